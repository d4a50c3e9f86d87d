"""The guarded HTTP client: redirects re-checked hop by hop, no cookies, one deadline."""

from __future__ import annotations

import asyncio
import contextlib
import http.cookiejar
import ssl
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from types import TracebackType
from typing import Any, Final

import httpcore
import httpx

from dispatch.egress.backend import PinnedNetworkBackend, PinnedTransport
from dispatch.egress.body import GuardedResponse
from dispatch.egress.errors import EgressDenied, EgressError, deadline_passed
from dispatch.egress.policy import EgressPolicy
from dispatch.egress.resolve import Resolver
from dispatch.egress.urls import check_url

_REDIRECT_STATUSES: Final = frozenset({301, 302, 303, 307, 308})
# Always dropped when a redirect leaves the origin; the policy may name more.
_CREDENTIAL_HEADERS: Final = frozenset({"authorization", "cookie", "proxy-authorization"})
_BODY_HEADERS: Final = ("content-type", "content-length", "transfer-encoding")
_ACCEPT_ENCODING: Final = "gzip, deflate"
# httpcore's trace event once the last byte of a request (headers and body) has been written.
_REQUEST_SENT_EVENTS: Final = frozenset(
    {"http11.send_request_body.complete", "http2.send_request_body.complete"}
)

# Called (with no arguments) each time a complete request has been written to the socket.
RequestSent = Callable[[], None]


class _RefuseAllCookies(http.cookiejar.DefaultCookiePolicy):
    def set_ok(self, cookie: http.cookiejar.Cookie, request: urllib.request.Request) -> bool:
        return False

    def return_ok(self, cookie: http.cookiejar.Cookie, request: urllib.request.Request) -> bool:
        return False


