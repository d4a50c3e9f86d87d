"""Who is in a drip: enrolling recipients, and ending the drips of those who left.

``enrollment: audience`` re-reads the campaign's audience on scheduler passes (a CSV file at
every pass, a URL at most every few minutes): mailboxes not enrolled yet are enrolled (their
``enrolled_at`` is this pass's time, whole seconds); active enrollments the audience made whose
mailbox is gone from it become ``left``. Any enrollment whose mailbox is suppressed becomes
``ended``. Either way the step job it still has waiting is withdrawn (never sent). A mailbox
enrolled once is not enrolled again (re-enrollment is not offered): one that left and comes
back stays ``left``. ``herald enroll`` adds one mailbox (source ``cli``); the audience never
removes those.

Guard: an audience read that yields nobody while people are enrolled from it removes nobody
(a file caught half-written by an export would otherwise end every drip); write the CSV
atomically (to a temporary file, then rename) all the same.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.addresses import mailbox_identity
from campaigns.audience import Recipient, RowProblem, iter_audience
from campaigns.errors import AudienceError
from campaigns.spec import CsvAudience, LoadedCampaign
from campaigns.spec_files import file_digest
from dispatch.keys import KeyTuple
from dispatch.models import GLOBAL_SCOPE
from dispatch.store import OutboxStore
from scheduler.enrollment_store import (
    ENDED,
    LEFT,
    EnrollmentRow,
    EnrollmentStore,
    NewEnrollment,
)
from scheduler.models import enrollment_table
from scheduler.planning import recipient_zone
from scheduler.snapshot import url_audience
from templates.files import FileRefused

AUDIENCE = "audience"
CLI = "cli"
LEFT_REASON = "left the audience"
SUPPRESSED_REASON = "suppressed"


@dataclass
class SyncReport:
    enrolled: int = 0
    left: int = 0
    ended: int = 0  # suppressed
    withdrawn: int = 0  # waiting jobs of those drips, cancelled
    rejected_rows: int = 0
    note: str | None = None  # something the operator should know (nothing was removed, ...)


def whole_seconds(moment: datetime) -> datetime:
    return moment.replace(microsecond=0)


def enrollment_of(recipient: Recipient, source: str) -> NewEnrollment:
    return NewEnrollment(
        mailbox=mailbox_identity(recipient.email),
        recipient=recipient.email,
        name=recipient.name,
        variables=dict(recipient.variables),
        timezone=recipient_zone(recipient.variables),
        source=source,
    )


def csv_digest(loaded: LoadedCampaign) -> str | None:
    """sha256 of the campaign's audience CSV; None for any other audience, or a CSV that cannot
    be read (``sync_audience`` then says why)."""
    audience = loaded.spec.audience
    if not isinstance(audience, CsvAudience):
        return None
    try:
        return file_digest(loaded.base_dir, audience.csv)
    except FileRefused:
        return None


def drip_key(campaign: str, step_id: str, row: EnrollmentRow) -> str:
    """The idempotency key of one step of the drip."""
    return KeyTuple(campaign, step_id, row.enrolled_at, row.mailbox).key()


def drip_keys(campaign: str, step_ids: Sequence[str], row: EnrollmentRow, upto: int) -> list[str]:
    """The keys of the drip's steps materialised so far (indexes below ``upto``)."""
    return [drip_key(campaign, step_id, row) for step_id in step_ids[:upto]]


def end_drips(
    conn: sa.Connection,
    campaign: str,
    step_ids: Sequence[str],
    rows: Sequence[EnrollmentRow],
    state: str,
    *,
    reason: str,
    actor: str,
) -> tuple[int, int]:
    """End these active drips and withdraw their waiting jobs, in the caller's transaction;
    (how many were still active, how many jobs were withdrawn).

    The rows are locked in id order first, as every scheduler takes them, and the steps
    materialised are read back from the rows the UPDATE changed: a scheduler that advanced a
    drip meanwhile is waited for (PostgreSQL row lock; SQLite's single writer), so its new job
    is withdrawn too; one that comes later finds the drip inactive and adds nothing. One UPDATE
    and one withdrawal for the lot, not one of each per drip: an audience that shrinks by
    thousands ends them in one pass.
    """
    store = EnrollmentStore(conn.dialect.name)
    store.lock(conn, [row.id for row in rows])
    upto = store.finish_many(conn, [row.id for row in rows], state, reason=reason)
    keys = [
        key
        for row in rows
        if row.id in upto
        for key in drip_keys(campaign, step_ids, row, upto[row.id])
    ]
    if not keys:
        return len(upto), 0
    withdrawn = OutboxStore(conn.dialect.name).withdraw(conn, keys, reason=reason, actor=actor)
    return len(upto), withdrawn


