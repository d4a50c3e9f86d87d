"""The webhook transport: one HTTP request per job, through the egress guard.

The job's payload is a JSON document ``{url, method, headers, body}``: ``body`` is the rendered
JSON text, ``headers`` are as the campaign wrote them, ``${ENV}`` references included. The
references are resolved here, at send time, so no secret is ever stored. Every request carries
``Idempotency-Key: <K>``, the job's key, so a receiver can deduplicate a resend.

How outcomes map onto the state machine (docs/design.md §4), mirroring the SMTP window (§6):

- ``prepare``: decode the payload, check the URL against the policy and resolve it (no bytes
  sent). A policy denial is permanent (failed, naming the rule); a DNS failure, or a variable
  missing from this worker's environment, is a clean retry (T6).
- ``deliver``: the request. A failure before the last byte of the request was written (connect
  refused, the connection dropped while writing) delivered nothing: retry (T7, with backoff).
  Once the whole request is on the wire, the receiver may act on it, so a timeout or disconnect
  from then on is ``in_doubt`` (T8) - resent automatically only when the step opted into
  ``in_doubt: resend``, which the receiver's deduplication on the key makes safe.
- The status decides: 2xx sent; 408, 429 and 5xx retry (``Retry-After`` in seconds or as an
  HTTP date is honoured); anything else failed. Redirects are refused (``max_redirects=0``): a
  3xx is a failed outcome naming where it pointed, since following it would send the body to a
  target nobody reviewed.

Decisions not dictated by the issue: ``prepare``'s lookup is a pre-check (the connection pool
resolves again, under the guard, when it opens a connection, and not at all when it reuses
one); ``Content-Type: application/json`` is sent unless the step sets its own; only the first
1 KiB of a response body is kept, for the outcome text.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import json
import os
import ssl
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Final

import httpcore

from dispatch.egress import (
    EgressClient,
    EgressDenied,
    EgressError,
    EgressPolicy,
    GuardedResponse,
    Resolver,
    check_url,
    resolve_validated,
    system_resolver,
)
from dispatch.egress.redact import Redactor, url_secrets
from dispatch.instrumentation import NULL_INSTRUMENTATION, Instrumentation
from dispatch.request_headers import (
    HeaderError,
    MissingVariable,
    resolve_headers,
    variables_in,
)
from dispatch.transport import Envelope, Outcome, PreparedSend, Verdict

METHODS: Final = ("POST", "PUT", "PATCH")
RETRY_STATUSES: Final = frozenset({408, 429})  # plus every 5xx
IDEMPOTENCY_HEADER: Final = "Idempotency-Key"
_SNIPPET_BYTES: Final = 1024
_DEFAULT_PORTS: Final = {"http": 80, "https": 443}


@dataclass(frozen=True)
class WebhookRequest:
    """A webhook job's payload. ``headers`` keep their ``${ENV}`` references unresolved."""

    url: str
    method: str
    body: str  # JSON text, rendered per recipient
    headers: Mapping[str, str] = field(default_factory=dict)

    def to_payload(self) -> bytes:
        document = {
            "url": self.url,
            "method": self.method,
            "headers": dict(self.headers),
            "body": self.body,
        }
        return json.dumps(document, ensure_ascii=False, sort_keys=True).encode("utf-8")

    @classmethod
    def from_payload(cls, payload: bytes) -> WebhookRequest:
        """Raises ValueError for anything but a document written by ``to_payload``."""
        document = json.loads(payload.decode("utf-8"))
        if not isinstance(document, dict):
            raise ValueError("not a JSON object")
        url, method, body = document.get("url"), document.get("method"), document.get("body")
        headers = document.get("headers", {})
        if not (isinstance(url, str) and isinstance(body, str) and method in METHODS):
            raise ValueError("needs url, method (POST, PUT or PATCH) and body")
        if not isinstance(headers, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in headers.items()
        ):
            raise ValueError("headers must map text to text")
        return cls(url=url, method=method, body=body, headers=headers)


def retry_after_seconds(value: str | None, *, now: datetime | None = None) -> float | None:
    """``Retry-After`` as seconds from now (RFC 9110 §10.2.3: delay-seconds or an HTTP-date)."""
    if value is None:
        return None
    text = value.strip()
    if text.isdigit():
        return float(text)
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # an HTTP-date is always GMT; obsolete forms may omit the zone
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())


def outcome_for_status(status: int, reply_headers: Mapping[str, str], snippet: str) -> Outcome:
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    text = f"HTTP {status} {phrase}".rstrip()
    if snippet:
        text = f"{text}: {snippet}"
    if 200 <= status < 300:
        return Outcome(Verdict.SENT, status, text)
    if status in RETRY_STATUSES or 500 <= status < 600:
        delay = retry_after_seconds(reply_headers.get("retry-after"))
        return Outcome(Verdict.RETRY, status, text, retry_after=delay)
    return Outcome(Verdict.FAILED, status, text)


