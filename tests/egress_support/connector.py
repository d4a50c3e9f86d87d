"""A socket opener for tests that records where the guard tried to connect, and connects nowhere.

It goes below ``PinnedNetworkBackend`` (``EgressClient(network_backend=...)``), so it sees exactly
the address the guard pinned, and answers with canned HTTP/1.1 bytes.
"""

from __future__ import annotations

import ipaddress
import ssl
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import httpcore

OK_REPLY = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def redirect_reply(location: str, status: int = 302) -> bytes:
    return (f"HTTP/1.1 {status} Found\r\nLocation: {location}\r\nContent-Length: 0\r\n\r\n").encode(
        "ascii"
    )


@dataclass(frozen=True)
class Connect:
    host: str
    port: int


class _RecordingStream(httpcore.AsyncMockStream):
    def __init__(self, buffer: list[bytes], sni_names: list[str | None]) -> None:
        super().__init__(buffer)
        self._sni_names = sni_names

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self._sni_names.append(server_hostname)
        return self


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """Records each connect; replies with ``replies[ip]`` (default: 200 "ok").

    Connects to an address in ``unreachable`` fail with ``httpcore.ConnectError``.
    """

    def __init__(
        self, replies: Mapping[str, bytes] | None = None, *, unreachable: Collection[str] = ()
    ) -> None:
        self._replies = dict(replies or {})
        self._unreachable = frozenset(unreachable)
        self.connects: list[Connect] = []
        self.sni_names: list[str | None] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        # The guard must hand us a literal; a name here would mean a second, unchecked lookup.
        ipaddress.ip_address(host)
        self.connects.append(Connect(host, port))
        if host in self._unreachable:
            raise httpcore.ConnectError(f"[Errno 111] Connection refused: {host}")
        return _RecordingStream([self._replies.get(host, OK_REPLY)], self.sni_names)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise AssertionError("the guard must never open a unix socket")

    async def sleep(self, seconds: float) -> None:
        raise AssertionError("the guard must not retry")
