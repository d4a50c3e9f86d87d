"""Compatibility alias: the column types now live in the bottom-level package ``dbtypes``.

Kept only so code written before the move (other branches of issue 8) still imports; import
``dbtypes`` in new code. Remove once nothing imports this module.
"""

from __future__ import annotations

from dbtypes import (
    ForeignText,
    UtcTimestamp,
    big_id,
    db_now,
    db_now_plus,
    seconds,
    utc,
)

__all__ = [
    "ForeignText",
    "UtcTimestamp",
    "big_id",
    "db_now",
    "db_now_plus",
    "seconds",
    "utc",
]
