"""A TCP forwarder on 127.0.0.1 that stands in for a database restarting, without touching the
shared PostgreSQL that other tests use at the same time.

``TcpProxy(target)`` owns a port. ``open()`` starts forwarding every connection to ``target``;
``close()`` stops listening (new connections are refused, as by a server that is down) and
``cut()`` resets every connection under way (as a restart does to its clients). It runs on its
own event loop in a daemon thread; every method is called from the test's thread and returns
once the change has happened.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice, released at once)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


class TcpProxy:
    def __init__(self, target: tuple[str, int], port: int | None = None) -> None:
        self.target = target
        self.port = port or free_port()
        self.accepted = 0  # connections forwarded since the start (to see that clients came)
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    @property
    def url_netloc(self) -> str:
        return f"127.0.0.1:{self.port}"

    def open(self) -> None:
        """Listen and forward (a server that came up)."""
        self._call(self._open())

    def close(self) -> None:
        """Stop listening and reset every connection (a server that went down)."""
        self._call(self._close())

    def cut(self) -> None:
        """Reset every connection under way but keep listening (a quick restart)."""
        self._call(self._cut())

    def stop(self) -> None:
        self.close()
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()

    def _call(self, coroutine: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(timeout=10)

    async def _open(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._handle, "127.0.0.1", self.port, reuse_address=True
            )

    async def _close(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        await self._cut()

    async def _cut(self) -> None:
        for writer in list(self._writers):
            _reset(writer)
        self._writers.clear()

    async def _handle(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        try:
            server_r, server_w = await asyncio.open_connection(*self.target)
        except OSError:
            _reset(client_w)
            return
        self.accepted += 1
        self._writers.update((client_w, server_w))
        await asyncio.gather(
            _pump(client_r, server_w), _pump(server_r, client_w), return_exceptions=True
        )
        for writer in (client_w, server_w):
            self._writers.discard(writer)
            writer.close()


async def _pump(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while chunk := await reader.read(65536):
            writer.write(chunk)
            await writer.drain()
    except (OSError, asyncio.IncompleteReadError):
        pass
    finally:
        with contextlib.suppress(OSError):
            writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST, not FIN: what a client sees when the server process goes away."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
