"""``herald status``: counts per campaign and step (in campaign order), rate, ETA, top failure
reasons and each campaign's schedule, for people (laid out by ``herald.cli.status_view`` to the
screen's width) or (``--json``) scripts; ``--watch`` refreshes it until Ctrl-C."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer

from herald.cli.base import (
    DatabaseUrl,
    JsonFlag,
    NowOption,
    app,
    clock_option,
    errors_mapped,
    opened,
)
from herald.cli.status_screen import render, watch_status
from herald.defaults import DEFAULT_DATABASE_URL
from herald.output import out

__all__ = ["render", "status"]  # render: tests print a snapshot with it

WidthOption = Annotated[
    int | None,
    typer.Option(
        "--width",
        min=20,
        help="Lay out for this many columns (default: the terminal's; piped: $COLUMNS if set,"
        " else unlimited, so nothing is shortened).",
        show_default=False,
    ),
]


@app.command()
def status(
    campaign: Annotated[str | None, typer.Argument(help="Only this campaign.")] = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
    now: NowOption = None,
    width: WidthOption = None,
    watch: Annotated[
        bool, typer.Option("--watch", help="Refresh every --interval seconds until Ctrl-C.")
    ] = False,
    interval: Annotated[
        float, typer.Option("--interval", min=0.1, help="Seconds between --watch refreshes.")
    ] = 2.0,
    watch_count: Annotated[
        int | None,
        typer.Option(
            "--watch-count",
            min=1,
            help="Stop after this many snapshots (implies --watch).",
            show_default=False,
        ),
    ] = None,
) -> None:
    """Counts per campaign and step, rate, ETA and failure reasons; in-doubt and failed first."""
    from herald.app.status import status as collect

    with errors_mapped():
        clock = clock_option(now)  # a bad --now is refused before the database is opened
        engine = opened(database_url, create=False)

        def take() -> dict[str, Any]:
            return collect(engine, campaign, clock=clock)

        if watch or watch_count is not None:
            watch_status(
                out, take, interval=interval, count=watch_count, as_json=as_json, width=width
            )
        elif as_json:
            out.print_json(json.dumps(take()))
        else:
            render(out, take(), width=width)
