"""Recording bounces, complaints and unsubscribes, and suppressing what they condemn.

One transaction per piece of evidence: the ``mail_feedback`` row (deduplicated on its UNIQUE
``event_ref``: a provider's event id, or a digest of an inbound report) and, if it is new, the
suppression it calls for. A retried webhook or a re-delivered DSN therefore changes nothing
the second time, and a suppression never exists without the evidence that caused it.

Who is suppressed is decided by Herald's own data: the job a VERP/mailto token names (its
mailbox, its list scope), or, for a provider event, the job of the event's X-Herald-Key when
there is one, else the recipient address of the SIGNED event. Never by a report's ``To:``.

- hard bounce, complaint → ``global`` (no campaign, transactional or not, may mail them);
- unsubscribe → the job's ``list_scope`` (``global`` when the job has none);
- soft bounce, policy block → recorded only (``soft`` is counted; ``block`` is for operators:
  a 5.7.x refusal is about our reputation, not the recipient).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Literal

import sqlalchemy as sa

from campaigns.addresses import AddressError, mailbox_identity
from campaigns.feedback import Report, Verdict, clean
from campaigns.feedback_providers import ProviderEvent
from campaigns.suppression import suppress
from dbtypes import dialect_insert
from dispatch.key_lookup import KeyPrefixError, normalise_prefix
from dispatch.models import GLOBAL_SCOPE, mail_feedback, send_job
from dispatch.outbox.keyed import job_of, with_key_prefix

Kind = Literal["hard", "soft", "block", "complaint", "unsubscribe"]
_KINDS: dict[Verdict, Kind] = {
    "hard": "hard",
    "soft": "soft",
    "policy": "block",
    "complaint": "complaint",
    "unsubscribe": "unsubscribe",
}
J = send_job.c


@dataclass(frozen=True)
class JobRef:
    key: str
    mailbox: str
    list_scope: str | None
    campaign: str

    @property
    def unsubscribe_scope(self) -> str:
        return self.list_scope or GLOBAL_SCOPE


@dataclass(frozen=True)
class Feedback:
    kind: Kind
    source: str  # dsn | arf | mailto | ses | sendgrid | mailgun | postmark
    event_ref: str
    mailbox: str | None
    job_key: str | None = None
    status_code: str | None = None
    detail: str = ""
    scope: str = GLOBAL_SCOPE  # where an unsubscribe applies


@dataclass(frozen=True)
class Recorded:
    new: bool  # False: this event_ref was recorded before, nothing changed
    suppressed: bool  # a suppression row was added now


def _select_jobs() -> sa.Select[tuple[str, str, str | None, str]]:
    return sa.select(J.key, J.mailbox, J.list_scope, J.campaign)


def job_by_prefix(conn: sa.Connection, raw: str) -> JobRef | None:
    """The one job whose key starts with ``raw`` (a token's 64-bit prefix), else None."""
    try:
        prefix = normalise_prefix(raw)
    except KeyPrefixError:
        return None
    rows = conn.execute(_select_jobs().where(with_key_prefix(prefix)).limit(2)).all()
    return _ref(rows[0]) if len(rows) == 1 else None


def job_by_key(conn: sa.Connection, key: str | None) -> JobRef | None:
    if key is None:
        return None
    row = conn.execute(_select_jobs().where(J.id == job_of(key))).first()
    return _ref(row) if row is not None else None


def _ref(row: sa.Row[tuple[str, str, str | None, str]]) -> JobRef:
    return JobRef(row.key, row.mailbox, row.list_scope, row.campaign)


def digest_ref(source: str, *parts: bytes | str) -> str:
    """An event_ref for evidence without an id of its own (an inbound report)."""
    h = hashlib.sha256()
    for part in parts:
        h.update(part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part)
        h.update(b"\x00")
    return f"{source}:{h.hexdigest()}"


def record_feedback(conn: sa.Connection, fb: Feedback) -> Recorded:
    """Insert the evidence once; on first sight apply the suppression it calls for."""
    stmt = (
        dialect_insert(mail_feedback, conn.dialect.name)
        .values(
            event_ref=fb.event_ref[:200],
            kind=fb.kind,
            mailbox=fb.mailbox,
            job_key=fb.job_key,
            source=fb.source,
            status_code=fb.status_code[:16] if fb.status_code else None,
            detail=clean(fb.detail, 1000),
        )
        .on_conflict_do_nothing(index_elements=["event_ref"])
        .returning(mail_feedback.c.id)
    )
    if conn.execute(stmt).first() is None:
        return Recorded(new=False, suppressed=False)
    if fb.mailbox is None or fb.kind not in ("hard", "complaint", "unsubscribe"):
        return Recorded(new=True, suppressed=False)
    scope = fb.scope if fb.kind == "unsubscribe" else GLOBAL_SCOPE
    reason = clean(f"{fb.kind} ({fb.source}) {fb.status_code or ''}".strip(), 200)
    added = suppress(conn, fb.mailbox, reason, scope=scope, source=fb.source)
    return Recorded(new=True, suppressed=added)


def report_feedback(job: JobRef, report: Report, *, source: str, event_ref: str) -> Feedback | None:
    """The evidence an inbound report about ``job`` gives, or None (delayed, none, unknown)."""
    kind = _KINDS.get(report.verdict)
    if kind is None or kind == "unsubscribe":
        return None
    return Feedback(
        kind,
        source,
        event_ref,
        job.mailbox,
        job.key,
        report.status,
        report.detail,
    )


def provider_feedback(conn: sa.Connection, provider: str, event: ProviderEvent) -> Feedback | None:
    """The evidence a verified provider event gives, resolved to a mailbox and scope."""
    kind = _KINDS.get(event.verdict)
    if kind is None:
        return None
    job = job_by_key(conn, event.herald_key)
    mailbox = job.mailbox if job is not None else _identity(event.address)
    scope = job.unsubscribe_scope if job is not None else GLOBAL_SCOPE
    return Feedback(
        kind,
        provider,
        event.event_ref,
        mailbox,
        job.key if job is not None else None,
        event.status,
        event.detail,
        scope,
    )


def _identity(address: str | None) -> str | None:
    if not address:
        return None
    try:
        return mailbox_identity(address)
    except AddressError:
        return None
