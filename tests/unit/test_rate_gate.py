"""dispatch.rate_gate without a database: which jobs ask for slots, and what happens when the
throttle's transaction fails (nothing asked is sent; what is still ours is released)."""

from __future__ import annotations

import asyncio
from typing import Any, cast

from hypothesis import given
from hypothesis import strategies as st

from dispatch.commit_requests import Release
from dispatch.held_leases import HeldLeases
from dispatch.rate_gate import RateGate, Throttle, recipient_domain
from dispatch.rates import domain_of
from dispatch.store import ClaimedJob
from dispatch.worker_report import WorkerReport


def job(job_id: int, recipient: str, campaign: str = "c", channel: str = "email") -> ClaimedJob:
    return ClaimedJob(
        id=job_id, token=1, key=f"k{job_id}", campaign=campaign, step="s", channel=channel,
        sender="news@herald.test", recipient=recipient, message_id=f"<{job_id}@h>",
        payload=b"", claims=1, send_attempts=0, max_send_attempts=5,
    )  # fmt: skip


class FailingCommitter:
    """Fails every throttle; records releases."""

    def __init__(self) -> None:
        self.released: list[tuple[int, int]] = []

    async def submit(self, request: Any) -> Any:
        if isinstance(request, Throttle):
            raise RuntimeError("connection lost")
        assert isinstance(request, Release)
        self.released.extend(request.leases)
        return {lease[0] for lease in request.leases}


def gate(committer: Any, campaigns: set[str]) -> RateGate:
    g = RateGate(cast(Any, committer), HeldLeases(30), WorkerReport(), {"slow.test": 2.0})
    g._campaigns = campaigns  # as if read from the table
    g._seen = {"c", "d"}
    g._read_at = float("inf")  # fresh: no read in this test
    return g


def test_keys_a_job_asks_for() -> None:
    g = gate(FailingCommitter(), {"d"})
    assert g.keys_of(job(1, "a@Slow.Test")) == ("domain:slow.test",)
    assert g.keys_of(job(2, "a@other.test")) == ()
    assert g.keys_of(job(3, "a@slow.test", campaign="d")) == ("campaign:d", "domain:slow.test")
    # A webhook has no mail domain; its campaign's rate still applies.
    assert g.keys_of(job(4, "https://x.test/h", campaign="d", channel="webhook")) == ("campaign:d",)


def test_a_failed_throttle_sends_none_of_the_asked_and_releases_them() -> None:
    committer = FailingCommitter()
    g = gate(committer, set())
    jobs = [job(1, "a@slow.test"), job(2, "b@free.test"), job(3, "c@slow.test")]
    ready = asyncio.run(g.admit(jobs))
    assert [j.id for j in ready] == [2]
    assert committer.released == [(1, 1), (3, 1)]
    assert g.report.released == 2


_ATOM = st.text(alphabet="aZ09_+-", min_size=1, max_size=5)
_LABEL = st.text(alphabet="aZ09-", min_size=1, max_size=5)


@given(
    st.one_of(
        st.builds(
            lambda local, labels: ".".join(local) + "@" + ".".join(labels),
            st.lists(_ATOM, min_size=1, max_size=3),
            st.lists(_LABEL, min_size=1, max_size=3),
        ),
        st.text(alphabet='aZ09_+-.@ <>"(),;:\\é\t', max_size=14),
    )
)
def test_the_fast_domain_of_a_recipient_is_what_the_address_parser_says(recipient: str) -> None:
    assert recipient_domain(recipient) == domain_of(recipient)


def test_display_names_and_trailing_dots_still_go_through_the_parser() -> None:
    assert recipient_domain("Ann <ann@Slow.Test.>") == "slow.test"
    assert recipient_domain("ann@SLOW.test") == "slow.test"
