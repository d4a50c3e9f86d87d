"""Operator commands through the real CLI: ``herald recover``, ``herald in-doubt list|resolve``
and ``herald dead list|retry`` (docs/design.md §4 R1–R3, T9, dead retry; §5; §9).

Jobs are put into each state directly with ``OutboxStore`` (as in ``test_fencing``); leases are
expired with an UPDATE. Every test runs on SQLite and PostgreSQL via the ``db_url`` fixture.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from typer.testing import Result

from dispatch.models import send_event, send_job
from dispatch.states import State
from dispatch.store import Completion, OutboxStore
from tests.support.factories import (
    claimed,
    cli,
    complete,
    dead_550,
    in_doubt,
    pending,
    sending,
    sent,
)

OPERATOR = "tester"
J = send_job.c


@pytest.fixture(autouse=True)
def _operator_name(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERALD_OPERATOR", OPERATOR)


# ---------------------------------------------------------------------- setting up jobs


def expire(engine: Engine, *job_ids: int) -> None:
    """What a long pause looks like from the database: the lease ran out five minutes ago."""
    with engine.begin() as conn:
        conn.execute(
            sa.update(send_job)
            .where(J.id.in_(job_ids))
            .values(lease_expires_at=datetime.now(UTC) - timedelta(minutes=5))
        )


def row(engine: Engine, key: str) -> Any:
    with engine.connect() as conn:
        return conn.execute(sa.select(send_job).where(J.key == key)).one()


def states(engine: Engine) -> dict[str, str]:
    with engine.connect() as conn:
        return {r.key: r.state for r in conn.execute(sa.select(J.key, J.state))}


def events(engine: Engine, job_id: int) -> list[Any]:
    store = OutboxStore(engine.dialect.name)
    with engine.connect() as conn:
        return store.events(conn, [job_id])


def event_count(engine: Engine) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.select(sa.func.count()).select_from(send_event)).scalar_one())


def db_now(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return OutboxStore(engine.dialect.name).database_now(conn)


# ---------------------------------------------------------------------- running the CLI


def ok(db_url: str, *args: str) -> Result:
    result = cli(db_url, *args)
    assert result.exit_code == 0, f"herald {' '.join(args)} exited {result.exit_code}:\n" + (
        result.output
    )
    assert "Traceback" not in result.output, result.output
    return result


def ok_json(db_url: str, *args: str) -> Any:
    return json.loads(ok(db_url, *args, "--json").stdout)


def usage_error(db_url: str, *args: str, expect: str) -> None:
    result = cli(db_url, *args)
    output = result.output
    assert result.exit_code == 2, f"herald {' '.join(args)}: exit {result.exit_code}\n{output}"
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert expect in result.stderr, f"{expect!r} missing from stderr:\n{output}"


def assert_changed_report(output: str, keys: Sequence[str], transition: str) -> None:
    """The human report lists one line per changed job (its 16-char prefix) and the count."""
    lines = [line for line in output.splitlines() if transition in line]
    assert sorted(line.split()[0] for line in lines) == sorted(k[:16] for k in keys), output
    assert f"{len(keys)} job(s) changed" in output, output


# ---------------------------------------------------------------------- 1. herald recover


def _recovery_scenario(engine: Engine) -> dict[str, Any]:
    """(a)×2 claimed+expired, (b) sending+expired, (c) poison, (d)×2 exhausted pending,
    (e) claimed and sending with live leases, plus an ordinary pending job."""
    live_claimed = claimed(engine, "live-claimed", lease=600)
    live_sending = sending(engine, "live-sending", lease=600)
    released = [claimed(engine, f"released-{i}") for i in range(2)]
    doubtful = sending(engine, "doubtful")
    poison = claimed(engine, "poison", max_claims=1)
    exhausted = []
    for i in range(2):
        # One attempt allowed, one made, then a 4xx asked for a retry: nothing left to spend.
        job = sending(engine, f"exhausted-{i}", max_send_attempts=1)
        complete(engine, Completion(job.lease, State.PENDING, code=451, text="later", retry_in=600))
        exhausted.append(job)
    ordinary = pending(engine, "ordinary")
    expire(engine, *(j.id for j in released), doubtful.id, poison.id)
    return {
        "live": [live_claimed, live_sending],
        "released": released,
        "doubtful": doubtful,
        "poison": poison,
        "exhausted": exhausted,
        "ordinary": ordinary,
    }


def test_recover_json_counts_each_category_and_touches_only_expired_leases(
    db_url: str, engine: Engine
) -> None:
    s = _recovery_scenario(engine)
    live_before = {j.key: row(engine, j.key) for j in s["live"]}
    live_events = {j.key: len(events(engine, j.id)) for j in s["live"]}
    actor = f"recover:{OPERATOR}"

    summary = ok_json(db_url, "recover")
    assert summary == {"released": 2, "in_doubt": 1, "dead": 3, "resent": 0}

    # (a) claimed, never started -> pending; token kept in the row, lease cleared, journalled.
    for job in s["released"]:
        r = row(engine, job.key)
        assert (r.state, r.lease_token, r.lease_owner, r.lease_expires_at) == (
            "pending",
            job.token,
            None,
            None,
        )
        last = events(engine, job.id)[-1]
        assert (last.from_state, last.to_state, last.token, last.actor, last.detail) == (
            "claimed",
            "pending",
            job.token,
            actor,
            "lease expired before sending",
        )

    # (b) started, outcome unknown -> in_doubt with its reason.
    r = row(engine, s["doubtful"].key)
    assert (r.state, r.in_doubt_reason, r.send_attempts) == (
        "in_doubt",
        "lease expired during send",
        1,
    )
    last = events(engine, s["doubtful"].id)[-1]
    assert (last.from_state, last.to_state, last.detail) == (
        "sending",
        "in_doubt",
        "lease expired during send",
    )

    # (c) claimed, expired, claims >= max_claims -> poison dead letter.
    r = row(engine, s["poison"].key)
    assert (r.state, r.claims, r.max_claims, r.lease_expires_at) == ("failed", 1, 1, None)
    assert r.outcome_text.startswith("poison")
    last = events(engine, s["poison"].id)[-1]
    assert (last.from_state, last.to_state) == ("claimed", "failed")

    # (d) pending with every send attempt used -> dead letter.
    for job in s["exhausted"]:
        r = row(engine, job.key)
        assert (r.state, r.send_attempts, r.max_send_attempts, r.outcome_text) == (
            "failed",
            1,
            1,
            "attempts exhausted",
        )
        last = events(engine, job.id)[-1]
        assert (last.from_state, last.to_state, last.detail) == (
            "pending",
            "failed",
            "attempts exhausted",
        )

    # (e) live leases are untouched: same state, same lease, no journal rows.
    for job in s["live"]:
        before, after = live_before[job.key], row(engine, job.key)
        assert (after.state, after.lease_expires_at, after.lease_owner, after.lease_token) == (
            before.state,
            before.lease_expires_at,
            before.lease_owner,
            before.lease_token,
        )
        assert len(events(engine, job.id)) == live_events[job.key]
    assert row(engine, s["ordinary"]).state == "pending"

    # A second pass finds nothing and changes nothing.
    snapshot, journal = states(engine), event_count(engine)
    assert ok_json(db_url, "recover") == {"released": 0, "in_doubt": 0, "dead": 0, "resent": 0}
    human = ok(db_url, "recover").stdout
    assert re.search(r"\b0\b[^,]*pending", human), human
    assert re.search(r"\b0\b[^,]*in doubt", human), human
    assert re.search(r"\b0\b[^,]*dead", human), human
    assert (states(engine), event_count(engine)) == (snapshot, journal)


def test_recover_human_output_names_each_count(db_url: str, engine: Engine) -> None:
    _recovery_scenario(engine)
    output = ok(db_url, "recover").stdout
    assert re.search(r"\b2\b[^,0-9]*back to pending", output), output
    assert re.search(r"\b1\b[^,0-9]*in doubt", output), output
    assert re.search(r"\b3\b[^,0-9]*dead", output), output


# ---------------------------------------------------------------------- 2. in-doubt list


def test_in_doubt_list_shows_exactly_the_in_doubt_jobs_with_reasons(
    db_url: str, engine: Engine
) -> None:
    a1 = in_doubt(engine, "a1", "alpha", reason="timeout after DATA")
    a2 = in_doubt(engine, "a2", "alpha", reason="connection reset in DATA")
    b1 = in_doubt(engine, "b1", "beta", reason="worker cancelled in DATA")
    others = [
        pending(engine, "p1", "alpha"),
        sent(engine, "s1", "alpha").key,
        dead_550(engine, "f1", "alpha").key,
        claimed(engine, "c1", "beta").key,
    ]

    everything = ok_json(db_url, "in-doubt", "list")
    assert everything["count"] == 3
    assert {j["key"]: j["in_doubt_reason"] for j in everything["jobs"]} == {
        a1.key: "timeout after DATA",
        a2.key: "connection reset in DATA",
        b1.key: "worker cancelled in DATA",
    }
    alpha = ok_json(db_url, "in-doubt", "list", "--campaign", "alpha")
    assert alpha["count"] == 2
    assert sorted(j["key"] for j in alpha["jobs"]) == sorted([a1.key, a2.key])
    assert {j["campaign"] for j in alpha["jobs"]} == {"alpha"}
    assert ok_json(db_url, "in-doubt", "list", "--campaign", "nope") == {"jobs": [], "count": 0}

    human = ok(db_url, "in-doubt", "list").stdout
    for job, reason in ((a1, "timeout after DATA"), (a2, "connection reset"), (b1, "worker")):
        assert job.key[:16] in human, human
        assert reason in human, human
    for key in others:
        assert key[:16] not in human, human
    assert "3 job(s)" in human, human

    beta = ok(db_url, "in-doubt", "list", "--campaign", "beta").stdout
    assert b1.key[:16] in beta, beta
    assert a1.key[:16] not in beta, beta
    assert a2.key[:16] not in beta, beta
    assert "1 job(s)" in beta, beta
    assert "no in-doubt jobs" in ok(db_url, "in-doubt", "list", "--campaign", "nope").stdout


# ---------------------------------------------------------------------- 3. in-doubt resolve


def test_resolve_as_sent_by_prefix_records_operator_and_why(db_url: str, engine: Engine) -> None:
    job = in_doubt(engine, "doubt")
    other = in_doubt(engine, "other")
    journal = event_count(engine)

    result = ok(
        db_url,
        "in-doubt",
        "resolve",
        job.key[:16],
        "--as",
        "sent",
        "--why",
        "checked the relay log",
    )
    assert_changed_report(result.stdout, [job.key], "in doubt → sent")

    assert row(engine, job.key).state == "sent"
    assert row(engine, other.key).state == "in_doubt"
    assert event_count(engine) == journal + 1
    last = events(engine, job.id)[-1]
    assert (last.from_state, last.to_state, last.token, last.detail) == (
        "in_doubt",
        "sent",
        job.token,
        "checked the relay log",
    )
    assert last.actor.startswith("operator:")
    assert last.actor == f"operator:{OPERATOR}"


def test_resolve_as_failed_with_full_key(db_url: str, engine: Engine) -> None:
    job = in_doubt(engine, "doubt")
    assert ok_json(
        db_url, "in-doubt", "resolve", job.key, "--as", "failed", "--why", "bounced later"
    ) == {"changed": [job.key], "count": 1}
    assert row(engine, job.key).state == "failed"
    last = events(engine, job.id)[-1]
    assert (last.from_state, last.to_state, last.actor, last.detail) == (
        "in_doubt",
        "failed",
        f"operator:{OPERATOR}",
        "bounced later",
    )


def test_resolve_resend_rearms_the_job_due_now_with_an_attempt_left(
    db_url: str, engine: Engine
) -> None:
    # Its only allowed attempt was used by the send that ended in doubt.
    job = in_doubt(engine, "doubt", max_send_attempts=1)
    assert (row(engine, job.key).send_attempts, row(engine, job.key).max_send_attempts) == (1, 1)

    result = ok(
        db_url, "in-doubt", "resolve", job.key[:16], "--resend", "--why", "relay never saw it"
    )
    assert_changed_report(result.stdout, [job.key], "in doubt → pending")

    r = row(engine, job.key)
    assert (r.state, r.lease_owner, r.lease_expires_at) == ("pending", None, None)
    assert r.not_before <= db_now(engine)
    assert r.max_send_attempts > r.send_attempts == 1
    last = events(engine, job.id)[-1]
    assert (last.from_state, last.to_state, last.actor, last.detail) == (
        "in_doubt",
        "pending",
        f"operator:{OPERATOR}",
        "relay never saw it",
    )

    # Recovery does not kill it as exhausted, and a worker can claim and start it right away.
    assert ok_json(db_url, "recover")["dead"] == 0
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        (again,) = store.claim(conn, owner="w2", limit=10, lease_seconds=60)
        assert again.key == job.key
        assert store.start_sends(conn, [again.lease], margin_seconds=1, actor="w2").keys() == {
            job.id
        }


def test_resolve_all_of_one_campaign_only(db_url: str, engine: Engine) -> None:
    alpha = [in_doubt(engine, f"a{i}", "alpha") for i in range(2)]
    beta = in_doubt(engine, "b0", "beta")

    result = ok_json(
        db_url, "in-doubt", "resolve", "--all", "--campaign", "alpha", "--as", "failed"
    )
    assert result["count"] == 2
    assert sorted(result["changed"]) == sorted(j.key for j in alpha)
    assert [row(engine, j.key).state for j in alpha] == ["failed", "failed"]
    assert row(engine, beta.key).state == "in_doubt"

    # Human form of --all: lists what it changed.
    human = ok(db_url, "in-doubt", "resolve", "--all", "--as", "sent").stdout
    assert_changed_report(human, [beta.key], "in doubt → sent")
    assert row(engine, beta.key).state == "sent"


def test_resolve_usage_errors_exit_2_and_change_nothing(db_url: str, engine: Engine) -> None:
    job = in_doubt(engine, "doubt")
    snapshot, journal = states(engine), event_count(engine)

    exactly_one = "choose exactly one of --as sent, --as failed, --resend"
    usage_error(db_url, "in-doubt", "resolve", job.key, expect=exactly_one)
    usage_error(
        db_url, "in-doubt", "resolve", job.key, "--as", "sent", "--resend", expect=exactly_one
    )
    usage_error(
        db_url, "in-doubt", "resolve", job.key, "--as", "bogus", expect="--as takes sent or failed"
    )
    usage_error(db_url, "in-doubt", "resolve", "--as", "sent", expect="name the jobs")
    usage_error(db_url, "in-doubt", "resolve", job.key, "--all", "--as", "sent", expect="not both")
    assert (states(engine), event_count(engine)) == (snapshot, journal)


def test_resolve_leaves_jobs_that_are_not_in_doubt_alone(db_url: str, engine: Engine) -> None:
    not_doubtful = [
        pending(engine, "p"),
        claimed(engine, "c").key,
        sent(engine, "s").key,
        dead_550(engine, "f").key,
    ]
    snapshot, journal = states(engine), event_count(engine)
    for key in not_doubtful:
        for how in (["--as", "sent"], ["--as", "failed"], ["--resend"]):
            # A named key that changed nothing is an operator mistake worth an exit code.
            result = cli(db_url, "in-doubt", "resolve", key, *how, "--json")
            assert result.exit_code == 1, result.output
            assert json.loads(result.stdout) == {"changed": [], "count": 0}
            assert f"{key[:16]}: not in doubt" in result.stderr
    assert ok_json(db_url, "in-doubt", "resolve", "--all", "--as", "failed") == {
        "changed": [],
        "count": 0,
    }
    assert "0 job(s) changed" in ok(db_url, "in-doubt", "resolve", "--all", "--resend").stdout
    assert (states(engine), event_count(engine)) == (snapshot, journal)


# ---------------------------------------------------------------------- 4. dead list / retry


def test_dead_list_and_retry_rearm_with_fresh_budgets(db_url: str, engine: Engine) -> None:
    bounced = dead_550(engine, "bounced", "alpha", max_send_attempts=1)
    poison = claimed(engine, "poison", "alpha", max_claims=1)
    expire(engine, poison.id)
    assert ok_json(db_url, "recover")["dead"] == 1
    other = dead_550(engine, "other", "beta")
    alive = [pending(engine, "alive", "alpha"), in_doubt(engine, "doubt", "alpha").key]

    listed = ok_json(db_url, "dead", "list")
    assert listed["count"] == 3
    reasons = {j["key"]: j["outcome_text"] for j in listed["jobs"]}
    assert reasons[bounced.key] == "5.1.1 no such user"
    assert reasons[poison.key].startswith("poison")
    assert set(reasons) == {bounced.key, poison.key, other.key}
    alpha = ok_json(db_url, "dead", "list", "--campaign", "alpha")
    assert sorted(j["key"] for j in alpha["jobs"]) == sorted([bounced.key, poison.key])
    assert alpha["count"] == 2
    human = ok(db_url, "dead", "list").stdout
    for key in (bounced.key, poison.key, other.key):
        assert key[:16] in human, human
    for key in alive:
        assert key[:16] not in human, human
    assert "5.1.1 no such user" in human, human
    assert "3 job(s)" in human, human

    # One job by its 16-character prefix.
    result = ok(db_url, "dead", "retry", bounced.key[:16])
    assert_changed_report(result.stdout, [bounced.key], "failed → pending")
    # The rest of one campaign.
    assert ok_json(db_url, "dead", "retry", "--all", "--campaign", "alpha") == {
        "changed": [poison.key],
        "count": 1,
    }
    assert row(engine, other.key).state == "failed"
    # Everything left; then nothing is left.
    assert ok_json(db_url, "dead", "retry", "--all") == {"changed": [other.key], "count": 1}
    assert ok_json(db_url, "dead", "retry", "--all") == {"changed": [], "count": 0}
    assert ok_json(db_url, "dead", "list") == {"jobs": [], "count": 0}

    now = db_now(engine)
    for job, sends, max_sends, claims, max_claims in (
        (bounced, 1, 1, 1, 10),
        (poison, 0, 5, 1, 1),
        (other, 1, 5, 1, 10),
    ):
        r = row(engine, job.key)
        assert r.state == "pending"
        assert r.not_before <= now
        assert (r.send_attempts, r.claims) == (sends, claims)
        # Fresh budgets: the job's whole original allowance is available again.
        assert r.max_send_attempts - r.send_attempts == max_sends
        assert r.max_claims - r.claims == max_claims
        assert r.max_send_attempts > r.send_attempts
        assert r.max_claims > r.claims
        last = events(engine, job.id)[-1]
        assert (last.from_state, last.to_state, last.actor, last.detail) == (
            "failed",
            "pending",
            f"operator:{OPERATOR}",
            "dead retry",
        )
    assert [row(engine, k).state for k in alive] == ["pending", "in_doubt"]

    # Re-armed jobs survive recovery and can be claimed again (the poison one included).
    assert ok_json(db_url, "recover")["dead"] == 0
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        again = store.claim(conn, owner="w2", limit=10, lease_seconds=60)
    assert {j.key for j in again} == {bounced.key, poison.key, other.key}


def test_dead_retry_usage_errors(db_url: str, engine: Engine) -> None:
    job = dead_550(engine, "bounced")
    journal = event_count(engine)
    usage_error(db_url, "dead", "retry", expect="name the jobs")
    usage_error(db_url, "dead", "retry", job.key, "--all", expect="not both")
    assert row(engine, job.key).state == "failed"
    assert event_count(engine) == journal
