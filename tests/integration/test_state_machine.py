"""dispatch.states is the single source of truth: every edge of the table is performed by some
store operation, and no operation can write a move outside the transitions it declares.

Two halves: introspection (each operation's ``@performs`` declarations cover the table exactly)
and a stateful property test that drives an outbox through random operation sequences, on SQLite
and in memory, checking every new journal row against the transitions the operation declared
and every job's state against the end of its journal.
"""

from __future__ import annotations

import shutil
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from campaigns.models import CampaignStatus, campaign_table
from dispatch.outbox import CAMPAIGN_GATE, Completion, Deferral, MemoryOutbox, SqlOutbox
from dispatch.outbox.versions import VersionReport, VersionStore
from dispatch.states import (
    MACHINE,
    ActorKind,
    State,
    T,
    Transition,
    TransitionError,
    allowed_edges,
    declared,
    is_valid_path,
)
from herald.db import create_engine
from herald.schema import upgrade
from tests.support.examples import examples
from tests.support.outboxes import Harness, MemoryHarness, SqlHarness, new_job


def operations(cls: type) -> dict[str, tuple[Transition, ...]]:
    """Public method name -> the transitions it declares, for every method of ``cls``."""
    return {
        name: declared(getattr(cls, name))
        for name in dir(cls)
        if not name.startswith("_") and callable(getattr(cls, name))
    }


def performed(*classes: type) -> set[Transition]:
    return {t for cls in classes for ts in operations(cls).values() for t in ts}


# ---------------------------------------------------------------------- the table itself


def test_every_transition_of_the_table_is_performed_by_a_sql_operation() -> None:
    assert performed(SqlOutbox, VersionStore) == set(MACHINE)


def test_the_memory_outbox_performs_every_transition_but_campaign_versions() -> None:
    versions = {T.SUPERSEDED, T.NEW_CONTENT, T.RESTORED}
    assert performed(MemoryOutbox) == set(MACHINE) - versions
    # Same operation, same declared transitions, in both implementations.
    sql, memory = operations(SqlOutbox), operations(MemoryOutbox)
    for name, transitions in memory.items():
        if name in sql:
            assert set(transitions) == set(sql[name]), name


def test_only_operations_that_change_state_declare_transitions() -> None:
    reads = {"counts", "jobs_in_state", "events", "has_work", "next_due_in", "database_now"}
    reads |= {"relay_statuses"}
    # No state change: a suppression is checked by T4, which settles the job (T4c);
    # record_relay writes relay_status only.
    others = {"heartbeat", "lease_state", "lease_rows", "suppress", "suppress_many", "unsuppress"}
    others |= {"record_relay"}
    reads |= {"rate_limits"}
    others |= {"acquire_slots", "set_rates", "slow_down"}  # rate cells, not jobs
    for name, transitions in operations(SqlOutbox).items():
        if name in reads | others:
            assert transitions == (), name


def test_the_edges_are_those_the_store_always_had_plus_nothing() -> None:
    s = State
    assert allowed_edges() == {
        (None, s.PENDING),
        (s.PENDING, s.CLAIMED),
        (s.CLAIMED, s.SENDING),
        (s.CLAIMED, s.PENDING),
        (s.CLAIMED, s.FAILED),
        (s.CLAIMED, s.CANCELLED),
        (s.SENDING, s.SENT),
        (s.SENDING, s.PENDING),
        (s.SENDING, s.FAILED),
        (s.SENDING, s.IN_DOUBT),
        (s.IN_DOUBT, s.SENT),
        (s.IN_DOUBT, s.PENDING),
        (s.IN_DOUBT, s.FAILED),
        (s.PENDING, s.FAILED),
        (s.PENDING, s.CANCELLED),
        (s.FAILED, s.PENDING),
        (s.CANCELLED, s.PENDING),
    }


def test_the_automatic_resend_is_its_own_edge_not_an_operators() -> None:
    assert T.POLICY_RESEND.actor is ActorKind.RECOVERY
    assert T.POLICY_RESEND.edges() == {(State.IN_DOUBT, State.PENDING)}
    assert T.POLICY_RESEND in declared(SqlOutbox.recover)
    assert T.RESOLVE_RESEND not in declared(SqlOutbox.recover)


def test_a_relay_outage_is_its_own_uncounted_hand_back() -> None:
    # W4, like W1 and W2: the worker gives back a claim it did not start, for a reason that is
    # not the job's. Its own code, so the journal says why (and R3 cannot blame the job).
    assert T.RELAY_UNAVAILABLE.code == "W4"
    assert T.RELAY_UNAVAILABLE.actor is ActorKind.WORKER
    assert T.RELAY_UNAVAILABLE.edges() == {(State.CLAIMED, State.PENDING)}
    assert declared(SqlOutbox.relay_unavailable_claims) == (T.RELAY_UNAVAILABLE,)
    assert declared(MemoryOutbox.relay_unavailable_claims) == (T.RELAY_UNAVAILABLE,)


