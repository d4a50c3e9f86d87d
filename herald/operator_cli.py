"""Operator commands: recovery, in-doubt resolution and the dead-letter queue.

Every change is a guarded transition recorded in ``send_event`` with who did it and why.
"""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from dispatch.key_lookup import KeyPrefixError, match_prefix, normalise_prefix
from dispatch.states import State
from dispatch.store import OutboxStore
from dispatch.supersede import superseded_keys
from herald.cli import (
    DatabaseUrl,
    JsonFlag,
    _operator,
    app,
    err,
    errors_mapped,
    open_engine,
    out,
)
from herald.errors import HeraldError, UsageError
from herald.settings import DEFAULT_DATABASE_URL

in_doubt_app = typer.Typer(
    help="Messages that may or may not have been delivered.", no_args_is_help=True
)
dead_app = typer.Typer(help="Messages that failed for good (dead letters).", no_args_is_help=True)
app.add_typer(in_doubt_app, name="in-doubt")
app.add_typer(dead_app, name="dead")

CampaignOption = Annotated[str | None, typer.Option("--campaign", help="Only this campaign.")]
GRACE_SECONDS = 2.0


@app.command()
def recover(
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    grace: Annotated[
        float, typer.Option(min=0.0, help="Seconds past expiry before acting.")
    ] = GRACE_SECONDS,
    as_json: JsonFlag = False,
) -> None:
    """Recover jobs whose lease expired: released, in doubt, or dead (never an unexpired lease)."""
    with errors_mapped():
        engine = open_engine(database_url)
        store = OutboxStore(engine.dialect.name)
        with engine.begin() as conn:
            report = store.recover(conn, grace_seconds=grace, actor=f"recover:{_operator()}")
        summary = {
            "released": report.released,
            "in_doubt": report.in_doubt,
            "dead": report.dead,
            "resent": report.resent,
        }
        if as_json:
            out.print_json(json.dumps(summary))
        else:
            out.print(
                f"recovered: {report.released} claimed-but-unstarted back to pending, "
                f"{report.in_doubt} started-with-unknown-outcome now in doubt, "
                f"{report.dead} exhausted moved to dead letters"
            )


def _rows_json(rows: list[Any]) -> list[dict[str, Any]]:
    docs = []
    for r in rows:
        doc = dict(r._mapping)
        for k, v in doc.items():
            if hasattr(v, "isoformat"):
                doc[k] = v.isoformat()
        docs.append(doc)
    return docs


def _list(state: State, campaign: str | None, database_url: str, as_json: bool) -> None:
    with errors_mapped():
        engine = open_engine(database_url)
        store = OutboxStore(engine.dialect.name)
        with engine.connect() as conn:
            rows = store.jobs_in_state(conn, state, campaign=campaign)
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


def _selection(keys: list[str], all_: bool, campaign: str | None) -> list[str] | None:
    if keys and all_:
        raise UsageError("give keys or --all, not both")
    if not keys and not all_:
        raise UsageError("name the jobs: one or more KEYs, or --all (optionally with --campaign)")
    return keys or None


def resolve_keys(engine: Any, keys: list[str] | None) -> list[str] | None:
    """Every command that takes job keys resolves them here, all before changing anything.

    Each argument must be 8-64 hex characters naming exactly one job (dispatch.key_lookup):
    malformed or ambiguous is invalid input (exit 2), no such job is exit 1.
    """
    if keys is None:
        return None
    try:
        prefixes = [normalise_prefix(key) for key in keys]
        with engine.connect() as conn:
            resolved = [match_prefix(conn, prefix) for prefix in prefixes]
    except KeyPrefixError as exc:
        hint = "`herald in-doubt list` and `herald dead list` show job keys"
        if exc.invalid_input:
            raise UsageError(str(exc), hint=hint) from exc
        raise HeraldError(str(exc), hint=hint) from exc
    return list(dict.fromkeys(resolved))  # the same job named twice is acted on once


