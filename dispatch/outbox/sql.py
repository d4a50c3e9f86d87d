"""The SQLAlchemy outbox: one object assembled from the concerns, for SQLite and PostgreSQL.

Methods take a ``Connection`` inside a transaction the caller owns, so a worker can group the
transitions of many concurrent sends into one commit, and the scheduler can enqueue jobs in the
same transaction that advances its fan-out cursor.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import sqlalchemy as sa

from dispatch.outbox.claim import ClaimOps
from dispatch.outbox.contract import Outbox
from dispatch.outbox.operator import OperatorOps
from dispatch.outbox.prune import PruneOps
from dispatch.outbox.rates import RateOps
from dispatch.outbox.reads import ReadOps
from dispatch.outbox.recovery import RecoveryOps
from dispatch.outbox.relay import RelayOps
from dispatch.outbox.send import SendOps


class SqlOutbox(ClaimOps, SendOps, RateOps, RelayOps, RecoveryOps, OperatorOps, ReadOps, PruneOps):
    """``SqlOutbox(engine.dialect.name)``: implements ``dispatch.outbox.contract.Outbox``."""


if TYPE_CHECKING:  # mypy proves the class honours the contract
    _conforms: type[Outbox[sa.Connection]] = SqlOutbox
