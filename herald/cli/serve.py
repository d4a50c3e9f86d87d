"""``herald serve``: the HTTP service recipients and mail providers reach (one-click unsubscribe).

Bounce and mailto-unsubscribe handling (an inbound SMTP listener, ``--smtp-host/--smtp-port``)
and provider webhooks (``/events/<provider>``) join it here: ``build_app(extra_routes=...)``.
"""

from __future__ import annotations

from typing import Annotated

import typer

from herald.cli.base import DatabaseUrl, app, errors_mapped, opened
from herald.defaults import DEFAULT_DATABASE_URL
from herald.output import err

Host = Annotated[
    str,
    typer.Option(
        "--host",
        envvar="HERALD_SERVE_HOST",
        help="Address to listen on (behind a TLS-terminating proxy: keep the loopback).",
    ),
]
Port = Annotated[
    int,
    typer.Option(
        "--port", envvar="HERALD_SERVE_PORT", min=0, max=65535, help="HTTP port (0: any free)."
    ),
]


@app.command()
def serve(
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    host: Host = "127.0.0.1",
    port: Port = 8025,
) -> None:
    """Answer one-click unsubscribes (POST /u/<token>; GET shows a confirmation page).

    Runs until SIGTERM/SIGINT. HERALD_PUBLIC_URL must lead here (over HTTPS) for the links
    in sent messages to work.
    """
    from herald.mail_settings import MailSettings
    from herald.serve.app import bind, build_app
    from herald.serve.app import serve as run_app

    with errors_mapped():
        settings = MailSettings.from_env()  # settings first: nothing is opened for a bad one
        engine = opened(database_url)
        application = build_app(engine, settings)
        sock = bind(host, port)

        def ready(bound_host: str, bound_port: int) -> None:
            public = settings.public_url or "HERALD_PUBLIC_URL not set"
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host  # an IPv6 address
            err.print(
                f"herald serve: listening on http://{shown}:{bound_port} "
                f"(one-click unsubscribe at /u/<token>; public URL: {public})",
                highlight=False,
            )

        try:
            run_app(application, sock, on_ready=ready)
        finally:
            sock.close()
