"""``launch --force-new-version`` never leaves the old version's work sendable (issue 7, item 3).

Through the real CLI (launch, worker, dead retry, in-doubt resolve) on SQLite and PostgreSQL,
against a real SMTP server. Each version tags its messages (subject ``v<N> <step>``), so the
server's record says which version every delivered message belongs to.
"""

from __future__ import annotations

import email
import email.policy
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_event, send_job
from dispatch.states import State, allowed_edges, is_valid_path
from dispatch.store import Completion, OutboxStore
from tests.support.factories import cli, launch_json
from tests.support.smtp_server import LedgerSMTPServer

NAME = "supersede"
J = send_job.c


# ---------------------------------------------------------------------- helpers


def write_version(
    folder: Path, version: int, steps: Sequence[str], recipients: Sequence[str]
) -> Path:
    """A campaign whose every message says which version, step and recipient it is for."""
    folder.mkdir(parents=True, exist_ok=True)
    lines = [
        f"name: {NAME}",
        'from: "Herald Tests <news@herald.test>"',
        "audience: [" + ", ".join(recipients) + "]",
        "steps:",
    ]
    for step in steps:
        lines += [
            f"  - id: {step}",
            f'    subject: "v{version} {step}"',
            f'    text: "version {version} of {step} for {{{{ email }}}}"',
        ]
    path = folder / "campaign.yaml"
    path.write_text("\n".join(lines) + "\n")
    return path


def drain(db_url: str, server: LedgerSMTPServer) -> None:
    smtp = f"smtp://{server.host}:{server.port}"
    result = cli(db_url, "worker", "--until-idle", "--smtp-url", smtp, "--concurrency", "4")
    assert result.exit_code == 0, result.output


def delivered(messages: Iterable[bytes]) -> list[tuple[int, str, str]]:
    """(version, step, recipient) of each message the server accepted."""
    found = []
    for raw in messages:
        msg = email.message_from_bytes(raw, policy=email.policy.SMTP)
        tag, step = str(msg["Subject"]).split(" ", 1)
        found.append((int(tag[1:]), step, msg["To"].addresses[0].addr_spec))
    return found


def rows(engine: Engine) -> dict[tuple[str, str], Any]:
    """(step, recipient) -> the job row."""
    with engine.connect() as conn:
        found = conn.execute(sa.select(send_job).where(J.campaign == NAME)).all()
    return {(r.step, r.recipient): r for r in found}


def journal(engine: Engine) -> dict[int, list[Any]]:
    with engine.connect() as conn:
        events = conn.execute(sa.select(send_event).order_by(send_event.c.id)).all()
    paths: dict[int, list[Any]] = {}
    for event in events:
        paths.setdefault(event.job_id, []).append(event)
    return paths


def assert_journal_valid(engine: Engine) -> None:
    for job_id, events in journal(engine).items():
        path = [(e.from_state, e.to_state) for e in events]
        assert is_valid_path(path), (job_id, path)


def claim_step(engine: Engine, step: str) -> list[Any]:
    """Claim every due job of ``step`` as a worker would (and hold the claims)."""
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        # Claim everything due, then give back what is not ours to hold.
        claimed = store.claim(conn, owner="held", limit=1000, lease_seconds=600)
        others = [job.lease for job in claimed if job.step != step]
        store.release_claims(conn, others, actor="held")
    return [job for job in claimed if job.step == step]


def settle(engine: Engine, jobs: Sequence[Any], target: State) -> None:
    """Take claimed jobs through T4 to ``target`` (failed: a 5xx; in_doubt: a lost DATA reply;
    pending: a 4xx after DATA, i.e. a retry of a job that was ``sending``)."""
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        started = store.start_sends(conn, [j.lease for j in jobs], margin_seconds=1, actor="w")
        assert started.keys() == {j.id for j in jobs}
    if target is State.SENDING:
        return
    completions = [
        Completion(
            j.lease,
            target,
            code={State.FAILED: 550, State.PENDING: 451}.get(target),
            text="injected",
            in_doubt_reason="timeout in DATA" if target is State.IN_DOUBT else None,
        )
        for j in jobs
    ]
    with engine.begin() as conn:
        assert store.complete(conn, completions, actor="w") == {j.id for j in jobs}


