"""``POST /events/<provider>``: bounce and complaint webhooks of SES (SNS), SendGrid, Mailgun
and Postmark, as a list of Starlette routes that ``herald serve`` mounts (``routes``).

Each request: read the raw body (capped), verify it (herald.serve.provider_auth) BEFORE
anything is parsed into events, map the provider's payload to events
(campaigns.feedback_providers), then record each event once in its own transaction
(campaigns.feedback_store: ``mail_feedback.event_ref`` UNIQUE, suppression on first sight) and
answer 200 with counts. A retried webhook is answered 200 again and changes nothing.

Answers: 401/403 for missing or forged signatures (nothing recorded), 404 for a provider that
is not configured (its secret unset: we cannot tell a real event from a forgery), 400 for a
body that is not JSON, 413 for a body over 5 MB, 503 when the SNS certificate cannot be fetched
or the database is down (the provider retries).

SNS ``SubscriptionConfirmation`` is confirmed only after the same checks as a notification
(allowed topic, valid signature) and only by a GET of a ``SubscribeURL`` on an SNS endpoint
(``https://sns.<region>.amazonaws.com/?Action=ConfirmSubscription…``), through the injected
fetcher; the default goes through the egress guard.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qs, urlsplit

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from campaigns.feedback_providers import (
    ProviderEvent,
    mailgun_events,
    postmark_events,
    sendgrid_events,
    ses_events,
)
from campaigns.feedback_store import provider_feedback, record_feedback
from herald.mail_settings import MailSettings
from herald.serve.provider_auth import (
    CertFetcher,
    Refused,
    SnsVerifier,
    load_sendgrid_key,
    sns_url_ok,
    verify_basic,
    verify_mailgun,
    verify_sendgrid,
)

log = logging.getLogger(__name__)

MAX_BODY = 5 * 1024 * 1024
Clock = Callable[[], float]
Handler = Callable[[Request], Awaitable[Response]]


class _TooLarge(Exception):
    pass


async def _raw_body(request: Request) -> bytes:
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > MAX_BODY:
        raise _TooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise Refused(400, "body is not JSON") from None


def _record(engine: Engine, provider: str, events: list[ProviderEvent]) -> dict[str, int]:
    counts = {"recorded": 0, "suppressed": 0, "duplicates": 0, "ignored": 0}
    for event in events:
        with engine.begin() as conn:
            fb = provider_feedback(conn, provider, event)
            if fb is None:
                counts["ignored"] += 1
                continue
            result = record_feedback(conn, fb)
        counts["recorded" if result.new else "duplicates"] += 1
        counts["suppressed"] += int(result.suppressed)
    return counts


def _endpoint(
    engine: Engine,
    provider: str,
    events_of: Callable[[Request, bytes], Awaitable[list[ProviderEvent] | Response]],
) -> Handler:
    async def endpoint(request: Request) -> Response:
        try:
            body = await _raw_body(request)
            outcome = await events_of(request, body)
            if isinstance(outcome, Response):
                return outcome
            counts = await run_in_threadpool(_record, engine, provider, outcome)
        except _TooLarge:
            return PlainTextResponse("body too large", status_code=413)
        except ClientDisconnect:
            return PlainTextResponse("client went away", status_code=400)
        except Refused as exc:
            headers = {"WWW-Authenticate": 'Basic realm="herald"'} if exc.status == 401 else None
            log.info(
                "events/%s: refused (%s): %s",
                provider,
                exc.status,
                exc.reason,
                extra={"event": "webhook_refused", "provider": provider, "status": exc.status},
            )
            return PlainTextResponse(exc.reason, status_code=exc.status, headers=headers)
        except sa.exc.SQLAlchemyError as exc:
            log.warning(
                "events/%s: not recorded (%s)",
                provider,
                type(exc).__name__,
                extra={"event": "webhook_not_recorded", "provider": provider},
            )
            return PlainTextResponse("temporarily unavailable", status_code=503)
        log.info(
            "events/%s: %s",
            provider,
            counts,
            extra={"event": "webhook_recorded", "provider": provider, "counts": counts},
        )
        return JSONResponse(counts)

    return endpoint


def _not_configured(provider: str, variable: str) -> Handler:
    async def endpoint(request: Request) -> Response:
        return PlainTextResponse(f"{provider} webhooks are not configured ({variable})", 404)

    return endpoint


async def _egress_get(url: str) -> bytes:
    """GET through the egress guard: no redirects, a small body, a short deadline."""
    import httpx

    from dispatch.egress.client import EgressClient
    from dispatch.egress.errors import EgressDenied, EgressError
    from dispatch.egress.policy import EgressPolicy

    policy = EgressPolicy(max_bytes=256 * 1024, total_timeout=10.0, max_redirects=0)
    try:
        async with EgressClient(policy) as client:
            status, _, body = await client.request("GET", url, max_redirects=0)
    except (EgressDenied, EgressError, httpx.HTTPError) as exc:
        raise OSError(f"GET failed: {type(exc).__name__}") from None
    if status != 200:
        raise OSError(f"HTTP {status}")
    return body


def routes(
    engine: Engine,
    settings: MailSettings,
    *,
    cert_fetcher: CertFetcher | None = None,
    subscribe: CertFetcher | None = None,
    clock: Clock = time.time,
) -> list[Route]:
    """The webhook routes. ``cert_fetcher`` fetches SNS certificates and ``subscribe`` GETs a
    validated SubscribeURL (both default to the egress guard); ``clock`` is Unix seconds.

    Raises ConfigError for a malformed SendGrid key, so ``herald serve`` stops at start.
    """
    result = [
        _ses_route(engine, settings, cert_fetcher or _egress_get, subscribe or _egress_get, clock)
    ]
    if settings.sendgrid_public_key is None:
        sendgrid = _not_configured("SendGrid", "HERALD_SENDGRID_PUBLIC_KEY")
    else:
        key = load_sendgrid_key(settings.sendgrid_public_key)

        async def sendgrid_of(request: Request, body: bytes) -> list[ProviderEvent]:
            h = request.headers
            verify_sendgrid(
                key,
                h.get("x-twilio-email-event-webhook-signature"),
                h.get("x-twilio-email-event-webhook-timestamp"),
                body,
                clock(),
            )
            return sendgrid_events(_json(body))

        sendgrid = _endpoint(engine, "sendgrid", sendgrid_of)
    result.append(Route("/events/sendgrid", sendgrid, methods=["POST"]))

    if (mailgun_key := settings.mailgun_signing_key) is None:
        mailgun = _not_configured("Mailgun", "HERALD_MAILGUN_SIGNING_KEY")
    else:

        async def mailgun_of(request: Request, body: bytes) -> list[ProviderEvent]:
            payload = _json(body)
            signature = payload.get("signature") if isinstance(payload, dict) else None
            verify_mailgun(mailgun_key, signature, clock())
            return mailgun_events(payload)

        mailgun = _endpoint(engine, "mailgun", mailgun_of)
    result.append(Route("/events/mailgun", mailgun, methods=["POST"]))

    if (postmark_auth := settings.postmark_auth) is None:
        postmark = _not_configured("Postmark", "HERALD_POSTMARK_AUTH")
    else:

        async def postmark_of(request: Request, body: bytes) -> list[ProviderEvent]:
            verify_basic(postmark_auth, request.headers.get("authorization"))
            return postmark_events(_json(body))

        postmark = _endpoint(engine, "postmark", postmark_of)
    result.append(Route("/events/postmark", postmark, methods=["POST"]))
    return result


def _ses_route(
    engine: Engine,
    settings: MailSettings,
    fetch: CertFetcher,
    subscribe: CertFetcher,
    clock: Clock,
) -> Route:
    if not settings.ses_topic_arns:
        return Route(
            "/events/ses", _not_configured("SES", "HERALD_SES_TOPIC_ARNS"), methods=["POST"]
        )
    verifier = SnsVerifier(settings.ses_topic_arns, fetch)

    async def ses_of(request: Request, body: bytes) -> list[ProviderEvent] | Response:
        # SNS posts text/plain JSON by default: the content type is not checked.
        message = _json(body)
        if not isinstance(message, dict):
            raise Refused(400, "not an SNS message")
        try:
            await verifier.verify(message, clock())
        except (OSError, ValueError) as exc:  # the certificate could not be fetched
            log.warning(
                "events/ses: certificate fetch failed: %s",
                type(exc).__name__,
                extra={"event": "webhook_verify_failed", "provider": "ses"},
            )
            return PlainTextResponse("cannot verify now", status_code=503)
        kind = message["Type"]
        if kind == "SubscriptionConfirmation":
            url = message["SubscribeURL"]
            topics = parse_qs(urlsplit(url).query).get("TopicArn")
            if not sns_url_ok(url, pem=False) or topics != [message["TopicArn"]]:
                raise Refused(403, "unexpected SubscribeURL")
            try:
                await subscribe(url)
            except (OSError, ValueError) as exc:
                log.warning(
                    "events/ses: confirmation failed: %s",
                    type(exc).__name__,
                    extra={"event": "webhook_confirm_failed", "provider": "ses"},
                )
                return PlainTextResponse("confirmation failed", status_code=503)
            log.info(
                "events/ses: subscription to %s confirmed",
                message["TopicArn"],
                extra={"event": "webhook_confirmed", "provider": "ses"},
            )
            return PlainTextResponse("subscription confirmed")
        if kind != "Notification":
            return PlainTextResponse("ok")
        try:
            notification = json.loads(message["Message"])
        except (ValueError, RecursionError):
            return PlainTextResponse("ok: not an SES notification")
        return ses_events(str(message["MessageId"]), notification)

    return Route("/events/ses", _endpoint(engine, "ses", ses_of), methods=["POST"])
