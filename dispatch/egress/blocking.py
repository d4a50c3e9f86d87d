"""A guarded response body as a blocking binary stream, for synchronous callers.

The egress client is asyncio, but the audience parsers are synchronous (``csv.reader`` pulls
lines). ``open_blocking`` runs the request on an event loop in a background thread and hands the
body over through a small bounded queue: memory stays constant whatever the body's size, and a
slow reader slows the download down instead of buffering it. Every check of the guard applies
unchanged; the total deadline covers the download however long the reader takes, so callers
reading large bodies pass a policy with a deadline sized for that.

An error of the request (denial, timeout, cap) is raised in the reading thread: from
``open_blocking`` if it happens before the response headers arrive, else from the read that
reaches it.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import queue
import ssl
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Final

import httpx

from dispatch.egress.client import EgressClient
from dispatch.egress.policy import EgressPolicy
from dispatch.egress.resolve import Resolver

# At most this many body chunks (each at most 64 KiB decoded) wait between the two threads.
_QUEUE_CHUNKS: Final = 8
_PUT_POLL: Final = 0.05  # seconds between checks for a reader that has gone away


@dataclass(frozen=True)
class _Head:
    status_code: int
    headers: httpx.Headers
    url: str
    encoding: str


@dataclass(frozen=True)
class _Failed:
    error: BaseException


_END: Final = object()  # the body is complete
_Message = object  # a _Head, then bytes chunks, then _END or a _Failed


class BlockingResponse(io.RawIOBase):
    """The response: status, headers, final URL and charset, and the body via ``read``."""

    def __init__(self, head: _Head, pump: _Pump) -> None:
        super().__init__()
        self.status_code = head.status_code
        self.headers = head.headers
        self.url = head.url  # the final URL, after any redirects
        self.encoding = head.encoding  # the declared charset, or utf-8
        self._pump = pump
        self._pending = memoryview(b"")
        self._finished = False

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while not self._pending:
            if self._finished:
                return 0
            message = self._pump.take()
            if message is _END:
                self._finished = True
                return 0
            if isinstance(message, _Failed):
                self._finished = True
                raise message.error
            assert isinstance(message, bytes)
            self._pending = memoryview(message)
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def close(self) -> None:
        if not self.closed:
            self._pump.stop()
        super().close()


class _Pump:
    """The background thread: one event loop, one request, the body pushed into a queue."""

    def __init__(
        self,
        method: str,
        url: str,
        *,
        policy: EgressPolicy,
        headers: Mapping[str, str],
        max_redirects: int | None,
        resolver: Resolver | None,
        ssl_context: ssl.SSLContext | None,
    ) -> None:
        self._request = (method, url, dict(headers), max_redirects)
        self._client_options = (policy, resolver, ssl_context)
        self._queue: queue.Queue[_Message] = queue.Queue(maxsize=_QUEUE_CHUNKS)
        self._stopping = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="egress-blocking", daemon=True)
        self._policy = policy

    def start(self) -> _Head:
        self._thread.start()
        first = self.take()
        if isinstance(first, _Head):
            return first
        self.stop()
        if isinstance(first, _Failed):
            raise first.error
        raise RuntimeError("egress response ended before its headers")  # pragma: no cover

    def take(self) -> _Message:
        return self._queue.get()

    def stop(self) -> None:
        """Stop the download (the reader is done or gone) and wait for the thread to end."""
        self._stopping.set()
        with self._lock:
            loop, task = self._loop, self._task
        if loop is not None and task is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already finished
                loop.call_soon_threadsafe(task.cancel)
        # Unblock a producer waiting for room; it sees the stop flag on its next put.
        with contextlib.suppress(queue.Empty):
            while True:
                self._queue.get_nowait()
        self._thread.join(timeout=self._policy.total_timeout + 5)

    def _run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        with self._lock:
            self._loop = asyncio.get_running_loop()
            self._task = asyncio.current_task()
        if self._stopping.is_set():
            return
        try:
            await self._fetch()
        except asyncio.CancelledError:
            return  # the reader stopped us; nobody is waiting for a message
        except BaseException as exc:
            self._put(_Failed(exc))
            return
        self._put(_END)

    async def _fetch(self) -> None:
        method, url, headers, max_redirects = self._request
        policy, resolver, ssl_context = self._client_options
        async with (
            EgressClient(policy, resolver=resolver, ssl_context=ssl_context) as client,
            client.stream(method, url, headers=headers, max_redirects=max_redirects) as response,
        ):
            head = _Head(
                response.status_code, response.headers, str(response.url), response.encoding
            )
            if not self._put(head):
                return
            async for chunk in response.iter_bytes():
                if not self._put(chunk):
                    return

    def _put(self, message: _Message) -> bool:
        """Hand a message to the reader; False once the reader has gone away.

        Blocking this thread's loop is intended: it serves this one request only, and a full
        queue is exactly when the download should pause.
        """
        while not self._stopping.is_set():
            try:
                self._queue.put(message, timeout=_PUT_POLL)
                return True
            except queue.Full:
                continue
        return False


@contextlib.contextmanager
def open_blocking(
    method: str,
    url: str,
    *,
    policy: EgressPolicy,
    headers: Mapping[str, str] | None = None,
    max_redirects: int | None = None,
    resolver: Resolver | None = None,
    ssl_context: ssl.SSLContext | None = None,
) -> Iterator[BlockingResponse]:
    """Send the request through the guard; yield the response once its headers are in.

    Raises ``EgressDenied`` / ``EgressError`` for a request that fails before the headers.
    Leaving the block stops the download, whether or not the body was read to the end.
    """
    pump = _Pump(
        method,
        url,
        policy=policy,
        headers=headers or {},
        max_redirects=max_redirects,
        resolver=resolver,
        ssl_context=ssl_context,
    )
    response = BlockingResponse(pump.start(), pump)
    try:
        yield response
    finally:
        response.close()
