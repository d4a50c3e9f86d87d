"""`herald prune` on SQLite and PostgreSQL: what is pruned (the messages of old finished jobs,
and their journal but the final event), what is never touched, and that a pruned job stays
idempotent and can never be sent again."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.spec import load_campaign
from dispatch.models import send_job
from dispatch.outbox.prune import PRUNABLE
from dispatch.states import TERMINAL, State
from dispatch.store import OutboxStore
from herald.app.launch import launch
from herald.app.operator import resolve_in_doubt, retry_dead
from herald.app.prune import retention_age
from herald.errors import UsageError
from scheduler.fanout import materialise
from tests.support.campaign_files import run_worker, write_campaign
from tests.support.factories import (
    claimed,
    cli,
    dead_550,
    in_doubt,
    new_job,
    pending,
    sending,
    sent,
)
from tests.support.pruning import J, age, journals, rows, run_prune
from tests.support.smtp_server import LedgerSMTPServer

LAUNCH_AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def cancelled(engine: Engine, name: str) -> str:
    key = pending(engine, name, campaign="beta")
    with engine.begin() as conn:
        assert OutboxStore(engine.dialect.name).cancel_campaign(conn, "beta", actor="t") == 1
    return key


def every_state(engine: Engine) -> dict[str, str]:
    """One job in each state (name -> key), plus a sent job that finished recently."""
    keys = {
        "pending": pending(engine, "pending"),
        "claimed": claimed(engine, "claimed").key,
        "sending": sending(engine, "sending").key,
        "in_doubt": in_doubt(engine, "in_doubt").key,
        "sent": sent(engine, "sent").key,
        "failed": dead_550(engine, "failed").key,
        "cancelled": cancelled(engine, "cancelled"),
    }
    age(engine)
    keys["recent"] = sent(engine, "recent").key
    return keys


def test_only_the_finished_states_are_prunable() -> None:
    assert {State.SENT, State.FAILED, State.CANCELLED} == PRUNABLE
    assert PRUNABLE < TERMINAL  # in_doubt waits for a decision that needs the message


def test_prune_drops_the_messages_of_old_finished_jobs_only(engine: Engine) -> None:
    keys = every_state(engine)
    before, journal_before = rows(engine), journals(engine)

    report = run_prune(engine)

    after, journal_after = rows(engine), journals(engine)
    pruned = {name for name, key in keys.items() if after[key]["payload"] == b""}
    assert pruned == {"sent", "failed", "cancelled"}
    for name, key in keys.items():
        job_id = before[key]["id"]
        if name in pruned:
            # Only the payload changed: key, identity, state, outcome, hash all kept.
            assert {**after[key], "payload": None} == {**before[key], "payload": None}
            assert journal_after[job_id] == journal_before[job_id][-1:]
        else:
            assert after[key] == before[key]
            assert journal_after[job_id] == journal_before[job_id]
    assert report.jobs == 3
    assert report.payload_bytes == sum(len(before[keys[n]]["payload"]) for n in pruned)
    deleted = sum(len(journal_before[before[keys[n]]["id"]]) - 1 for n in pruned)
    assert report.events == deleted > 0
    # Running it again finds nothing left to do.
    again = run_prune(engine)
    assert (again.jobs, again.events) == (0, 0)
    assert rows(engine) == after


def test_dry_run_changes_nothing_and_predicts_the_real_pass(engine: Engine) -> None:
    every_state(engine)
    before, journal_before = rows(engine), journals(engine)
    predicted = run_prune(engine, dry_run=True)
    assert (rows(engine), journals(engine)) == (before, journal_before)
    done = run_prune(engine)
    assert (predicted.jobs, predicted.payload_bytes, predicted.events) == (
        done.jobs,
        done.payload_bytes,
        done.events,
    )


def test_keep_journal_and_campaign_narrow_the_pass(engine: Engine) -> None:
    keys = every_state(engine)
    journal_before = journals(engine)
    report = run_prune(engine, campaign="beta", keep_journal=True)
    after = rows(engine)
    assert report.jobs == 1
    assert report.events == 0
    assert {k for k, r in after.items() if r["payload"] == b""} == {keys["cancelled"]}
    assert journals(engine) == journal_before


def test_a_job_changed_within_the_period_is_kept(engine: Engine) -> None:
    key = sent(engine, "s").key
    age(engine, by=timedelta(days=89))
    assert run_prune(engine).jobs == 0
    age(engine, by=timedelta(days=91))
    assert run_prune(engine).jobs == 1
    assert rows(engine)[key]["payload"] == b""


def test_relaunch_and_refire_of_a_pruned_campaign_create_nothing(
    engine: Engine, tmp_path: Path, smtp_server: LedgerSMTPServer
) -> None:
    path, _addresses = write_campaign(tmp_path / "c", recipients=3)
    launch(engine, path, clock=lambda: LAUNCH_AT, actor="test")
    report = run_worker(engine, smtp_server.host, smtp_server.port)
    assert report.sent == 9
    assert len(smtp_server.messages()) == 9
    age(engine)
    assert run_prune(engine).jobs == 9
    pruned = rows(engine)
    assert all(r["payload"] == b"" and r["state"] == "sent" for r in pruned.values())

    again = launch(engine, path, clock=lambda: LAUNCH_AT + timedelta(days=200), actor="test")
    assert (again.fanout.new_jobs, again.fanout.existing_jobs) == (0, 9)
    # The same occurrence materialised again (a re-fired trigger): every key already there.
    refired = materialise(engine, load_campaign(path), LAUNCH_AT)
    assert refired.new_jobs == 0
    # A new version with the same content: sent jobs are history, nothing is re-armed.
    version = launch(engine, path, clock=lambda: LAUNCH_AT, actor="test", force_new_version=True)
    assert version.fanout.new_jobs == 0
    assert rows(engine) == pruned
    assert run_worker(engine, smtp_server.host, smtp_server.port).sent == 0
    assert len(smtp_server.messages()) == 9


def test_reenqueueing_a_pruned_key_is_a_no_op(engine: Engine) -> None:
    key = sent(engine, "s").key
    age(engine)
    run_prune(engine)
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        job = new_job(key, due=datetime.now(UTC), recipient="s@example.com")
        assert store.enqueue(conn, [job]) == 0
        assert store.enqueue(conn, [job], replace_pending=True) == 0
    assert rows(engine)[key]["payload"] == b""


def test_dead_retry_refuses_a_pruned_job(engine: Engine, db_url: str) -> None:
    old = dead_550(engine, "old").key
    age(engine)
    fresh = dead_550(engine, "fresh").key
    run_prune(engine)
    refused = retry_dead(engine, [old], actor="operator:t")
    assert (refused.changed, refused.pruned) == ([], [old])
    # --all re-arms every dead job that still has its message, and only those.
    everything = retry_dead(engine, None, actor="operator:t")
    assert everything.keys == [fresh]
    assert rows(engine)[old]["state"] == "failed"

    result = cli(db_url, "dead", "retry", old)
    assert result.exit_code == 1
    assert "dropped by retention" in result.output


def test_resend_refuses_a_job_without_its_message(engine: Engine, db_url: str) -> None:
    """Prune never touches an in-doubt job; should one lose its message anyway (by hand), the
    resend guard still refuses it, while deciding what happened stays possible."""
    keys = [in_doubt(engine, "a").key, in_doubt(engine, "b").key]
    with engine.begin() as conn:
        conn.execute(sa.update(send_job).where(J.key.in_(keys)).values(payload=b""))
    refused = resolve_in_doubt(engine, keys[:1], target=State.PENDING, actor="operator:t")
    assert (refused.changed, refused.pruned) == ([], keys[:1])
    result = cli(db_url, "in-doubt", "resolve", keys[0], "--resend")
    assert result.exit_code == 1
    assert "dropped by retention" in result.output
    decided = resolve_in_doubt(engine, keys[1:], target=State.SENT, actor="operator:t")
    assert decided.keys == keys[1:]


@pytest.mark.parametrize(
    ("raw", "force", "ok"),
    [("90d", False, True), ("2w", False, True), ("1d", False, True), ("12h", False, False),
     ("12h", True, True), ("0", True, False), ("0d", False, False), ("-3d", False, False),
     ("90", False, False), ("soon", False, False)],
)  # fmt: skip
def test_retention_age_refuses_nonsense(raw: str, force: bool, ok: bool) -> None:
    if ok:
        assert retention_age(raw, force=force) > timedelta(0)
    else:
        with pytest.raises(UsageError):
            retention_age(raw, force=force)


def test_cli_prunes_reports_and_refuses(engine: Engine, db_url: str) -> None:
    keys = every_state(engine)
    url = db_url
    assert cli(url, "prune", "--older-than", "0").exit_code == 2
    assert cli(url, "prune", "--older-than", "6h").exit_code == 2
    assert cli(url, "prune", "--older-than", "90d", "--batch-size", "0").exit_code == 2
    dry = cli(url, "prune", "--older-than", "90d", "--dry-run", "--json")
    assert dry.exit_code == 0, dry.output
    assert json.loads(dry.stdout)["jobs"] == 3
    assert all(r["payload"] != b"" for r in rows(engine).values())
    done = cli(url, "prune", "--older-than", "90d", "--batch-size", "2")
    assert done.exit_code == 0, done.output
    assert "pruned 3 job(s)" in done.output
    assert rows(engine)[keys["sent"]]["payload"] == b""
    age(engine, [keys["recent"]], by=timedelta(hours=2))
    vacuumed = cli(url, "prune", "--older-than", "1h", "--force", "--vacuum", "--json")
    assert vacuumed.exit_code == 0, vacuumed.output
    assert json.loads(vacuumed.stdout)["jobs"] == 1  # the recent one, two hours old
    assert rows(engine)[keys["recent"]]["payload"] == b""


def test_the_dashboard_preview_says_a_message_was_pruned() -> None:
    from types import SimpleNamespace

    from herald.serve.dashboard.pages_preview import PRUNED, shown

    row = SimpleNamespace(key="k", channel="email", state="sent", occurrence_at=LAUNCH_AT)
    assert shown(SimpleNamespace(**vars(row), payload=b"")).raw == PRUNED
    assert shown(SimpleNamespace(**vars(row), payload=b"Subject: x\r\n\r\nhi\r\n")).raw != PRUNED
