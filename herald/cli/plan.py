"""``herald schedule`` (alias ``herald plan``) and ``herald simulate``: when a campaign would
send what, computed from the file alone. Neither opens a database: nothing is written, and a
campaign can be checked before it is ever launched (``--now`` asks "what if it were then?").
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from herald.cli.base import (
    JsonFlag,
    NowOption,
    app,
    clock_option,
    errors_mapped,
    fail,
    progress_bar,
)
from herald.output import err, out, styled

if TYPE_CHECKING:
    from rich.console import Console

    from herald.app.plan import Plan
    from herald.app.simulate import Simulation

CampaignFile = Annotated[Path, typer.Argument(help="The campaign YAML file.")]
Count = Annotated[
    int, typer.Option("--count", "-n", min=1, max=1000, help="How many fires to list.")
]
Until = Annotated[
    str,
    typer.Option(
        "--until",
        help="How far to look: a duration from --now (30d, 2w, 12h) or an ISO-8601 time.",
    ),
]
EnrollEvery = Annotated[
    str | None,
    typer.Option(
        "--enroll-every",
        help="Drips: enroll the audience again every DURATION (1d: a new cohort each day), "
        "to see steps of successive cohorts overlap. Default: everyone enrolled at --now.",
    ),
]


def schedule(
    file: CampaignFile, count: Count = 10, now: NowOption = None, as_json: JsonFlag = False
) -> None:
    """The next fires and, per step, how many messages fall due when. Writes nothing."""
    from herald.app.plan import plan as plan_campaign
    from herald.app.unsubscribe import links_from_env
    from herald.cli.launch import print_check

    with errors_mapped():
        clock = clock_option(now)
        result = plan_campaign(
            file, count=count, clock=clock, progress=progress_bar, links=links_from_env()
        )
        if not result.report.ok:
            print_check(result.report, as_json=False)
            fail(f"{result.report.problem_count} problem(s) in the campaign", code=2)
        if as_json:
            out.print_json(json.dumps(result.to_json()))
            return
        render_plan(out, result)


# `herald plan` is the same command under the name the design card uses.
app.command("schedule")(schedule)
app.command("plan", help="Same as `herald schedule`.")(schedule)


@app.command()
def simulate(
    file: CampaignFile,
    until: Until = "30d",
    now: NowOption = None,
    enroll_every: EnrollEvery = None,
    as_json: JsonFlag = False,
) -> None:
    """The timeline of what would be sent when, up to --until, in memory. Writes nothing."""
    from herald.app.simulate import parse_every, parse_until
    from herald.app.simulate import simulate as simulate_campaign

    with errors_mapped():
        clock = clock_option(now)
        start = clock()
        result = simulate_campaign(
            file,
            until=parse_until(until, start),
            clock=lambda: start,
            enroll_every=None if enroll_every is None else parse_every(enroll_every),
        )
        if as_json:
            out.print_json(json.dumps(result.to_json()))
            return
        render_simulation(out, result)


# ---------------------------------------------------------------------- printing


def render_plan(console: Console, result: Plan) -> None:
    from rich.table import Table

    from herald.cli.timefmt import local_text, utc_text

    zone = result.zone
    console.print(f"{result.name}: {result.description}")
    for warning in result.warnings:
        err.print(styled("warning:", "bold yellow"), warning)
    if not result.fires:
        console.print("no future fire: nothing would be sent")
        return
    fires = Table(title=f"next {len(result.fires)} fire(s)", title_justify="left")
    fires.add_column("#", justify="right")
    fires.add_column(f"local ({zone})")
    fires.add_column("UTC")
    fires.add_column("messages", justify="right")
    for index, fire in enumerate(result.fires, start=1):
        when = fire.label or local_text(fire.at, zone)
        fires.add_row(str(index), when, utc_text(fire.at), str(fire.messages))
    console.print(fires)
    first = result.fires[0]
    steps = Table(
        title=f"per step, for fire 1 ({first.label or local_text(first.at, zone)})",
        title_justify="left",
    )
    steps.add_column("step")
    steps.add_column("messages", justify="right")
    steps.add_column("falls due (local)")
    steps.add_column("UTC")
    steps.add_column("zone")
    previous = None
    for group in first.groups:
        steps.add_row(
            group.step if group.step != previous else "",
            str(group.messages),
            local_text(group.due, group.zone),
            utc_text(group.due),
            group.zone,
        )
        previous = group.step
    console.print(steps)
    console.print(
        f"{result.recipients} recipient(s) read at {utc_text(result.now)}; nothing was written"
    )


def render_simulation(console: Console, result: Simulation) -> None:
    from rich.table import Table

    from herald.cli.timefmt import local_text, utc_text

    console.print(
        f"{result.name}: {result.description}; from {utc_text(result.now)} "
        f"to {utc_text(result.until)}"
    )
    if not result.entries:
        console.print("nothing would be sent in that time")
    else:
        table = Table(show_lines=False)
        table.add_column("falls due (local)")
        table.add_column("UTC")
        table.add_column("zone")
        table.add_column("occurrence" if result.trigger != "enrollment" else "enrolled")
        table.add_column("step")
        table.add_column("messages", justify="right")
        for entry in result.entries:
            table.add_row(
                local_text(entry.due, entry.zone),
                utc_text(entry.due),
                entry.zone,
                local_text(entry.occurrence, result.zone),
                entry.step,
                str(entry.messages),
            )
        console.print(table)
    summary = (
        f"{result.messages} message(s) from {result.occurrences} "
        f"{'cohort' if result.trigger == 'enrollment' else 'occurrence'}(s)"
    )
    if result.per_enrollment:
        summary += " of one recipient each (enrollment: manual)"
    if result.beyond:
        summary += f"; {result.beyond} more fall due after {utc_text(result.until)}"
    if result.cut:
        summary += f"; only the first {result.occurrences} occurrence(s) were simulated"
    console.print(summary + "; simulated in memory, nothing was written")
