"""Serving a process's metrics over HTTP (``--metrics-port`` of worker, scheduler and run).

prometheus_client's own server, in a daemon thread, on the registry given: it answers
``GET /metrics`` (any path, in fact) while the process's event loop sends. Port 0 binds any
free port; the start-up line (stderr) names the one bound, so scripts and tests can find it.
A port in use is one clear line and exit 1, before any work starts.
"""

from __future__ import annotations

import errno
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, start_http_server

from herald.errors import ConfigError, HeraldError
from herald.output import err


@contextmanager
def metrics_served(
    registry: CollectorRegistry, host: str, port: int | None, *, command: str
) -> Iterator[int | None]:
    """Serve ``registry`` on ``host:port`` while the block runs; yields the bound port (None:
    ``port`` is None, metrics off)."""
    if port is None:
        yield None
        return
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise HeraldError(  # operational (exit 1): the setting may be right, the port busy
                f"metrics port {port} on {host} is already in use",
                hint="stop what listens there or choose another --metrics-port",
            ) from None
        detail = exc.strerror or str(exc)
        raise ConfigError(f"cannot serve metrics on {host}:{port}: {detail}") from None
    bound = int(server.server_address[1])
    shown = f"[{host}]" if ":" in host else host
    err.print(f"{command}: metrics on http://{shown}:{bound}/metrics", highlight=False)
    try:
        yield bound
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
