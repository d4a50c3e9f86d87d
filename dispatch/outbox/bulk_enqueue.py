"""Enqueue (T1) on PostgreSQL through COPY: a batch of new jobs in three statements.

The portable enqueue (``ClaimOps.enqueue``) sends a batch as multi-row ``INSERT … VALUES``
statements; at fan-out sizes most of its time went into building and parsing those long
statements (psycopg re-parses every one: they are too long for its statement cache), not into
PostgreSQL. Here the batch is streamed with binary ``COPY`` into a temporary staging table, and
one statement moves it into ``send_job`` and writes the journal:

    WITH keyed AS (INSERT INTO send_key … SELECT … FROM stage ORDER BY seq
                   ON CONFLICT DO NOTHING RETURNING job_id),
         new AS (INSERT INTO send_job … SELECT … FROM stage JOIN keyed ON job_id = id
                 RETURNING id)
    INSERT INTO send_event … SELECT … FROM new

The semantics are the portable path's, statement for statement:

- no conflict target, so either UNIQUE index of send_key (key; campaign/step/occurrence/
  mailbox) makes a row a no-op, and rows go in in the batch's order (``ORDER BY seq``): of
  several spellings of one mailbox in a batch, the first keeps the job, as with the portable
  path;
- one T1 journal row per new job (token 0, from NULL, actor ``scheduler``), in the same
  transaction, at the transaction's time, exactly the rows ``sqlcore.journal`` writes;
- ``replace_pending`` is one ``UPDATE … FROM stage``, equal to the portable per-row UPDATE when
  each (key, recipient) pair occurs once in the batch; a batch repeating a pair (an audience
  listing one address twice with different data) takes the per-row UPDATE, whose outcome
  depends on the order of the repeats.

A batch is first tried without ``ON CONFLICT`` (in a savepoint): a launch's batches are new
keys, and with ``ON CONFLICT`` PostgreSQL checks every unique index before it inserts and
again as it inserts (speculative insertion): 97 → 74 ms per 5,000 jobs measured. If a key is
already there (a resumed or repeated fan-out, or two spellings of one mailbox in the batch),
the plain insert stops on the unique violation, the savepoint is rolled back and the batch goes
in with ``ON CONFLICT DO NOTHING`` as before: the same rows either way. A new version's batches
(``replace_pending``) are mostly existing keys and go straight to ``ON CONFLICT``.

``copy_enqueue`` is ``stage`` (COPY) then ``insert_staged`` (the statement above), both in the
caller's transaction; the fan-out calls them apart, so that one connection stages the next
batch while another inserts the last (``scheduler.fanout_writer``).

The staging table is per session (``TEMP``) and created inside the caller's transaction if
missing, so it also works through a transaction-mode pooler: whichever server connection runs
the transaction has it by then. ``ON COMMIT DELETE ROWS`` empties it at commit, and each call
empties it after use too (``_TRUNCATE``, ``_DELETE``), since a new campaign version enqueues
many batches in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import sqlalchemy as sa

from dbtypes import UtcTimestamp, db_now
from dispatch.models import send_job
from dispatch.outbox.jobs import NewJob, payload_hash
from dispatch.outbox.keyed import job_of
from dispatch.outbox.sqlcore import bound_state
from dispatch.states import State, T

J = send_job.c

# Renamed with migration 0009 (the ``id`` column): a transaction pooler's server session may
# still hold an older Herald's staging table, under the old name.
STAGE: Final = "herald_enqueue_stage_keyed"

# (column, PostgreSQL type) of the staging table, in COPY order; ``seq`` is the batch order.
_STAGED: Final = (
    ("seq", "bigint"),
    ("key", "text"),
    ("key_tuple", "text"),
    ("campaign", "text"),
    ("step", "text"),
    ("occurrence_at", "timestamptz"),
    ("channel", "text"),
    ("sender", "text"),
    ("recipient", "text"),
    ("mailbox", "text"),
    ("message_id", "text"),
    ("payload", "bytea"),
    ("payload_hash", "text"),
    ("not_before", "timestamptz"),
    ("send_window", "text"),
    ("list_scope", "text"),
    ("max_claims", "integer"),
    ("max_send_attempts", "integer"),
    ("in_doubt_policy", "text"),
)
_COPIED: Final = tuple(name for name, _ in _STAGED[1:])

# Created only when missing, in a DO block: ``CREATE … IF NOT EXISTS`` would send a NOTICE to
# the client for every batch after the first.
_CREATE: Final = (
    f"DO $$ BEGIN IF to_regclass('pg_temp.{STAGE}') IS NULL THEN "
    f"CREATE TEMP TABLE {STAGE} ("
    + ", ".join(f"{name} {type_}" for name, type_ in _STAGED)
    # Each staged row's job id, drawn as COPY writes it (so in the batch's order): a row that
    # turns out to exist burns its id, as a conflicting insert into a BIGSERIAL column does.
    + ", id bigint NOT NULL DEFAULT nextval('send_job_id_seq')"
    + ") ON COMMIT DELETE ROWS; END IF; END $$"
)
# How a call empties the staging table after use. ``copy_enqueue`` may be one of many calls in
# one transaction (a new campaign version stages every batch in ONE transaction): there rows a
# DELETE leaves dead stay in the table to its end, and every later batch's scans read them all
# again (a new version of 100,000 jobs took 34 s, growing with the square of the audience), so
# it TRUNCATEs (a fresh, empty file). ``insert_staged``'s transaction holds one batch and
# commits right after: a DELETE of that batch costs less than a new file (5 % of an enqueue of
# 1,000-job batches).
_TRUNCATE: Final = f"TRUNCATE {STAGE}"
_DELETE: Final = f"DELETE FROM {STAGE}"  # noqa: S608
_COPY: Final = f"COPY {STAGE} ({', '.join(n for n, _ in _STAGED)}) FROM STDIN (FORMAT BINARY)"

# The columns a new job starts with that do not come from the NewJob (ClaimOps.enqueue's too).
_START: Final = {
    "state": f"'{T.ENQUEUE.target.value}'",
    "claims": "0",
    "send_attempts": "0",
    "lease_token": "0",
}


# The send_key columns a staged job fills (its id comes from send_job's sequence).
_KEYED: Final = ("key", "campaign", "step", "occurrence_at", "mailbox")


# Built from this module's constants only (no value is ever spliced in): S608 does not apply.
def _insert(*, on_conflict: bool) -> str:
    """Keys first: a job is created only for a send_key row this statement inserted, so the
    two unique indexes of send_key decide what exists, as send_job's own did before 0009.

    With ``on_conflict``, rows go in in the batch's order (``ORDER BY seq``): of several rows
    for one key or one mailbox, the first gets the job, joined to its key by the id the staged
    row drew (unique even where a key is staged twice). Without, every staged key goes in or
    the statement fails (and the savepoint is rolled back): no order and no join are needed.
    """
    if on_conflict:
        keys = f"FROM {STAGE} ORDER BY seq ON CONFLICT DO NOTHING RETURNING job_id"
        jobs = f"FROM {STAGE} AS s JOIN keyed AS k ON k.job_id = s.id"
    else:
        keys = f"FROM {STAGE}"
        jobs = f"FROM {STAGE} AS s"
    copied = ", ".join(tuple(f"s.{c}" for c in _COPIED) + tuple(_START.values()))
    return (
        f"WITH keyed AS (INSERT INTO send_key (job_id, {', '.join(_KEYED)}) "  # noqa: S608
        f"SELECT id, {', '.join(_KEYED)} {keys}), "
        f"new AS (INSERT INTO send_job (id, {', '.join(_COPIED + tuple(_START))}) "
        f"SELECT s.id, {copied} {jobs} RETURNING id), "
        "events AS (INSERT INTO send_event (job_id, token, from_state, to_state, at, actor, "
        "detail) "
        f"SELECT id, 0, NULL, '{T.ENQUEUE.target.value}', now(), 'scheduler', NULL "
        "FROM new ORDER BY id) "
        "SELECT count(*) FROM new"
    )


_INSERT: Final = _insert(on_conflict=True)
_INSERT_NEW: Final = _insert(on_conflict=False)  # every key new, or a unique violation
_UNIQUE_VIOLATION: Final = "23505"  # SQLSTATE
_SAVEPOINT: Final = "herald_enqueue_new"
# A job is found by its key through send_key (send_job has no index on it since 0009).
_REPLACE: Final = (
    f"UPDATE send_job AS j SET payload = s.payload, payload_hash = s.payload_hash, "  # noqa: S608
    "not_before = s.not_before, send_window = s.send_window, list_scope = s.list_scope, "
    "max_send_attempts = s.max_send_attempts, updated_at = now() "
    f"FROM {STAGE} AS s JOIN send_key AS k ON k.key = s.key "
    "WHERE j.id = k.job_id AND j.recipient = s.recipient "
    f"AND j.state = '{State.PENDING.value}' AND j.payload_hash <> s.payload_hash"
)


def usable(conn: sa.Connection | sa.Engine) -> bool:
    """Whether this connection (or the engine's) can COPY: PostgreSQL through psycopg 3."""
    return conn.dialect.name == "postgresql" and conn.dialect.driver == "psycopg"


def copy_enqueue(
    conn: sa.Connection, jobs: Sequence[NewJob], *, replace_pending: bool = False
) -> int:
    """Insert ``jobs`` that do not exist yet and journal them (T1); returns how many were new.

    Same contract as ``ClaimOps.enqueue``, which calls it on PostgreSQL. Runs in the caller's
    transaction.
    """
    if not jobs:
        return 0
    created: int = wrapped(conn, _copy_enqueue, conn, jobs, replace_pending=replace_pending)
    return created


def _copy_enqueue(conn: sa.Connection, jobs: Sequence[NewJob], *, replace_pending: bool) -> int:
    _stage(conn, jobs)
    return _insert_staged(conn, jobs, replace_pending=replace_pending, empty=_TRUNCATE)


def stage(conn: sa.Connection, jobs: Sequence[NewJob]) -> None:
    """The first half of ``copy_enqueue``: ``jobs`` streamed into the session's staging table,
    in the caller's transaction; each staged row draws its job id. Nothing is in the outbox
    until ``insert_staged`` runs in the same transaction (the fan-out's pipeline stages the
    next batch while the previous one is inserted: scheduler.fanout_writer)."""
    wrapped(conn, _stage, conn, jobs)


def insert_staged(conn: sa.Connection, jobs: Sequence[NewJob]) -> int:
    """The second half of ``copy_enqueue`` for the batch ``stage`` staged (``jobs``, the same
    sequence): the new ones inserted and journalled (T1); returns how many were new. Its
    transaction stages nothing else (see ``_DELETE``)."""
    created: int = wrapped(conn, _insert_staged, conn, jobs, replace_pending=False, empty=_DELETE)
    return created


def wrapped(conn: sa.Connection, fn: Any, *args: Any, **kwargs: Any) -> Any:
    """``fn`` with the raw driver's errors wrapped as SQLAlchemy would wrap them, so a database
    refusal in a COPY reaches the caller's error mapping like one from any other statement."""
    dbapi_error = conn.dialect.loaded_dbapi.Error
    try:
        return fn(*args, **kwargs)
    except dbapi_error as exc:
        raise sa.exc.DBAPIError.instance(
            "COPY", None, exc, dbapi_error, dialect=conn.dialect
        ) from exc


def _stage(conn: sa.Connection, jobs: Sequence[NewJob]) -> None:
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cursor:
        cursor.execute(_CREATE)
        with cursor.copy(_COPY) as copy:
            copy.set_types([type_ for _, type_ in _STAGED])
            for seq, job in enumerate(jobs):
                copy.write_row(
                    (
                        seq,
                        job.key,
                        job.key_tuple,
                        job.campaign,
                        job.step,
                        job.occurrence_at,
                        job.channel,
                        job.sender,
                        job.recipient,
                        job.mailbox_identity,
                        job.message_id,
                        job.payload,
                        payload_hash(job.payload),
                        job.not_before,
                        job.send_window,
                        job.list_scope,
                        job.max_claims,
                        job.max_send_attempts,
                        job.in_doubt_policy,
                    )
                )


def _insert_staged(
    conn: sa.Connection, jobs: Sequence[NewJob], *, replace_pending: bool, empty: str
) -> int:
    raw: Any = conn.connection.driver_connection
    with raw.cursor() as cursor:
        created = None
        if not replace_pending and not _taken_before(conn):
            created = _insert_new(conn, cursor)
            if created is None:
                conn.info[_TAKEN_IN] = conn.get_transaction()
        if created is None:
            cursor.execute(_INSERT)
            created = int(cursor.fetchone()[0])
        if replace_pending and created < len(jobs):
            if _pairs_unique(jobs):
                cursor.execute(_REPLACE)
            else:
                replace_each(conn, jobs)
        cursor.execute(empty)
    return created


# conn.info key: the transaction in which a batch found a key or mailbox already taken. Its
# later batches skip the plain attempt: a new campaign version enqueues every batch in one
# transaction, and all its keys exist (the attempt failed for each, ~10 % of its time).
_TAKEN_IN: Final = "herald_enqueue_taken_in"


def _taken_before(conn: sa.Connection) -> bool:
    transaction = conn.get_transaction()
    return transaction is not None and conn.info.get(_TAKEN_IN) is transaction


def _insert_new(conn: sa.Connection, cursor: Any) -> int | None:
    """The staged batch inserted without ON CONFLICT: how many (all), or None if a key or a
    mailbox was already taken (nothing of the attempt is left: its savepoint is rolled back)."""
    cursor.execute(f"SAVEPOINT {_SAVEPOINT}")
    try:
        cursor.execute(_INSERT_NEW)
    except conn.dialect.loaded_dbapi.Error as exc:
        if getattr(exc, "sqlstate", None) != _UNIQUE_VIOLATION:
            raise
        cursor.execute(f"ROLLBACK TO SAVEPOINT {_SAVEPOINT}")
        return None
    created = int(cursor.fetchone()[0])
    cursor.execute(f"RELEASE SAVEPOINT {_SAVEPOINT}")
    return created


def _pairs_unique(jobs: Sequence[NewJob]) -> bool:
    return len({(job.key, job.recipient) for job in jobs}) == len(jobs)


def replace_each(conn: sa.Connection, jobs: Sequence[NewJob]) -> None:
    """``replace_pending``, one UPDATE per job in batch order (an executemany).

    Only rows nobody has claimed yet take the new version's payload; anything claimed or beyond
    keeps what it had (a sent key stays sent). Not a transition: the state stays pending.
    """
    conn.execute(
        sa.update(send_job)
        .where(
            J.id == job_of(sa.bindparam("b_key")),
            J.recipient == sa.bindparam("b_recipient"),
            J.state == bound_state(State.PENDING.value),  # by key: see sqlcore.guard
            J.payload_hash != sa.bindparam("b_hash"),
        )
        .values(
            payload=sa.bindparam("b_payload"),
            payload_hash=sa.bindparam("b_hash"),
            not_before=sa.bindparam("b_not_before", type_=UtcTimestamp()),
            send_window=sa.bindparam("b_window"),
            list_scope=sa.bindparam("b_scope"),
            max_send_attempts=sa.bindparam("b_max"),
            updated_at=db_now(),
        ),
        [
            {
                "b_key": job.key,
                "b_recipient": job.recipient,
                "b_hash": payload_hash(job.payload),
                "b_payload": job.payload,
                "b_not_before": job.not_before,
                "b_window": job.send_window,
                "b_scope": job.list_scope,
                "b_max": job.max_send_attempts,
            }
            for job in jobs
        ],
    )
