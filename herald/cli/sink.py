"""``herald sink``: a development SMTP server storing every message in a Maildir."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from herald.cli.base import app, errors_mapped
from herald.errors import ConfigError
from herald.output import err, visible


@app.command()
def sink(
    maildir: Annotated[Path, typer.Option(help="Where to store messages.")] = Path("maildir"),
    host: Annotated[str, typer.Option(help="Address to listen on (loopback only).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 1025,
) -> None:
    """A development SMTP server that stores every message in a Maildir."""
    from herald.sink import serve_sink_forever

    with errors_mapped():

        def ready(handle: Any) -> None:
            err.print(
                f"sink listening on {handle.host}:{handle.port}, storing in {maildir} "
                "(Ctrl-C to stop)"
            )

        def echo(line: str) -> None:
            print(visible(line), flush=True)  # the sink shows what any client sent

        try:
            serve_sink_forever(maildir, host=host, port=port, echo=echo, on_ready=ready)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot start the sink: {exc}") from exc
