"""Finding jobs by key: through ``send_key``, whose unique index holds every key once.

send_job has no index on ``key`` on PostgreSQL since migration 0009 (an index there was
re-inserted by every transition), so a statement that selects jobs by key asks send_key for
their ids and reads send_job by primary key.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from dispatch.models import send_job, send_key

J = send_job.c
K = send_key.c


def job_of(key: Any) -> sa.ScalarSelect[Any]:
    """The id of the job with this key (a bound parameter or a column), as a subquery."""
    return sa.select(K.job_id).where(K.key == key).scalar_subquery()


def with_keys(keys: Sequence[str]) -> sa.ColumnElement[bool]:
    """``send_job.id IN (the ids of these keys)``."""
    return J.id.in_(sa.select(K.job_id).where(K.key.in_(list(keys))))


def with_key_prefix(prefix: str) -> sa.ColumnElement[bool]:
    """The jobs whose key starts with ``prefix`` (LIKE-escaped), found in send_key's index."""
    return J.id.in_(sa.select(K.job_id).where(K.key.startswith(prefix, autoescape=True)))
