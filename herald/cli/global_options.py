"""``herald``'s own options (``--config FILE``), read in the app's callback: after them and
before the command's, so what the configuration file sets is in the environment when click
reads the command's options (precedence: option > environment > file > default;
herald/config.py). ``herald config`` (herald/cli/config.py) shows what the file did."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated

import typer

from herald.cli.base import app, errors_mapped

if TYPE_CHECKING:
    from herald.config import Loaded
    from herald.config_names import Setting

LOADED = "herald.config"  # the key of what the file did in click's ctx.meta


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

    with errors_mapped(starts_work=False):  # the command's imports are still to come
        loaded = load(config, lambda: every_setting(ctx))
    ctx.meta[LOADED] = loaded
    # What the file set is undone when the command ends: a test (or any caller) running many
    # commands in one process must not see one command's file in the next.
    ctx.call_on_close(lambda: _unset(loaded))


def _unset(loaded: Loaded) -> None:
    for env in loaded.applied:
        if os.environ.get(env) == loaded.values.get(env):
            del os.environ[env]


def every_setting(ctx: typer.Context) -> dict[str, Setting]:
    """Every setting: walking the command tree imports every command's module (only when a
    configuration file is found, or for ``herald config``)."""
    from herald.config_names import known_settings

    return known_settings(ctx.find_root().command)
