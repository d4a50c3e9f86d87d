"""Operator commands: pause/resume/cancel, recovery, in-doubt resolution, dead letters.

Every change is a guarded transition recorded in ``send_event`` with who did it and why
(herald.app.operator); this module parses, calls and prints.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer

from herald.cli.base import CampaignOption, DatabaseUrl, JsonFlag, app, errors_mapped, opened
from herald.defaults import DEFAULT_DATABASE_URL
from herald.errors import UsageError
from herald.output import err, out

if TYPE_CHECKING:
    from dispatch.states import State
    from herald.app.operator import Action, Changed

in_doubt_app = typer.Typer(
    help="Messages that may or may not have been delivered.", no_args_is_help=True
)
dead_app = typer.Typer(help="Messages that failed for good (dead letters).", no_args_is_help=True)
app.add_typer(in_doubt_app, name="in-doubt")
app.add_typer(dead_app, name="dead")

GRACE_SECONDS = 2.0  # the same as herald.app.operator.GRACE_SECONDS, without importing it
KeysArgument = Annotated[
    list[str] | None,
    typer.Argument(help="Job keys, or unique prefixes of at least 8 hex characters."),
]


def _actor(role: str) -> str:
    from herald.app.common import operator_name

    return f"{role}:{operator_name()}"


# ---------------------------------------------------------------------- pause / resume / cancel


def _control(action: Action, name: str, database_url: str) -> None:
    from herald.app.operator import change_status

    with errors_mapped():
        result = change_status(opened(database_url), name, action, actor=_actor("operator"))
        extra = f"; {result.cancelled_jobs} unsent job(s) cancelled" if action == "cancel" else ""
        if result.cleared_reason:
            extra += f" (was {result.cleared_reason})"
        out.print(f"{name}: {result.previous} → {result.status}{extra}")


@app.command()
def pause(campaign: str, database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Stop starting new sends for a campaign (sends already started finish)."""
    _control("pause", campaign, database_url)


