"""Shared rate limits in SQL: one GCRA cell per key in ``rate_limit``, and W3.

Acquiring a slot is ONE conditional UPDATE on the database clock (so every worker on every
host shares the cell, and their clocks never matter): it moves the cell's TAT and returns it,
or matches nothing when the key has no slot free now. The arithmetic is
``dispatch.rates.acquire``'s, in epoch seconds (SQLite stores timestamps as epoch REAL;
PostgreSQL converts with ``extract(epoch …)`` / ``to_timestamp``).

PostgreSQL locks each cell it moves until the transaction commits, so a transaction takes the
cells in one global order (keys sorted) and two workers can never wait on each other in a
cycle. A 421 slowdown and the refresh of the keys run in their own short transactions for the
same reason (``dispatch.rate_gate``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa

from dbtypes import UtcTimestamp, db_now
from dispatch import rates
from dispatch.models import rate_limit
from dispatch.outbox.base import SqlBase
from dispatch.outbox.jobs import Deferral, Refusal, SlotAsk
from dispatch.outbox.sqlcore import hand_back_until
from dispatch.states import T, performs

R = rate_limit.c


class RateOps(SqlBase):
    # ------------------------------------------------------------------ clock forms

    def _epoch(self, ts: Any) -> sa.ColumnElement[float]:
        if self.dialect == "sqlite":
            return sa.type_coerce(ts, sa.Float())
        return sa.cast(sa.extract("epoch", ts), sa.Float())

    def _timestamp(self, epoch: sa.ColumnElement[float]) -> sa.ColumnElement[datetime]:
        if self.dialect == "sqlite":
            return sa.type_coerce(epoch, UtcTimestamp())
        return sa.func.to_timestamp(epoch, type_=UtcTimestamp())

    def _floor(self, value: sa.ColumnElement[float]) -> sa.ColumnElement[float]:
        # SQLite's CAST truncates (floor, for the positive rates here); PostgreSQL's rounds.
        if self.dialect == "sqlite":
            return sa.cast(value, sa.Integer)
        return sa.func.floor(value, type_=sa.Float())

    def _effective(self) -> sa.ColumnElement[float]:
        """per_second × factor while a slowdown lasts (``dispatch.rates.effective``)."""
        slowed = sa.and_(R.factor_until.is_not(None), R.factor_until > db_now())
        return R.per_second * sa.case((slowed, R.factor), else_=sa.literal(1.0))

    # ------------------------------------------------------------------ slots

    def acquire_slots(self, conn: sa.Connection, asks: Sequence[SlotAsk]) -> dict[int, Refusal]:
        """Take a slot of every key each job asks for, in the order asked; returns the jobs
        refused, each with the key that refused it and the moment its next slot is estimated
        (spread one interval apart per key, so refused jobs come back in turn rather than all
        at once).

        Keys are visited in sorted order (``campaign:`` before ``domain:``); a job refused by
        one key is not asked of the later ones. A slot taken for a job a later key refuses is
        spent unused: the limit is never exceeded, at worst under-used."""
        refused: dict[int, Refusal] = {}
        for key in sorted({k for ask in asks for k in ask.keys}):
            waiting = [a for a in asks if key in a.keys and a.lease[0] not in refused]
            taken = 0
            while taken < len(waiting) and self._take(conn, key):
                taken += 1
            if taken == len(waiting):
                continue
            # GCRA is monotone on one clock reading: once refused, the rest are refused too.
            found = self._next_slot(conn, key)
            if found is None:
                continue  # the key has no limit (any more): nothing to take
            slot, interval, now = found
            at = datetime.fromtimestamp(now, UTC)
            for index, ask in enumerate(waiting[taken:]):
                due = datetime.fromtimestamp(slot + index * interval, UTC)
                refused[ask.lease[0]] = Refusal(due, key, at)
        return refused

    def _take(self, conn: sa.Connection, key: str) -> bool:
        """One GCRA acquisition: the conditional UPDATE (``dispatch.rates.acquire``)."""
        now = self._epoch(db_now())
        rate = self._effective()
        tat = self._epoch(R.tat)
        start = sa.case((sa.or_(R.tat.is_(None), tat < now), now), else_=tat)
        tau = sa.case((rate >= 1, (self._floor(rate) - 1) / rate), else_=sa.literal(0.0))
        stmt = (
            sa.update(rate_limit)
            .where(R.key == key, start - now <= tau + rates.EPSILON)
            .values(tat=self._timestamp(start + 1.0 / rate), updated_at=db_now())
            .returning(R.key)
        )
        return conn.execute(stmt).first() is not None

    def _next_slot(self, conn: sa.Connection, key: str) -> tuple[float, float, float] | None:
        """(epoch seconds of the key's next slot, its interval, the database's now), None if
        the key has no cell: read only when refused."""
        row = conn.execute(
            sa.select(
                self._epoch(R.tat).label("tat"),
                R.per_second,
                R.factor,
                self._epoch(R.factor_until).label("until"),
                self._epoch(db_now()).label("now"),
            ).where(R.key == key)
        ).first()
        if row is None:
            return None
        per_second = rates.effective(row.per_second, row.factor, row.until, row.now)
        return rates.next_slot(row.tat, row.now, per_second), 1.0 / per_second, row.now

    @performs(T.RATE_LIMITED)
    def rate_limited_claims(
        self, conn: sa.Connection, deferrals: Sequence[Deferral], *, actor: str
    ) -> set[int]:
        """W3: hand back claims that got no slot, each due at its estimated slot, guarded by
        token. Like W1 and W2 the claim is not counted, and no attempt was used."""
        return hand_back_until(conn, deferrals, T.RATE_LIMITED, "rate limited", actor)

    # ------------------------------------------------------------------ the cells

    def set_rates(self, conn: sa.Connection, limits: Mapping[str, float | None]) -> None:
        """Create or change these keys' limits (per second); None removes a key's limit.
        The cell's TAT and slowdown are kept: a new worker does not reset the pace."""
        for key in sorted(limits):
            per_second = limits[key]
            if per_second is None:
                conn.execute(sa.delete(rate_limit).where(R.key == key))
                continue
            insert = self.forms.insert(rate_limit).values(
                key=key, per_second=per_second, factor=1.0, updated_at=db_now()
            )
            conn.execute(
                insert.on_conflict_do_update(
                    index_elements=["key"],
                    set_={"per_second": per_second, "updated_at": db_now()},
                    where=R.per_second != per_second,
                )
            )

    def rate_limits(self, conn: sa.Connection, prefix: str = "") -> dict[str, float]:
        """The limited keys (starting with ``prefix``) and their configured rates."""
        stmt = sa.select(R.key, R.per_second)
        if prefix:
            stmt = stmt.where(R.key.startswith(prefix, autoescape=True))
        return {row.key: row.per_second for row in conn.execute(stmt)}

    def slow_down(self, conn: sa.Connection, key: str) -> float | None:
        """A 421/451/454 from this key's domain: halve its rate for ``SLOWDOWN_SECONDS`` (down
        to ``SLOWDOWN_FLOOR``), at most once per ``SLOWDOWN_EVERY`` seconds, so one burst of
        refusals is one halving. Returns the new factor (None: nothing changed)."""
        now = self._epoch(db_now())
        until = self._epoch(R.factor_until)
        slowed = sa.and_(R.factor_until.is_not(None), until > now)
        halved = self.forms.greatest(R.factor / 2, sa.literal(rates.SLOWDOWN_FLOOR))
        stmt = (
            sa.update(rate_limit)
            .where(
                R.key == key,
                sa.or_(
                    ~slowed,
                    until - now <= rates.SLOWDOWN_SECONDS - rates.SLOWDOWN_EVERY,
                ),
            )
            .values(
                factor=sa.case((slowed, halved), else_=sa.literal(0.5)),
                factor_until=self._timestamp(now + rates.SLOWDOWN_SECONDS),
                updated_at=db_now(),
            )
            .returning(R.factor)
        )
        row = conn.execute(stmt).first()
        return None if row is None else float(row.factor)
