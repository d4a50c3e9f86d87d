"""The lazy command table (herald/cli/registry.py) against the commands themselves: every
command in it, from the module that defines it, with its help; and every help screen the same
as typer prints when every command module is imported up front."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import subprocess
import sys

import typer.main

from herald.cli.base import app
from herald.cli.registry import COMMANDS

# Prints {"argv as text": [exit code, output]} for the command paths in argv[1] (JSON), or for
# every command and subcommand when there are none; argv[2] == "eager": every module the table
# names imported first (in the table's order: the order they were imported before the table),
# and typer's own group, as before the table.
HELP_SCREENS = """
import importlib, json, sys
from typer.core import TyperGroup
from typer.main import get_command
from typer.testing import CliRunner
from herald.cli import app
from herald.cli.registry import COMMANDS

if sys.argv[2] == "eager":
    for module in dict.fromkeys(module for module, _ in COMMANDS.values()):
        importlib.import_module(f"herald.cli.{module}")
    app.info.cls = TyperGroup
paths = json.loads(sys.argv[1])
if not paths:
    group = get_command(app)
    paths = [[], ["--help"]]
    for name, command in group.commands.items():
        paths.append([name, "--help"])
        paths += [[name, sub, "--help"] for sub in getattr(command, "commands", {})]
screens = {}
for path in paths:
    result = CliRunner().invoke(app, path)
    screens[" ".join(path)] = [result.exit_code, result.output]
print(json.dumps(screens))
"""


def help_screens(mode: str, paths: list[list[str]] | None = None) -> dict[str, list[object]]:
    done = subprocess.run(
        [sys.executable, "-c", HELP_SCREENS, json.dumps(paths or []), mode],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "100", "TERMINAL_WIDTH": "100"},
        check=True,
    )
    screens: dict[str, list[object]] = json.loads(done.stdout)
    return screens


def test_every_help_screen_is_the_one_typer_prints_with_every_module_imported() -> None:
    eager = help_screens("eager")
    assert len(eager) > len(COMMANDS) + 10  # the groups' subcommands too
    lazy = help_screens("lazy", [path.split() for path in eager])
    assert list(lazy) == list(eager)
    for path, screen in eager.items():
        assert lazy[path] == screen, f"herald {path}"


def test_the_table_names_each_command_its_module_and_its_help() -> None:
    for module in dict.fromkeys(module for module, _ in COMMANDS.values()):
        importlib.import_module(f"herald.cli.{module}")
    defined: dict[str, tuple[str, str]] = {}
    for info in app.registered_commands:
        assert info.callback is not None
        name = info.name or typer.main.get_command_name(info.callback.__name__)
        help_text = info.help if info.help is not None else inspect.getdoc(info.callback)
        defined[name] = (info.callback.__module__, help_text or "")
    for group in app.registered_groups:
        assert group.name is not None
        assert group.typer_instance is not None
        callback = group.typer_instance.registered_commands[0].callback
        assert callback is not None
        defined[group.name] = (callback.__module__, str(group.typer_instance.info.help))
    listed = {name: (f"herald.cli.{module}", first) for name, (module, first) in COMMANDS.items()}
    firsts = {
        name: (module, inspect.cleandoc(text).split("\n\n")[0].strip())
        for name, (module, text) in defined.items()
    }
    assert listed == firsts


def test_a_name_not_in_the_table_is_no_command() -> None:
    group = typer.main.get_command(app)
    assert isinstance(group, typer.core.TyperGroup)
    assert group.get_command(typer.Context(group), "no-such-command") is None
    assert "no-such-command" not in group.commands
    assert list(group.commands)[: len(COMMANDS)] == list(COMMANDS)
