"""The outbox contract (dispatch.outbox.contract), one set of tests on three implementations:
memory, SQLite and PostgreSQL. A behaviour the memory outbox gets wrong fails here exactly as a
SQL one would."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from dispatch.outbox import Completion, Deferral, LeaseRow
from dispatch.states import State, is_valid_path
from herald.db import create_engine
from tests.conftest import fresh_database
from tests.support.outboxes import Harness, ManualClock, MemoryHarness, SqlHarness, new_job


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def harness(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Harness]:
    if request.param == "memory":
        yield MemoryHarness()
        return
    with fresh_database(request, request.param, tmp_path) as url:  # as db_url's
        engine = create_engine(url)
        yield SqlHarness(engine)
        engine.dispose()


def past(seconds: float = 1) -> datetime:
    return datetime.now(UTC) - timedelta(seconds=seconds)


def enqueue(h: Harness, *jobs_: object) -> int:
    with h.begin() as tx:
        n: int = h.outbox.enqueue(tx, list(jobs_))
    return n


def claim(h: Harness, limit: int = 10, lease_seconds: float = 60, owner: str = "w") -> list:  # type: ignore[type-arg]
    with h.begin() as tx:
        return list(h.outbox.claim(tx, owner=owner, limit=limit, lease_seconds=lease_seconds))


def journal_is_consistent(h: Harness) -> None:
    """Every job's journal is a path of the machine ending in the job's state."""
    paths: dict[int, list[tuple[str | None, str]]] = {}
    for job_id, source, target in h.journal():
        paths.setdefault(job_id, []).append((source, target))
    for job_id, state in h.states().items():
        assert is_valid_path(paths[job_id]), (job_id, paths[job_id])
        assert paths[job_id][-1][1] == state, (job_id, paths[job_id], state)


# ---------------------------------------------------------------------- enqueue, claim


def test_enqueue_is_idempotent_on_key_and_on_mailbox(harness: Harness) -> None:
    when = past()
    assert enqueue(harness, new_job("a", when), new_job("b", when)) == 2
    assert enqueue(harness, new_job("a", past(5))) == 0
    # Another key for the same mailbox and message (an older Herald's spelling) exists too.
    same_mailbox = dataclasses.replace(new_job("other-key", when), recipient="a@example.com")
    assert enqueue(harness, same_mailbox) == 0
    assert sorted(harness.states().values()) == ["pending", "pending"]
    assert [(source, target) for _, source, target in harness.journal()] == [
        (None, "pending"),
        (None, "pending"),
    ]


def test_claim_takes_due_jobs_in_order_with_a_new_token_each_time(harness: Harness) -> None:
    enqueue(
        harness,
        new_job("late", past(1)),
        new_job("early", past(10)),
        new_job("future", datetime.now(UTC) + timedelta(hours=1)),
    )
    jobs = claim(harness)
    assert [j.key for j in jobs] == ["early", "late"]
    assert all(j.token == 1 and j.claims == 1 for j in jobs)
    assert claim(harness) == []  # nothing else due
    harness.expire_leases()
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=0, actor="r")
    assert report.released == 2
    again = claim(harness)
    assert sorted(j.token for j in again) == [2, 2]
    journal_is_consistent(harness)


def test_an_inactive_campaign_is_not_claimed_and_has_no_work(harness: Harness) -> None:
    enqueue(harness, new_job("a", past()))
    harness.set_campaign_status("c", "paused")
    assert claim(harness) == []
    with harness.begin() as tx:
        assert harness.outbox.has_work(tx) is False
        assert harness.outbox.next_due_in(tx) is None
    harness.set_campaign_status("c", "active")
    with harness.begin() as tx:
        assert harness.outbox.has_work(tx) is True
        due = harness.outbox.next_due_in(tx)
    assert due is not None
    assert due <= 0
    assert len(claim(harness)) == 1


# ---------------------------------------------------------------------- fencing


def test_an_old_lease_can_do_nothing_once_the_job_was_claimed_again(harness: Harness) -> None:
    enqueue(harness, new_job("a", past()))
    (old,) = claim(harness)
    harness.expire_leases()
    with harness.begin() as tx:
        harness.outbox.recover(tx, grace_seconds=0, actor="r")
    (new,) = claim(harness, owner="w2")
    assert new.token == old.token + 1
    with harness.begin() as tx:
        o = harness.outbox
        assert o.start_sends(tx, [old.lease], margin_seconds=0, actor="zombie").keys() == set()
        assert o.heartbeat(tx, [old.lease], lease_seconds=60) == set()
        for target in (State.SENT, State.FAILED, State.IN_DOUBT, State.PENDING):
            assert o.complete(tx, [Completion(old.lease, target)], actor="zombie") == set()
        assert o.release_claims(tx, [old.lease], actor="zombie") == set()
        assert o.settle_unstartable(tx, [old.lease], actor="zombie") == {}
        assert o.lease_state(tx, [old.lease]) == {}
        assert o.lease_state(tx, [new.lease]) == {new.id: "claimed"}
        assert o.start_sends(tx, [new.lease], margin_seconds=0, actor="w2").keys() == {new.id}
    journal_is_consistent(harness)


def test_heartbeat_extends_a_live_lease_and_never_revives_an_expired_one(harness: Harness) -> None:
    enqueue(harness, new_job("a", past()))
    (job,) = claim(harness)
    with harness.begin() as tx:
        assert harness.outbox.heartbeat(tx, [job.lease], lease_seconds=60) == {job.id}
    harness.expire_leases()
    with harness.begin() as tx:
        assert harness.outbox.heartbeat(tx, [job.lease], lease_seconds=60) == set()


# ---------------------------------------------------------------------- T4 and its refusals


@pytest.mark.parametrize(
    ("setup", "expected"),
    [
        ("short lease", State.PENDING),
        ("suppressed", State.CANCELLED),
        ("campaign cancelled", State.CANCELLED),
        ("campaign paused", State.PENDING),
    ],
)
def test_a_refused_t4_is_settled_by_the_most_final_reason(
    harness: Harness, setup: str, expected: State
) -> None:
    enqueue(harness, new_job("a", past()))
    (job,) = claim(harness, lease_seconds=5)
    margin = 30 if setup == "short lease" else 0
    if setup == "suppressed":
        with harness.begin() as tx:
            assert harness.outbox.suppress(tx, job.recipient, "unsubscribed") is True
            assert harness.outbox.suppress(tx, job.recipient, "again") is False
    if setup.startswith("campaign"):
        harness.set_campaign_status("c", setup.split()[1])
    with harness.begin() as tx:
        assert (
            harness.outbox.start_sends(tx, [job.lease], margin_seconds=margin, actor="w").keys()
            == set()
        )
        assert harness.outbox.settle_unstartable(tx, [job.lease], actor="w") == {job.id: expected}
    assert harness.states() == {job.id: expected.value}
    journal_is_consistent(harness)


# ---------------------------------------------------------------------- outcomes T5–T8


@pytest.mark.parametrize(
    ("completion", "before_data", "expected"),
    [
        (State.SENT, False, State.SENT),
        (State.PENDING, False, State.PENDING),
        (State.FAILED, False, State.FAILED),
        (State.IN_DOUBT, False, State.IN_DOUBT),
        (State.PENDING, True, State.PENDING),
        (State.FAILED, True, State.FAILED),
    ],
)
def test_each_outcome_needs_its_source_state_and_the_token(
    harness: Harness, completion: State, before_data: bool, expected: State
) -> None:
    enqueue(harness, new_job("a", past()))
    (job,) = claim(harness)
    outcome = Completion(job.lease, completion, 250, "ok", retry_in=0, before_data=before_data)
    with harness.begin() as tx:
        if not before_data:
            # Before T4 an after-DATA outcome matches nothing.
            assert harness.outbox.complete(tx, [outcome], actor="w") == set()
            harness.outbox.start_sends(tx, [job.lease], margin_seconds=0, actor="w")
        assert harness.outbox.complete(tx, [outcome], actor="w") == {job.id}
        assert harness.outbox.complete(tx, [outcome], actor="w") == set()  # applied once
    assert harness.states() == {job.id: expected.value}
    journal_is_consistent(harness)


def test_a_late_250_after_recovery_marked_the_job_in_doubt_still_proves_delivery(
    harness: Harness,
) -> None:
    enqueue(harness, new_job("a", past()))
    (job,) = claim(harness)
    with harness.begin() as tx:
        harness.outbox.start_sends(tx, [job.lease], margin_seconds=0, actor="w")
    harness.expire_leases()
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=0, actor="r")
    assert report.in_doubt == 1
    with harness.begin() as tx:
        assert harness.outbox.complete(tx, [Completion(job.lease, State.SENT)], actor="w") == {
            job.id
        }
    assert harness.states() == {job.id: "sent"}
    journal_is_consistent(harness)


def test_an_outcome_the_machine_does_not_have_is_refused(harness: Harness) -> None:
    enqueue(harness, new_job("a", past()))
    (job,) = claim(harness)
    with pytest.raises(ValueError, match="no transition"), harness.begin() as tx:
        harness.outbox.complete(
            tx, [Completion(job.lease, State.IN_DOUBT, before_data=True)], actor="w"
        )
    assert harness.states() == {job.id: "claimed"}


# ---------------------------------------------------------------------- recovery


def test_recovery_releases_fails_poison_marks_in_doubt_and_resends_by_policy(
    harness: Harness,
) -> None:
    enqueue(
        harness,
        new_job("released", past(5)),
        new_job("poison", past(4), max_claims=1),
        new_job("lost", past(3)),
        new_job("webhook", past(2), policy="resend"),
        new_job("exhausted", datetime.now(UTC) + timedelta(hours=1), max_send_attempts=0),
    )
    jobs = {j.key: j for j in claim(harness)}
    with harness.begin() as tx:
        leases = [jobs["lost"].lease, jobs["webhook"].lease]
        harness.outbox.start_sends(tx, leases, margin_seconds=0, actor="w")
    harness.expire_leases()
    with harness.begin() as tx:
        report = harness.outbox.recover(tx, grace_seconds=0, actor="r")
    assert (report.released, report.in_doubt, report.resent) == (1, 2, 1)
    assert report.dead == 2  # poison (claimed) + exhausted (pending)
    with harness.begin() as tx:
        by_key = {r.key: r.state for s in State for r in harness.outbox.jobs_in_state(tx, s)}
    assert by_key == {
        "released": "pending",
        "poison": "failed",
        "lost": "in_doubt",
        "webhook": "pending",
        "exhausted": "failed",
    }
    webhook = jobs["webhook"].id
    path = [(s, t) for job_id, s, t in harness.journal() if job_id == webhook]
    assert path[-2:] == [("sending", "in_doubt"), ("in_doubt", "pending")]
    journal_is_consistent(harness)


def test_recovery_ignores_a_live_lease(harness: Harness) -> None:
    enqueue(harness, new_job("a", past()))
    (job,) = claim(harness, lease_seconds=600)
    with harness.begin() as tx:
        harness.outbox.start_sends(tx, [job.lease], margin_seconds=1, actor="w")
        report = harness.outbox.recover(tx, grace_seconds=0, actor="r")
    assert (report.released, report.in_doubt, report.dead) == (0, 0, 0)


def test_released_claims_do_not_count_against_max_claims(harness: Harness) -> None:
    enqueue(harness, new_job("a", past(), max_claims=1))
    (job,) = claim(harness)
    with harness.begin() as tx:
        assert harness.outbox.release_claims(tx, [job.lease], actor="w") == {job.id}
    (again,) = claim(harness)
    assert again.claims == 1
    assert again.token == job.token + 1


# ---------------------------------------------------------------------- operators, reads


def test_operator_cancel_resolve_and_dead_retry(harness: Harness) -> None:
    enqueue(
        harness,
        *(new_job(k, past(i)) for i, k in enumerate(["p", "c", "doubt1", "doubt2", "dead"])),
    )
    jobs = {j.key: j for j in claim(harness, limit=4)}  # dead, doubt2, doubt1, c
    with harness.begin() as tx:
        o = harness.outbox
        o.start_sends(tx, [jobs["doubt1"].lease, jobs["doubt2"].lease], margin_seconds=0, actor="w")
        o.start_sends(tx, [jobs["dead"].lease], margin_seconds=0, actor="w")
        o.complete(
            tx,
            [Completion(jobs[k].lease, State.IN_DOUBT) for k in ("doubt1", "doubt2")]
            + [Completion(jobs["dead"].lease, State.FAILED, 550, "no")],
            actor="w",
        )
        assert o.cancel_campaign(tx, "c", actor="op") == 2  # pending p, claimed c
        resent = o.resolve_in_doubt(
            tx, keys=["doubt1"], campaign=None, target=State.PENDING, actor="op", why="check"
        )
        assert resent == [(jobs["doubt1"].id, "doubt1")]
        decided = o.resolve_in_doubt(
            tx, keys=None, campaign="c", target=State.SENT, actor="op", why="seen"
        )
        assert decided == [(jobs["doubt2"].id, "doubt2")]
        assert o.retry_dead(tx, keys=None, campaign="c", actor="op") == [(jobs["dead"].id, "dead")]
        counts = sorted(o.counts(tx))
        assert o.jobs_in_state(tx, State.PENDING, limit=1)[0].key == "doubt1"
        events = o.events(tx, [jobs["doubt1"].id])
    assert counts == [("c", "s", "cancelled", 2), ("c", "s", "pending", 2), ("c", "s", "sent", 1)]
    assert [(e.from_state, e.to_state) for e in events][-1] == ("in_doubt", "pending")
    assert events[-1].actor == "op"
    assert events[-1].detail == "check"
    journal_is_consistent(harness)
    # Re-arming granted one more transmission: the job can be claimed and started again.
    (job,) = [j for j in claim(harness) if j.key == "doubt1"]
    with harness.begin() as tx:
        assert harness.outbox.start_sends(tx, [job.lease], margin_seconds=0, actor="w").keys() == {
            job.id
        }


def test_a_failed_transaction_changes_nothing(harness: Harness) -> None:
    enqueue(harness, new_job("a", past()))

    class Boom(Exception):
        pass

    def claim_then_fail() -> None:
        with harness.begin() as tx:
            assert len(harness.outbox.claim(tx, owner="w", limit=1, lease_seconds=60)) == 1
            raise Boom

    with pytest.raises(Boom):
        claim_then_fail()
    assert list(harness.states().values()) == ["pending"]
    assert len(harness.journal()) == 1


def test_database_now_is_the_outbox_clock(harness: Harness) -> None:
    with harness.begin() as tx:
        now = harness.outbox.database_now(tx)
    assert abs((now - datetime.now(UTC)).total_seconds()) < 60


# ---------------------------------------------------------------------- T4's time (the Date)


def test_t4_returns_when_the_job_crossed_and_a_reread_of_the_lease_gives_the_same(
    harness: Harness,
) -> None:
    enqueue(harness, new_job("a", past()), new_job("b", past()))
    first, second = claim(harness)
    with harness.begin() as tx:
        before = harness.outbox.database_now(tx)
    with harness.begin() as tx:
        started = harness.outbox.start_sends(tx, [first.lease], margin_seconds=0, actor="w")
    with harness.begin() as tx:
        after = harness.outbox.database_now(tx)
        rows = harness.outbox.lease_rows(tx, [first.lease, second.lease, (first.id, 99)])
    assert started.keys() == {first.id}
    assert before <= started[first.id] <= after
    # What a worker whose T4 commit went unacknowledged reads back: the very same moment.
    assert rows == {
        first.id: LeaseRow("sending", started[first.id]),
        second.id: LeaseRow("claimed", None),
    }
    with harness.begin() as tx:
        assert harness.outbox.lease_state(tx, [first.lease]) == {first.id: "sending"}


# ---------------------------------------------------------------------- send windows (W2)

WINDOW = '{"days":[0,1,2,3,4],"start":540,"end":1020,"zone":"Europe/Berlin"}'


def test_the_send_window_is_stored_returned_by_claim_and_replaced_with_the_content(
    harness: Harness,
) -> None:
    windowed = dataclasses.replace(new_job("a", past()), send_window=WINDOW)
    enqueue(harness, windowed, new_job("b", past()))
    by_key = {j.key: j for j in claim(harness)}
    assert (by_key["a"].send_window, by_key["b"].send_window) == (WINDOW, None)
    # A new version's content for a pending job brings its window along.
    enqueue(harness, new_job("c", datetime.now(UTC) + timedelta(hours=1)))
    later = WINDOW.replace('"end":1020', '"end":1080')
    replacement = dataclasses.replace(
        new_job("c", past()), payload=b"Subject: y\r\n\r\nnew\r\n", send_window=later
    )
    with harness.begin() as tx:
        harness.outbox.enqueue(tx, [replacement], replace_pending=True)
    (c,) = claim(harness)
    assert (c.key, c.send_window, c.payload) == ("c", later, replacement.payload)


def test_a_claim_outside_its_window_goes_back_uncounted_until_the_window_opens(
    harness: Harness,
) -> None:
    enqueue(harness, new_job("a", past(), max_claims=1))
    (job,) = claim(harness)
    with harness.begin() as tx:
        o = harness.outbox
        assert o.defer_claims(tx, [Deferral((job.id, job.token + 1), past())], actor="w") == set()
        # Due at once again: the claim was not counted, so max_claims=1 allows another.
        assert o.defer_claims(tx, [Deferral(job.lease, past())], actor="w") == {job.id}
        assert o.defer_claims(tx, [Deferral(job.lease, past())], actor="w") == set()  # once
    (again,) = claim(harness)
    assert (again.claims, again.token) == (1, job.token + 1)
    opening = datetime.now(UTC) + timedelta(hours=3)
    with harness.begin() as tx:
        assert harness.outbox.defer_claims(tx, [Deferral(again.lease, opening)], actor="w") == {
            job.id
        }
    assert claim(harness) == []  # not before the window opens
    with harness.begin() as tx:
        due = harness.outbox.next_due_in(tx)
        events = harness.outbox.events(tx, [job.id])
    assert due is not None
    assert abs(due - 3 * 3600) < 120
    assert harness.states() == {job.id: "pending"}
    assert [(e.from_state, e.to_state) for e in events] == [
        (None, "pending"),
        ("pending", "claimed"),
        ("claimed", "pending"),
        ("pending", "claimed"),
        ("claimed", "pending"),
    ]
    assert events[-1].detail == f"outside send window; due {opening.isoformat()}"
    journal_is_consistent(harness)


# ---------------------------------------------------------------------- withdraw (T14)


def test_withdraw_cancels_what_is_not_past_t4_and_fences_a_claim(harness: Harness) -> None:
    enqueue(
        harness,
        *(new_job(k, past(i + 1)) for i, k in enumerate(["keep", "sent", "sending", "claimed"])),
        new_job("pending", datetime.now(UTC) + timedelta(hours=1)),
    )
    jobs = {j.key: j for j in claim(harness)}  # claimed, sending, sent, keep
    with harness.begin() as tx:
        o = harness.outbox
        o.start_sends(tx, [jobs["sending"].lease, jobs["sent"].lease], margin_seconds=0, actor="w")
        o.complete(tx, [Completion(jobs["sent"].lease, State.SENT, 250, "ok")], actor="w")
        o.release_claims(tx, [jobs["keep"].lease], actor="w")
    gone = ["pending", "claimed", "sending", "sent", "unknown"]
    with harness.begin() as tx:
        assert harness.outbox.withdraw(tx, gone, reason="left the audience", actor="sched") == 2
        assert harness.outbox.withdraw(tx, gone, reason="again", actor="sched") == 0
        assert harness.outbox.withdraw(tx, [], reason="nothing", actor="sched") == 0
        by_key = {r.key: r for s in State for r in harness.outbox.jobs_in_state(tx, s)}
        # The withdrawn claim is fenced: its T4 matches nothing, and nothing settles it.
        claimed = jobs["claimed"].lease
        assert harness.outbox.start_sends(tx, [claimed], margin_seconds=0, actor="w") == {}
        assert harness.outbox.settle_unstartable(tx, [claimed], actor="w") == {}
        events = harness.outbox.events(tx, [jobs["claimed"].id])
    assert {k: r.state for k, r in by_key.items()} == {
        "keep": "pending",
        "sent": "sent",
        "sending": "sending",  # on the wire: beyond recall
        "claimed": "cancelled",
        "pending": "cancelled",
    }
    assert by_key["claimed"].outcome_text == by_key["pending"].outcome_text == "left the audience"
    last = events[-1]
    assert (last.from_state, last.to_state, last.actor, last.detail) == (
        "claimed",
        "cancelled",
        "sched",
        "left the audience",
    )
    journal_is_consistent(harness)


def test_withdraw_takes_many_keys(harness: Harness) -> None:
    keys = [f"k{i:04d}" for i in range(1200)]  # more than one statement's worth on SQL
    enqueue(harness, *(new_job(k, datetime.now(UTC) + timedelta(hours=1)) for k in keys))
    with harness.begin() as tx:
        assert harness.outbox.withdraw(tx, keys, reason="left", actor="s") == len(keys)
    assert set(harness.states().values()) == {"cancelled"}


# ---------------------------------------------------------------------- memory only: the clock


def test_the_memory_outbox_expires_leases_on_its_own_clock() -> None:
    clock = ManualClock(datetime(2026, 1, 1, tzinfo=UTC))
    h = MemoryHarness(clock)
    enqueue(h, new_job("a", clock.now), new_job("later", clock.now + timedelta(seconds=30)))
    (job,) = claim(h, lease_seconds=10)
    with h.begin() as tx:
        assert h.outbox.next_due_in(tx) == 30.0
    clock.advance(11)
    with h.begin() as tx:
        assert h.outbox.heartbeat(tx, [job.lease], lease_seconds=10) == set()
        assert h.outbox.recover(tx, grace_seconds=0, actor="r").released == 1
    clock.advance(20)
    assert sorted(j.key for j in claim(h)) == ["a", "later"]
