"""DATA with MAIL and RCPT, to a relay that offers PIPELINING: the worker sends the DATA command
in the same write as MAIL and RCPT, before it asks for T4, and the message only once T4 has
committed. A job under a rate limit still sends DATA only after its T4 (a slot refused at T4
would otherwise cost the connection), and a DATA command refused there is a refusal before T4
(T6): the job never reaches sending. Against a real aiosmtpd server that offers PIPELINING, on
both databases."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy.engine import Engine

from dispatch.instrumentation import NullInstrumentation
from dispatch.states import is_valid_path
from dispatch.store import ClaimedJob, Lease
from tests.integration.test_smtp_ready import (
    DEADLINE,
    DROP,
    DataDoor,
    jobs_and_paths,
    launch_campaign,
    run,
    watched_server,
)


@pytest.fixture
def door() -> Iterator[tuple[DataDoor, int]]:
    watched = DataDoor()
    with watched_server(watched, pipelining=True) as port:
        yield watched, port


class WhenDataArrived(NullInstrumentation):
    """Notes whether the relay had seen DATA when T4 was asked for, and while it was open."""

    def __init__(self, watched: DataDoor) -> None:
        self.watched = watched
        self.before_t4_asked: list[bool] = []
        self.inside_t4: list[bool] = []
        self.t4_committing_at = 0.0

    async def before_t4(self, job: ClaimedJob) -> None:
        self.before_t4_asked.append(self.watched.data_seen.is_set())

    def before_t4_commit(self, leases: Sequence[Lease]) -> None:
        # A DATA sent beside T4 gets a moment to arrive; one sent after T4 never does.
        self.inside_t4.append(self.watched.data_seen.wait(0.2))
        self.t4_committing_at = time.monotonic()


def test_data_goes_before_t4_is_asked_and_the_message_after_t4(
    tmp_path: Path, engine: Engine, door: tuple[DataDoor, int]
) -> None:
    watched, port = door
    launch_campaign(engine, tmp_path, "early", "ada@example.com")
    watch = WhenDataArrived(watched)

    worker = run(engine, port, watch)

    assert watch.before_t4_asked == [True]
    ((message, arrived_at),) = watched.stored
    assert b"Hello there" in message
    assert arrived_at > watch.t4_committing_at
    assert worker.report.sent == 1
    ((job, path),) = jobs_and_paths(engine)
    assert job.state == "sent"
    assert path[-2:] == [("claimed", "sending"), ("sending", "sent")]


def test_a_job_under_a_rate_limit_sends_data_only_after_its_t4(
    tmp_path: Path, engine: Engine, door: tuple[DataDoor, int]
) -> None:
    watched, port = door
    launch_campaign(engine, tmp_path, "limited", "ada@example.com")
    watch = WhenDataArrived(watched)

    worker = run(engine, port, watch, domain_rates={"example.com": 1000.0})

    assert watch.before_t4_asked == [False]
    assert watch.inside_t4 == [False]  # not even while T4's transaction was open
    assert watched.data_seen.wait(DEADLINE)
    assert worker.report.sent == 1
    ((job, _),) = jobs_and_paths(engine)
    assert job.state == "sent"


@pytest.mark.parametrize(
    ("first", "state", "head"),
    [
        ("554 5.3.4 no thanks", "failed", [("claimed", "failed")]),
        ("451 4.3.0 not now", "sent", [("claimed", "pending"), ("pending", "claimed")]),
        (DROP, "sent", [("claimed", "pending"), ("pending", "claimed")]),
    ],
)
def test_a_data_command_refused_with_mail_and_rcpt_never_reaches_sending(
    tmp_path: Path,
    engine: Engine,
    door: tuple[DataDoor, int],
    first: str,
    state: str,
    head: list[Any],
) -> None:
    """Refused (or the connection lost) before any of the message and before T4: T6 or T6f,
    never sending for that attempt, never in doubt; a retry then goes out whole."""
    watched, port = door
    watched.answer = lambda n: first if n == 1 else None
    launch_campaign(engine, tmp_path, "refused", "ada@example.com")

    run(engine, port, NullInstrumentation())

    ((job, path),) = jobs_and_paths(engine)
    assert job.state == state
    assert "in_doubt" not in {to for _, to in path}
    claimed_at = path.index(("pending", "claimed")) if ("pending", "claimed") in path else 0
    assert path[claimed_at + 1 : claimed_at + 1 + len(head)] == head
    assert is_valid_path(path)
    assert len(watched.messages()) == (1 if state == "sent" else 0)
