"""The configuration file (``herald --config FILE``, ``HERALD_CONFIG``, ``./herald.toml``, the
user's config folder) and ``herald config``, which shows every effective setting.

The file is read in the app's callback: after ``herald``'s own options and before the
command's, so what it sets is in the environment when click reads the command's options
(precedence: option > environment > file > default; herald/config.py).
"""

from __future__ import annotations

import json
import os
from typing import TYPE_CHECKING, Annotated, Any

import typer

from herald.cli.base import JsonFlag, app, errors_mapped
from herald.output import err, out, styled

if TYPE_CHECKING:
    from herald.config import Loaded
    from herald.config_names import Setting

_LOADED = "herald.config"  # the key of what the file did in click's ctx.meta


@app.callback()
def _global_options(
    ctx: typer.Context,
    config: Annotated[
        str | None,
        typer.Option(
            "--config",
            envvar="HERALD_CONFIG",
            metavar="FILE",
            help="Configuration file (default: ./herald.toml, else ~/.config/herald/herald.toml).",
            show_default=False,
        ),
    ] = None,
) -> None:
    # No docstring: it would replace the app's help text.
    if ctx.resilient_parsing:  # shell completion: nothing is run
        return
    from herald.config import load

    with errors_mapped():
        loaded = load(config, lambda: _known(ctx))
    ctx.meta[_LOADED] = loaded
    # What the file set is undone when the command ends: a test (or any caller) running many
    # commands in one process must not see one command's file in the next.
    ctx.call_on_close(lambda: _unset(loaded))


def _unset(loaded: Loaded) -> None:
    for env in loaded.applied:
        if os.environ.get(env) == loaded.values.get(env):
            del os.environ[env]


def _known(ctx: typer.Context) -> dict[str, Setting]:
    from herald.config_names import known_settings

    return known_settings(ctx.find_root().command)


@app.command("config")
def config_command(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Every effective setting, its value (secrets masked) and where it came from."""
    from herald.config import Found, Loaded
    from herald.config_view import effective, unknown_variables

    with errors_mapped():
        loaded = ctx.meta.get(_LOADED) or Loaded(Found(None, ()))
        known = _known(ctx)
        rows = effective(known, loaded, os.environ)
        unknown = unknown_variables(known, os.environ)
        found = loaded.found
        if as_json:
            document: dict[str, Any] = {
                "file": None if found.path is None else str(found.path),
                "searched": [str(path) for path in found.searched],
                "settings": [row.as_json() for row in rows],
                "unknown": [{"env": env, "did_you_mean": close} for env, close in unknown],
            }
            out.print_json(json.dumps(document))
            return
        if found.path is not None:
            out.print(styled("configuration file:", "bold"), str(found.path))
        else:
            looked = ", ".join(str(path) for path in found.searched)
            out.print(styled("configuration file:", "bold"), f"none (looked for {looked})")
        _table(rows)
        for env, close in unknown:
            guess = f" (did you mean {close}?)" if close else ""
            err.print(styled("warning:", "bold yellow"), f"not a Herald setting: {env}{guess}")


def _table(rows: list[Any]) -> None:
    # Plain aligned columns: a rich Table of a hundred rows takes most of a second to lay out.
    from herald.output import visible

    cells = [("setting", "value", "source", "variable")]
    cells += [
        (row.name, "(unset)" if row.value is None else visible(row.value), row.source, row.env)
        for row in rows
    ]
    widths = [max(len(cell[i]) for cell in cells) for i in range(3)]
    lines = [
        "  ".join([*(c.ljust(w) for c, w in zip(cell, widths, strict=False)), cell[3]])
        for cell in cells
    ]
    for line in lines:
        out.print(line, soft_wrap=True)