class WebhookTransport:
    """Sends webhook jobs. One shared guarded client, so connections are pooled per host.

    ``environ`` is where ``${ENV}`` references are looked up (default: this process's
    environment, read at each send). ``resolver`` and ``ssl_context`` are for tests;
    ``instrumentation`` is told ``after_data_write`` once a request is complete on the wire.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        environ: Mapping[str, str] | None = None,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        instrumentation: Instrumentation = NULL_INSTRUMENTATION,
    ) -> None:
        self.policy = policy
        self.instrumentation = instrumentation
        self._environ = os.environ if environ is None else environ
        self._resolver = resolver or system_resolver
        self._client = EgressClient(policy, resolver=resolver, ssl_context=ssl_context)

    async def prepare(
        self, envelope: Envelope, *, with_ready: bool = False
    ) -> PreparedSend | Outcome:
        # A webhook has no step before its request (``ready`` is None): ``with_ready`` changes
        # nothing.
        try:
            request = WebhookRequest.from_payload(envelope.payload)
        except (ValueError, UnicodeDecodeError) as exc:
            return Outcome(Verdict.FAILED, None, f"unreadable webhook payload: {exc}")
        redact = Redactor(url_secrets(request.url))
        prepared = await self._prepare(envelope, request)
        if isinstance(prepared, Outcome):
            return _scrubbed(prepared, redact)
        return prepared

    async def _prepare(self, envelope: Envelope, request: WebhookRequest) -> PreparedSend | Outcome:
        try:
            url = check_url(request.url, self.policy)
            port = url.port if url.port is not None else _DEFAULT_PORTS[url.scheme]
            host = url.raw_host.decode("ascii")
            await resolve_validated(host, port, self.policy, self._resolver, url=request.url)
        except EgressDenied as exc:
            return Outcome(Verdict.FAILED, None, str(exc))
        except EgressError as exc:
            return Outcome(Verdict.RETRY, None, f"before sending: {exc}")
        try:
            headers = resolve_headers(request.headers, self._environ)
        except MissingVariable as exc:
            # The worker's environment can be fixed; the job is intact. Retry with backoff.
            return Outcome(Verdict.RETRY, None, f"before sending: {exc}")
        except HeaderError as exc:
            return Outcome(Verdict.FAILED, None, f"before sending: {exc}")
        if not any(name.lower() == "content-type" for name in headers):
            headers["Content-Type"] = "application/json"
        headers[IDEMPOTENCY_HEADER] = envelope.key
        return _PreparedWebhook(
            self._client,
            request,
            headers,
            _secrets_of(request, self._environ),
            on_sent=lambda: self.instrumentation.after_data_write(envelope),
        )

    async def aclose(self) -> None:
        await self._client.aclose()


def _secrets_of(request: WebhookRequest, environ: Mapping[str, str]) -> Redactor:
    """Every secret this request carries: each resolved ``${ENV}`` value, each header value it
    appears in, and the URL's credentials. A receiver may echo any of them back."""
    secrets = url_secrets(request.url)
    for value in request.headers.values():
        names = variables_in(value)
        if names:
            secrets += [environ.get(name, "") for name in names]
            secrets += resolve_headers({"x": value}, environ).values()
    return Redactor(secrets)


def _scrubbed(outcome: Outcome, redact: Redactor) -> Outcome:
    """The outcome with its text cleaned of the request's secrets: it is about to be stored (the
    outbox, the journal) and shown (``dead list``, ``in-doubt list``)."""
    text = redact(outcome.text)
    return outcome if text == outcome.text else dataclasses.replace(outcome, text=text)


class _PreparedWebhook:
    def __init__(
        self,
        client: EgressClient,
        request: WebhookRequest,
        headers: dict[str, str],
        redact: Redactor,
        *,
        on_sent: Callable[[], None],
    ) -> None:
        self._client = client
        self._request = request
        self._headers = headers
        self._redact = redact
        self._on_sent = on_sent

    def ready(self) -> asyncio.Future[Outcome | None] | None:
        return None  # nothing to say before the request itself

    async def deliver(self, started_at: datetime) -> Outcome:
        # A webhook request has no Date to stamp: it goes out exactly as stored.
        return _scrubbed(await self._deliver(), self._redact)

    async def _deliver(self) -> Outcome:
        request_sent = False

        def on_request_sent() -> None:
            nonlocal request_sent
            request_sent = True
            self._on_sent()

        def unknown(what: str) -> Outcome:
            if request_sent:
                return Outcome(Verdict.IN_DOUBT, None, f"after the request was sent: {what}")
            return Outcome(Verdict.RETRY, None, f"before the request was sent: {what}")

        try:
            async with self._client.stream(
                self._request.method,
                self._request.url,
                headers=self._headers,
                content=self._request.body.encode("utf-8"),
                max_redirects=0,
                on_request_sent=on_request_sent,
            ) as response:
                # The status is the receiver's answer; the body only decorates the outcome.
                snippet = await _snippet(response, self._redact)
                return outcome_for_status(response.status_code, response.headers, snippet)
        except EgressDenied as exc:
            # Before sending (the pool's own lookup disagreed with prepare's) or a redirect:
            # either way the receiver refused to be the final target, or we refused it.
            return Outcome(Verdict.FAILED, None, str(exc))
        except EgressError as exc:
            return unknown(str(exc))
        except asyncio.CancelledError:
            # Worker shutdown past its grace period; the transport contract is "never raise".
            return unknown("cancelled")
        except (httpcore.TimeoutException, httpcore.NetworkError, OSError) as exc:
            return unknown(f"{type(exc).__name__}: {exc}")

    async def abandon(self) -> None:
        """Nothing to undo: ``prepare`` opens no connection."""


async def _snippet(response: GuardedResponse, redact: Redactor) -> str:
    """The start of the response body, for operators, scrubbed; never fails the outcome.

    Read a little past the kept bytes and scrub before cutting, so that a secret the receiver
    echoes across the cut is masked whole, not left half visible.
    """
    wanted = _SNIPPET_BYTES + 4 * redact.longest
    collected = b""
    chunks = response.iter_bytes()
    try:
        async for chunk in chunks:
            collected += chunk
            if len(collected) >= wanted:
                break
    except EgressError:
        pass
    finally:
        closer = getattr(chunks, "aclose", None)
        if closer is not None:
            await closer()
    kept = len(collected[:_SNIPPET_BYTES].decode("utf-8", errors="ignore"))
    text = redact.head(collected.decode("utf-8", errors="replace"), kept)
    return redact(" ".join(text.split())[:200])
