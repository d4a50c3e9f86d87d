"""``herald sink``: a development SMTP server storing every message in a Maildir."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from herald.cli.base import app, errors_mapped
from herald.cli.log_options import LogFormat, LogFormatName, LogLevel, LogLevelName, start_logging
from herald.errors import ConfigError
from herald.output import visible


@app.command()
def sink(
    maildir: Annotated[Path, typer.Option(help="Where to store messages.")] = Path("maildir"),
    host: Annotated[str, typer.Option(help="Address to listen on (loopback only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 1025,
    log_level: LogLevel = LogLevelName.info,
    log_format: LogFormat = LogFormatName.text,
) -> None:
    """A development SMTP server that stores every message in a Maildir."""
    start_logging(log_level, log_format)
    from herald.logs import say
    from herald.sink import serve_sink_forever

    with errors_mapped():

        def ready(handle: Any) -> None:
            say(
                f"sink listening on {handle.host}:{handle.port}, storing in {maildir} "
                "(Ctrl-C to stop)",
                "sink_started",
                host=handle.host,
                port=handle.port,
                maildir=str(maildir),
            )

        def echo(line: str) -> None:
            print(visible(line), flush=True)  # the sink shows what any client sent

        try:
            serve_sink_forever(maildir, host=host, port=port, echo=echo, on_ready=ready)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot start the sink: {exc}") from exc
