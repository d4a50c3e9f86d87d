"""The outbox contract: what the worker and its committer, recovery, operators and readers may
ask of an outbox, whatever stores it (modelled on APScheduler 4's data stores and
procrastinate's connectors).

Every call runs inside a transaction the caller owns (``Tx``: a SQLAlchemy ``Connection`` in
``engine.begin()`` for ``SqlOutbox``, a ``MemoryTx`` from ``MemoryOutbox.begin()``); nothing is
visible to others until it commits, and an exception rolls all of it back. The guarantees every
implementation gives (tests/test_outbox_contract.py checks them on memory, SQLite and PostgreSQL):

- a transition happens only if the job is in one of its ``sources`` (``dispatch.states``) and,
  for a worker's transitions, still carries the caller's fencing token; otherwise the call
  changes nothing for that job and leaves it out of its result;
- every transition appends exactly one journal event (from, to, token, actor, detail);
- every claim increments the job's token, so an old lease can never act again;
- leases expire on the outbox's own clock (the database's, or the memory outbox's ``clock``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol, TypeVar

from dispatch.outbox.jobs import (
    ClaimedJob,
    Completion,
    Deferral,
    Lease,
    LeaseRow,
    NewJob,
    RecoveryReport,
    Refusal,
    SlotAsk,
)
from dispatch.outbox.relay import RelayRow
from dispatch.states import State

Tx = TypeVar("Tx", contravariant=True)


class JobView(Protocol):
    """The attributes of a row from ``jobs_in_state``."""

    id: int
    key: str
    campaign: str
    step: str
    recipient: str
    message_id: str
    state: str
    send_attempts: int
    claims: int
    outcome_code: int | None
    outcome_text: str | None
    in_doubt_reason: str | None
    send_started_at: datetime | None
    updated_at: datetime | None


class EventView(Protocol):
    """The attributes of a journal row from ``events``."""

    job_id: int
    token: int
    from_state: str | None
    to_state: str
    actor: str
    detail: str | None
    at: datetime | None


class Outbox(Protocol[Tx]):
    # --- scheduler
    def enqueue(
        self, conn: Tx, jobs: Sequence[NewJob], *, replace_pending: bool = False
    ) -> int: ...
    def withdraw(self, conn: Tx, keys: Sequence[str], *, reason: str, actor: str) -> int: ...

    # --- worker (through its committer), each guarded by the lease's token
    def claim(
        self, conn: Tx, *, owner: str, limit: int, lease_seconds: float
    ) -> list[ClaimedJob]: ...
    def heartbeat(self, conn: Tx, leases: Sequence[Lease], *, lease_seconds: float) -> set[int]: ...
    def start_sends(
        self, conn: Tx, leases: Sequence[Lease], *, margin_seconds: float, actor: str
    ) -> dict[int, datetime]: ...
    def settle_unstartable(
        self, conn: Tx, leases: Sequence[Lease], *, actor: str
    ) -> dict[int, State]: ...
    def complete(self, conn: Tx, completions: Sequence[Completion], *, actor: str) -> set[int]: ...
    def release_claims(self, conn: Tx, leases: Sequence[Lease], *, actor: str) -> set[int]: ...
    def defer_claims(self, conn: Tx, deferrals: Sequence[Deferral], *, actor: str) -> set[int]: ...
    def relay_unavailable_claims(
        self, conn: Tx, leases: Sequence[Lease], *, retry_in: float, why: str, actor: str
    ) -> set[int]: ...
    def lease_state(self, conn: Tx, leases: Sequence[Lease]) -> dict[int, str]: ...
    # shared rate limits (dispatch.outbox.rates): slots, W3, the cells
    def acquire_slots(self, conn: Tx, asks: Sequence[SlotAsk]) -> dict[int, Refusal]: ...
    def rate_limited_claims(
        self, conn: Tx, deferrals: Sequence[Deferral], *, actor: str
    ) -> set[int]: ...
    def set_rates(self, conn: Tx, limits: Mapping[str, float | None]) -> None: ...
    def rate_limits(self, conn: Tx, prefix: str = "") -> dict[str, float]: ...
    def slow_down(self, conn: Tx, key: str) -> float | None: ...
    def lease_rows(self, conn: Tx, leases: Sequence[Lease]) -> dict[int, LeaseRow]: ...

    # --- relay outages (dispatch.outbox.relay)
    def record_relay(
        self, conn: Tx, relay: str, *, reachable: bool, error: str | None, worker: str
    ) -> bool: ...
    def relay_statuses(self, conn: Tx) -> list[RelayRow]: ...

    # --- recovery
    def recover(self, conn: Tx, *, grace_seconds: float, actor: str) -> RecoveryReport: ...

    # --- operators
    def cancel_campaign(self, conn: Tx, campaign: str, *, actor: str) -> int: ...
    def resolve_in_doubt(
        self,
        conn: Tx,
        *,
        keys: Sequence[str] | None,
        campaign: str | None,
        target: State,
        actor: str,
        why: str,
    ) -> list[tuple[int, str]]: ...
    def retry_dead(
        self, conn: Tx, *, keys: Sequence[str] | None, campaign: str | None, actor: str
    ) -> list[tuple[int, str]]: ...
    # Suppression entries, by mailbox identity (the caller computes it: campaigns.suppression).
    # ``scope``: "global" or "list:<name>"; T4 refuses a job whose mailbox is suppressed
    # globally or in the job's ``list_scope``, and settles it cancelled ("suppressed", T4c).
    def suppress(
        self, conn: Tx, mailbox: str, reason: str, *, scope: str = ..., source: str = ...
    ) -> bool: ...
    def suppress_many(
        self, conn: Tx, entries: Sequence[tuple[str, str, str]], *, source: str
    ) -> int: ...  # (mailbox, scope, reason) each; how many were new
    def unsuppress(self, conn: Tx, mailbox: str, *, scope: str = ...) -> bool: ...

    # --- readers
    def counts(self, conn: Tx, campaign: str | None = None) -> list[tuple[str, str, str, int]]: ...
    def jobs_in_state(
        self, conn: Tx, state: State, *, campaign: str | None = None, limit: int | None = None
    ) -> list[Any]: ...  # JobView rows
    def events(self, conn: Tx, job_ids: Sequence[int] | None = None) -> list[Any]: ...  # EventView
    def has_work(self, conn: Tx, horizon_seconds: float = 0.0) -> bool: ...
    def next_due_in(self, conn: Tx) -> float | None: ...
    def database_now(self, conn: Tx) -> datetime: ...
