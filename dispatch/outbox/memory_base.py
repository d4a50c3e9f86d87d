"""The memory outbox's data, clock, transactions and the one door to a state change (``_move``).

``_move`` checks the job's state against the transition's sources (``dispatch.states``), applies
the change and appends the journal event, as a guarded UPDATE and its event row would.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from dispatch.models import GLOBAL_SCOPE
from dispatch.outbox.gate import CAMPAIGN_GATE, CampaignGate
from dispatch.outbox.jobs import Deferral, Lease
from dispatch.outbox.relay import RelayRow
from dispatch.states import State, Transition

Clock = Callable[[], datetime]


def system_clock() -> datetime:
    return datetime.now(UTC)


@dataclass
class MemJob:
    id: int
    key: str
    key_tuple: str
    campaign: str
    step: str
    occurrence_at: datetime
    channel: str
    sender: str
    recipient: str
    mailbox: str
    message_id: str
    payload: bytes
    payload_hash: str
    not_before: datetime
    max_claims: int
    max_send_attempts: int
    in_doubt_policy: str
    send_window: str | None = None
    list_scope: str | None = None
    state: str = State.PENDING.value
    claims: int = 0
    send_attempts: int = 0
    lease_owner: str | None = None
    lease_token: int = 0
    lease_expires_at: datetime | None = None
    send_started_at: datetime | None = None
    outcome_code: int | None = None
    outcome_text: str | None = None
    outcome_at: datetime | None = None
    in_doubt_reason: str | None = None
    resolution: str | None = None
    superseded_at: datetime | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None


@dataclass(frozen=True)
class MemEvent:
    id: int
    job_id: int
    token: int
    from_state: str | None
    to_state: str
    actor: str
    detail: str | None
    at: datetime


@dataclass
class _Data:
    jobs: dict[int, MemJob] = field(default_factory=dict)
    events: list[MemEvent] = field(default_factory=list)
    campaigns: dict[str, str] = field(default_factory=dict)  # name -> status
    # (mailbox, scope) -> reason; scope is GLOBAL_SCOPE or ``list:<name>``, as in SQL.
    suppressed: dict[tuple[str, str], str] = field(default_factory=dict)
    relays: dict[str, RelayRow] = field(default_factory=dict)  # relay_status, by relay
    rates: dict[str, Any] = field(default_factory=dict)  # key -> memory_rates.MemRateCell
    next_id: int = 1


class MemoryTx:
    """One transaction: the data it may change and the outbox's clock."""

    def __init__(self, data: _Data, clock: Clock) -> None:
        self.data = data
        self.clock = clock


class MemoryBase:
    """The data, the clock, transactions and the one way a job changes state (``_move``)."""

    def __init__(self, *, clock: Clock = system_clock, gate: CampaignGate = CAMPAIGN_GATE) -> None:
        self.clock = clock
        self.gate = gate
        self._data = _Data()
        self._lock = threading.RLock()

    @contextmanager
    def begin(self) -> Iterator[MemoryTx]:
        with self._lock:
            snapshot = copy.deepcopy(self._data)
            try:
                yield MemoryTx(self._data, self.clock)
            except BaseException:
                self._data = snapshot
                raise

    def set_campaign_status(self, tx: MemoryTx, campaign: str, status: str) -> None:
        """What the ``campaigns`` package's table holds in SQL."""
        tx.data.campaigns[campaign] = status

    # ------------------------------------------------------------ helpers

    def _move(
        self,
        tx: MemoryTx,
        job: MemJob,
        transition: Transition,
        actor: str,
        detail: str | None,
        **changes: Any,
    ) -> None:
        source = State(job.state)
        transition.check(source)
        now = tx.clock()
        for name, value in changes.items():
            setattr(job, name, value)
        job.state = transition.target.value
        job.updated_at = now
        self._event(tx, job, source, transition, actor, detail)

    @staticmethod
    def _event(
        tx: MemoryTx,
        job: MemJob,
        source: State | None,
        transition: Transition,
        actor: str,
        detail: str | None,
    ) -> None:
        event = MemEvent(
            len(tx.data.events) + 1,
            job.id,
            job.lease_token,
            None if source is None else source.value,
            transition.target.value,
            actor,
            detail,
            tx.clock(),
        )
        tx.data.events.append(event)

    @staticmethod
    def _suppressed(tx: MemoryTx, job: MemJob) -> bool:
        """As ``sqlcore.suppressed``: global, or the job's own list (never a NULL scope)."""
        scopes = [GLOBAL_SCOPE] if job.list_scope is None else [GLOBAL_SCOPE, job.list_scope]
        return any((job.mailbox, scope) in tx.data.suppressed for scope in scopes)

    def _active(self, tx: MemoryTx, job: MemJob) -> bool:
        # A campaign the table does not know is not inactive (SQL: NOT IN inactive names).
        return tx.data.campaigns.get(job.campaign, self.gate.active) == self.gate.active

    def _hand_back_until(
        self,
        conn: MemoryTx,
        deferrals: Sequence[Deferral],
        transition: Transition,
        why: str,
        actor: str,
    ) -> set[int]:
        """Claimed → pending, due at each job's ``not_before``, the claim not counted (W2, W3;
        the SQL twin is ``sqlcore.hand_back_until``)."""
        done = set()
        for deferral in deferrals:
            for j in self._leased(conn, [deferral.lease]):
                if State(j.state) in transition.sources:
                    self._move(
                        conn,
                        j,
                        transition,
                        actor,
                        f"{why}; due {deferral.not_before.isoformat()}",
                        claims=j.claims - 1,
                        not_before=deferral.not_before,
                        lease_owner=None,
                        lease_expires_at=None,
                    )
                    done.add(j.id)
        return done

    @staticmethod
    def _leased(tx: MemoryTx, leases: Sequence[Lease]) -> list[MemJob]:
        """The jobs that carry one of these leases, each once (as ``(id, token) IN (…)``)."""
        wanted = set(leases)
        found = (tx.data.jobs.get(job_id) for job_id in dict.fromkeys(i for i, _ in leases))
        return [j for j in found if j is not None and (j.id, j.lease_token) in wanted]

    @staticmethod
    def _selected(
        tx: MemoryTx, state: State, keys: Sequence[str] | None, campaign: str | None
    ) -> list[MemJob]:
        return [
            j
            for j in sorted(tx.data.jobs.values(), key=lambda j: j.id)
            if j.state == state.value
            and (keys is None or j.key in keys)
            and (campaign is None or j.campaign == campaign)
        ]
