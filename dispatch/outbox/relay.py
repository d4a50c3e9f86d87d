"""Relay outages in the outbox: W4 (claims handed back because the relay is unreachable) and
``relay_status``, the last thing any worker learnt about each relay (migration 0006).

A relay outage is not the recipients' failure: W4 counts neither a claim nor an attempt, so no
outage, however long, can exhaust a job (R3) or dead-letter it. ``relay_status`` is shared by
every worker on every host, so ``herald status`` can say "relay unreachable since …" wherever it
runs; a worker that reaches the relay again marks it ok.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from dbtypes import db_now, db_now_plus, seconds
from dispatch.models import relay_status, send_job
from dispatch.outbox.base import SqlBase
from dispatch.outbox.jobs import Lease
from dispatch.outbox.sqlcore import J, guard, journal, leases_in, returned
from dispatch.states import T, performs

R = relay_status.c
UNREACHABLE = "unreachable"
OK = "ok"
# An outage still going on is re-reported by every worker facing it at each failed probe (at
# least every 30 s) and by every --until-idle run. One nobody has reported for this long, while
# mail goes out through another relay, is a relay no worker uses any more (a URL that was
# fixed): a successful send forgets it, so `herald status` does not warn about it for ever.
FORGET_AFTER = 600.0  # seconds


@dataclass(frozen=True)
class RelayRow:
    """One relay as ``relay_status`` knows it. ``since``: when it entered ``state``."""

    relay: str  # redacted: scheme, host and port, never credentials
    state: str  # ok | unreachable
    since: datetime
    last_error: str | None
    worker: str | None  # the worker that last reported it
    updated_at: datetime | None


class RelayOps(SqlBase):
    @performs(T.RELAY_UNAVAILABLE)
    def relay_unavailable_claims(
        self, conn: sa.Connection, leases: Sequence[Lease], *, retry_in: float, why: str, actor: str
    ) -> set[int]:
        """claimed → pending for claims that could not reach the relay, due in ``retry_in``
        seconds (database clock), guarded by token. Like W1, the claim is not counted (and no
        attempt was: nothing got as far as MAIL)."""
        if not leases:
            return set()
        stmt = (
            sa.update(send_job)
            .where(leases_in(leases), guard(T.RELAY_UNAVAILABLE, bound=True))
            .values(
                state=T.RELAY_UNAVAILABLE.target.value,
                claims=J.claims - 1,
                not_before=db_now_plus(seconds(retry_in)),
                lease_owner=None,
                lease_expires_at=None,
                updated_at=db_now(),
            )
            .returning(J.id, J.lease_token)
        )
        done = returned(conn.execute(stmt), why)
        journal(conn, T.RELAY_UNAVAILABLE, done, actor)
        return {i for i, _, _ in done}

    def record_relay(
        self,
        conn: sa.Connection,
        relay: str,
        *,
        reachable: bool,
        error: str | None,
        worker: str,
    ) -> bool:
        """Unreachable: upsert, keeping the ``since`` of an outage already recorded (by any
        worker). Reachable: mark an unreachable relay ok again (nothing if it is not recorded as
        unreachable: a healthy relay costs a no-op UPDATE), and forget other relays recorded
        unreachable that nobody has reported for ``FORGET_AFTER``. True if this relay's row
        changed state."""
        if reachable:
            stmt = (
                sa.update(relay_status)
                .where(R.relay == relay, R.state == UNREACHABLE)
                .values(state=OK, since=db_now(), worker=worker, updated_at=db_now())
            )
            changed = bool(conn.execute(stmt).rowcount)
            conn.execute(
                sa.delete(relay_status).where(
                    R.relay != relay,
                    R.state == UNREACHABLE,
                    R.updated_at < db_now_plus(seconds(-FORGET_AFTER)),
                )
            )
            return changed
        before = conn.execute(sa.select(R.state).where(R.relay == relay)).scalar()
        insert = self.forms.insert(relay_status).values(
            relay=relay,
            state=UNREACHABLE,
            since=db_now(),
            last_error=error,
            worker=worker,
            updated_at=db_now(),
        )
        conn.execute(
            insert.on_conflict_do_update(
                index_elements=[R.relay],
                set_={
                    "state": UNREACHABLE,
                    "since": sa.case((R.state == UNREACHABLE, R.since), else_=db_now()),
                    "last_error": insert.excluded.last_error,
                    "worker": insert.excluded.worker,
                    "updated_at": db_now(),
                },
            )
        )
        return before != UNREACHABLE

    def relay_statuses(self, conn: sa.Connection) -> list[RelayRow]:
        """Every relay a worker ever found unreachable (and whether it is ok again), by name."""
        rows = conn.execute(
            sa.select(R.relay, R.state, R.since, R.last_error, R.worker, R.updated_at).order_by(
                R.relay
            )
        )
        return [RelayRow(*row) for row in rows]