class EgressClient:
    """The guarded HTTP client. One per process is fine: it keeps no cookies.

    ``ssl_context`` replaces the default (certifi roots, verification on) - tests pass one that
    trusts a local CA. ``network_backend`` replaces the socket opener below the guard - tests
    pass a recording fake. Neither can weaken the address checks.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        ssl_context: ssl.SSLContext | None = None,
        network_backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._policy = policy
        backend = PinnedNetworkBackend(policy, resolver=resolver, inner=network_backend)
        context = ssl_context or httpx.create_ssl_context(trust_env=False)
        self._client = httpx.AsyncClient(
            transport=PinnedTransport(backend, context),
            trust_env=False,  # no *_PROXY, no SSL_CERT_FILE, no .netrc
            follow_redirects=False,  # every hop is re-checked in _follow below
            timeout=httpx.Timeout(policy.total_timeout),  # the real bound is our total deadline
            cookies=http.cookiejar.CookieJar(policy=_RefuseAllCookies()),
            headers={"User-Agent": "Herald", "Accept-Encoding": _ACCEPT_ENCODING},
        )

    async def __aenter__(self) -> EgressClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._client.aclose()

    def stream(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        max_redirects: int | None = None,
        on_request_sent: RequestSent | None = None,
    ) -> contextlib.AbstractAsyncContextManager[GuardedResponse]:
        """Open the final response after following (and re-checking) up to ``max_redirects``.

        ``max_redirects=0`` (webhooks) turns any redirect into ``EgressDenied`` with rule
        "redirect not allowed" and the ``location`` it pointed to.

        ``on_request_sent`` is called once a complete request is on the wire. A caller whose
        request has effects (a webhook) uses it to tell a failure that happened before the
        receiver could have acted from one after (docs/design.md §6, the SMTP final-dot window).
        """
        hops = self._policy.max_redirects if max_redirects is None else max_redirects
        extensions = {} if on_request_sent is None else {"trace": _sent_tracer(on_request_sent)}
        return self._open(method, url, headers or {}, content, hops, extensions)

    async def request(
        self,
        method: str,
        url: str,
        *,
        headers: Mapping[str, str] | None = None,
        content: bytes | None = None,
        max_redirects: int | None = None,
    ) -> tuple[int, httpx.Headers, bytes]:
        """Status, headers and the whole (capped) body."""
        async with self.stream(
            method, url, headers=headers, content=content, max_redirects=max_redirects
        ) as response:
            body = await response.read()
            return response.status_code, response.headers, body

    @contextlib.asynccontextmanager
    async def _open(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None,
        max_redirects: int,
        extensions: dict[str, Any],
    ) -> AsyncIterator[GuardedResponse]:
        deadline = asyncio.get_running_loop().time() + self._policy.total_timeout
        response = await self._follow(
            method, url, headers, content, max_redirects, deadline, extensions
        )
        try:
            yield GuardedResponse(response, policy=self._policy, deadline=deadline)
        finally:
            await response.aclose()

    async def _follow(
        self,
        method: str,
        url: str,
        headers: Mapping[str, str],
        content: bytes | None,
        max_redirects: int,
        deadline: float,
        extensions: dict[str, Any],
    ) -> httpx.Response:
        current = check_url(url, self._policy)
        method = method.upper()
        request_headers = httpx.Headers(headers)
        request_headers.pop("host", None)  # the Host header always comes from the checked URL
        body = content
        hop = 0
        while True:
            request = self._client.build_request(
                method, current, headers=request_headers, content=body, extensions=extensions
            )
            response = await self._send(request, deadline)
            location = response.headers.get("location")
            if response.status_code not in _REDIRECT_STATUSES or location is None:
                return response
            await response.aclose()
            if hop >= max_redirects:
                rule = (
                    "redirect not allowed"
                    if max_redirects == 0
                    else f"too many redirects (limit {max_redirects})"
                )
                raise EgressDenied(url=str(current), rule=rule, location=location)
            hop += 1
            target = _redirect_target(current, location)
            following = check_url(str(target), self._policy)
            method, body, request_headers = self._redirected_request(
                response.status_code, method, body, request_headers, current, following
            )
            current = following

    def _redirected_request(
        self,
        status: int,
        method: str,
        body: bytes | None,
        headers: httpx.Headers,
        source: httpx.URL,
        target: httpx.URL,
    ) -> tuple[str, bytes | None, httpx.Headers]:
        headers = httpx.Headers(headers)
        # What browsers (and httpx) do: 303 and 302 become GET, and so does POST after a 301.
        becomes_get = (status in (302, 303) and method != "HEAD") or (
            status == 301 and method == "POST"
        )
        if becomes_get:
            method, body = "GET", None
            for name in _BODY_HEADERS:
                headers.pop(name, None)
        if _origin(source) != _origin(target):
            for name in _CREDENTIAL_HEADERS | self._policy.secret_headers:
                headers.pop(name, None)
        return method, body, headers

    async def _send(self, request: httpx.Request, deadline: float) -> httpx.Response:
        url = str(request.url)
        try:
            async with asyncio.timeout_at(deadline):
                return await self._client.send(request, stream=True)
        except TimeoutError:
            raise deadline_passed(url, self._policy.total_timeout) from None
        except EgressDenied as exc:
            # Raised in the backend, which only knew host:port; name the URL being fetched.
            raise EgressDenied(url=url, rule=exc.rule, address=exc.address) from exc
        except EgressError as exc:
            raise type(exc)(url=url, reason=exc.reason) from exc
        except httpx.HTTPError as exc:
            raise EgressError(url=url, reason=f"{type(exc).__name__}: {exc}") from exc


def _redirect_target(source: httpx.URL, location: str) -> httpx.URL:
    try:
        return source.join(location)
    except httpx.InvalidURL:
        raise EgressDenied(url=location, rule="invalid redirect location") from None


def _origin(url: httpx.URL) -> tuple[str, bytes, int | None]:
    return url.scheme, url.raw_host, url.port


def _sent_tracer(callback: RequestSent) -> Callable[[str, dict[str, Any]], Awaitable[None]]:
    async def trace(event: str, info: dict[str, Any]) -> None:
        if event in _REQUEST_SENT_EVENTS:
            callback()

    return trace