def sync_audience(
    engine: Engine, loaded: LoadedCampaign, *, now: datetime, actor: str
) -> SyncReport:
    """Enroll the audience's new mailboxes, end the drips of those gone from it."""
    report = SyncReport()
    name = loaded.spec.name
    entries: dict[str, NewEnrollment] = {}
    for item in iter_audience(loaded):
        if isinstance(item, RowProblem):
            report.rejected_rows += 1
            continue
        entry = enrollment_of(item, AUDIENCE)
        entries.setdefault(entry.mailbox, entry)  # the first row of a mailbox counts
    source = url_audience(loaded)
    if source is not None and source.strict and report.rejected_rows:
        raise AudienceError(
            f"{report.rejected_rows} invalid row(s) in the audience; nobody was enrolled",
            file=source.url,
            field="audience.strict",
            hint="fix the rows, or set strict: false to enroll the valid ones",
        )
    store = EnrollmentStore(engine.dialect.name)
    with engine.connect() as conn:
        known = set(
            conn.execute(
                sa.select(enrollment_table.c.mailbox).where(enrollment_table.c.campaign == name)
            ).scalars()
        )
        from_audience = store.active_from(conn, name, AUDIENCE)
    new = [entry for mailbox, entry in entries.items() if mailbox not in known]
    enrolled_at = whole_seconds(now)
    for start in range(0, len(new), 500):
        with engine.begin() as conn:
            report.enrolled += len(
                store.enroll(conn, name, new[start : start + 500], enrolled_at=enrolled_at)
            )
    gone = [enrollment_id for enrollment_id, mailbox in from_audience if mailbox not in entries]
    if gone and not entries:
        report.note = "the audience is empty: nobody was removed from the drip"
        return report
    report.left, withdrawn = _end_all(engine, loaded, gone, LEFT, LEFT_REASON, actor)
    report.withdrawn += withdrawn
    return report


def end_suppressed(
    engine: Engine, loaded: LoadedCampaign, *, actor: str, report: SyncReport
) -> None:
    """End the active drips whose mailbox is suppressed."""
    store = EnrollmentStore(engine.dialect.name)
    spec = loaded.spec
    scopes = [GLOBAL_SCOPE] if spec.transactional else [GLOBAL_SCOPE, spec.suppression_scope]
    with engine.connect() as conn:
        ids = [row.id for row in store.active_suppressed(conn, spec.name, scopes)]
    ended, withdrawn = _end_all(engine, loaded, ids, ENDED, SUPPRESSED_REASON, actor)
    report.ended += ended
    report.withdrawn += withdrawn


def _end_all(
    engine: Engine,
    loaded: LoadedCampaign,
    ids: Sequence[int],
    state: str,
    reason: str,
    actor: str,
) -> tuple[int, int]:
    """End these drips; (how many were still active, how many jobs were withdrawn)."""
    name = loaded.spec.name
    step_ids = [step.id for step in loaded.spec.steps]
    store = EnrollmentStore(engine.dialect.name)
    ended = withdrawn_total = 0
    for start in range(0, len(ids), 500):
        with engine.begin() as conn:
            rows = store.by_ids(conn, ids[start : start + 500])
            done, withdrawn = end_drips(
                conn, name, step_ids, rows, state, reason=reason, actor=actor
            )
            ended += done
            withdrawn_total += withdrawn
    return ended, withdrawn_total


def enroll_one(
    engine: Engine,
    campaign: str,
    recipient: Recipient,
    *,
    now: datetime,
    timezone: str | None = None,
) -> tuple[EnrollmentRow, bool]:
    """Enroll one recipient by hand (``herald enroll``); (the enrollment, whether it is new).

    ``timezone`` (already checked) overrides the recipient's ``timezone`` variable.
    """
    entry = enrollment_of(recipient, CLI)
    if timezone is not None:
        entry = NewEnrollment(
            entry.mailbox, entry.recipient, entry.name, entry.variables, timezone, entry.source
        )
    store = EnrollmentStore(engine.dialect.name)
    with engine.begin() as conn:
        created = bool(store.enroll(conn, campaign, [entry], enrolled_at=whole_seconds(now)))
        row = store.get(conn, campaign, entry.mailbox)
    assert row is not None
    return row, created


def variables_text(data: Mapping[str, object]) -> dict[str, str]:
    """Template variables from JSON values: text as it is, numbers and booleans as JSON
    spells them, null as empty. Raises ValueError for a list or an object."""
    found: dict[str, str] = {}
    for key, value in data.items():
        if isinstance(value, str):
            found[key] = value
        elif isinstance(value, bool):
            found[key] = "true" if value else "false"
        elif isinstance(value, int | float):
            found[key] = str(value)
        elif value is None:
            found[key] = ""
        else:
            raise ValueError(f"variable {key!r} must be text, a number, true/false or null")
    return found
