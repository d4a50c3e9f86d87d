"""Turn (campaign, step, occurrence, recipient) into the exact payload a worker will send.

The same function serves ``validate`` (render everything, write nothing) and ``launch`` (render
and enqueue), so what was checked is what gets sent. An email step renders to the MIME message;
a webhook step to a JSON document holding the URL, method, headers (their ``${ENV}`` references
unresolved: the worker resolves them at send time) and the rendered JSON body.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from campaigns.addresses import mailbox_identity
from campaigns.audience import Recipient
from campaigns.spec import LoadedCampaign, StepSpec, WebhookStepSpec
from dispatch.keys import KeyTuple, message_id
from dispatch.outbox.jobs import new_job
from dispatch.store import NewJob
from dispatch.webhook import WebhookRequest
from scheduler.planning import Planner, recipient_zone
from scheduler.unsubscribe_links import (
    NOT_CONFIGURED,
    TRANSACTIONAL,
    UNSUBSCRIBE_URL,
    UnsubscribeLinks,
    missing_url,
)
from templates.errors import TemplateError
from templates.json_body import JsonBodyTemplate
from templates.mime import build_message
from templates.render import StepTemplate


@dataclass(frozen=True)
class CompiledEmail:
    spec: StepSpec
    template: StepTemplate
    # Carried with the compiled step so every path that composes (check, fan-out, drips, new
    # versions) gets the same links as the step, without a parameter on each of them.
    links: UnsubscribeLinks | None = None


@dataclass(frozen=True)
class CompiledWebhook:
    spec: WebhookStepSpec
    body: JsonBodyTemplate


CompiledStep = CompiledEmail | CompiledWebhook


class StepCompileError(Exception):
    """A step's template cannot be compiled; names the step."""

    def __init__(self, step: str, error: TemplateError) -> None:
        super().__init__(f"step {step!r}: {error}")
        self.step = step
        self.error = error


def compile_step(
    loaded: LoadedCampaign,
    step: StepSpec | WebhookStepSpec,
    links: UnsubscribeLinks | None = None,
) -> CompiledStep:
    """Raises TemplateError. ``links``: see scheduler.unsubscribe_links (None: no headers)."""
    if isinstance(step, WebhookStepSpec):
        return CompiledWebhook(step, JsonBodyTemplate.compile(step.body, base_dir=loaded.base_dir))
    template = StepTemplate.compile(
        base_dir=loaded.base_dir,
        subject=step.subject,
        text=step.text,
        html=step.html,
        template=step.template,
    )
    return CompiledEmail(step, template, links)


def compile_steps(
    loaded: LoadedCampaign, links: UnsubscribeLinks | None = None
) -> list[CompiledStep]:
    """Compile every step once; collect every failure rather than stopping at the first."""
    compiled: list[CompiledStep] = []
    failures: list[StepCompileError] = []
    for step in loaded.spec.steps:
        try:
            compiled.append(compile_step(loaded, step, links))
        except TemplateError as exc:
            failures.append(StepCompileError(step.id, exc))
    if failures:
        raise CompileFailures(failures)
    return compiled


class CompileFailures(Exception):
    def __init__(self, failures: list[StepCompileError]) -> None:
        super().__init__("; ".join(str(f) for f in failures))
        self.failures = failures


def template_variables(recipient: Recipient) -> dict[str, object]:
    variables: dict[str, object] = dict(recipient.variables)
    variables["email"] = recipient.email
    if recipient.name is not None:
        variables["name"] = recipient.name
    return variables


