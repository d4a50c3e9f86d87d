"""Outbox tables: send_job, send_event, suppression, rate_limit, relay_status, mail_feedback
(docs/design.md §3).

The worker needs nothing but the send_job row: the payload is rendered at materialisation time.
Schema changes go through an Alembic migration in ``herald/migrations``; these models are what
the code reads and writes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

import sqlalchemy as sa

from dbtypes import ForeignText, IndexedChoice, UtcTimestamp, big_id, db_now

# Plain SQLAlchemy tables (no ORM): importing them stays cheap for every command.
metadata = sa.MetaData()


def _ts(name: str, nullable: bool = True, default_now: bool = False) -> sa.Column[datetime]:
    return sa.Column(
        name,
        UtcTimestamp(),
        nullable=nullable,
        server_default=db_now() if default_now else None,
    )


# The predicates of the two partial indexes (as in migration 0007). A query uses one only when
# its own state test implies the predicate, e.g. ``state = 'failed'`` or ``state IN (…)``.
LEASE_INDEXED = ("claimed", "sending", "in_doubt", "failed")
CAMPAIGN_INDEXED = ("pending", "sent", "failed", "cancelled", "in_doubt")
LEASE_STATES = f"state IN {LEASE_INDEXED}"
SETTLED_STATES = f"state IN {CAMPAIGN_INDEXED}"
# Pending jobs with nothing left to spend (migration 0008): recovery's R3 reads only these.
EXHAUSTED_PENDING = (
    "state = 'pending' AND (send_attempts >= max_send_attempts OR claims >= max_claims)"
)

# The indexes of send_job that are partial on PostgreSQL, and their predicates (migrations 0001,
# 0007, 0008). Not passed to sa.Index as postgresql_where=: SQLAlchemy checks a dialect's
# arguments by importing that dialect, and its PostgreSQL package (every driver's module) was
# ~40 ms of every SQLite command's start-up. with_postgresql_predicates() sets them on the
# indexes; herald.db calls it for every PostgreSQL engine and create_all() before its DDL, so
# wherever PostgreSQL reads these models they carry the predicates as before.
POSTGRESQL_WHERE: Final = {
    "ix_send_job_due": "state = 'pending'",
    "ix_send_job_campaign_state": SETTLED_STATES,
    "ix_send_job_state_lease": LEASE_STATES,
    "ix_send_job_exhausted": EXHAUSTED_PENDING,
}

send_job = sa.Table(
    "send_job",
    metadata,
    sa.Column("id", big_id(), primary_key=True),
    # Unique through send_key (migration 0009). On PostgreSQL no index of send_job names it;
    # SQLite keeps the UNIQUE below (it costs SQLite's transitions nothing, see 0009).
    sa.Column("key", sa.String(64), nullable=False),
    sa.Column("key_tuple", sa.Text, nullable=False),
    sa.Column("campaign", sa.String(128), nullable=False),
    sa.Column("step", sa.String(64), nullable=False),
    _ts("occurrence_at", nullable=False),
    sa.Column("channel", sa.String(16), nullable=False),
    sa.Column("sender", sa.String(320), nullable=False),
    sa.Column("recipient", sa.String(320), nullable=False),  # as written
    # The canonical identity of the recipient's mailbox (campaigns.addresses.mailbox_identity):
    # what suppression and the one-job-per-mailbox rule compare.
    sa.Column("mailbox", sa.String(320), nullable=False),
    # 0 for the job that holds its mailbox. Only migration 0003 sets 1, 2, … on the extra jobs
    # an older Herald created for other spellings of one mailbox (kept as history; see 0003).
    sa.Column("mailbox_dup", sa.Integer, nullable=False, server_default="0"),
    sa.Column("message_id", sa.String(400), nullable=False),
    sa.Column("payload", sa.LargeBinary, nullable=False),
    sa.Column("payload_hash", sa.String(64), nullable=False),
    sa.Column("state", IndexedChoice(), nullable=False, default="pending"),
    _ts("not_before", nullable=False),
    # The job's send window (dispatch.wallclock.SendWindow.to_json), or None: the worker
    # re-checks it at claim and hands a job outside it back until the window opens.
    sa.Column("send_window", sa.Text, nullable=True),
    # The suppression scope of the job's campaign (``list:<name>``), compared at T4 together
    # with ``global``; None for jobs made before migration 0006 (only ``global`` applies).
    sa.Column("list_scope", sa.String(140), nullable=True),
    sa.Column("claims", sa.Integer, nullable=False, default=0),
    sa.Column("max_claims", sa.Integer, nullable=False),
    sa.Column("send_attempts", sa.Integer, nullable=False, default=0),
    sa.Column("max_send_attempts", sa.Integer, nullable=False),
    sa.Column("lease_owner", sa.String(128)),
    # The fencing token: incremented by every claim and never reset, so a token identifies
    # exactly one lease of one job forever (a re-armed job cannot hand an old token back out).
    sa.Column("lease_token", sa.BigInteger, nullable=False, default=0),
    _ts("lease_expires_at"),
    _ts("send_started_at"),
    sa.Column("outcome_code", sa.Integer),
    sa.Column("outcome_text", ForeignText()),
    _ts("outcome_at"),
    sa.Column("in_doubt_reason", ForeignText()),
    sa.Column("in_doubt_policy", sa.String(16), nullable=False, default="hold"),
    sa.Column("resolution", ForeignText()),
    # Set when a new campaign version removed this job's key: its payload must never go out
    # (T4 refuses it; `dead retry` and `in-doubt resolve --resend` will not re-arm it).
    _ts("superseded_at"),
    _ts("created_at", default_now=True),
    _ts("updated_at", default_now=True),
    # Partial on both; PostgreSQL's predicate is in POSTGRESQL_WHERE, as for the three below.
    sa.Index(
        "ix_send_job_due",
        "not_before",
        "id",
        sqlite_where=sa.text("state = 'pending'"),
    ),
    # Partial on PostgreSQL (migration 0007, POSTGRESQL_WHERE): a transition inserts into every
    # index whose predicate its new row version meets (none is HOT: state is indexed), so each
    # holds only the states it is read by. Leased rows are counted from ix_send_job_state_lease
    # (ReadOps.counts). SQLite keeps them whole: it uses a partial index only for a query that
    # repeats the predicate term for term.
    sa.Index(
        "ix_send_job_campaign_state",
        "campaign",
        "step",
        "state",
    ),
    sa.Index(
        "ix_send_job_state_lease",
        "state",
        "lease_expires_at",
    ),
    # Nearly empty: a pending job normally has budget left. Without it every recovery pass
    # read every pending job (dispatch.outbox.recovery, R3).
    sa.Index(
        "ix_send_job_exhausted",
        "state",  # leads so that SQLite prefers it to ix_send_job_state_lease (migration 0008)
        "id",
        sqlite_where=sa.text(EXHAUSTED_PENDING),
    ),
    sa.UniqueConstraint("key").ddl_if(dialect="sqlite"),
)

# What makes a job exist, apart from the job (migration 0009): its idempotency key, and its
# (campaign, step, occurrence, mailbox) for the one-job-per-mailbox rule. Written once at
# enqueue (T1), in the job's transaction, and never updated. The two unique indexes used to be
# send_job's, where every transition (a new row version: state is indexed, so no update is
# HOT) inserted into both again: half of PostgreSQL's work per transition
# (bench/profiles/drain-cpu.md, session 23). Here they are written once per job.
send_key = sa.Table(
    "send_key",
    metadata,
    sa.Column("key", sa.String(64), primary_key=True),
    # The job's id. The portable enqueue (ClaimOps.enqueue) writes a negative placeholder
    # first and the id before its transaction ends: a committed row holds the id.
    sa.Column("job_id", sa.BigInteger, nullable=True),
    sa.Column("campaign", sa.String(128), nullable=False),
    sa.Column("step", sa.String(64), nullable=False),
    _ts("occurrence_at", nullable=False),
    sa.Column("mailbox", sa.String(320), nullable=False),
    sa.Column("mailbox_dup", sa.Integer, nullable=False, server_default="0"),
    sa.Index(
        "ux_send_key_mailbox",
        "campaign",
        "step",
        "occurrence_at",
        "mailbox",
        "mailbox_dup",
        unique=True,
    ),
)


def with_postgresql_predicates() -> None:
    """Set ``postgresql_where`` on the indexes of ``POSTGRESQL_WHERE`` (idempotent). Imports
    SQLAlchemy's PostgreSQL dialect: call it where PostgreSQL is used."""
    for index in send_job.indexes:
        where = POSTGRESQL_WHERE.get(str(index.name))
        if where is not None and index.dialect_kwargs.get("postgresql_where") is None:
            index.dialect_kwargs["postgresql_where"] = sa.text(where)


