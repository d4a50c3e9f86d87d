"""``/u/<token>``: the one-click unsubscribe endpoint (RFC 8058) and its confirmation page.

- ``GET`` shows a page with a button (a form that POSTs to the same URL) and changes nothing:
  mail scanners and link prefetchers GET every URL in a message, and a GET that unsubscribed
  has emptied whole lists elsewhere.
- ``POST`` unsubscribes: the mailbox is suppressed in the scope the token names (``list:<name>``
  of the campaign), idempotently, and the answer is 200 with a short page, never a redirect
  (RFC 8058 §3.1: redirected POSTs turn into GETs). No cookie, session or CSRF token: the mail
  client's POST carries none (RFC 8058 §3.1 forbids it), and the signed token is the
  authorisation. Any body is accepted (Gmail sends ``List-Unsubscribe=One-Click`` urlencoded,
  RFC 8058 prefers multipart, the confirmation page's own form sends the same pair); whether
  it was the one-click pair is recorded, not required.
- A token that is malformed, altered, or signed by a key no longer in HERALD_SIGNING_KEYS gets
  the same neutral 404 page (dispatch.signed_tokens.BadToken says nothing about which).

The token is verified without a database lookup; the database is written only by a POST.
Every value shown on a page (the address, the list) is HTML-escaped.
"""

from __future__ import annotations

import hashlib
import html
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

import sqlalchemy as sa
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from campaigns.suppression import suppress
from dispatch.models import mail_feedback
from dispatch.outbox.dialect import forms_for
from dispatch.signed_tokens import BadToken, SigningKeys, UnsubscribeClaim, read_unsubscribe_token

REASON = "unsubscribed (one-click link)"
SOURCE = "https"
MAX_BODY = 64 * 1024  # a one-click body is 26 bytes; nothing legitimate comes near this
ONE_CLICK = ("List-Unsubscribe", "One-Click")

# Sent with every page: nothing cached or indexed, no referrer leaking the token onwards, no
# script, and the only form may post back here.
_HEADERS = {
    "Cache-Control": "no-store",
    "X-Robots-Tag": "noindex, nofollow",
    "Referrer-Policy": "no-referrer",
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
}


@dataclass(frozen=True)
class Unsubscribed:
    new: bool  # False: the mailbox was already suppressed in that scope
    one_click: bool  # the body was the RFC 8058 pair


def routes(engine: sa.Engine, keys: SigningKeys) -> list[Route]:
    """The Starlette routes of ``/u/<token>`` (GET and HEAD: the page; POST: unsubscribe)."""

    async def confirm(request: Request) -> Response:
        claim = _claim(keys, request)
        if claim is None:
            return _not_found()
        return _page(
            "Unsubscribe?",
            f"<p>Stop sending <b>{_list(claim)}</b> to <b>{html.escape(claim.mailbox)}</b>?</p>"
            '<form method="post"><input type="hidden" name="List-Unsubscribe" '
            'value="One-Click"><button type="submit">Unsubscribe</button></form>',
        )

    async def unsubscribe(request: Request) -> Response:
        claim = _claim(keys, request)
        if claim is None:
            return _not_found()
        body = await _bounded_body(request)
        if body is None:
            return _page("Too large", "<p>The request body is too large.</p>", status=413)
        one_click = is_one_click(request.headers.get("content-type", ""), body)
        token = str(request.path_params["token"])
        await run_in_threadpool(record_unsubscribe, engine, claim, token, one_click)
        return _page(
            "Unsubscribed",
            f"<p><b>{html.escape(claim.mailbox)}</b> will receive no more <b>{_list(claim)}</b>."
            "</p>",
        )

    return [
        Route("/u/{token}", confirm, methods=["GET"]),  # Starlette adds HEAD
        Route("/u/{token}", unsubscribe, methods=["POST"]),
    ]


def record_unsubscribe(
    engine: sa.Engine, claim: UnsubscribeClaim, token: str, one_click: bool
) -> Unsubscribed:
    """Suppress the claim's mailbox in its scope and keep the evidence, in one transaction.

    Idempotent: a second POST of the same token finds the suppression and the feedback row
    (``event_ref`` is the token's digest) and changes nothing.
    """
    with engine.begin() as conn:
        # The token carries the identity computed when the message was composed; suppress()
        # maps an identity to itself, and checks scope and source like every other entry.
        new = suppress(conn, claim.mailbox, REASON, scope=claim.scope, source=SOURCE)
        conn.execute(
            forms_for(conn.dialect.name)
            .insert(mail_feedback)
            .values(
                event_ref=f"https:{hashlib.sha256(token.encode()).hexdigest()[:64]}",
                kind="unsubscribe",
                mailbox=claim.mailbox,
                source=SOURCE,
                detail=(
                    f"campaign {claim.campaign}; scope {claim.scope}; key {claim.kid}; "
                    + ("one-click" if one_click else "other body")
                ),
            )
            .on_conflict_do_nothing(index_elements=["event_ref"])
        )
    return Unsubscribed(new, one_click)


def is_one_click(content_type: str, body: bytes) -> bool:
    """Whether ``body`` holds ``List-Unsubscribe=One-Click``, urlencoded or multipart.

    Read leniently and by hand (a malformed body must not stop an unsubscribe): multipart is
    matched on the field's name and value inside any part.
    """
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == "application/x-www-form-urlencoded" or not kind:
        try:
            pairs = parse_qsl(body.decode("ascii"), keep_blank_values=True)
        except (UnicodeDecodeError, ValueError):
            return False
        return ONE_CLICK in pairs
    if kind == "multipart/form-data":
        for part in body.split(b"\r\n--"):
            head, _, value = part.partition(b"\r\n\r\n")
            named = re.search(rb'(?<![a-z*])name="List-Unsubscribe"', head) is not None
            if named and value.rstrip(b"\r\n").strip() == b"One-Click":
                return True
    return False


async def _bounded_body(request: Request) -> bytes | None:
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > MAX_BODY:
        return None
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY:
            return None
    return bytes(body)


def _claim(keys: SigningKeys, request: Request) -> UnsubscribeClaim | None:
    try:
        return read_unsubscribe_token(keys, str(request.path_params["token"]))
    except BadToken:
        return None


def _list(claim: UnsubscribeClaim) -> str:
    scope = claim.scope.removeprefix("list:")
    return html.escape(scope if scope != claim.scope else claim.campaign)


def _not_found() -> Response:
    return _page(
        "Link not valid",
        "<p>This unsubscribe link is not valid. If you copied it, check that it is complete.</p>",
        status=404,
    )


def _page(title: str, body: str, *, status: int = 200) -> HTMLResponse:
    document = (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title>"
        "<style>body{font-family:system-ui,sans-serif;max-width:32rem;margin:4rem auto;"
        "padding:0 1rem}button{font-size:1rem;padding:.5rem 1rem}</style></head>"
        f"<body><h1>{title}</h1>{body}</body></html>"
    )
    return HTMLResponse(document, status_code=status, headers=_HEADERS)
