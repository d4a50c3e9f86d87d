"""``--log-level`` and ``--log-format``: the options of every long-running command (worker,
scheduler, run, serve, sink), defined once. A value outside the choices is invalid input:
click says which values are allowed and exits 2, before anything starts."""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

import typer


class LogLevelName(StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


class LogFormatName(StrEnum):
    text = "text"
    json = "json"


LogLevel = Annotated[
    LogLevelName,
    typer.Option(
        "--log-level",
        envvar="HERALD_LOG_LEVEL",
        case_sensitive=False,
        help="Least severe log records shown on stderr (debug also shows the libraries').",
    ),
]
LogFormat = Annotated[
    LogFormatName,
    typer.Option(
        "--log-format",
        envvar="HERALD_LOG_FORMAT",
        case_sensitive=False,
        help="text: one readable line per record; json: one JSON object per line.",
    ),
]


def start_logging(level: LogLevelName, fmt: LogFormatName) -> None:
    from herald.logs import setup_logging

    setup_logging(level.value, fmt.value)