@sa.event.listens_for(metadata, "before_create")
def _predicates_before_ddl(_target: Any, connection: sa.Connection, **_kw: Any) -> None:
    if connection.dialect.name == "postgresql":
        with_postgresql_predicates()


# Append-only journal; one row per transition, written in the transition's transaction.
send_event = sa.Table(
    "send_event",
    metadata,
    sa.Column("id", big_id(), primary_key=True),
    sa.Column("job_id", sa.BigInteger, nullable=False),
    sa.Column("token", sa.BigInteger, nullable=False),
    sa.Column("from_state", sa.String(16)),
    sa.Column("to_state", sa.String(16), nullable=False),
    _ts("at", default_now=True),
    sa.Column("actor", sa.String(160), nullable=False),
    sa.Column("detail", ForeignText()),
    sa.Index("ix_send_event_job", "job_id", "id"),
)


# Mailboxes that must never be sent to (unsubscribes, hard bounces, complaints, manual).
#
# ``address`` holds the mailbox identity (compared with ``send_job.mailbox``), not a spelling.
# ``scope`` is ``global`` (every campaign, transactional mail too) or ``list:<name>`` (only the
# campaigns of that list: an unsubscribe from the newsletter does not stop receipts).
GLOBAL_SCOPE = "global"

suppression = sa.Table(
    "suppression",
    metadata,
    sa.Column("address", sa.String(320), primary_key=True),
    sa.Column("scope", sa.String(140), primary_key=True, server_default=GLOBAL_SCOPE),
    sa.Column("reason", ForeignText(), nullable=False),
    # manual | import | unsubscribe | mailto | bounce | complaint | ses | sendgrid | …
    sa.Column("source", sa.String(32), nullable=False, server_default="manual"),
    _ts("created_at", default_now=True),
)


