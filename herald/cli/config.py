"""``herald config``: every effective setting, and what the configuration file (``herald
--config FILE``, ``HERALD_CONFIG``, ``./herald.toml``, the user's config folder) did. The file
itself is read in the app's callback (herald/cli/global_options.py)."""

from __future__ import annotations

import json
import os
from typing import Any

import typer

from herald.cli.base import JsonFlag, app, errors_mapped
from herald.cli.global_options import LOADED, every_setting
from herald.output import err, out, styled


@app.command("config")
def config_command(ctx: typer.Context, as_json: JsonFlag = False) -> None:
    """Every effective setting, its value (secrets masked) and where it came from."""
    from herald.config import Found, Loaded
    from herald.config_view import effective, unknown_variables

    with errors_mapped():
        loaded = ctx.meta.get(LOADED) or Loaded(Found(None, ()))
        known = every_setting(ctx)
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
