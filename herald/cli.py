"""The ``herald`` command: the only place that wires campaigns, scheduler and dispatch together.

Exit codes: 0 success, 1 operational failure, 2 invalid input. Errors are printed as one line
(plus a hint); tracebacks are for bugs only.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, NoReturn, TypeVar

import typer
from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from campaigns.audience_url import AudienceUnavailable
from campaigns.errors import CampaignError, SpecError
from campaigns.spec import LoadedCampaign, load_campaign
from dispatch.egress.redact import redact_url
from dispatch.smtp import SmtpUrlError
from dispatch.transport import TransportConfigError
from dispatch.worker import Worker, WorkerConfig
from herald import status as status_view
from herald.db import create_engine
from herald.errors import ConfigError, DatabaseError, HeraldError, UsageError
from herald.output import err as err  # re-exported: the subcommand modules print with them
from herald.output import out as out
from herald.output import styled, visible
from herald.schema import ensure_schema, upgrade
from herald.settings import DEFAULT_DATABASE_URL, DEFAULT_SMTP_URL, known_secrets
from herald.transports import build_transports
from scheduler.check import CheckReport, check_campaign
from scheduler.fanout import materialise
from scheduler.new_version import NewVersionFanout
from templates.errors import TemplateError

app = typer.Typer(
    name="herald",
    help="Campaigns as code: every message sent exactly once per recipient, step and occurrence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
app.add_typer(db_app, name="db")

DatabaseUrl = Annotated[
    str,
    typer.Option(
        "--database-url",
        envvar="HERALD_DATABASE_URL",
        help="sqlite:///herald.db or postgresql://user@host/db",
    ),
]
SmtpUrl = Annotated[
    str,
    typer.Option(
        "--smtp-url",
        envvar="HERALD_SMTP_URL",
        help="smtp://host:port, smtps://user:pass@host:465, smtp://host:587?starttls=true",
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]

F = TypeVar("F", bound=Callable[..., Any])


def fail(message: str, *, hint: str | None = None, code: int = 1) -> NoReturn:
    # Scrubbed of every credential of the settings this command parsed: library errors (a
    # driver's, a server's) may quote them.
    message = known_secrets.scrub(message)
    err.print(styled("error:", "bold red"), message)
    if hint:
        err.print(f"  hint: {known_secrets.scrub(hint)}")
    raise typer.Exit(code)


@contextmanager
def errors_mapped() -> Iterator[None]:
    """The seam: our errors and library errors become one line and an exit code."""
    try:
        yield
    except SpecError as exc:
        if exc.problems:
            for problem in exc.problems:
                err.print(styled(str(problem), "red"))
            fail(f"{len(exc.problems)} problem(s) in the campaign file", code=2)
        fail(str(exc), code=2)
    except AudienceUnavailable as exc:  # the network, not the file: may pass on a retry
        fail(str(exc), code=1)
    except CampaignError as exc:
        fail(str(exc), code=2)
    except TemplateError as exc:
        fail(str(exc), code=2)
    except HeraldError as exc:
        fail(exc.message, hint=exc.hint, code=exc.exit_code)
    except SmtpUrlError as exc:
        fail(str(exc), code=2)
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        fail(
            f"database error: {detail}",
            hint="check --database-url / HERALD_DATABASE_URL and that the database is running",
        )
    finally:
        while _opened_engines:
            _opened_engines.pop().dispose()
        known_secrets.forget()


_opened_engines: list[Engine] = []  # disposed when the command's errors_mapped() block ends


def open_engine(url: str) -> Engine:
    engine = create_engine(url)
    _opened_engines.append(engine)
    try:
        ensure_schema(engine)
    except SQLAlchemyError as exc:
        detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
        raise DatabaseError(
            f"cannot open the database {redact_url(url)}: {detail}",
            hint="is the server running and the URL right?",
        ) from exc
    return engine


def now_utc() -> datetime:
    return datetime.now(UTC)


# ---------------------------------------------------------------------- validate / launch


def _load(file: Path) -> LoadedCampaign:
    if not file.exists():
        raise UsageError(f"{file}: no such file")
    return load_campaign(file)


def _print_check(report: CheckReport, as_json: bool) -> None:
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
        out.print_json(json.dumps(payload))
        return
    for p in report.problems:
        err.print(styled(str(p), "red"))
    if report.problem_count > len(report.problems):
        err.print(f"… and {report.problem_count - len(report.problems)} more")
    for where, first in report.duplicate_rows:
        note = f"note: {where}: same mailbox as {first}; sent once, to the first"
        err.print(note, markup=False)
    if report.duplicates:
        err.print(
            f"note: {report.duplicates} duplicate address(es) in the audience; each is sent once"
        )


def _print_rejects(report: CheckReport) -> None:
    """Rows a ``strict: false`` audience rejected: skipped on purpose, still shown."""
    if not report.rejected:
        return
    err.print(styled(f"{report.rejected} audience row(s) rejected and skipped:", "yellow"))
    for p in report.rejects[:20]:
        err.print(f"  {p}")
    if report.rejected > 20:
        err.print(f"  … and {report.rejected - 20} more")


@contextmanager
def _progress(total_hint: int | None, label: str) -> Iterator[Callable[[int], None] | None]:
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), console=err, transient=True
    ) as bar:
        task = bar.add_task(label, total=total_hint)
        yield lambda n: bar.advance(task, n)


@app.command()
def validate(
    file: Annotated[Path, typer.Argument(help="The campaign YAML file.")],
    as_json: JsonFlag = False,
) -> None:
    """Parse a campaign and render every step for every recipient. Writes nothing."""
    with errors_mapped():
        loaded = _load(file)
        with _progress(None, "rendering") as progress:
            report = check_campaign(loaded, now_utc(), progress=progress)
        _print_check(report, as_json)
        if not report.ok:
            fail(f"{report.problem_count} problem(s); nothing was launched", code=2)
        if not as_json:
            _print_rejects(report)
            out.print(
                f"ok: {loaded.spec.name}: {report.recipients} recipient(s), "
                f"{len(loaded.spec.steps)} step(s), {report.messages} message(s)"
            )


@app.command()
def launch(
    file: Annotated[Path, typer.Argument(help="The campaign YAML file.")],
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
) -> None:
    """Validate, store the campaign and fan out its send jobs (idempotent)."""
    from campaigns.control import register

    with errors_mapped():
        loaded = _load(file)
        engine = open_engine(database_url)
        now = now_utc()
        # Check first against the launch time the campaign will really use.
        from campaigns.store import CampaignStore

        with engine.connect() as conn:
            existing = CampaignStore(engine.dialect.name).get(conn, loaded.spec.name)
        occurrence_at = existing.launched_at if existing else now
        with _progress(None, "checking") as progress:
            report = check_campaign(
                loaded, occurrence_at, progress=progress, engine=engine, count_duplicates=False
            )
        if not report.ok:
            _print_check(report, as_json=False)
            fail(f"{report.problem_count} problem(s); nothing was launched", code=2)
        # A new version fans out inside the transaction that stores it (scheduler.new_version).
        new_version = (
            NewVersionFanout(engine, loaded, occurrence_at, actor=f"launch:{_operator()}")
            if force_new_version
            else None
        )
        registration = register(
            engine,
            loaded,
            now=now,
            force_new_version=force_new_version,
            on_new_version=new_version.apply if new_version is not None else None,
        )
        superseded = 0
        if registration.new_version and new_version is not None:
            result = new_version.result
            superseded = new_version.report.cancelled + new_version.report.marked
        else:
            with _progress(report.messages, "enqueueing") as progress:
                result = materialise(
                    engine, loaded, registration.campaign.launched_at, progress=progress
                )
        summary = {
            "campaign": loaded.spec.name,
            "version": registration.campaign.version,
            "created": registration.created,
            "new_jobs": result.new_jobs,
            "existing_jobs": result.existing_jobs,
            "recipients": report.recipients,
            "rejected_rows": report.rejected,
            "steps": len(loaded.spec.steps),
            # Unsent jobs of steps/recipients a new version removed: cancelled, or marked.
            "superseded_jobs": superseded,
        }
        _print_rejects(report)  # stderr: JSON on stdout stays parseable
        if as_json:
            out.print_json(json.dumps(summary))
        else:
            verb = "launched" if registration.created else "already launched"
            out.print(
                f"{verb}: {loaded.spec.name} (version {registration.campaign.version}): "
                f"{result.new_jobs} new job(s), {result.existing_jobs} already queued"
                + (f", {superseded} superseded" if superseded else "")
            )


# ---------------------------------------------------------------------- worker


@app.command()
def worker(
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    smtp_url: SmtpUrl = DEFAULT_SMTP_URL,
    concurrency: Annotated[int, typer.Option(min=1, max=1000, help="Sends at once.")] = 20,
    lease: Annotated[
        float, typer.Option(min=1.0, help="Lease length in seconds (heartbeats renew it).")
    ] = 120.0,
    recovery_interval: Annotated[
        float, typer.Option(min=0.1, help="Seconds between this worker's recovery passes.")
    ] = 5.0,
    shutdown_grace: Annotated[
        float,
        typer.Option(min=0.0, help="On SIGTERM, how long started sends may take to finish."),
    ] = 30.0,
    until_idle: Annotated[
        bool,
        typer.Option(
            "--until-idle",
            help="Exit 0 when nothing is running and nothing is due within --idle-horizon.",
        ),
    ] = False,
    idle_horizon: Annotated[
        float,
        typer.Option(
            min=0.0,
            help="With --until-idle: keep waiting for jobs (e.g. retries) due within this many "
            "seconds; later steps are left for a later run.",
        ),
    ] = 60.0,
    retry_base: Annotated[
        float, typer.Option(min=0.0, help="First retry delay in seconds (doubles each time).")
    ] = 30.0,
    poll: Annotated[float, typer.Option(min=0.01, help="Idle poll interval, seconds.")] = 1.0,
    as_json: JsonFlag = False,
) -> None:
    """Claim and send due jobs. SIGTERM/SIGINT: finish started sends, release the rest."""
    with errors_mapped():
        engine = open_engine(database_url)
        transports = build_transports(smtp_url)
        config = WorkerConfig(
            concurrency=concurrency,
            lease_seconds=lease,
            t4_margin_seconds=min(10.0, lease / 4),
            until_idle=until_idle,
            idle_horizon_seconds=idle_horizon,
            retry_base_seconds=retry_base,
            poll_interval=poll,
            recovery_interval=recovery_interval,
            shutdown_grace_seconds=shutdown_grace,
        )
        the_worker = Worker(engine, transports, config)
        try:
            report = asyncio.run(_run_worker(the_worker))
        except TransportConfigError as exc:
            raise ConfigError(exc.message, hint=exc.hint) from None
        if as_json:
            out.print_json(json.dumps(report.as_dict()))
        else:
            r = report
            out.print(
                f"worker done: {r.sent} sent, {r.retried} to retry, {r.failed} failed, "
                f"{r.in_doubt} in doubt, {r.released} released"
            )


async def _run_worker(the_worker: Worker) -> Any:
    loop = asyncio.get_running_loop()
    signals_seen = 0

    def on_signal() -> None:
        nonlocal signals_seen
        signals_seen += 1
        if signals_seen == 1:
            err.print("stopping: finishing started sends, releasing the rest (again to force)")
            the_worker.stop()
        else:
            # Leases keep this safe: unstarted claims expire back to pending, started sends
            # become in_doubt through recovery.
            os._exit(130)

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    return await the_worker.run()


# ---------------------------------------------------------------------- status / control


@app.command()
def status(
    campaign: Annotated[str | None, typer.Argument(help="Only this campaign.")] = None,
    database_url: DatabaseUrl = DEFAULT_DATABASE_URL,
    as_json: JsonFlag = False,
) -> None:
    """Counts per campaign, step and state; in-doubt and failed jobs shown first."""
    with errors_mapped():
        engine = open_engine(database_url)
        snapshot = status_view.collect(engine, campaign)
        if campaign is not None and not snapshot["campaigns"]:
            raise UsageError(f"no campaign named {campaign!r}")
        if as_json:
            out.print_json(json.dumps(snapshot))
        else:
            status_view.render(out, snapshot)


def _control(action: str, name: str, database_url: str) -> None:
    from campaigns.control import change_status

    with errors_mapped():
        engine = open_engine(database_url)
        result = change_status(engine, name, action, actor=f"operator:{_operator()}")
        extra = f"; {result.cancelled_jobs} unsent job(s) cancelled" if action == "cancel" else ""
        out.print(f"{name}: {result.previous} → {result.status}{extra}")


@app.command()
def pause(campaign: str, database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Stop starting new sends for a campaign (sends already started finish)."""
    _control("pause", campaign, database_url)


@app.command()
def resume(campaign: str, database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Resume a paused campaign."""
    _control("resume", campaign, database_url)


@app.command()
def cancel(campaign: str, database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Cancel every unsent job of a campaign. Jobs already sending go out."""
    _control("cancel", campaign, database_url)


def _operator() -> str:
    return os.environ.get("HERALD_OPERATOR") or os.environ.get("USER") or "unknown"


# ---------------------------------------------------------------------- sink, db


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


@db_app.command("upgrade")
def db_upgrade(database_url: DatabaseUrl = DEFAULT_DATABASE_URL) -> None:
    """Create or upgrade the schema to the current version."""
    with errors_mapped():
        engine = create_engine(database_url)
        _opened_engines.append(engine)
        upgrade(engine)
        out.print("database is at the current schema")


def main() -> None:
    from herald import (
        audience_cli,  # noqa: F401 - registers audience check
        operator_cli,  # noqa: F401 - registers in-doubt, dead, recover
    )

    app()
