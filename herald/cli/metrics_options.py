"""``--metrics-port`` and ``--metrics-host``: the options of every long-running command that
serves Prometheus metrics (``herald worker``, ``herald scheduler``, ``herald run``)."""

from __future__ import annotations

from typing import Annotated

import typer

DEFAULT_METRICS_HOST = "127.0.0.1"

MetricsPort = Annotated[
    int | None,
    typer.Option(
        "--metrics-port",
        envvar="HERALD_METRICS_PORT",
        min=0,
        max=65535,
        help="Serve Prometheus metrics over HTTP on this port (0: any free port, named on "
        "start-up; none: off).",
    ),
]
MetricsHost = Annotated[
    str,
    typer.Option(
        "--metrics-host",
        envvar="HERALD_METRICS_HOST",
        help="Address the metrics port listens on (keep the loopback unless scraped remotely).",
    ),
]
