"""Local servers on 127.0.0.1 for the egress tests: HTTP or HTTPS, scripted per path.

Each server runs in its own thread, so the asyncio client under test runs undisturbed in the
test's thread. Replies can redirect, stream forever, drip a byte a second, or stall; all of them
end promptly when the server is stopped.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any

import trustme

# write(chunk) sends bytes to the client; the event is set when the server is stopping.
BodyWriter = Callable[[Callable[[bytes], None], threading.Event], None]


@dataclass(frozen=True)
class Reply:
    status: int = 200
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    # When set, the body is produced by this function instead, and the connection closes after.
    stream: BodyWriter | None = None
    # Hold the reply (headers included) until the server stops.
    stall: bool = False


@dataclass(frozen=True)
class SeenRequest:
    method: str
    path: str
    headers: Mapping[str, str]  # lower-case names
    body: bytes
    peer: str


Route = Reply | Callable[[SeenRequest], Reply]


def redirect(location: str, status: int = 302) -> Reply:
    return Reply(status=status, headers={"Location": location})


def endless(write: Callable[[bytes], None], stopping: threading.Event) -> None:
    """Bytes until the client hangs up (or the server stops)."""
    chunk = b"x" * 65536
    while not stopping.is_set():
        write(chunk)


def drip(write: Callable[[bytes], None], stopping: threading.Event) -> None:
    """One byte a second: every read succeeds, so only a total deadline can end it."""
    while True:
        write(b".")
        if stopping.wait(1.0):
            return


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, owner: LocalHTTPServer, tls: ssl.SSLContext | None) -> None:
        self.owner = owner
        self.tls = tls
        super().__init__(("127.0.0.1", 0), _Handler)

    def finish_request(self, request: Any, client_address: Any) -> None:
        # A bound on every socket operation, so no handler thread can outlive a test for long.
        request.settimeout(10)
        if self.tls is None:
            _Handler(request, client_address, self)
            return
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as exc:
            self.owner.tls_failures.append(exc)
            return
        try:
            _Handler(wrapped, client_address, self)
        finally:
            wrapped.close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass  # clients hanging up mid-body is the point of several tests


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def do_HEAD(self) -> None:
        self._serve()

    def do_PUT(self) -> None:
        self._serve()

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _serve(self) -> None:
        owner = self.server.owner
        length = int(self.headers.get("Content-Length") or 0)
        seen = SeenRequest(
            method=self.command,
            path=self.path,
            headers={name.lower(): value for name, value in self.headers.items()},
            body=self.rfile.read(length) if length else b"",
            peer=self.client_address[0],
        )
        owner.requests.append(seen)
        route = owner.routes.get(self.path.split("?", 1)[0])
        reply = (
            Reply(status=404)
            if route is None
            else route
            if isinstance(route, Reply)
            else route(seen)
        )
        if reply.stall:
            owner.stopping.wait()
            return
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        if reply.stream is None:
            if "content-length" not in {name.lower() for name in reply.headers}:
                self.send_header("Content-Length", str(len(reply.body)))
            self.end_headers()
            self.wfile.write(reply.body)
            return
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        # The client hanging up mid-body is what the guard is supposed to do.
        with contextlib.suppress(OSError, ssl.SSLError):
            reply.stream(self._write, owner.stopping)

    def _write(self, chunk: bytes) -> None:
        self.wfile.write(chunk)
        self.wfile.flush()


class LocalHTTPServer:
    """``with LocalHTTPServer({"/": Reply(body=b"hi")}) as server: server.url("/")``."""

    def __init__(self, routes: Mapping[str, Route], *, tls: ssl.SSLContext | None = None) -> None:
        self.routes: dict[str, Route] = dict(routes)
        self.requests: list[SeenRequest] = []
        self.sni_names: list[str | None] = []
        self.tls_failures: list[Exception] = []
        self.stopping = threading.Event()
        if tls is not None:
            tls.sni_callback = self._record_sni
        self._server = _Server(self, tls)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self.port: int = self._server.server_address[1]
        self.scheme = "http" if tls is None else "https"

    def url(self, path: str = "/", *, host: str = "127.0.0.1") -> str:
        return f"{self.scheme}://{host}:{self.port}{path}"

    def __enter__(self) -> LocalHTTPServer:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()

    def _record_sni(self, _ssl: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        self.sni_names.append(name)


@dataclass(frozen=True)
class TLSPair:
    """A server context with a certificate for ``names`` and a client context trusting its CA."""

    server: ssl.SSLContext
    client: ssl.SSLContext


def tls_pair(ca: trustme.CA, *names: str) -> TLSPair:
    server = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    ca.issue_cert(*names).configure_cert(server)
    client = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    ca.configure_trust(client)
    return TLSPair(server=server, client=client)


class ConnectionRecorder:
    """A listening socket that only counts who connected (a would-be proxy).

    The kernel completes the TCP handshake from the listen backlog, so connections can be
    counted afterwards without a serving thread.
    """

    def __init__(self) -> None:
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen(16)
        self._socket.setblocking(False)
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"

    def connection_count(self) -> int:
        count = 0
        while True:
            try:
                connection, _peer = self._socket.accept()
            except BlockingIOError:
                return count
            connection.close()
            count += 1

    def __enter__(self) -> ConnectionRecorder:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self._socket.close()
