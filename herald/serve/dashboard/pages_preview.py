"""``/preview?campaign=&step=&recipient=``: the message stored for that job, as the worker
will send it (without the Date it stamps at sending). Headers and bodies are shown as text; the
HTML body also as a mail client would show it, in an ``<iframe sandbox srcdoc>`` that runs no
script and fetches nothing (the page's CSP applies to it too)."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from email import message_from_bytes
from email import policy as email_policy
from email.message import EmailMessage
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from campaigns.addresses import AddressError, mailbox_identity
from herald.db import reading
from herald.serve.dashboard import reads
from herald.serve.dashboard.auth import Session
from herald.serve.dashboard.web import Dashboard


@dataclass(frozen=True)
class Shown:
    key: str
    channel: str
    state: str
    occurrence: str
    headers: list[tuple[str, str]]
    text: str | None
    html: str | None
    raw: str  # the whole stored message as text (webhook: the request, indented)


def _content(message: EmailMessage, kind: str) -> str | None:
    part = message.get_body(preferencelist=(kind,))
    if part is None:
        return None
    try:
        content = part.get_content()
    except (LookupError, ValueError):  # an unknown charset: show the source instead
        return None
    return content if isinstance(content, str) else None


PRUNED = "(message dropped by retention: herald prune; its key and outcome are kept)"


def shown(row: Any) -> Shown:
    payload: bytes = row.payload
    if not payload:  # pruned (docs/operations/retention.md): say so rather than show a blank
        occurrence = row.occurrence_at.isoformat()
        return Shown(row.key, row.channel, row.state, occurrence, [], None, None, PRUNED)
    raw = payload.decode("utf-8", errors="replace")
    headers: list[tuple[str, str]] = []
    text = html = None
    if row.channel == "email":
        message = message_from_bytes(payload, policy=email_policy.default)
        assert isinstance(message, EmailMessage)
        headers = [(name, str(value)) for name, value in message.items()]
        text, html = _content(message, "plain"), _content(message, "html")
    else:
        with contextlib.suppress(ValueError):  # not JSON after all: shown as stored
            raw = json.dumps(json.loads(raw), indent=2, ensure_ascii=False)
    return Shown(
        row.key, row.channel, row.state, row.occurrence_at.isoformat(), headers, text, html, raw
    )


def routes(dash: Dashboard) -> list[BaseRoute]:
    def find(campaign: str, step: str, recipient: str) -> list[Shown]:
        try:
            mailbox: str | None = mailbox_identity(recipient)
        except AddressError:
            mailbox = None
        with reading(dash.engine) as conn:
            rows = reads.stored_jobs(conn, campaign, step, recipient, mailbox)
        return [shown(row) for row in rows]

    async def preview(request: Request, session: Session) -> Response:
        params = request.query_params
        campaign = params.get("campaign", "")[:128]
        step = params.get("step", "")[:64]
        recipient = params.get("recipient", "")[:320]
        asked = bool(campaign and step and recipient)
        messages = await run_in_threadpool(find, campaign, step, recipient) if asked else []
        return dash.render(
            request,
            "dashboard/preview.html",
            session=session,
            campaign=campaign,
            step=step,
            recipient=recipient,
            asked=asked,
            messages=messages,
        )

    return [Route("/preview", dash.page(preview), methods=["GET"])]