# Shared rate limits (per campaign, per recipient domain): one GCRA cell per key, updated by
# every worker on every host with one conditional statement.
rate_limit = sa.Table(
    "rate_limit",
    metadata,
    sa.Column("key", sa.String(300), primary_key=True),  # campaign:<name> | domain:<domain>
    sa.Column("per_second", sa.Float, nullable=False),
    # < 1 while a 421/451/454 has slowed this key down, until factor_until.
    sa.Column("factor", sa.Float, nullable=False, server_default="1"),
    _ts("factor_until"),
    _ts("tat"),  # theoretical arrival time of the next permitted send
    _ts("updated_at", default_now=True),
)


# What workers last learnt about each relay (redacted URL): ok, or unreachable since when.
relay_status = sa.Table(
    "relay_status",
    metadata,
    sa.Column("relay", sa.String(300), primary_key=True),
    sa.Column("state", sa.String(16), nullable=False),  # ok | unreachable
    _ts("since", nullable=False),
    sa.Column("last_error", ForeignText()),
    sa.Column("worker", sa.String(128)),
    _ts("updated_at", default_now=True),
)


# Bounces, complaints and unsubscribes as they arrive, deduplicated on ``event_ref``
# (a provider's event id, a DSN's Message-ID…): the evidence behind a suppression.
mail_feedback = sa.Table(
    "mail_feedback",
    metadata,
    sa.Column("id", big_id(), primary_key=True),
    sa.Column("event_ref", sa.String(200), nullable=True, unique=True),
    sa.Column("kind", sa.String(16), nullable=False),  # hard | soft | complaint | unsubscribe
    sa.Column("mailbox", sa.String(320), nullable=True),
    sa.Column("job_key", sa.String(64), nullable=True),
    sa.Column("source", sa.String(32), nullable=False),  # dsn | arf | mailto | https | ses | …
    sa.Column("status_code", sa.String(16)),
    sa.Column("detail", ForeignText()),
    _ts("created_at", default_now=True),
    sa.Index("ix_mail_feedback_mailbox", "mailbox", "kind"),
)
