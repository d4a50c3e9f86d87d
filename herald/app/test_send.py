"""Use case ``test-send``: every email step of a campaign, once, to an address of the
operator's, through the configured relay: to see the real thing in a real inbox before launch.

Outside the campaign, provably:

- Nothing is written to any database: the messages go straight to the relay, never into the
  outbox, so a test send can neither count as a recipient's send nor stop one.
- Their keys are not the campaign's: each is composed (scheduler.compose, the path launch
  uses, so every header composition adds is there) under the step id ``test-send:<id>``,
  which no real step can have (step ids are ``[a-z0-9_-]``), at the moment of the test as
  occurrence. So the ``Message-ID`` and ``X-Herald-Key`` are new on every test send (a
  provider that collapses repeated Message-IDs still shows the second test), and a bounce or
  feedback naming the key finds no job.
- They carry ``X-Herald-Test-Send: yes``, for filters and for anyone reading the headers.

The subject is left as composed (no "[test]" prefix): the point is to see what recipients will
see, subject length and encoding included. The content is rendered with the data of the
audience's first row (or ``recipient``'s row), addressed to ``to``; ``{{ email }}`` is ``to``.
Webhook steps are not sent (they call an API, not a mailbox) and are listed as skipped.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from campaigns.addresses import AddressError, normalise_address
from campaigns.audience import Recipient, RowProblem, iter_audience
from campaigns.spec import LoadedCampaign
from dispatch.store import NewJob
from dispatch.transport import (
    Envelope,
    Outcome,
    RelayUnavailable,
    Transport,
    TransportConfigError,
    Verdict,
)
from herald.app.common import Clock, utc_now
from herald.app.launch import load
from herald.app.preview import check_step, recipient_identity
from herald.errors import HeraldError, UsageError
from scheduler.compose import (
    CompiledEmail,
    CompileFailures,
    compile_steps,
    compose_job,
)
from scheduler.unsubscribe_links import UnsubscribeLinks
from templates.errors import TemplateError

#: Step ids of test sends: a colon is never part of a real step id (campaigns.spec_fields).
TEST_STEP_PREFIX = "test-send:"
TEST_HEADER = b"X-Herald-Test-Send: yes\r\n"
_MIME_VERSION = b"\r\nMIME-Version: 1.0\r\n"


class SendTestFailed(HeraldError):
    """The relay did not take a test message (exit 1). ``sent``: the steps it took before."""

    def __init__(self, message: str, *, sent: list[SentTest], hint: str | None = None) -> None:
        super().__init__(message, hint=hint)
        self.sent = sent


@dataclass(frozen=True)
class SentTest:
    step: str
    message_id: str
    reply: str


@dataclass(frozen=True)
class SendTestResult:
    campaign: str
    to: str
    data_from: str  # whose data rendered the content: "line 2 (ann@example.com)" or "none"
    sent: list[SentTest] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # webhook steps


def compose_tests(
    loaded: LoadedCampaign,
    to: str,
    *,
    step: str | None = None,
    recipient: str | None = None,
    now: datetime,
    links: UnsubscribeLinks | None = None,
) -> tuple[list[NewJob], list[str], str]:
    """The test messages (jobs never stored), the webhook steps skipped, and whose data."""
    try:
        address = normalise_address(to)
    except AddressError as exc:
        raise UsageError(f"--to {to!r} is not an email address: {exc}") from None
    check_step(loaded, step)
    identity = None if recipient is None else recipient_identity(recipient, "--recipient")
    row = _data_row(loaded, identity, recipient)
    try:
        compiled = compile_steps(loaded, links)
    except CompileFailures as exc:
        raise UsageError(
            f"the campaign does not compile: {exc}", hint="run herald validate"
        ) from None
    target = Recipient(
        email=address,
        name=row.name if row is not None else None,
        variables={**(row.variables if row is not None else {}), "email": to.strip()},
        line=row.line if row is not None else 0,
    )
    jobs: list[NewJob] = []
    skipped: list[str] = []
    for each in compiled:
        if step is not None and each.spec.id != step:
            continue
        if not isinstance(each, CompiledEmail):
            skipped.append(each.spec.id)
            continue
        # replace(), not a new CompiledEmail: whatever else compilation attached to the step
        # (its template, and anything composition reads from it) comes along unchanged.
        test_step = replace(
            each, spec=each.spec.model_copy(update={"id": TEST_STEP_PREFIX + each.spec.id})
        )
        try:
            job = compose_job(loaded, test_step, target, now)
        except TemplateError as exc:
            raise UsageError(f"step {each.spec.id}: {exc}") from None
        jobs.append(replace(job, payload=_marked(job.payload)))
    if step is not None and skipped:
        raise UsageError(f"step {step!r} is a webhook step: test-send sends email steps only")
    data_from = "none" if row is None else f"{row.where} ({row.email})"
    return jobs, skipped, data_from


def send_tests(
    file: Path,
    to: str,
    *,
    smtp_url: str,
    transport: Transport | None = None,
    step: str | None = None,
    recipient: str | None = None,
    clock: Clock = utc_now,
    links: UnsubscribeLinks | None = None,
) -> SendTestResult:
    """Compose and send (see the module docstring). Raises UsageError for bad input,
    SendTestFailed when the relay does not take a message (the steps before it were sent)."""
    loaded = load(file)
    now = clock()
    jobs, skipped, data_from = compose_tests(
        loaded, to, step=step, recipient=recipient, now=now, links=links
    )
    if transport is None:
        from herald.transports import build_transports

        transport = build_transports(smtp_url)["email"]
    sent = asyncio.run(_send_all(transport, jobs, clock))
    return SendTestResult(
        loaded.spec.name, jobs[0].recipient if jobs else to, data_from, sent, skipped
    )


def _data_row(
    loaded: LoadedCampaign, identity: str | None, recipient: str | None
) -> Recipient | None:
    if loaded.spec.audience is None:
        if recipient is not None:
            raise UsageError(
                f"campaign {loaded.spec.name} has no audience to take {recipient!r} from"
            )
        return None
    from campaigns.addresses import mailbox_identity

    for item in iter_audience(loaded):
        if isinstance(item, RowProblem):
            continue
        if identity is None or mailbox_identity(item.email) == identity:
            return item
    if recipient is not None:
        raise UsageError(f"{recipient!r} is not in the audience of {loaded.spec.name}")
    return None  # an empty list: the templates get no data but the address


def _marked(payload: bytes) -> bytes:
    """``payload`` with the test header, among Herald's own headers (before MIME-Version)."""
    cut = payload.find(_MIME_VERSION)
    assert cut >= 0, "templates.mime writes MIME-Version in every message"
    cut += 2  # after the CRLF ending the previous header
    return payload[:cut] + TEST_HEADER + payload[cut:]