@app.command()
def resume(campaign: str, database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Resume a paused campaign (also one that paused itself: its error count starts afresh)."""
    _control("resume", campaign, database_url)


@app.command()
def cancel(campaign: str, database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Cancel every unsent job of a campaign. Jobs already sending go out."""
    _control("cancel", campaign, database_url)


# ---------------------------------------------------------------------- recover


@app.command()
def recover(
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    grace: Annotated[
        float, typer.Option(min=0.0, help="Seconds past expiry before acting.")
    ] = GRACE_SECONDS,
    as_json: JsonFlag = False,
) -> None:
    """Recover jobs whose lease expired: released, in doubt, or dead (never an unexpired lease)."""
    from herald.app.operator import recover as recover_jobs

    with errors_mapped():
        report = recover_jobs(opened(database_url), grace=grace, actor=_actor("recover"))
        if as_json:
            summary = {
                "released": report.released,
                "in_doubt": report.in_doubt,
                "dead": report.dead,
                "resent": report.resent,
            }
            out.print_json(json.dumps(summary))
        else:
            out.print(
                f"recovered: {report.released} claimed-but-unstarted back to pending, "
                f"{report.in_doubt} started-with-unknown-outcome now in doubt, "
                f"{report.dead} exhausted moved to dead letters"
            )


# ---------------------------------------------------------------------- in-doubt, dead


@in_doubt_app.command("list")
def in_doubt_list(
    campaign: CampaignOption = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """List in-doubt jobs with the reason each is in doubt."""
    from dispatch.states import State

    _list(State.IN_DOUBT, campaign, database_url, as_json)


@in_doubt_app.command("resolve")
def in_doubt_resolve(
    keys: KeysArgument = None,
    all_: Annotated[
        bool, typer.Option("--all", help="Every in-doubt job (of --campaign).")
    ] = False,
    as_: Annotated[
        str | None, typer.Option("--as", help="sent or failed: what you know happened.")
    ] = None,
    resend: Annotated[
        bool, typer.Option("--resend", help="Send it again (may duplicate).")
    ] = False,
    why: Annotated[str, typer.Option(help="Recorded in the journal.")] = "operator decision",
    campaign: CampaignOption = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Decide an in-doubt job: --as sent, --as failed, or --resend."""
    from dispatch.states import State
    from herald.app.operator import resolve_in_doubt, selection

    with errors_mapped():
        if (as_ is None) == (not resend):
            raise UsageError("choose exactly one of --as sent, --as failed, --resend")
        if as_ is not None and as_ not in ("sent", "failed"):
            raise UsageError(f"--as takes sent or failed, not {as_!r}")
        target = State.PENDING if resend else State(as_ or "failed")
        selected = selection(keys or [], all_)
        changed = resolve_in_doubt(
            opened(database_url),
            selected,
            target=target,
            actor=_actor("operator"),
            why=why,
            campaign=campaign,
        )
        _report(changed, f"in doubt → {target.value}", as_json)
        _warn_unchanged(changed, "in doubt")


@dead_app.command("list")
def dead_list(
    campaign: CampaignOption = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """List failed jobs with the last reply or reason."""
    from dispatch.states import State

    _list(State.FAILED, campaign, database_url, as_json)


@dead_app.command("retry")
def dead_retry(
    keys: KeysArgument = None,
    all_: Annotated[bool, typer.Option("--all", help="Every dead job (of --campaign).")] = False,
    campaign: CampaignOption = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Re-arm failed jobs with fresh attempts; they are sent by the next worker."""
    from herald.app.operator import retry_dead, selection

    with errors_mapped():
        selected = selection(keys or [], all_)
        changed = retry_dead(
            opened(database_url), selected, actor=_actor("operator"), campaign=campaign
        )
        _report(changed, "failed → pending", as_json)
        _warn_unchanged(changed, "failed")


def _list(state: State, campaign: str | None, database_url: str, as_json: bool) -> None:
    from rich.table import Table

    from dispatch.states import State
    from herald.app.operator import list_jobs

    with errors_mapped():
        rows = list_jobs(opened(database_url, create=False), state, campaign)
        if as_json:
            out.print_json(json.dumps({"jobs": _rows_json(rows), "count": len(rows)}))
            return
        if not rows:
            out.print(f"no {state.value.replace('_', '-')} jobs")
            return
        table = Table()
        for column in ("key", "campaign", "step", "recipient", "attempts", "reason"):
            table.add_column(column)
        for r in rows:
            reason = r.in_doubt_reason if state is State.IN_DOUBT else r.outcome_text
            table.add_row(
                r.key[:16], r.campaign, r.step, r.recipient, str(r.send_attempts), reason or ""
            )
        out.print(table)
        out.print(f"{len(rows)} job(s)")


def _rows_json(rows: list[Any]) -> list[dict[str, Any]]:
    docs = []
    for r in rows:
        doc = dict(r._mapping)
        for k, v in doc.items():
            if hasattr(v, "isoformat"):
                doc[k] = v.isoformat()
        docs.append(doc)
    return docs


def _warn_unchanged(changed: Changed, what: str) -> None:
    """Named keys that changed nothing are a mistyped key or a stale list: say so, exit 1."""
    for key in changed.missed:
        if key in changed.superseded:
            err.print(
                f"{key}: not re-armed: its content belongs to a replaced version of campaign "
                f"{changed.superseded[key]!r}, which no longer sends it (superseded)"
            )
        elif key in changed.pruned:
            err.print(
                f"{key[:16]}: not re-armed: its message was dropped by retention (herald prune); "
                "a pruned job is history and can never be sent again"
            )
        else:
            err.print(f"{key[:16]}: not {what} (unknown key, or already handled)")
    if changed.missed:
        raise typer.Exit(1)


def _report(changed: Changed, what: str, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps({"changed": changed.keys, "count": len(changed.changed)}))
        return
    for key in changed.keys:
        out.print(f"{key[:16]}  {what}")
    out.print(f"{len(changed.changed)} job(s) changed")
