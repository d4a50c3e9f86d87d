"""Use case ``preview``: the exact message a launch would enqueue for one recipient, and its
``Date`` as the worker would stamp it. Reads the campaign file and its audience; opens no
database and writes nothing (``--html`` writes one file the operator names: herald.cli).

The message is composed by the check itself (scheduler.check.check_campaign, restricted with
``only`` to one recipient): the function ``validate`` and ``launch`` run, composing through
scheduler.compose, so the preview's bytes are launch's bytes, headers included — every header
composition adds (e.g. List-Unsubscribe) appears here with no code of its own.

What the bytes depend on besides the file:

- the occurrence: the key and so the ``Message-ID``, ``X-Herald-Key`` and MIME boundary hash
  it. A preview uses the occurrence a launch at ``now`` would make (a launch: ``now``; a
  ``start_at`` or schedule: its next fire; a drip: an enrollment at ``now``). ``--now`` set to
  a launched campaign's launch time gives exactly its stored bytes.
- the ``Date``: the worker stamps it when the message crosses into sending; the preview shows
  it for the moment the message is due (or ``now`` if that is past).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from email import message_from_bytes
from email import policy as email_policy
from email.message import EmailMessage
from pathlib import Path
from typing import Any

from campaigns.addresses import AddressError, mailbox_identity
from campaigns.audience import Recipient
from campaigns.spec import LoadedCampaign
from dispatch.message_date import date_value, with_date
from dispatch.store import NewJob
from herald.app.common import Clock, utc_now
from herald.app.launch import load
from herald.errors import UsageError
from scheduler.check import CheckReport, check_campaign
from scheduler.unsubscribe_links import UnsubscribeLinks


class PreviewFailed(UsageError):
    """The recipient's message cannot be composed; ``report`` says why (exit 2)."""

    def __init__(self, report: CheckReport) -> None:
        super().__init__(f"{report.problem_count} problem(s); nothing to preview")
        self.report = report


@dataclass(frozen=True)
class PreviewMessage:
    step: str
    channel: str  # email | webhook
    key: str
    message_id: str
    to: str  # RCPT TO and To: the audience row's own spelling
    due: datetime  # when the job falls due (UTC)
    date_at: datetime | None  # the moment the Date shown is for (email only)
    message: bytes  # email: the bytes SMTP DATA carries, Date included; webhook: the request

    def html(self) -> str | None:
        """The HTML part as a mail client shows it (decoded from the message); None if none."""
        if self.channel != "email":
            return None
        parsed = message_from_bytes(self.message, policy=email_policy.default)
        assert isinstance(parsed, EmailMessage)
        part = parsed.get_body(preferencelist=("html",))
        if part is None:
            return None
        content = part.get_content()
        return content if isinstance(content, str) else None

    def to_json(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "channel": self.channel,
            "key": self.key,
            "message_id": self.message_id,
            "to": self.to,
            "due": self.due.isoformat(),
            "date": None if self.date_at is None else date_value(self.date_at),
            # Email is 7-bit ASCII by construction (templates.mime); a webhook request is JSON.
            "message": self.message.decode("utf-8"),
        }


@dataclass(frozen=True)
class Preview:
    loaded: LoadedCampaign
    occurrence_at: datetime
    recipient: Recipient
    messages: list[PreviewMessage]
    # Problems elsewhere (another row, another step): launch would refuse the campaign.
    report: CheckReport
    duplicate_rows: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "campaign": self.loaded.spec.name,
            "occurrence": self.occurrence_at.isoformat(),
            "recipient": {"email": self.recipient.email, "where": self.recipient.where},
            "messages": [message.to_json() for message in self.messages],
            "launch_would_refuse": not self.report.ok,
            "problem_count": self.report.problem_count,
        }