def compose_job(
    loaded: LoadedCampaign,
    step: CompiledStep,
    recipient: Recipient,
    occurrence_at: datetime,
    *,
    not_before: datetime | None = None,
    send_window: str | None = None,
) -> NewJob:
    """Render one message. Raises TemplateError for this recipient's rendering problem.

    ``not_before``: when the step is planned for this recipient (scheduler.planning); without
    it, ``after`` counted from the occurrence. ``send_window``: the window the worker must
    send it in (SendWindow JSON), or None.
    """
    spec = loaded.spec
    # The key names the mailbox, not the spelling: every spelling of one mailbox gets one key.
    # For the usual lower-case dot-atom address the identity is the normal form, so those keys
    # are what they were before identities existed (they are in Message-IDs already sent).
    mailbox = mailbox_identity(recipient.email)
    key_tuple = KeyTuple(spec.name, step.spec.id, occurrence_at, mailbox)
    key = key_tuple.key()
    mid = message_id(key, spec.sender.domain())
    if not_before is None:
        not_before = occurrence_at + step.spec.after
    variables = template_variables(recipient)
    if isinstance(step, CompiledWebhook):
        payload = WebhookRequest(
            url=step.spec.url,
            method=step.spec.method,
            headers=dict(step.spec.headers),
            body=step.body.render(variables),
        ).to_payload()
        in_doubt_policy = step.spec.in_doubt
    else:
        unsubscribe = _unsubscribe(loaded, step.links, mailbox, key, variables)
        payload = build_message(
            sender=spec.sender.address,
            sender_name=spec.sender.name,
            recipient=recipient.email,
            recipient_name=recipient.name,
            reply_to=spec.reply_to.address if spec.reply_to else None,
            content=step.template.render(variables),
            message_id=mid,
            key=key,
            extra_headers=unsubscribe,
        )
        in_doubt_policy = "hold"  # email is never resent automatically (docs/design.md §5)
    return new_job(
        key=key,
        key_tuple=key_tuple.canonical(),
        campaign=spec.name,
        step=step.spec.id,
        occurrence_at=occurrence_at,
        channel=step.spec.channel,
        sender=spec.sender.address,
        recipient=recipient.email,  # the recipient's own spelling: RCPT TO and To
        mailbox=mailbox,
        message_id=mid,
        payload=payload,
        not_before=not_before,
        max_send_attempts=spec.max_attempts,
        in_doubt_policy=in_doubt_policy,
        send_window=send_window,
        # Transactional mail (receipts, resets) obeys only global suppression: an unsubscribe
        # from a list must not stop it. Everything else obeys its list's too.
        list_scope=None if spec.transactional else spec.suppression_scope,
    )


def _unsubscribe(
    loaded: LoadedCampaign,
    links: UnsubscribeLinks | None,
    mailbox: str,
    key: str,
    variables: dict[str, object],
) -> dict[str, str] | None:
    """The List-Unsubscribe headers of a marketing message, with ``unsubscribe_url`` set in
    ``variables``; None (and ``unsubscribe_url`` left to the audience, else failing when used)
    for a transactional campaign or without links."""
    spec = loaded.spec
    if spec.transactional or links is None:
        variables.setdefault(
            UNSUBSCRIBE_URL, missing_url(TRANSACTIONAL if spec.transactional else NOT_CONFIGURED)
        )
        return None
    # The identity, not the spelling: the suppression it makes must match every spelling.
    url = links.url(mailbox=mailbox, scope=spec.suppression_scope, campaign=spec.name)
    variables[UNSUBSCRIBE_URL] = url  # Herald's link wins over an audience column of that name
    return links.headers(url, key)


def compose_broadcast(
    loaded: LoadedCampaign,
    planner: Planner,
    index: int,
    step: CompiledStep,
    recipient: Recipient,
    occurrence_at: datetime,
) -> NewJob:
    """Step ``index`` of an occurrence for one recipient, planned on the chain of the
    occurrence's steps (scheduler.planning) in the recipient's zone."""
    planned = planner.broadcast(occurrence_at, recipient_zone(recipient.variables))[index]
    return compose_job(
        loaded,
        step,
        recipient,
        occurrence_at,
        not_before=planned.not_before,
        send_window=planned.send_window,
    )
