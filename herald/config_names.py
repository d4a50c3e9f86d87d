"""Every setting Herald knows: each option of each command, plus the environment-only ones.

A setting has one environment variable, and the configuration file reaches it by name: the
top-level key ``name`` is ``HERALD_NAME``, the key ``concurrency`` in the table ``[worker]`` is
``HERALD_WORKER_CONCURRENCY`` (what click's ``auto_envvar_prefix="HERALD"`` reads for
``herald worker --concurrency``). The options are found by walking the click command tree, so
an option another module adds is a known setting without being listed here; the settings that
are environment variables only (read by ``herald.mail_settings``, the egress guard, …) are
listed once, below.

Imports nothing heavy: ``herald --config FILE ...`` checks a file's names before any command.
"""

from __future__ import annotations

import enum
import types
import typing
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from herald.defaults import DEFAULT_DATABASE_URL, DEFAULT_SMTP_URL

PREFIX: Final = "HERALD"


class Kind(enum.Enum):
    """What a value in the configuration file must be (a TOML type), and how it becomes text."""

    TEXT = "a string"
    INTEGER = "an integer"
    NUMBER = "a number"
    BOOLEAN = "true or false"
    LIST = "a string or a list of strings"  # comma-joined for the environment
    WORDS = "a list of strings without spaces"  # a click option given many times
    SCALAR = "a string or a number"


# Words in a name that make its value a secret: `herald config` masks it (and nothing else
# prints it: herald.secrets scrubs every credential a command parses).
SECRET_WORDS: Final = ("password", "token", "secret", "keys", "auth", "signing", "private")


def is_secret(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in SECRET_WORDS)


@dataclass(frozen=True)
class Setting:
    name: str  # as the configuration file spells it: "database_url", "worker.concurrency"
    env: str  # HERALD_DATABASE_URL, HERALD_WORKER_CONCURRENCY
    kind: Kind = Kind.TEXT
    default: str | None = None  # as text; None: unset (off)
    choices: tuple[str, ...] = ()
    commands: tuple[str, ...] = field(default=(), compare=False)  # where it is an option
    varies: bool = False  # the default differs between the commands that take it

    @property
    def secret(self) -> bool:
        return is_secret(self.name)


def env_name(path: Iterable[str]) -> str:
    """``("worker", "concurrency")`` → ``HERALD_WORKER_CONCURRENCY`` (``-`` becomes ``_``)."""
    return "_".join([PREFIX, *path]).upper().replace("-", "_")


def _env_only(name: str, kind: Kind = Kind.TEXT, default: str | None = None) -> Setting:
    return Setting(name=name, env=env_name([name]), kind=kind, default=default)


# The settings that are environment variables only (plus the names shared with other commands'
# options, so that a file may set them even where the option is not defined yet).
ENV_ONLY: Final = (
    _env_only("database_url", default=DEFAULT_DATABASE_URL),
    _env_only("smtp_url", default=DEFAULT_SMTP_URL),
    _env_only("log_level", default="info"),
    _env_only("log_format", default="text"),
    _env_only("metrics_port", Kind.INTEGER),
    _env_only("metrics_host", default="127.0.0.1"),
    _env_only("database_wait", Kind.SCALAR),
    # "transaction" when database_url is a pooler in transaction mode (herald.db.POOLERS).
    replace(_env_only("database_pooler", default="none"), choices=("none", "transaction")),
    _env_only("dashboard_password"),
    _env_only("dashboard_token"),
    _env_only("operator"),
    _env_only("egress_allow", Kind.LIST),
    _env_only("egress_allow_http", Kind.BOOLEAN, default="0"),
    _env_only("egress_ports", Kind.LIST),
    _env_only("egress_nat64", Kind.LIST),
    _env_only("secret_vars", Kind.LIST),
    _env_only("signing_keys", Kind.LIST),
    _env_only("public_url"),
    _env_only("unsubscribe_domain"),
    _env_only("bounce_domain"),
    _env_only("dkim_selector"),
    _env_only("dkim_key_file"),
    _env_only("dkim_domain"),
    _env_only("dkim_ed25519_selector"),
    _env_only("dkim_ed25519_key_file"),
    _env_only("dkim_ed25519_domain"),
    _env_only("domain_rates", Kind.LIST),
    _env_only("sendgrid_public_key"),
    _env_only("mailgun_signing_key"),
    _env_only("postmark_auth"),
    _env_only("ses_topic_arns", Kind.LIST),
)
# `[secret] crm_token = "..."` is HERALD_SECRET_CRM_TOKEN: the variables campaigns may name in
# HTTP headers (docs/operating.md). Any name is allowed under it, and every one is a secret.
SECRET_TABLE: Final = "secret"  # noqa: S105 (a table's name, not a password)
# Options of the app itself, not settings a file may hold.
NOT_IN_FILE: Final = frozenset({env_name(["config"])})