class _Chooser:
    """``only`` for the check: the first row of ``identity``'s mailbox (and its duplicates,
    which the check then reports), or without an identity the first usable row."""

    def __init__(self, identity: str | None) -> None:
        self.identity = identity
        self.chosen: Recipient | None = None

    def __call__(self, recipient: Recipient) -> bool:
        if self.identity is None:
            if self.chosen is not None:
                return False
        elif mailbox_identity(recipient.email) != self.identity:
            return False
        if self.chosen is None:
            self.chosen = recipient
        return True


def recipient_identity(address: str, option: str) -> str:
    """The mailbox ``address`` names, or UsageError quoting it (escaped) and why not."""
    try:
        return mailbox_identity(address)
    except AddressError as exc:
        raise UsageError(f"{option} {address!r} is not an email address: {exc}") from None


def check_step(loaded: LoadedCampaign, step: str | None) -> None:
    ids = [each.id for each in loaded.spec.steps]
    if step is not None and step not in ids:
        raise UsageError(
            f"campaign {loaded.spec.name} has no step {step!r}",
            hint=f"its steps: {', '.join(ids)}",
        )


def occurrence_for(loaded: LoadedCampaign, now: datetime) -> datetime:
    """The occurrence a launch at ``now`` would make first (see the module docstring)."""
    from herald.app.plan import upcoming

    fires = upcoming(loaded.spec, now, 1)
    return fires[0][0] if fires else now


def preview(
    file: Path,
    *,
    recipient: str | None = None,
    step: str | None = None,
    clock: Clock = utc_now,
    links: UnsubscribeLinks | None = None,
) -> Preview:
    """Compose ``recipient``'s messages (every step, or ``step``) as launch would. Writes
    nothing. Raises UsageError for an unknown step, an address that is not one or is not in
    the audience, PreviewFailed when the recipient's message cannot be composed."""
    identity = None if recipient is None else recipient_identity(recipient, "--recipient")
    now = clock()
    loaded = load(file)
    check_step(loaded, step)
    if loaded.spec.audience is None:
        raise UsageError(
            f"campaign {loaded.spec.name} has no audience: its recipients come from"
            " `herald enroll`, so there is nobody to preview",
            hint="`herald test-send FILE --to ADDRESS` sends its steps to an address of yours",
        )
    occurrence_at = occurrence_for(loaded, now)
    chooser = _Chooser(identity)
    jobs: dict[str, NewJob] = {}

    def keep(job: NewJob) -> None:
        jobs.setdefault(job.step, job)  # the first row of the mailbox is the one sent to

    report = check_campaign(
        loaded, occurrence_at, only=chooser, on_job=keep, require_recipients=False, links=links
    )
    chosen = chooser.chosen
    if chosen is None:
        if report.problem_count and not report.recipients:
            raise PreviewFailed(report)
        if recipient is None:
            raise UsageError(f"the audience of {loaded.spec.name} is empty: nobody to preview")
        raise UsageError(
            f"{recipient!r} is not in the audience of {loaded.spec.name}:"
            " nothing would be sent to it",
            hint="omit --recipient to preview the first recipient; `herald test-send FILE"
            " --to ADDRESS` sends the steps to any address",
        )
    wanted = [each.id for each in loaded.spec.steps if step is None or each.id == step]
    if any(each not in jobs for each in wanted):
        raise PreviewFailed(report)
    messages = [_message(jobs[each], now) for each in wanted]
    duplicates = [where for where, _ in report.duplicate_rows]
    return Preview(loaded, occurrence_at, chosen, messages, report, duplicates)


def _message(job: NewJob, now: datetime) -> PreviewMessage:
    if job.channel != "email":
        return PreviewMessage(
            job.step, job.channel, job.key, job.message_id, job.recipient, job.not_before,
            None, job.payload,
        )  # fmt: skip
    # The worker stamps Date at the moment of sending (dispatch.message_date): at the earliest
    # when the job falls due.
    date_at = max(job.not_before, now)
    return PreviewMessage(
        job.step, job.channel, job.key, job.message_id, job.recipient, job.not_before,
        date_at, with_date(job.payload, date_at),
    )  # fmt: skip