def test_a_transition_refuses_a_source_it_does_not_have() -> None:
    T.CLAIM.check(State.PENDING)
    with pytest.raises(TransitionError):
        T.CLAIM.check(State.FAILED)
    with pytest.raises(TransitionError):
        T.ENQUEUE.check(State.PENDING)


def test_transition_codes_and_labels_are_unique() -> None:
    assert len({t.code for t in MACHINE}) == len(MACHINE)
    assert len({t.label for t in MACHINE}) == len(MACHINE)


def test_the_campaign_gate_matches_the_campaigns_table() -> None:
    assert CAMPAIGN_GATE.table == campaign_table.name
    assert {CAMPAIGN_GATE.name_column, CAMPAIGN_GATE.status_column} <= set(campaign_table.c.keys())
    assert CAMPAIGN_GATE.active == CampaignStatus.ACTIVE.value
    assert CAMPAIGN_GATE.cancelled == CampaignStatus.CANCELLED.value


# ---------------------------------------------------------------------- random operation sequences

_TEMPLATE: list[Path] = []


def _sqlite_copy() -> SqlHarness:
    """A migrated SQLite database: migrated once, then copied per example (fast)."""
    if not _TEMPLATE:
        folder = Path(tempfile.mkdtemp(prefix="herald-sm-"))
        engine = create_engine(f"sqlite:///{folder / 'template.db'}")
        upgrade(engine)
        engine.dispose()
        _TEMPLATE.append(folder / "template.db")
    target = Path(tempfile.mkdtemp(prefix="herald-sm-")) / "herald.db"
    shutil.copy(_TEMPLATE[0], target)
    return SqlHarness(create_engine(f"sqlite:///{target}"))


KEYS = [f"k{i}" for i in range(6)]


