"""The memory outbox's rate limits: the same cells, slots and W3 as ``dispatch.outbox.rates``,
on the outbox's clock and ``dispatch.rates``' arithmetic (the definition the SQL mirrors)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from dispatch import rates
from dispatch.outbox.jobs import Deferral, Refusal, SlotAsk
from dispatch.outbox.memory_base import MemoryBase, MemoryTx
from dispatch.states import T, performs


@dataclass
class MemRateCell:
    per_second: float
    factor: float = 1.0
    factor_until: float | None = None  # epoch seconds
    tat: float | None = None  # epoch seconds


class MemoryRateOps(MemoryBase):
    def _cells(self, conn: MemoryTx) -> dict[str, MemRateCell]:
        cells: dict[str, MemRateCell] = conn.data.rates
        return cells

    def acquire_slots(self, conn: MemoryTx, asks: Sequence[SlotAsk]) -> dict[int, Refusal]:
        refused: dict[int, Refusal] = {}
        now = conn.clock().timestamp()
        for key in sorted({k for ask in asks for k in ask.keys}):
            cell = self._cells(conn).get(key)
            waiting = [a for a in asks if key in a.keys and a.lease[0] not in refused]
            if cell is None:
                continue  # no limit (any more): nothing to take
            per_second = rates.effective(cell.per_second, cell.factor, cell.factor_until, now)
            taken = 0
            while taken < len(waiting):
                allowed, tat = rates.acquire(cell.tat, now, per_second)
                if not allowed:
                    break
                cell.tat = tat
                taken += 1
            slot = rates.next_slot(cell.tat, now, per_second)
            at = datetime.fromtimestamp(now, UTC)
            for index, ask in enumerate(waiting[taken:]):
                due = datetime.fromtimestamp(slot + index / per_second, UTC)
                refused[ask.lease[0]] = Refusal(due, key, at)
        return refused

    @performs(T.RATE_LIMITED)
    def rate_limited_claims(
        self, conn: MemoryTx, deferrals: Sequence[Deferral], *, actor: str
    ) -> set[int]:
        return self._hand_back_until(conn, deferrals, T.RATE_LIMITED, "rate limited", actor)

    def set_rates(self, conn: MemoryTx, limits: Mapping[str, float | None]) -> None:
        cells = self._cells(conn)
        for key, per_second in limits.items():
            if per_second is None:
                cells.pop(key, None)
            elif key in cells:
                cells[key].per_second = per_second
            else:
                cells[key] = MemRateCell(per_second)

    def rate_limits(self, conn: MemoryTx, prefix: str = "") -> dict[str, float]:
        return {k: c.per_second for k, c in self._cells(conn).items() if k.startswith(prefix)}

    def slow_down(self, conn: MemoryTx, key: str) -> float | None:
        cell = self._cells(conn).get(key)
        now = conn.clock().timestamp()
        if cell is None:
            return None
        slowed = cell.factor_until is not None and cell.factor_until > now
        if slowed:
            assert cell.factor_until is not None
            if cell.factor_until - now > rates.SLOWDOWN_SECONDS - rates.SLOWDOWN_EVERY:
                return None
            cell.factor = max(cell.factor / 2, rates.SLOWDOWN_FLOOR)
        else:
            cell.factor = 0.5
        cell.factor_until = now + rates.SLOWDOWN_SECONDS
        return cell.factor
