"""What a worker tells about permanent failures, in the transaction that records them.

A campaign whose recent sends keep failing permanently (a blacklisted sender, a relay that
rejects the content) should stop itself before it burns its audience. That rule reads the
campaign's spec, which ``dispatch`` must not import, so the worker only offers the moment: after
a completion batch that contains permanent failures (T7f/T8, and T6 ending ``failed``), inside
the same transaction, it calls the ``FailureWatch`` it was given with the ids of those jobs.
``herald`` gives the worker ``campaigns.error_threshold.ErrorThreshold``; a worker built without
one (tests, tools) watches nothing.

Whatever the watch writes commits or rolls back with the failures that caused it. It must be
cheap (it runs on the committer thread, inside the batch) and idempotent: several workers may
see the same failures and decide the same thing.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import sqlalchemy as sa


class FailureWatch(Protocol):
    def after_failures(self, conn: sa.Connection, job_ids: Sequence[int]) -> None:
        """``job_ids`` have just been recorded ``failed`` in ``conn``'s transaction."""
