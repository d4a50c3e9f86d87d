"""``herald serve``: what recipients and mail providers reach — one-click unsubscribe
(``/u/<token>``), provider webhooks (``/events/<provider>``) and, with ``--smtp-port``, the
inbound SMTP listener for bounces, complaints and mailto unsubscribes (herald.serve.inbound).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Annotated, Any

import typer

from herald.cli.base import (
    DatabaseUrl,
    DatabaseWait,
    app,
    errors_mapped,
    opened_waiting,
    reexec_if_reloading,
)
from herald.cli.log_options import LogFormat, LogFormatName, LogLevel, LogLevelName, start_logging
from herald.defaults import DEFAULT_DATABASE_URL

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


SmtpHost = Annotated[
    str,
    typer.Option(
        "--smtp-host",
        envvar="HERALD_SERVE_SMTP_HOST",
        help="Address the inbound SMTP listener listens on.",
    ),
]
SmtpPort = Annotated[
    int | None,
    typer.Option(
        "--smtp-port",
        envvar="HERALD_SERVE_SMTP_PORT",
        min=0,
        max=65535,
        help="Inbound SMTP port for bounces and mailto unsubscribes (none: no listener).",
    ),
]


@app.command()
def serve(
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    host: Host = "127.0.0.1",
    port: Port = 8025,
    smtp_host: SmtpHost = "127.0.0.1",
    smtp_port: SmtpPort = None,
    database_wait: DatabaseWait = None,
    log_level: LogLevel = LogLevelName.info,
    log_format: LogFormat = LogFormatName.text,
) -> None:
    """Answer one-click unsubscribes (POST /u/<token>; GET shows a confirmation page),
    provider webhooks (POST /events/ses|sendgrid|mailgun|postmark) and, with --smtp-port,
    bounces, complaints and mailto unsubscribes by SMTP. With HERALD_DASHBOARD_PASSWORD or
    HERALD_DASHBOARD_TOKEN set, also the web dashboard at / (docs/operations/dashboard.md).

    Runs until SIGTERM/SIGINT; SIGHUP stops it the same way and starts it again with the same
    command (a reload). HERALD_PUBLIC_URL must lead here (over HTTPS) for the links
    in sent messages to work.
    """
    start_logging(log_level, log_format)
    from dispatch.egress.redact import redact_setting
    from herald.app.service_logs import herald_version
    from herald.logs import say
    from herald.mail_settings import MailSettings
    from herald.serve import events, inbound
    from herald.serve.app import bind, build_app
    from herald.serve.app import serve as run_app
    from herald.serve.dashboard.settings import DashboardSettings

    with errors_mapped():
        settings = MailSettings.from_env()  # settings first: nothing is opened for a bad one
        engine = opened_waiting(database_url, database_wait, service=True)
        board = DashboardSettings.from_env(settings.signing_keys, public_url=settings.public_url)
        application = build_app(
            engine,
            settings,
            extra_routes=events.routes(engine, settings),
            dashboard_settings=board,
        )
        alongside: list[Callable[[], Coroutine[Any, Any, None]]] = []
        smtp_sock = None
        if smtp_port is not None:
            inbound.check_settings(settings)  # a ConfigError now, not once uvicorn runs
            smtp_sock = bind(smtp_host, smtp_port)

            def smtp_ready(bound_host: str, bound_port: int) -> None:
                accepted = [
                    f"{prefix}+<token>@{domain}"
                    for prefix, domain in (
                        ("bounce", settings.bounce_domain),
                        ("unsub", settings.unsubscribe_domain),
                    )
                    if domain
                ]
                say(
                    f"herald serve: inbound SMTP on {bound_host}:{bound_port}"
                    f" (accepts {', '.join(accepted)})",
                    "inbound_listening",
                    host=bound_host,
                    port=bound_port,
                )

            listening = smtp_sock

            def listen() -> Coroutine[Any, Any, None]:
                return inbound.serve_inbound(
                    engine, settings, host=smtp_host, port=0, sock=listening, on_ready=smtp_ready
                )

            alongside.append(listen)
        sock = bind(host, port)

        dashboard_note = (
            "dashboard at /"
            if board.enabled
            else "dashboard off: set HERALD_DASHBOARD_PASSWORD or HERALD_DASHBOARD_TOKEN"
        )

        def ready(bound_host: str, bound_port: int) -> None:
            public = settings.public_url or "HERALD_PUBLIC_URL not set"
            shown = f"[{bound_host}]" if ":" in bound_host else bound_host  # an IPv6 address
            say(
                f"herald serve: listening on http://{shown}:{bound_port} "
                f"(one-click unsubscribe at /u/<token>; public URL: {public}; {dashboard_note})",
                "serve_started",
                version=herald_version(),
                database=redact_setting(database_url),
                host=bound_host,
                port=bound_port,
            )

        try:
            run_app(application, sock, on_ready=ready, alongside=alongside)
        finally:
            sock.close()
            if smtp_sock is not None:
                smtp_sock.close()
    reexec_if_reloading()
