"""The memory outbox's relay-outage operations: W4 and ``relay_status`` (as
``dispatch.outbox.relay`` does them in SQL)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta

from dispatch.outbox.jobs import Lease
from dispatch.outbox.memory_base import MemoryBase, MemoryTx
from dispatch.outbox.relay import FORGET_AFTER, OK, UNREACHABLE, RelayRow
from dispatch.states import State, T, performs


class MemoryRelayOps(MemoryBase):
    @performs(T.RELAY_UNAVAILABLE)
    def relay_unavailable_claims(
        self, conn: MemoryTx, leases: Sequence[Lease], *, retry_in: float, why: str, actor: str
    ) -> set[int]:
        now = conn.clock()
        done = set()
        for j in self._leased(conn, leases):
            if State(j.state) in T.RELAY_UNAVAILABLE.sources:
                self._move(
                    conn,
                    j,
                    T.RELAY_UNAVAILABLE,
                    actor,
                    why,
                    claims=j.claims - 1,
                    not_before=now + timedelta(seconds=retry_in),
                    lease_owner=None,
                    lease_expires_at=None,
                )
                done.add(j.id)
        return done

    def record_relay(
        self, conn: MemoryTx, relay: str, *, reachable: bool, error: str | None, worker: str
    ) -> bool:
        now = conn.clock()
        old = conn.data.relays.get(relay)
        if reachable:
            forget = now - timedelta(seconds=FORGET_AFTER)
            for name, row in list(conn.data.relays.items()):
                stale = row.updated_at is not None and row.updated_at < forget
                if name != relay and row.state == UNREACHABLE and stale:
                    del conn.data.relays[name]
            if old is None or old.state != UNREACHABLE:
                return False
            conn.data.relays[relay] = replace(
                old, state=OK, since=now, worker=worker, updated_at=now
            )
            return True
        since = old.since if old is not None and old.state == UNREACHABLE else now
        conn.data.relays[relay] = RelayRow(relay, UNREACHABLE, since, error, worker, now)
        return old is None or old.state != UNREACHABLE

    def relay_statuses(self, conn: MemoryTx) -> list[RelayRow]:
        return [conn.data.relays[name] for name in sorted(conn.data.relays)]
