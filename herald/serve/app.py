"""The ASGI application ``herald serve`` runs, and running it with uvicorn.

``build_app`` assembles the routes: ``/u/<token>`` (herald.serve.unsubscribe) and whatever
else the caller mounts (provider webhooks: ``extra_routes``). ``serve`` binds the socket itself
before uvicorn starts, so a port in use is one clear line (exit 1), and ``--port 0`` picks
a free port that the start-up line names.

uvicorn's own logging is off: its access log would write every ``/u/<token>`` path, and the
token holds the recipient's address (base64 is not a secret). Errors inside a request are still
answered with a 500 by Starlette; Herald logs one line per start-up, nothing per request.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import socket
from collections.abc import Callable, Coroutine, Iterator, Sequence
from typing import Any

import sqlalchemy as sa
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route

from herald.errors import ConfigError, HeraldError
from herald.mail_settings import MailSettings
from herald.serve import dashboard, unsubscribe
from herald.serve.dashboard.settings import DashboardSettings

SETTINGS_HINT = (
    "set HERALD_SIGNING_KEYS to the same key ring the launch and scheduler processes use "
    "(e.g. HERALD_SIGNING_KEYS=k1:<secret of 16+ characters>)"
)


def build_app(
    engine: sa.Engine,
    mail_settings: MailSettings,
    *,
    extra_routes: Sequence[BaseRoute] = (),
    dashboard_settings: DashboardSettings | None = None,
) -> Starlette:
    """The application; ConfigError without HERALD_SIGNING_KEYS (no token could be read)."""
    if mail_settings.signing_keys is None:
        raise ConfigError("herald serve needs HERALD_SIGNING_KEYS", hint=SETTINGS_HINT)

    async def health(_request: Request) -> Response:
        return PlainTextResponse("ok")

    routes: list[BaseRoute] = [
        *unsubscribe.routes(engine, mail_settings.signing_keys),
        Route("/healthz", health, methods=["GET"]),
        *extra_routes,
    ]
    if dashboard_settings is not None:  # last: its `/` must not shadow the routes above
        routes += dashboard.routes(engine, dashboard_settings)
    return Starlette(routes=routes)


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: any free port); HeraldError when taken."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise HeraldError(  # operational (exit 1): the setting may be right, the port busy
                f"port {port} on {host} is already in use",
                hint="stop what listens there or choose another --port",
            ) from None
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror}") from None
    sock.setblocking(False)
    return sock


def serve(
    app: Starlette,
    sock: socket.socket,
    *,
    on_ready: Callable[[str, int], None] | None = None,
    alongside: Sequence[Callable[[], Coroutine[Any, Any, None]]] = (),
) -> None:
    """Run ``app`` on the bound ``sock`` until SIGINT/SIGTERM (uvicorn handles them).

    ``alongside``: coroutines run on the same loop while the HTTP server runs, cancelled when
    it stops (the hook for the inbound SMTP listener of ``--smtp-port``).
    """
    import uvicorn

    config = uvicorn.Config(
        app,
        log_config=None,
        access_log=False,
        log_level="warning",
        server_header=False,
        proxy_headers=False,
        lifespan="off",
    )
    host, port = sock.getsockname()[:2]

    class Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if self.started and on_ready is not None:
                on_ready(host, port)

        @contextlib.contextmanager
        def capture_signals(self) -> Iterator[None]:
            # uvicorn re-raises a captured SIGTERM after a graceful shutdown, so the process
            # would end "killed by SIGTERM" (143); a stop that was asked for exits 0.
            with super().capture_signals():
                yield
                self._captured_signals.clear()

    async def run() -> None:
        others = [asyncio.create_task(start()) for start in alongside]
        try:
            await Server(config).serve(sockets=[sock])
        finally:
            for task in others:
                task.cancel()
            await asyncio.gather(*others, return_exceptions=True)

    asyncio.run(run())