@in_doubt_app.command("list")
def in_doubt_list(
    campaign: CampaignOption = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """List in-doubt jobs with the reason each is in doubt."""
    _list(State.IN_DOUBT, campaign, database_url, as_json)


@in_doubt_app.command("resolve")
def in_doubt_resolve(
    keys: Annotated[
        list[str] | None,
        typer.Argument(help="Job keys, or unique prefixes of at least 8 hex characters."),
    ] = None,
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
    with errors_mapped():
        if (as_ is None) == (not resend):
            raise UsageError("choose exactly one of --as sent, --as failed, --resend")
        if as_ is not None and as_ not in ("sent", "failed"):
            raise UsageError(f"--as takes sent or failed, not {as_!r}")
        target = State.PENDING if resend else State(as_ or "failed")
        selected = _selection(keys or [], all_, campaign)
        engine = open_engine(database_url)
        selected = resolve_keys(engine, selected)
        store = OutboxStore(engine.dialect.name)
        with engine.begin() as conn:
            changed = store.resolve_in_doubt(
                conn,
                keys=selected,
                campaign=campaign,
                target=target,
                actor=f"operator:{_operator()}",
                why=why,
            )
            refused = _superseded(conn, selected, changed) if resend else {}
        _report(changed, f"in doubt → {target.value}", as_json)
        _warn_unchanged(selected, changed, "in doubt", refused)


@dead_app.command("list")
def dead_list(
    campaign: CampaignOption = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """List failed jobs with the last reply or reason."""
    _list(State.FAILED, campaign, database_url, as_json)


@dead_app.command("retry")
def dead_retry(
    keys: Annotated[
        list[str] | None,
        typer.Argument(help="Job keys, or unique prefixes of at least 8 hex characters."),
    ] = None,
    all_: Annotated[bool, typer.Option("--all", help="Every dead job (of --campaign).")] = False,
    campaign: CampaignOption = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Re-arm failed jobs with fresh attempts; they are sent by the next worker."""
    with errors_mapped():
        selected = _selection(keys or [], all_, campaign)
        engine = open_engine(database_url)
        selected = resolve_keys(engine, selected)
        store = OutboxStore(engine.dialect.name)
        with engine.begin() as conn:
            changed = store.retry_dead(
                conn, keys=selected, campaign=campaign, actor=f"operator:{_operator()}"
            )
            refused = _superseded(conn, selected, changed)
        _report(changed, "failed → pending", as_json)
        _warn_unchanged(selected, changed, "failed", refused)


def _superseded(
    conn: Any, selected: list[str] | None, changed: list[tuple[int, str]]
) -> dict[str, str]:
    """Named keys left alone because a new campaign version replaced their payload."""
    if selected is None:
        return {}
    done = {key for _, key in changed}
    return superseded_keys(conn, [key for key in selected if key not in done])


def _warn_unchanged(
    selected: list[str] | None,
    changed: list[tuple[int, str]],
    what: str,
    refused: dict[str, str] | None = None,
) -> None:
    """Named keys that changed nothing are a mistyped key or a stale list: say so, exit 1."""
    if selected is None:
        return
    done = {key for _, key in changed}
    missed = [key for key in selected if key not in done]
    for key in missed:
        if refused and key in refused:
            # markup=False: the campaign name is data.
            err.print(
                f"{key}: not re-armed: its content belongs to a replaced version of campaign "
                f"{refused[key]!r}, which no longer sends it (superseded)",
                markup=False,
            )
        else:
            err.print(f"{key[:16]}: not {what} (unknown key, or already handled)")
    if missed:
        raise typer.Exit(1)


def _report(changed: list[tuple[int, str]], what: str, as_json: bool) -> None:
    if as_json:
        out.print_json(json.dumps({"changed": [k for _, k in changed], "count": len(changed)}))
        return
    for _, key in changed:
        out.print(f"{key[:16]}  {what}")
    out.print(f"{len(changed)} job(s) changed")
