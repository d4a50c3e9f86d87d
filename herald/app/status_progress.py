"""How a send is going, for ``herald status``: each step's place in its campaign, the rate at
which its jobs finish, when what is left should be done at that rate, and why jobs failed.

- Step order is the order of ``steps:`` in the spec as launched (the campaign table), read once
  per spec hash and kept: ``--watch`` re-reads status every few seconds, the spec never changes
  under a hash. Steps that have jobs but are not in the stored spec (a step a newer version
  removed) come after, by name.
- The rate counts jobs that *finished* (sent or failed: the worker's throughput, whatever the
  relay answered) with an ``outcome_at`` in the last ``RATE_WINDOW`` before the caller's now,
  per minute of the time since the first of them (at least ``_MIN_SPAN``): a send that started
  two minutes ago is measured over those two minutes, not diluted over ten.
- The ETA is now plus what is left (pending, claimed, sending) at that rate, and never before
  the latest ``not_before`` of its pending jobs (work that is not due yet is not done sooner).
  None when the rate is zero or nothing is left; in doubt waits for an operator, not counted.
- Failure reasons group the failed jobs' relay replies (code and text, one line) with every
  address in them shown as ``<address>``: a server that names each recipient in its reply
  still makes one reason, not one per recipient.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Final

import sqlalchemy as sa

from campaigns.models import campaign_table
from dbtypes import UtcTimestamp
from dispatch.models import send_job
from dispatch.states import State

C = campaign_table.c
J = send_job.c

RATE_WINDOW: Final = timedelta(minutes=10)
_MIN_SPAN: Final = timedelta(minutes=1)  # a first send a second ago is not 60 sends a minute
TOP_FAILURES: Final = 3
_LEFT: Final = frozenset({State.PENDING.value, State.CLAIMED.value, State.SENDING.value})
_FINISHED: Final = (State.SENT.value, State.FAILED.value)
_ADDRESS: Final = re.compile(r"<?[^\s<>\"'(),;:\[\]]+@[^\s<>\"'(),;:\[\]]+>?")
_REASON_LIMIT: Final = 500  # a reply can be long; the reason is a summary

_step_orders: dict[str, tuple[str, ...]] = {}  # spec hash -> step ids, in spec order
_CACHED_SPECS: Final = 256


@dataclass(frozen=True)
class Pace:
    """What one step (or campaign) finished lately and what it has left."""

    finished: int = 0  # sent or failed within the rate window
    first: datetime | None = None  # the earliest of those
    last_due: datetime | None = None  # the latest not_before of its pending jobs

    def merged(self, other: Pace) -> Pace:
        return Pace(
            self.finished + other.finished,
            _earliest(self.first, other.first),
            _latest(self.last_due, other.last_due),
        )

    def rate_per_minute(self, now: datetime) -> float:
        if not self.finished or self.first is None:
            return 0.0
        span = max(now - self.first, _MIN_SPAN)
        return self.finished / (span / timedelta(minutes=1))

    def eta(self, now: datetime, left: int) -> datetime | None:
        rate = self.rate_per_minute(now)
        if not left or not rate:
            return None
        at_rate = now + timedelta(minutes=left / rate)
        return at_rate if self.last_due is None else max(at_rate, self.last_due)


def left_of(counts: dict[str, int]) -> int:
    """Jobs still to be attempted: pending, claimed or sending."""
    return sum(n for state, n in counts.items() if state in _LEFT)


def paces(conn: sa.Connection, campaign: str | None, now: datetime) -> dict[tuple[str, str], Pace]:
    """Per (campaign, step): finished within the window before ``now``, and the last due time."""
    since = now - RATE_WINDOW
    recent = sa.and_(J.state.in_(_FINISHED), J.outcome_at > since, J.outcome_at <= now)
    pending = J.state == State.PENDING.value
    stmt = sa.select(
        J.campaign,
        J.step,
        sa.func.count(sa.case((recent, J.id))),
        # Typed: an aggregate over a CASE must still come back as an aware datetime.
        sa.type_coerce(sa.func.min(sa.case((recent, J.outcome_at))), UtcTimestamp()),
        sa.type_coerce(sa.func.max(sa.case((pending, J.not_before))), UtcTimestamp()),
    ).where(sa.or_(recent, pending))
    if campaign is not None:
        stmt = stmt.where(J.campaign == campaign)
    stmt = stmt.group_by(J.campaign, J.step)
    return {
        (name, step): Pace(int(n), first, due) for name, step, n, first, due in conn.execute(stmt)
    }


def top_failures(conn: sa.Connection, campaign: str | None) -> dict[str, list[dict[str, object]]]:
    """Per campaign: up to TOP_FAILURES ``{"reason", "count"}``, commonest first (ties by
    reason, so the order is stable)."""
    stmt = sa.select(J.campaign, J.outcome_code, J.outcome_text, sa.func.count()).where(
        J.state == State.FAILED.value
    )
    if campaign is not None:
        stmt = stmt.where(J.campaign == campaign)
    stmt = stmt.group_by(J.campaign, J.outcome_code, J.outcome_text)
    counted: dict[str, Counter[str]] = {}
    for name, code, text, n in conn.execute(stmt):
        counted.setdefault(name, Counter())[failure_reason(code, text)] += int(n)
    return {
        name: [
            {"reason": reason, "count": n}
            for reason, n in sorted(counter.items(), key=lambda item: (-item[1], item[0]))[
                :TOP_FAILURES
            ]
        ]
        for name, counter in counted.items()
    }


def failure_reason(code: int | None, text: str | None) -> str:
    """One line: the reply code (unless the text starts with it), the text, addresses masked."""
    words = " ".join(_ADDRESS.sub("<address>", text or "").split())
    if code is not None and not words.startswith(str(code)):
        words = f"{code} {words}".strip()
    if len(words) > _REASON_LIMIT:
        words = words[: _REASON_LIMIT - 1].rstrip() + "…"
    return words or "no reason recorded"


def step_orders(conn: sa.Connection, hashes: dict[str, str]) -> dict[str, tuple[str, ...]]:
    """Per campaign name (``hashes``: name -> spec hash): its step ids in spec order. Reads the
    stored spec only for hashes not seen before."""
    missing = sorted({h for h in hashes.values() if h not in _step_orders})
    if missing:
        if len(_step_orders) + len(missing) > _CACHED_SPECS:
            _step_orders.clear()
        for spec_hash, text in conn.execute(
            sa.select(C.spec_hash, C.spec).where(C.spec_hash.in_(missing))
        ):
            _step_orders[spec_hash] = step_ids(text)
    return {name: _step_orders.get(h, ()) for name, h in hashes.items()}


def step_ids(spec_text: str) -> tuple[str, ...]:
    """The ``id`` of each entry of ``steps:`` in ``spec_text``, in order; () if unreadable
    (then steps are shown by name)."""
    from campaigns.errors import CampaignError
    from campaigns.yaml_loader import load_yaml

    try:
        data = load_yaml(spec_text, file="<stored spec>").data
    except (CampaignError, ValueError):
        return ()
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        return ()
    ids = [str(s["id"]) for s in steps if isinstance(s, dict) and "id" in s]
    return tuple(dict.fromkeys(ids))


def in_spec_order(steps: Iterable[str], order: tuple[str, ...]) -> list[str]:
    """``steps`` (with jobs) and the spec's steps (maybe without jobs yet): the spec's in its
    order, then any others by name."""
    have = set(steps)
    return [*order, *sorted(have - set(order))]


def _earliest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else min(a, b)


def _latest(a: datetime | None, b: datetime | None) -> datetime | None:
    return b if a is None else a if b is None else max(a, b)