async def _send_all(transport: Transport, jobs: list[NewJob], clock: Clock) -> list[SentTest]:
    sent: list[SentTest] = []
    try:
        for job in jobs:
            sent.append(await _send_one(transport, job, clock, sent))
    finally:
        await transport.aclose()
    return sent


async def _send_one(
    transport: Transport, job: NewJob, clock: Clock, sent: list[SentTest]
) -> SentTest:
    step = job.step.removeprefix(TEST_STEP_PREFIX)
    envelope = Envelope(
        job_id=0,
        key=job.key,
        channel="email",
        sender=job.sender,
        recipient=job.recipient,
        message_id=job.message_id,
        payload=job.payload,
    )
    try:
        prepared = await transport.prepare(envelope)
    except TransportConfigError as exc:
        raise SendTestFailed(exc.message, sent=sent, hint=exc.hint) from None
    except RelayUnavailable as exc:
        earlier = f" ({len(sent)} earlier step(s) were sent)" if sent else ""
        raise SendTestFailed(
            f"test-send: relay unreachable: {exc} (step {step} not sent){earlier}",
            sent=sent,
            hint="check HERALD_SMTP_URL / --smtp-url and that the relay is running",
        ) from None
    if isinstance(prepared, Outcome):
        raise _failed(step, prepared, sent, delivered=False)
    outcome = await prepared.deliver(clock())
    if outcome.verdict is not Verdict.SENT:
        raise _failed(step, outcome, sent, delivered=outcome.verdict is Verdict.IN_DOUBT)
    return SentTest(step, job.message_id, f"{outcome.code} {outcome.text}".strip())


def _failed(
    step: str, outcome: Outcome, sent: list[SentTest], *, delivered: bool
) -> SendTestFailed:
    if delivered:
        what = f"the relay may or may not have taken step {step}: {outcome.text}"
    elif outcome.code is None:
        what = f"could not reach the relay (step {step} not sent): {outcome.text}"
    else:
        what = f"the relay refused step {step}: {outcome.code} {outcome.text}"
    earlier = f" ({len(sent)} earlier step(s) were sent)" if sent else ""
    return SendTestFailed(
        f"test-send: {what}{earlier}",
        sent=sent,
        hint="check HERALD_SMTP_URL / --smtp-url and that the relay is running",
    )
