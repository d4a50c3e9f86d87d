"""What every command module shares: the typer app, common options, and the error seam.

Imports nothing heavy: ``herald --help`` loads this, typer and the command modules only. The
libraries a command needs (SQLAlchemy, Jinja2, aiosmtplib, httpx, pydantic, Alembic) are
imported inside the command, through the application layer (``herald.app``).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer

from campaigns.errors import CampaignError, SpecError
from herald.cli import coercion, startup
from herald.cli.registry import LazyGroup
from herald.errors import HeraldError
from herald.output import err, styled
from herald.secrets import known_secrets

if TYPE_CHECKING:
    from sqlalchemy.engine import Engine

    from herald.app.common import Clock

app = typer.Typer(
    name="herald",
    help="Campaigns as code: every message sent exactly once per recipient, step and occurrence.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    cls=LazyGroup,  # a command's module is imported only when it runs (herald/cli/registry.py)
    # Every option is also HERALD_<COMMAND>_<OPTION> (herald worker --concurrency:
    # HERALD_WORKER_CONCURRENCY) unless it names its own variable; herald.toml sets them
    # (herald/config.py).
    context_settings={"auto_envvar_prefix": "HERALD"},
)
LazyGroup.source = app
coercion.install()  # plain option values without importing pydantic (herald/cli/coercion.py)

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
DatabaseWait = Annotated[
    str | None,
    typer.Option(
        "--database-wait",
        envvar="HERALD_DATABASE_WAIT",
        help="Seconds to wait, with backoff, for a database that is starting or restarting "
        "(a number, or 'forever'). Default: forever for a service, 0 for --until-idle / --once. "
        "A wrong password, database or URL fails at once.",
        show_default=False,
    ),
]
JsonFlag = Annotated[bool, typer.Option("--json", help="Machine-readable output.")]
CampaignOption = Annotated[str | None, typer.Option("--campaign", help="Only this campaign.")]
NowOption = Annotated[
    str | None,
    typer.Option(
        "--now",
        envvar="HERALD_NOW",
        help="Pretend it is this time: ISO-8601, no offset means UTC (e.g. 2026-12-07T09:00Z).",
        show_default=False,
    ),
]


def fail(message: str, *, hint: str | None = None, code: int = 1) -> NoReturn:
    # Scrubbed of every credential of the settings this command parsed: library errors (a
    # driver's, a server's) may quote them.
    message = known_secrets.scrub(message)
    from herald.logs import failed_as_json  # --log-format json: the error is a record too

    if failed_as_json(message, hint=hint, code=code):
        raise typer.Exit(code)
    err.print(styled("error:", "bold red"), message)
    if hint:
        err.print(f"  hint: {known_secrets.scrub(hint)}")
    raise typer.Exit(code)


def clock_option(now: str | None) -> Clock:
    """The clock a read-only command runs on: ``--now``/``HERALD_NOW``, else the real one.
    Call it inside ``errors_mapped()``: a bad value is invalid input (exit 2)."""
    from herald.app.clock import clock_from

    return clock_from(now)


_opened_engines: list[Engine] = []  # disposed when the command's errors_mapped() block ends


def opened(url: str, *, create: bool = True) -> Engine:
    """The database of ``url``, schema current, disposed when the command ends.

    ``create=False`` for read-only commands: the database must exist with a current schema
    (else exit 1 naming it); nothing is created or upgraded (herald.app.engine.open_existing).
    """
    from herald.app.engine import open_engine, open_existing

    engine = open_engine(url) if create else open_existing(url)
    _opened_engines.append(engine)
    return engine


def opened_waiting(url: str, database_wait: str | None, *, service: bool) -> Engine:
    """``opened``, but waiting for a database that is starting or restarting (herald.app.db_wait):
    up to ``--database-wait`` seconds, by default forever for a ``service``, else not at all."""
    from herald.app.db_wait import open_waiting, wait_seconds
    from herald.app.engine import open_engine
    from herald.app.reload import signals_before_start

    max_wait = wait_seconds(database_wait, service=service)
    with signals_before_start():
        engine = open_waiting(lambda: open_engine(url), url=url, max_wait=max_wait)
    _opened_engines.append(engine)
    return engine


def reexec_if_reloading() -> None:
    """After a service command stopped: re-execute it if a SIGHUP asked for a reload
    (herald.app.reload). Call outside ``errors_mapped()``, once its engines are disposed."""
    from herald.app.reload import reexec_if_requested

    reexec_if_requested()


def keep_until_done(engine: Engine) -> Engine:
    """Dispose of ``engine`` when the command's ``errors_mapped`` block ends."""
    _opened_engines.append(engine)
    return engine


@contextmanager
def errors_mapped(*, starts_work: bool = True) -> Iterator[None]:
    """The seam: our errors and library errors become one line and an exit code.

    A command's first block also ends its start-up (herald/cli/startup.py): it has imported
    what it needs. ``starts_work=False``: the app's own callback, before the command's imports.
    """
    if starts_work:
        startup.resume()
    try:
        yield
    except SpecError as exc:
        if exc.problems:
            for problem in exc.problems:
                err.print(styled(str(problem), "red"))
            fail(f"{len(exc.problems)} problem(s) in the campaign file", code=2)
        fail(str(exc), code=2)
    except CampaignError as exc:
        # The network, not the file: an unavailable audience may pass on a retry.
        fail(str(exc), code=1 if _is(exc, "campaigns.audience_url", "AudienceUnavailable") else 2)
    except HeraldError as exc:
        fail(exc.message, hint=exc.hint, code=exc.exit_code)
    except Exception as exc:
        # templates' package imports Jinja2: its error is recognised without importing it.
        if _is(exc, "templates.errors", "TemplateError") or _is(
            exc, "dispatch.smtp", "SmtpUrlError"
        ):
            fail(str(exc), code=2)
        if _is(exc, "sqlalchemy.exc", "SQLAlchemyError"):
            detail = str(getattr(exc, "orig", None) or exc).strip().splitlines()[0]
            fail(
                f"database error: {detail}",
                hint="check --database-url / HERALD_DATABASE_URL and that the database is running",
            )
        raise
    finally:
        while _opened_engines:
            _opened_engines.pop().dispose()
        known_secrets.forget()


def _is(exc: BaseException, module: str, name: str) -> bool:
    """``isinstance(exc, module.name)`` without importing ``module``: if it was never imported,
    nothing raised one of its errors (and importing it here would slow every command down)."""
    loaded = sys.modules.get(module)
    kind = getattr(loaded, name, None) if loaded is not None else None
    return isinstance(kind, type) and isinstance(exc, kind)


@contextmanager
def progress_bar(label: str, total: int | None) -> Iterator[Callable[[int], None] | None]:
    """A transient progress bar on a terminal's stderr; nothing when piped."""
    if not sys.stderr.isatty():
        yield None
        return
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    with Progress(
        TextColumn(label), BarColumn(), MofNCompleteColumn(), console=err, transient=True
    ) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
