"""``herald validate`` and ``herald launch``: parse the options, call the use case, print."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from herald.cli.base import (
    DatabaseUrl,
    JsonFlag,
    NowOption,
    app,
    clock_option,
    errors_mapped,
    fail,
    opened,
    progress_bar,
)
from herald.defaults import DEFAULT_DATABASE_URL
from herald.output import err, out, styled

if TYPE_CHECKING:
    from campaigns.spec import LoadedCampaign
    from scheduler.check import CheckReport
    from scheduler.passes import CampaignPass

CampaignFile = Annotated[Path, typer.Argument(help="The campaign YAML file.")]


@app.command()
def validate(file: CampaignFile, as_json: JsonFlag = False, now: NowOption = None) -> None:
    """Parse a campaign and render every step for every recipient. Writes nothing."""
    from herald.app.launch import validate as validate_campaign
    from herald.app.unsubscribe import links_from_env

    with errors_mapped():
        result = validate_campaign(
            file, clock=clock_option(now), progress=progress_bar, links=links_from_env()
        )
        warn_unsubscribe(result.loaded)
        report = result.report
        print_check(report, as_json, warnings=result.warnings)
        if not report.ok:
            fail(f"{report.problem_count} problem(s); nothing was launched", code=2)
        if not as_json:
            print_rejects(report)
            out.print(
                f"ok: {result.loaded.spec.name}: {report.recipients} recipient(s), "
                f"{len(result.loaded.spec.steps)} step(s), {report.messages} message(s)"
            )


@app.command()
def launch(
    file: CampaignFile,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    force_new_version: Annotated[
        bool,
        typer.Option(
            "--force-new-version",
            help="Replace a changed campaign's definition: sent messages stay sent, unsent ones "
            "take the new content, unsent ones of removed steps or recipients are cancelled.",
        ),
    ] = False,
    as_json: JsonFlag = False,
    check_processes: Annotated[
        int | None,
        typer.Option(
            "--check-processes",
            min=1,
            help="Processes that check and compose an audience file of 256 KiB or more "
            "[default: one per core, at most 4; 1: this process only].",
        ),
    ] = None,
) -> None:
    """Validate, store the campaign and fan out its send jobs (idempotent)."""
    from herald.app.launch import CheckFailed, load
    from herald.app.launch import launch as launch_campaign
    from herald.app.unsubscribe import links_from_env

    with errors_mapped():
        loaded = load(file)  # a wrong file is reported before any database is opened
        links = links_from_env()
        warn_unsubscribe(loaded)
        try:
            result = launch_campaign(
                opened(database_url),
                loaded,
                force_new_version=force_new_version,
                progress=progress_bar,
                links=links,
                check_processes=check_processes,
            )
        except CheckFailed as exc:
            print_check(exc.report, as_json=False)
            raise
        print_rejects(result.report)  # stderr: JSON on stdout stays parseable
        if as_json:
            out.print_json(json.dumps(result.summary()))
            return
        verb = "launched" if result.created else "already launched"
        fanout = result.fanout
        out.print(
            f"{verb}: {result.loaded.spec.name} (version {result.version}): "
            f"{fanout.new_jobs} new job(s), {fanout.existing_jobs} already queued"
            + (f", {result.superseded} superseded" if result.superseded else "")
        )
        if result.scheduled is not None:
            spec = result.loaded.spec
            zone_name = spec.schedule.zone_name if spec.schedule is not None else spec.zone_name
            print_scheduled(result.scheduled, zone_name)


def warn_unsubscribe(loaded: LoadedCampaign) -> None:
    """On stderr: a marketing campaign whose messages will carry no List-Unsubscribe."""
    from herald.app.unsubscribe import warning

    said = warning(loaded)
    if said is not None:
        err.print(styled("warning:", "yellow"), said)


def _moment(at: datetime, zone_name: str) -> str:
    """``Thu 2026-12-03 09:00 CET (2026-12-03 08:00Z)``: the campaign's wall clock, and UTC."""
    from dispatch.wallclock import zone

    local = at.astimezone(zone(zone_name))
    return f"{local:%a %Y-%m-%d %H:%M %Z} ({at.astimezone(UTC):%Y-%m-%d %H:%MZ})"


def print_scheduled(passed: CampaignPass, zone_name: str = "UTC") -> None:
    """What the pass at launch did for a scheduled or enrollment campaign."""
    if passed.trigger == "enrollment":
        out.print(f"enrollment: {passed.enrolled} enrolled now; each drip counts from its own")
    for moment in passed.fired:
        out.print(f"fired: occurrence {_moment(moment, zone_name)}")
    for moment, reason in passed.skipped:
        out.print(f"skipped: occurrence {_moment(moment, zone_name)}: {reason}")
    if passed.trigger != "enrollment":
        upcoming = "none (it has ended)"
        if passed.next_fire is not None:
            upcoming = _moment(passed.next_fire, zone_name)
        out.print(f"next fire: {upcoming}")
    if passed.note:
        err.print(styled("note:", "yellow"), passed.note)


def print_check(report: CheckReport, as_json: bool, *, warnings: list[str] | None = None) -> None:
    """The check's problems and notes; ``warnings`` (validate's) on stderr, or as the JSON
    document's ``warnings`` (a list of strings; the key is only present for validate)."""
    if as_json:
        payload = {
            "ok": report.ok,
            "recipients": report.recipients,
            "messages": report.messages,
            "duplicates": report.duplicates,
            "duplicate_rows": [
                {"where": where, "first": first} for where, first in report.duplicate_rows
            ],
            "rejected_rows": report.rejected,
            "problem_count": report.problem_count,
            "problems": [
                {
                    "where": p.where,
                    "step": p.step,
                    "error": p.error,
                    "file": p.file,
                    "field": p.field,
                }
                for p in report.problems
            ],
        }
        if warnings is not None:
            payload["warnings"] = warnings
        out.print_json(json.dumps(payload))
        return
    for warning in warnings or []:
        err.print(styled("warning:", "yellow"), warning)
    for p in report.problems:
        err.print(styled(str(p), "red"))
    if report.problem_count > len(report.problems):
        err.print(f"… and {report.problem_count - len(report.problems)} more")
    for where, first in report.duplicate_rows:
        err.print(f"note: {where}: same mailbox as {first}; sent once, to the first")
    if report.duplicates:
        err.print(
            f"note: {report.duplicates} duplicate address(es) in the audience; each is sent once"
        )


def print_rejects(report: CheckReport) -> None:
    """Rows a ``strict: false`` audience rejected: skipped on purpose, still shown."""
    if not report.rejected:
        return
    err.print(styled(f"{report.rejected} audience row(s) rejected and skipped:", "yellow"))
    for p in report.rejects[:20]:
        err.print(f"  {p}")
    if report.rejected > 20:
        err.print(f"  … and {report.rejected - 20} more")
