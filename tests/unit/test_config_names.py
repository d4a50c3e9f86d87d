"""The known settings: every option of every command (found by walking the command tree, so an
option added later is known without a list to update) and the environment-only ones."""

from __future__ import annotations

import enum
from typing import Annotated

import typer
import typer.main

from herald.cli import app
from herald.config_names import ENV_ONLY, Kind, known_settings

KNOWN = known_settings(typer.main.get_command(app))


class Level(enum.Enum):
    debug = "debug"
    info = "info"


def test_every_option_of_every_command_is_a_setting() -> None:
    def walk(command: object, path: tuple[str, ...]) -> list[str]:
        found = []
        for param in getattr(command, "params", []):
            if param.opts[0].startswith("--") and param.name not in ("help", "config"):
                found.append(param.envvar or "_".join(["HERALD", *path, param.name]).upper())
        for name, sub in getattr(command, "commands", {}).items():
            found += walk(sub, (*path, name.replace("-", "_")))
        return found

    variables = walk(typer.main.get_command(app), ())
    assert len(variables) > 80
    assert set(variables) <= set(KNOWN)


def test_the_shared_and_environment_only_names_are_known() -> None:
    for name in (
        "log_level",
        "log_format",
        "metrics_port",
        "metrics_host",
        "dashboard_password",
        "dashboard_token",
        "database_wait",
        "signing_keys",
        "dkim_key_file",
        "egress_allow",
    ):
        assert f"HERALD_{name.upper()}" in KNOWN
    assert {s.env for s in ENV_ONLY} <= set(KNOWN)
    assert "HERALD_CONFIG" not in KNOWN  # the file's own option is not a setting in it


def test_types_come_from_the_options() -> None:
    assert KNOWN["HERALD_WORKER_CONCURRENCY"].kind is Kind.INTEGER
    assert KNOWN["HERALD_WORKER_CONCURRENCY"].default == "20"
    assert KNOWN["HERALD_WORKER_LEASE"].kind is Kind.NUMBER
    assert KNOWN["HERALD_WORKER_UNTIL_IDLE"].kind is Kind.BOOLEAN
    assert KNOWN["HERALD_AUDIENCE_CHECK_HEADER"].kind is Kind.WORDS
    assert KNOWN["HERALD_DKIM_KEYGEN_ALGORITHM"].choices == ("rsa", "ed25519")
    assert KNOWN["HERALD_DATABASE_URL"].name == "database_url"
    assert KNOWN["HERALD_IN_DOUBT_LIST_CAMPAIGN"].name == "in-doubt.list.campaign"


def test_an_option_added_elsewhere_replaces_the_listed_name() -> None:
    extra = typer.Typer()

    @extra.command()
    def one(
        level: Annotated[
            Level, typer.Option("--log-level", envvar="HERALD_LOG_LEVEL")
        ] = Level.info,
    ) -> None: ...

    @extra.command()
    def two(
        wait: Annotated[float, typer.Option("--database-wait", envvar="HERALD_DATABASE_WAIT")] = 0,
    ) -> None: ...

    @extra.command()
    def three(
        wait: Annotated[
            float | None, typer.Option("--database-wait", envvar="HERALD_DATABASE_WAIT")
        ] = None,
    ) -> None: ...

    known = known_settings(typer.main.get_command(extra))
    assert known["HERALD_LOG_LEVEL"].choices == ("debug", "info")
    assert known["HERALD_DATABASE_WAIT"].kind is Kind.NUMBER
    assert known["HERALD_DATABASE_WAIT"].varies  # 0 for one command, forever for another
    assert known["HERALD_DATABASE_WAIT"].commands == ("three", "two")


def test_secret_names() -> None:
    secret = {s.name for s in KNOWN.values() if s.secret}
    assert {
        "dashboard_password",
        "dashboard_token",
        "signing_keys",
        "mailgun_signing_key",
        "postmark_auth",
    } <= secret
    assert "database_url" not in secret  # shown, with its password masked
    assert "sendgrid_public_key" not in secret  # a public key
