"""The pinned network backend under httpcore's pool, and the httpx transport around it."""

from __future__ import annotations

import contextlib
import ipaddress
import ssl
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator

import httpcore
import httpx

from dispatch.egress.errors import EgressDenied, EgressError, EgressTimeout
from dispatch.egress.policy import EgressPolicy
from dispatch.egress.resolve import Resolver, resolve_validated, system_resolver


class PinnedNetworkBackend(httpcore.AsyncNetworkBackend):
    """Every TCP connection httpcore opens passes here, and goes only to a validated address.

    ``inner`` opens the actual socket (default: httpcore's anyio backend); tests inject a
    recording fake so no real connection is ever made.
    """

    def __init__(
        self,
        policy: EgressPolicy,
        *,
        resolver: Resolver | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._policy = policy
        self._resolver = resolver or system_resolver
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        target = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        if port not in self._policy.allowed_ports:
            raise EgressDenied(url=target, rule=f"port not allowed ({port})")
        addresses = await resolve_validated(host, port, self._policy, self._resolver, url=target)
        failure: httpcore.ConnectError | None = None
        for address in addresses:
            # An IPv4-mapped answer was judged by its IPv4 address: open an IPv4 socket to
            # exactly that, so the destination does not depend on the host's dual-stack setup.
            if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
                address = address.ipv4_mapped
            try:
                return await self._inner.connect_tcp(
                    str(address),
                    port,
                    timeout=timeout,
                    local_address=local_address,
                    socket_options=socket_options,
                )
            except httpcore.ConnectError as exc:
                failure = exc  # every address here passed validation; try the next one
        assert failure is not None  # resolve_validated never returns an empty list
        raise failure

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise EgressDenied(url=path, rule="unix sockets not allowed")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


@contextlib.contextmanager
def _transport_errors(url: str) -> Iterator[None]:
    """Turn httpcore failures into ours; our own exceptions pass through untouched."""
    try:
        yield
    except httpcore.TimeoutException as exc:
        raise EgressTimeout(url=url, reason=f"{type(exc).__name__}: {exc}") from exc
    except (
        httpcore.NetworkError,
        httpcore.ProtocolError,
        httpcore.ProxyError,
        httpcore.UnsupportedProtocol,
    ) as exc:
        raise EgressError(url=url, reason=f"{type(exc).__name__}: {exc}") from exc


class _CoreByteStream(httpx.AsyncByteStream):
    def __init__(self, stream: AsyncIterable[bytes], url: str) -> None:
        self._stream = stream
        self._url = url

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _transport_errors(self._url):
            async for chunk in self._stream:
                yield chunk

    async def aclose(self) -> None:
        closer = getattr(self._stream, "aclose", None)
        if closer is not None:
            await closer()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport over our own httpcore pool.

    Built directly rather than by patching ``AsyncHTTPTransport._pool`` (a private attribute),
    and it never constructs a proxy pool.
    """

    def __init__(self, backend: PinnedNetworkBackend, ssl_context: ssl.SSLContext) -> None:
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            network_backend=backend,
            max_connections=100,
            max_keepalive_connections=20,
            keepalive_expiry=5.0,
            retries=0,  # a retry is a new connection; the caller decides, under its deadline
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        url = str(request.url)
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _transport_errors(url):
            core_response = await self._pool.handle_async_request(core_request)
        assert isinstance(core_response.stream, AsyncIterable)
        return httpx.Response(
            status_code=core_response.status,
            headers=core_response.headers,
            stream=_CoreByteStream(core_response.stream, url),
            extensions=core_response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()