# ---------------------------------------------------------------------- the state machine


def test_supersede_transitions_are_edges_of_the_state_machine() -> None:
    edges = allowed_edges()
    for edge in (
        (State.PENDING, State.CANCELLED),
        (State.CLAIMED, State.CANCELLED),
        (State.CLAIMED, State.PENDING),
        (State.CANCELLED, State.PENDING),
    ):
        assert edge in edges
    # Nothing may leave `sending` for `cancelled`: a message on the wire cannot be recalled.
    assert (State.SENDING, State.CANCELLED) not in edges


# ---------------------------------------------------------------------- removed step / recipient


def test_removed_step_and_recipient_are_cancelled_as_superseded_and_never_sent(
    tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    people = ["ann@example.com", "bob@example.com", "cy@example.com"]
    v1 = write_version(tmp_path / "c", 1, ["welcome", "tips"], people)
    assert launch_json(db_url, v1)["new_jobs"] == 6
    held = claim_step(engine, "tips")  # a worker holds claims on the step about to go
    assert len(held) == 3

    # v2 drops the step `tips` and the recipient cy, keeps (and changes) welcome for ann, bob.
    v2 = write_version(tmp_path / "c", 2, ["welcome"], people[:2])
    report = launch_json(db_url, v2, "--force-new-version")
    assert report["version"] == 2
    assert report["superseded_jobs"] == 4  # tips × 3 (claimed) + welcome for cy (pending)

    after = rows(engine)
    for recipient in people:
        tips = after[("tips", recipient)]
        assert (tips.state, tips.outcome_text) == ("cancelled", "superseded")
        assert tips.superseded_at is not None
        assert tips.lease_owner is None
    gone = after[("welcome", "cy@example.com")]
    assert (gone.state, gone.outcome_text) == ("cancelled", "superseded")
    for recipient in people[:2]:
        kept = after[("welcome", recipient)]
        assert (kept.state, kept.superseded_at) == ("pending", None)
        assert b"v2 welcome" in bytes(kept.payload)
    events = journal(engine)
    superseded = [e for evs in events.values() for e in evs if e.detail == "superseded"]
    assert sorted((e.from_state, e.to_state) for e in superseded) == sorted(
        [("claimed", "cancelled")] * 3 + [("pending", "cancelled")]
    )
    assert_journal_valid(engine)

    # The worker that held the claims is fenced: its T4 matches no row.
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        assert (
            store.start_sends(conn, [j.lease for j in held], margin_seconds=1, actor="held") == {}
        )
        assert store.settle_unstartable(conn, [j.lease for j in held], actor="held") == {}

    drain(db_url, smtp_server)
    assert sorted(delivered(smtp_server.messages())) == [
        (2, "welcome", "ann@example.com"),
        (2, "welcome", "bob@example.com"),
    ]

    # The old file is now a changed spec: refused unless forced again.
    old = write_version(tmp_path / "old", 1, ["welcome", "tips"], people)
    refused = cli(db_url, "launch", str(old))
    assert refused.exit_code == 2, refused.output
    assert "--force-new-version" in refused.output


def test_relaunching_a_removed_step_restores_it_with_the_new_content(
    tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    people = ["ann@example.com", "bob@example.com"]
    launch_json(db_url, write_version(tmp_path / "c", 1, ["welcome", "tips"], people))
    launch_json(
        db_url, write_version(tmp_path / "c", 2, ["welcome"], people), "--force-new-version"
    )
    assert {r.state for (step, _), r in rows(engine).items() if step == "tips"} == {"cancelled"}
    report = launch_json(
        db_url,
        write_version(tmp_path / "c", 3, ["welcome", "tips"], people),
        "--force-new-version",
    )
    assert (report["version"], report["superseded_jobs"]) == (3, 0)
    assert {(r.state, r.superseded_at) for r in rows(engine).values()} == {("pending", None)}
    drain(db_url, smtp_server)
    assert sorted(delivered(smtp_server.messages())) == [
        (3, step, who) for step in ("tips", "welcome") for who in people
    ]
    assert_journal_valid(engine)


# ---------------------------------------------------------------------- atomicity


def _install_failing_trigger(engine: Engine, step: str) -> None:
    """Make the database refuse any job of ``step``: a failure in the middle of the fan-out."""
    with engine.begin() as conn:
        if engine.dialect.name == "sqlite":
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse_step BEFORE INSERT ON send_job "
                f"WHEN NEW.step = '{step}' BEGIN SELECT RAISE(ABORT, 'injected failure'); END"
            )
        else:
            conn.exec_driver_sql(
                "CREATE FUNCTION refuse_step() RETURNS trigger AS $$ BEGIN "
                f"IF NEW.step = '{step}' THEN RAISE EXCEPTION 'injected failure'; END IF; "
                "RETURN NEW; END $$ LANGUAGE plpgsql"
            )
            conn.exec_driver_sql(
                "CREATE TRIGGER refuse_step BEFORE INSERT ON send_job "
                "FOR EACH ROW EXECUTE FUNCTION refuse_step()"
            )


def _drop_failing_trigger(engine: Engine) -> None:
    with engine.begin() as conn:
        conn.exec_driver_sql(
            "DROP TRIGGER refuse_step" + ("" if engine.dialect.name == "sqlite" else " ON send_job")
        )


def _snapshot(engine: Engine) -> tuple[Any, ...]:
    with engine.connect() as conn:
        campaign = conn.execute(
            sa.text("select version, spec_hash, spec from campaign where name = :n"), {"n": NAME}
        ).one()
        jobs = conn.execute(
            sa.select(J.key, J.state, J.payload_hash, J.superseded_at, J.outcome_text).order_by(
                J.key
            )
        ).all()
        occurrences = conn.execute(
            sa.text("select step, fanout_state, cursor from occurrence order by step")
        ).all()
        events = conn.execute(sa.select(sa.func.count()).select_from(send_event)).scalar_one()
    return tuple(campaign), [tuple(j) for j in jobs], [tuple(o) for o in occurrences], events


def test_a_failure_while_storing_the_new_version_changes_nothing(
    tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    people = ["ann@example.com", "bob@example.com", "cy@example.com"]
    launch_json(db_url, write_version(tmp_path / "c", 1, ["welcome", "tips"], people))
    before = _snapshot(engine)

    # v2 drops `tips` and cy, changes welcome, adds `extra` -- whose jobs the database refuses
    # after welcome's have been written in the same transaction.
    _install_failing_trigger(engine, "extra")
    v2 = write_version(tmp_path / "c", 2, ["welcome", "extra"], people[:2])
    failed = cli(db_url, "launch", str(v2), "--force-new-version")
    assert failed.exit_code == 1, failed.output
    assert "injected failure" in failed.output
    assert _snapshot(engine) == before, "the old version and its jobs must be exactly as they were"
    assert {r.state for r in rows(engine).values()} == {"pending"}

    _drop_failing_trigger(engine)
    assert launch_json(db_url, v2, "--force-new-version")["superseded_jobs"] == 4
    drain(db_url, smtp_server)
    assert sorted(delivered(smtp_server.messages())) == [
        (2, step, who) for step in ("extra", "welcome") for who in people[:2]
    ]


# ---------------------------------------------------------------------- sending, failed, in doubt


def test_superseded_dead_and_in_doubt_jobs_are_never_rearmed(
    tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    people = ["ann@example.com", "bob@example.com", "cy@example.com"]
    launch_json(db_url, write_version(tmp_path / "c", 1, ["welcome", "tips"], people))
    tips = {job.recipient: job for job in claim_step(engine, "tips")}
    settle(engine, [tips["ann@example.com"]], State.FAILED)
    settle(engine, [tips["bob@example.com"]], State.IN_DOUBT)
    settle(engine, [tips["cy@example.com"]], State.SENDING)  # on the wire at the switch

    report = launch_json(
        db_url, write_version(tmp_path / "c", 2, ["welcome"], people), "--force-new-version"
    )
    assert report["superseded_jobs"] == 3
    marked = rows(engine)
    assert [marked[("tips", p)].state for p in people] == ["failed", "in_doubt", "sending"]
    assert all(marked[("tips", p)].superseded_at is not None for p in people)

    dead_key, doubt_key = tips["ann@example.com"].key, tips["bob@example.com"].key
    for args, key in (
        (["dead", "retry", dead_key], dead_key),
        (["dead", "retry", dead_key[:16].upper()], dead_key),
        (["in-doubt", "resolve", doubt_key, "--resend"], doubt_key),
    ):
        refused = cli(db_url, *args)
        assert refused.exit_code == 1, refused.output
        assert key in refused.stderr, refused.stderr
        assert "superseded" in refused.stderr, refused.stderr
        assert "replaced version" in refused.stderr
    assert json.loads(cli(db_url, "dead", "retry", "--all", "--json").stdout)["count"] == 0
    resent = cli(db_url, "in-doubt", "resolve", "--all", "--resend", "--json")
    assert json.loads(resent.stdout)["count"] == 0
    # Deciding what happened stays possible; re-arming the result does not.
    assert cli(db_url, "in-doubt", "resolve", doubt_key, "--as", "failed").exit_code == 0
    assert cli(db_url, "dead", "retry", doubt_key).exit_code == 1

    # The job that was sending comes back for a retry (4xx after DATA): T4 refuses it.
    store = OutboxStore(engine.dialect.name)
    sending_job = tips["cy@example.com"]
    with engine.begin() as conn:
        retry = Completion(sending_job.lease, State.PENDING, code=451, text="later")
        assert store.complete(conn, [retry], actor="w") == {sending_job.id}
    drain(db_url, smtp_server)
    assert sorted(delivered(smtp_server.messages())) == [(2, "welcome", p) for p in people]
    final = rows(engine)[("tips", "cy@example.com")]
    assert (final.state, final.outcome_text) == ("cancelled", "superseded")
    assert_journal_valid(engine)


# ---------------------------------------------------------------------- sequences of versions

# Each scenario: a list of (steps, recipients, drain-after-launch). The invariant, checked after
# every drain: each message delivered since the previous drain is of the version current when
# it was sent and is one that version has; over the whole run, each (step, recipient) is
# delivered at most once, and after the last drain every pair of the last version was.
A, B, C, D = "a@example.com", "b@example.com", "c@example.com", "d@example.com"
SCENARIOS: dict[str, list[tuple[list[str], list[str], bool]]] = {
    "shrink-then-grow": [
        (["s1", "s2"], [A, B, C], False),
        (["s1"], [A, B], True),
        (["s1", "s2", "s3"], [A, B, C, D], True),
    ],
    "swap-steps-undrained": [
        (["s1"], [A, B], False),
        (["s2"], [A, B], False),
        (["s1", "s3"], [B, C], True),
    ],
    "drain-between-every-version": [
        (["s1", "s2"], [A], True),
        (["s2"], [A, B], True),
        (["s1", "s2"], [B, C], True),
        (["s3"], [C], True),
    ],
    "remove-everyone-then-restore": [
        (["s1", "s2"], [A, B], False),
        (["s1", "s2"], [C], False),
        (["s2"], [A, B, C], True),
    ],
}


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_every_message_belongs_to_the_version_current_when_it_was_sent(
    scenario: str, tmp_path: Path, db_url: str, engine: Engine, smtp_server: LedgerSMTPServer
) -> None:
    seen = 0
    ever: list[tuple[str, str]] = []
    pairs: set[tuple[str, str]] = set()
    for version, (steps, people, drain_now) in enumerate(SCENARIOS[scenario], start=1):
        path = write_version(tmp_path / "c", version, steps, people)
        launch_json(db_url, path, *(["--force-new-version"] if version > 1 else []))
        pairs = {(step, who) for step in steps for who in people}
        if not drain_now:
            continue
        drain(db_url, smtp_server)
        messages = delivered(smtp_server.messages())
        for tag, step, who in messages[seen:]:
            assert tag == version, f"v{tag} {step} to {who} sent while v{version} was current"
            assert (step, who) in pairs, f"{step} to {who} is not part of v{version}"
        ever += [(step, who) for _, step, who in messages[seen:]]
        seen = len(messages)
    assert len(ever) == len(set(ever)), "a (step, recipient) was delivered twice"
    assert pairs <= set(ever), "the last version was not delivered in full"
    assert_journal_valid(engine)
