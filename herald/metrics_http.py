"""Serving a process's metrics over HTTP (``--metrics-port`` of worker, scheduler and run).

A threaded WSGI server in a daemon thread: ``GET /metrics`` is prometheus_client's exposition
of the registry given, ``/healthz`` says the process is alive and ``/readyz`` asks ``ready``
(the database answers, its schema is current: herald.app.readiness), the same probes as
``herald serve``; any other path is a 404. It answers while the process's event loop sends.
Port 0 binds any free port; the start-up line (stderr) names the one bound, so scripts and
tests can find it. A port in use is one clear line and exit 1, before any work starts.
"""

from __future__ import annotations

import errno
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from herald.errors import ConfigError, HeraldError
from herald.output import err


@contextmanager
def metrics_served(
    registry: CollectorRegistry,
    host: str,
    port: int | None,
    *,
    command: str,
    ready: Callable[[], str | None] = lambda: None,
) -> Iterator[int | None]:
    """Serve ``registry`` and the probes on ``host:port`` while the block runs; yields the bound
    port (None: ``port`` is None, metrics off). ``ready``: None when ready, else why not."""
    if port is None:
        yield None
        return
    try:
        server = make_server(
            host, port, probes_app(registry, ready), _ThreadingServer, _QuietHandler
        )
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise HeraldError(  # operational (exit 1): the setting may be right, the port busy
                f"metrics port {port} on {host} is already in use",
                hint="stop what listens there or choose another --metrics-port",
            ) from None
        detail = exc.strerror or str(exc)
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {detail}") from None
    thread = threading.Thread(target=server.serve_forever, name="herald-metrics", daemon=True)
    thread.start()
    bound = int(server.server_address[1])
    shown = f"[{host}]" if ":" in host else host
    err.print(f"{command}: metrics on http://{shown}:{bound}/metrics", highlight=False)
    try:
        yield bound
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def probes_app(registry: CollectorRegistry, ready: Callable[[], str | None]) -> WsgiApp:
    """``/metrics``, ``/healthz`` and ``/readyz`` (200 "ready" or 503 with the reason)."""
    metrics = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == "/metrics":
            return metrics(environ, start_response)  # type: ignore[no-any-return]
        if path == "/healthz":
            return _text(start_response, "200 OK", "ok")
        if path == "/readyz":
            reason = ready()
            if reason is None:
                return _text(start_response, "200 OK", "ready")
            return _text(start_response, "503 Service Unavailable", f"not ready: {reason}")
        return _text(start_response, "404 Not Found", "not found: /metrics, /healthz, /readyz")

    return app


def _text(start_response: Callable[..., Any], status: str, body: str) -> list[bytes]:
    data = (body + "\n").encode()
    start_response(
        status, [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(data)))]
    )
    return [data]


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a slow scraper never holds the process at exit


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        return None  # no access log on stderr: scrapes every few seconds would drown the events