class OutboxMachine(RuleBasedStateMachine):
    """Random sequences of every store operation; each step checks the journal it wrote."""

    backend = "memory"

    def __init__(self) -> None:
        super().__init__()
        self.h: Harness = MemoryHarness() if self.backend == "memory" else _sqlite_copy()
        self.leases: list[tuple[int, int]] = []  # every lease ever handed out, stale ones too
        self.seen = 0  # journal rows already checked
        self.version = 1

    def teardown(self) -> None:
        if isinstance(self.h, SqlHarness):
            self.h.engine.dispose()

    def do(self, operation: Any, *args: Any, **kwargs: Any) -> Any:
        """Run one operation in its own transaction; check the journal rows it wrote."""
        with self.h.begin() as tx:
            result = operation(tx, *args, **kwargs)
        edges = {edge for t in declared(operation) for edge in t.edges()}
        journal = self.h.journal()
        for job_id, source, target in journal[self.seen :]:
            edge = (None if source is None else State(source), State(target))
            assert edge in edges, (operation.__name__, job_id, edge)
        self.seen = len(journal)
        return result

    def pick(self, data: st.DataObject) -> list[tuple[int, int]]:
        if not self.leases:
            return []
        return data.draw(st.lists(st.sampled_from(self.leases), max_size=3, unique=True))

    @rule(
        keys=st.lists(st.sampled_from(KEYS), min_size=1, max_size=3, unique=True),
        policy=st.sampled_from(["hold", "resend"]),
        attempts=st.integers(0, 2),
        scope=st.sampled_from(["list:c", None]),  # None: transactional (global only)
    )
    def enqueue(self, keys: list[str], policy: str, attempts: int, scope: str | None) -> None:
        when = datetime(2026, 1, 1, tzinfo=UTC)
        jobs = [
            new_job(
                k, when, policy=policy, max_send_attempts=attempts, max_claims=2, list_scope=scope
            )
            for k in keys
        ]
        self.do(self.h.outbox.enqueue, jobs)

    @rule(limit=st.integers(1, 4), lease=st.sampled_from([60.0, 1.0]))
    def claim(self, limit: int, lease: float) -> None:
        jobs = self.do(self.h.outbox.claim, owner="w", limit=limit, lease_seconds=lease)
        self.leases += [j.lease for j in jobs]

    @rule(data=st.data(), margin=st.sampled_from([0.0, 30.0]))
    def start_and_settle(self, data: st.DataObject, margin: float) -> None:
        leases = self.pick(data)
        started = self.do(self.h.outbox.start_sends, leases, margin_seconds=margin, actor="w")
        refused = [lease for lease in leases if lease[0] not in started]
        self.do(self.h.outbox.settle_unstartable, refused, actor="w")

    @rule(
        data=st.data(),
        outcome=st.sampled_from(
            [
                (State.SENT, False),
                (State.PENDING, False),
                (State.FAILED, False),
                (State.IN_DOUBT, False),
                (State.PENDING, True),
                (State.FAILED, True),
            ]
        ),
    )
    def complete(self, data: st.DataObject, outcome: tuple[State, bool]) -> None:
        target, before = outcome
        completions = [Completion(lease, target, before_data=before) for lease in self.pick(data)]
        self.do(self.h.outbox.complete, completions, actor="w")

    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        self.do(self.h.outbox.release_claims, self.pick(data), actor="w")

    @rule(
        data=st.data(),
        due=st.sampled_from([datetime(2026, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)]),
    )
    def outside_window(self, data: st.DataObject, due: datetime) -> None:
        deferrals = [Deferral(lease, due) for lease in self.pick(data)]
        self.do(self.h.outbox.defer_claims, deferrals, actor="w")

    @rule(data=st.data(), retry_in=st.sampled_from([0.0, 30.0]))
    def relay_unavailable(self, data: st.DataObject, retry_in: float) -> None:
        self.do(
            self.h.outbox.relay_unavailable_claims,
            self.pick(data),
            retry_in=retry_in,
            why="relay unreachable: connection refused (smtp://relay:25)",
            actor="w",
        )

    @rule(
        data=st.data(),
        due=st.sampled_from([datetime(2026, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)]),
    )
    def rate_limited(self, data: st.DataObject, due: datetime) -> None:
        deferrals = [Deferral(lease, due) for lease in self.pick(data)]
        self.do(self.h.outbox.rate_limited_claims, deferrals, actor="w")

    @rule(keys=st.lists(st.sampled_from(KEYS), max_size=3, unique=True))
    def withdraw(self, keys: list[str]) -> None:
        self.do(self.h.outbox.withdraw, keys, reason="left the audience", actor="scheduler")

    @rule()
    def expire_and_recover(self) -> None:
        self.h.expire_leases()
        self.do(self.h.outbox.recover, grace_seconds=0, actor="recovery")

    @rule(status=st.sampled_from(["active", "paused", "cancelled"]))
    def campaign_status(self, status: str) -> None:
        self.h.set_campaign_status("c", status)

    @rule()
    def cancel(self) -> None:
        self.do(self.h.outbox.cancel_campaign, "c", actor="op")

    @rule(key=st.sampled_from(KEYS), scope=st.sampled_from(["global", "list:c", "list:x"]))
    def suppress(self, key: str, scope: str) -> None:
        self.do(self.h.outbox.suppress, f"{key}@example.com", "test", scope=scope)

    @rule(key=st.sampled_from(KEYS), scope=st.sampled_from(["global", "list:c"]))
    def unsuppress(self, key: str, scope: str) -> None:
        self.do(self.h.outbox.unsuppress, f"{key}@example.com", scope=scope)

    @rule(verdict=st.sampled_from([State.SENT, State.PENDING, State.FAILED]))
    def resolve(self, verdict: State) -> None:
        self.do(
            self.h.outbox.resolve_in_doubt,
            keys=None,
            campaign="c",
            target=verdict,
            actor="op",
            why="test",
        )

    @rule()
    def dead_retry(self) -> None:
        self.do(self.h.outbox.retry_dead, keys=None, campaign=None, actor="op")

    @precondition(lambda self: self.backend == "sqlite")
    @rule(kept=st.lists(st.sampled_from(KEYS), max_size=6, unique=True))
    def new_version(self, kept: list[str]) -> None:
        """A new version keeping ``kept`` (new content), dropping the rest: T11–T13."""
        assert isinstance(self.h, SqlHarness)
        self.version += 1
        versions = VersionStore(self.h.name)
        when = datetime(2026, 1, 1, tzinfo=UTC)
        payload = f"Subject: v{self.version}\r\n\r\nbody\r\n".encode()
        jobs = [new_job(k, when, payload=payload, max_claims=2) for k in kept]
        report = VersionReport()
        with self.h.begin() as conn:
            existing = versions.lock_campaign_jobs(conn, "c")
        self.do(self.h.outbox.enqueue, jobs, replace_pending=True)
        self.do(
            versions.take_new_content,
            jobs,
            existing,
            version=self.version,
            actor="scheduler",
            report=report,
        )
        self.do(versions.supersede_removed, existing, set(kept), actor="scheduler", report=report)

    @invariant()
    def every_job_is_where_its_journal_ends(self) -> None:
        paths: dict[int, list[tuple[str | None, str]]] = {}
        for job_id, source, target in self.h.journal():
            paths.setdefault(job_id, []).append((source, target))
        for job_id, state in self.h.states().items():
            assert is_valid_path(paths[job_id]), paths[job_id]
            assert paths[job_id][-1][1] == state, (job_id, paths[job_id], state)


class SqliteOutboxMachine(OutboxMachine):
    backend = "sqlite"


SETTINGS = settings(
    max_examples=examples(40),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)

TestMemoryOutboxMachine = OutboxMachine.TestCase
TestMemoryOutboxMachine.settings = SETTINGS
TestSqliteOutboxMachine = SqliteOutboxMachine.TestCase
TestSqliteOutboxMachine.settings = SETTINGS
