"""Which module defines each command, and the help ``herald --help`` lists for it.

``herald --help`` lists every command from this table, without importing a command module;
``herald NAME`` imports the one module that defines NAME. Importing every module up front (and
the libraries they name at import) was most of the start-up time of every command.

A new command is one line here (in the order ``herald --help`` lists it) besides its module;
tests/unit/test_cli_registry.py fails until the line matches the command (module and help).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from functools import partial
from typing import TYPE_CHECKING, Any, ClassVar, Final

from typer.core import TyperCommand, TyperGroup

if TYPE_CHECKING:
    from typer import Typer
    from typer._click import Command, Context, HelpFormatter

# name: (module in herald.cli, the first paragraph of its help, as `herald --help` shows it)
COMMANDS: Final[dict[str, tuple[str, str]]] = {
    "validate": (
        "launch",
        "Parse a campaign and render every step for every recipient. Writes nothing.",
    ),
    "launch": ("launch", "Validate, store the campaign and fan out its send jobs (idempotent)."),
    "preview": (
        "preview",
        "Print exactly what launch would send to one recipient, headers included. Writes\n"
        "nothing (no database is opened) but the --html file.",
    ),
    "test-send": (
        "preview",
        "Send every email step once to --to through the relay, outside the campaign: nothing is\n"
        "stored, the keys and Message-IDs are new, the outbox is untouched.",
    ),
    "enroll": (
        "enroll",
        "Enroll a recipient: their drip's steps count from now. Enrolling twice is a no-op.",
    ),
    "schedule": (
        "plan",
        "The next fires and, per step, how many messages fall due when. Writes nothing.",
    ),
    "plan": ("plan", "Same as `herald schedule`."),
    "simulate": (
        "plan",
        "The timeline of what would be sent when, up to --until, in memory. Writes nothing.",
    ),
    "worker": (
        "worker",
        "Claim and send due jobs. SIGTERM/SIGINT: finish started sends, release the rest.\n"
        "SIGHUP: the same, then start again with the same command (a reload).",
    ),
    "scheduler": (
        "scheduler",
        "Fire due schedules, one-shots and drip steps into the outbox, until SIGTERM/SIGINT\n"
        "(SIGHUP: stop the same way, then start again with the same command).",
    ),
    "run": (
        "scheduler",
        "Scheduler, worker and recovery in one process: one machine, the embedded database.\n"
        "SIGHUP: stop gracefully, then start again with the same command (a reload).",
    ),
    "status": (
        "status",
        "Counts per campaign and step, rate, ETA and failure reasons; in-doubt and failed first.",
    ),
    "pause": (
        "operator",
        "Stop starting new sends for a campaign (sends already started finish).",
    ),
    "resume": (
        "operator",
        "Resume a paused campaign (also one that paused itself: its error count starts afresh).",
    ),
    "cancel": ("operator", "Cancel every unsent job of a campaign. Jobs already sending go out."),
    "recover": (
        "operator",
        "Recover jobs whose lease expired: released, in doubt, or dead (never an unexpired lease).",
    ),
    "feedback": (
        "feedback",
        "Bounces, complaints and unsubscribes received: counts, soft bounces, the newest.",
    ),
    "serve": (
        "serve",
        "Answer one-click unsubscribes (POST /u/<token>; GET shows a confirmation page),\n"
        "provider webhooks (POST /events/ses|sendgrid|mailgun|postmark) and, with --smtp-port,\n"
        "bounces, complaints and mailto unsubscribes by SMTP. With HERALD_DASHBOARD_PASSWORD or\n"
        "HERALD_DASHBOARD_TOKEN set, also the web dashboard at / (docs/operations/dashboard.md).",
    ),
    "sink": ("sink", "A development SMTP server that stores every message in a Maildir."),
    "config": (
        "config",
        "Every effective setting, its value (secrets masked) and where it came from.",
    ),
    "prune": (
        "prune",
        "Drop the messages of old sent, failed and cancelled jobs; keep their keys.",
    ),
    "in-doubt": ("operator", "Messages that may or may not have been delivered."),
    "dead": ("operator", "Messages that failed for good (dead letters)."),
    "suppress": (
        "suppress",
        "Mailboxes never to send to: globally, or for one list's campaigns.",
    ),
    "dkim": ("dkim", "DKIM signing keys."),
    "audience": ("audience", "Audience sources."),
    "db": ("db", "Database schema."),
}


class LazyCommands(MutableMapping[str, "Command"]):
    """A group's commands by name: every name of the table from the start, each command built
    (its module imported) when first looked up. ``in`` and iteration import nothing."""

    def __init__(self, loaded: Mapping[str, Command], load: Callable[[str], Command | None]):
        self._loaded = dict(loaded)
        self._load = load

    def __getitem__(self, name: str) -> Command:
        if name not in self._loaded:
            command = self._load(name) if name in COMMANDS else None
            if command is None:
                raise KeyError(name)
            self._loaded[name] = command
        return self._loaded[name]

    def __contains__(self, name: object) -> bool:
        return name in COMMANDS or name in self._loaded

    def __iter__(self) -> Iterator[str]:
        yield from COMMANDS
        yield from (name for name in self._loaded if name not in COMMANDS)

    def __len__(self) -> int:
        return len(COMMANDS) + sum(name not in COMMANDS for name in self._loaded)

    def __setitem__(self, name: str, command: Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]


class LazyGroup(TyperGroup):
    """The ``herald`` group: lists the table's commands, imports a command's module when run."""

    # The app the command modules register on (herald.cli.base.app, which sets it: a module
    # imported by the command modules cannot import them back).
    source: ClassVar[Typer | None] = None

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        assert self.source is not None, "herald.cli.base sets LazyGroup.source"
        self.commands = LazyCommands(self.commands, partial(load_command, self.source))
        self._listing = False

    def list_commands(self, ctx: Context) -> list[str]:
        return list(self.commands)  # TyperGroup's reads every value, i.e. imports every module

    def get_command(self, ctx: Context, cmd_name: str) -> Command | None:
        if self._listing and cmd_name in COMMANDS:
            return TyperCommand(name=cmd_name, help=COMMANDS[cmd_name][1])
        return self.commands.get(cmd_name)

    def format_help(self, ctx: Context, formatter: HelpFormatter) -> None:
        # Typer's help lists each command with the first paragraph of its help: the table's.
        import_help_renderer()
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


def load_command(app: Typer, name: str) -> Command | None:
    """Import the module the table names for ``name`` and build its click command (None if
    the module does not define it), as typer would have built it with every other."""
    from typer.main import get_command_from_info, get_command_name, get_group_from_info

    importlib.import_module(f"herald.cli.{COMMANDS[name][0]}")
    for info in app.registered_commands:
        callback = info.callback
        if (info.name or (callback and get_command_name(callback.__name__))) == name:
            return get_command_from_info(
                info,
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
            )
    for group in app.registered_groups:
        if group.name == name:
            return get_group_from_info(
                group,
                pretty_exceptions_short=app.pretty_exceptions_short,
                rich_markup_mode=app.rich_markup_mode,
                suggest_commands=app.suggest_commands,
            )
    return None


class _Deferred(type):
    """A stand-in class: calling it, or any attribute, imports the real one of the same name."""

    def _real(cls) -> Any:
        return getattr(importlib.import_module(cls.__module__), cls.__name__)

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        return cls._real()(*args, **kwargs)

    def __getattr__(cls, name: str) -> Any:
        return getattr(cls._real(), name)


# Imported by typer's help renderer, used only for markdown help (rich_markup_mode="markdown")
# and pretty tracebacks (pretty_exceptions_enable=False): neither is Herald's. With markdown-it,
# pygments and attrs they were a third of `herald --help`'s time.
_UNUSED_BY_HELP: Final = (("rich.markdown", "Markdown"), ("rich.traceback", "Traceback"))


def import_help_renderer() -> None:
    """Import ``typer.rich_utils`` with stand-ins for the modules of ``_UNUSED_BY_HELP``.

    The stand-ins are in ``sys.modules`` only while typer's module is imported: any later
    import of those modules gets the real one, and so does a stand-in class if ever used."""
    if "typer.rich_utils" in sys.modules:
        return
    stand_ins = {}
    for module, name in _UNUSED_BY_HELP:
        if module not in sys.modules:
            stand_in = type(sys)(module)
            setattr(stand_in, name, _Deferred(name, (), {"__module__": module}))
            stand_ins[module] = stand_in
    sys.modules.update(stand_ins)
    try:
        importlib.import_module("typer.rich_utils")
    finally:
        for module, stand_in in stand_ins.items():
            if sys.modules.get(module) is stand_in:
                del sys.modules[module]