def known_settings(root: Any) -> dict[str, Setting]:
    """Every setting by environment variable: the options of ``root``'s command tree (a click
    group, walked), then the environment-only ones not already among them."""
    found: dict[str, Setting] = {}
    for path, option in _options(root, ()):
        setting = _from_option(path, option)
        if setting.env in NOT_IN_FILE:
            continue
        earlier = found.get(setting.env)
        if earlier is None:
            found[setting.env] = setting
        else:
            found[setting.env] = replace(
                earlier,
                commands=earlier.commands + setting.commands,
                varies=earlier.varies or earlier.default != setting.default,
            )
    for setting in ENV_ONLY:
        found.setdefault(setting.env, setting)
    return found


def _options(command: Any, path: tuple[str, ...]) -> Iterable[tuple[tuple[str, ...], Any]]:
    for param in getattr(command, "params", ()):
        # Options only: arguments are never read from the environment.
        is_option = bool(getattr(param, "opts", None)) and param.opts[0].startswith("-")
        if is_option and param.name != "help" and getattr(param, "expose_value", True):
            yield path, param
    for name, sub in sorted(getattr(command, "commands", {}).items()):
        yield from _options(sub, (*path, name))


def _from_option(path: tuple[str, ...], option: Any) -> Setting:
    envvar = option.envvar
    if isinstance(envvar, list | tuple):
        envvar = envvar[0] if envvar else None
    if envvar:
        # An explicit variable (HERALD_DATABASE_URL) is one setting for every command.
        name = envvar.removeprefix(PREFIX + "_").lower()
    else:
        name = ".".join([*path, option.name])
        envvar = env_name([*path, option.name])
    kind, choices = _kind(option)
    return Setting(
        name=name,
        env=envvar,
        kind=kind,
        default=_text(option.default),
        choices=choices,
        commands=(" ".join(path) or "herald",),
    )


def _kind(option: Any) -> tuple[Kind, tuple[str, ...]]:
    if getattr(option, "multiple", False):
        return Kind.WORDS, ()
    if getattr(option, "is_flag", False):
        return Kind.BOOLEAN, ()
    descriptor = getattr(option, "type_descriptor", None)
    annotation = _unoptional(getattr(descriptor, "annotation", str))
    if isinstance(annotation, type):
        if issubclass(annotation, enum.Enum):
            return Kind.TEXT, tuple(str(member.value) for member in annotation)
        if issubclass(annotation, bool):
            return Kind.BOOLEAN, ()
        if issubclass(annotation, int):
            return Kind.INTEGER, ()
        if issubclass(annotation, float):
            return Kind.NUMBER, ()
    return Kind.TEXT, ()


def _unoptional(annotation: Any) -> Any:
    """``int | None`` → ``int``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        rest = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        return rest[0] if len(rest) == 1 else str
    return annotation


def _text(default: Any) -> str | None:
    if default is None or callable(default) or repr(default) == "Sentinel.UNSET":
        return None
    if isinstance(default, enum.Enum):
        return str(default.value)
    if isinstance(default, bool):
        return "true" if default else "false"
    if isinstance(default, Path):
        return str(default)
    return str(default)
