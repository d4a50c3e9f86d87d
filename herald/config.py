"""The configuration file, ``herald.toml``: where it is found, what it may say, how it applies.

Found (the first that exists): ``--config FILE``, else ``HERALD_CONFIG``, else ``herald.toml``
in the working folder, else ``$XDG_CONFIG_HOME/herald/herald.toml`` (``~/.config/...``). A file
named by ``--config``/``HERALD_CONFIG`` must exist; the two searched places may be absent.

The file sets environment variables, each only when the environment does not set it already
(an empty variable counts as unset, as click and Herald's readers treat it), before the
command's options are read. So every setting, option or environment-only, has one precedence:
option > environment > file > default (docs/operations/configuration.md).

Every problem is a ``ConfigError`` (exit 2) naming the file: a TOML syntax error with its
line and column, an unknown name with the closest known one, a value of the wrong type with
the type expected. No value from the file is ever shown: it may be a secret.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable, Iterator, Mapping, MutableMapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

from herald.config_names import SECRET_TABLE, Kind, Setting, env_name
from herald.errors import ConfigError

if TYPE_CHECKING:
    import tomllib

FILE_NAME: Final = "herald.toml"
CONFIG_VARIABLE: Final = "HERALD_CONFIG"
HINT: Final = "`herald config` lists every setting; docs/operations/configuration.md"


@dataclass(frozen=True)
class Found:
    """The file to use (None: no file), and the places looked at, in order."""

    path: Path | None
    searched: tuple[Path, ...]
    explicit: bool = False  # named by --config or HERALD_CONFIG


@dataclass
class Loaded:
    """What the file did: the variables it set (the others were set already)."""

    found: Found
    values: dict[str, str] = field(default_factory=dict)  # every variable the file names
    applied: set[str] = field(default_factory=set)  # those it set in the environment


def search_path(cwd: Path, environ: Mapping[str, str]) -> tuple[Path, ...]:
    config_home = environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return (cwd / FILE_NAME, Path(config_home) / "herald" / FILE_NAME)


def find(option: str | None, environ: Mapping[str, str], cwd: Path | None = None) -> Found:
    """The configuration file: ``option`` (``--config``), ``HERALD_CONFIG``, then the search."""
    named = option or environ.get(CONFIG_VARIABLE) or None
    if named:
        path = Path(named).expanduser()
        if not path.is_file():
            raise ConfigError(
                f"no configuration file {path} (--config / {CONFIG_VARIABLE})",
                hint="check the path, or leave it unset to use ./herald.toml",
            )
        return Found(path, (path,), explicit=True)
    searched = search_path(Path.cwd() if cwd is None else cwd, environ)
    for path in searched:
        if path.is_file():
            return Found(path, searched)
    return Found(None, searched)


def read(path: Path, known: Mapping[str, Setting]) -> dict[str, str]:
    """The variables ``path`` sets, each value as environment text; ConfigError for any problem."""
    import tomllib  # here: most runs find no file, and every command looks

    try:
        with path.open("rb") as file:
            document = tomllib.load(file)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(_syntax_message(path, exc), hint="TOML: https://toml.io") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"{path}: not UTF-8 text (byte {exc.start})", hint="TOML files are UTF-8"
        ) from None
    except OSError as exc:
        raise ConfigError(f"cannot read {path}: {exc.strerror}") from None
    values: dict[str, str] = {}
    spelt: dict[str, str] = {}  # the name each variable was given by, for a second spelling
    for key_path, value in _leaves(document, ()):
        name = ".".join(key_path)
        env = env_name(key_path)
        setting = known.get(env)
        if setting is None and _is_secret_variable(key_path):
            setting = Setting(name=name, env=env)
        if setting is None:
            raise ConfigError(f"{path}: unknown setting {name!r}{_suggest(name, known)}", hint=HINT)
        if env in spelt:  # `serve_host` and `[serve] host` are both HERALD_SERVE_HOST
            raise ConfigError(
                f"{path}: {spelt[env]!r} and {name!r} are the same setting", hint=HINT
            )
        spelt[env] = name
        values[env] = _as_text(path, name, setting, value)
    return values


def _is_secret_variable(key_path: tuple[str, ...]) -> bool:
    """``[secret] crm_token``: any name that makes a variable name (HERALD_SECRET_CRM_TOKEN)."""
    return len(key_path) == 2 and key_path[0] == SECRET_TABLE and bool(_NAME.fullmatch(key_path[1]))


_NAME = re.compile(r"[A-Za-z0-9_-]+")


def apply(values: Mapping[str, str], environ: MutableMapping[str, str]) -> set[str]:
    """Set each variable that ``environ`` does not set (or sets empty); the names set."""
    applied = set()
    for env, value in values.items():
        if not environ.get(env):
            environ[env] = value
            applied.add(env)
    return applied


def _leaves(
    table: Mapping[str, Any], path: tuple[str, ...]
) -> Iterator[tuple[tuple[str, ...], Any]]:
    for key, value in table.items():
        if isinstance(value, dict):
            yield from _leaves(value, (*path, key))
        else:
            yield (*path, key), value


def _suggest(name: str, known: Mapping[str, Setting]) -> str:
    names = sorted({setting.name for setting in known.values()})
    close = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    if not close:
        # `[worker] concurency`: compare the last part with the names in the same table.
        table, _, leaf = name.rpartition(".")
        siblings = [n.rpartition(".")[2] for n in names if n.rpartition(".")[0] == table]
        leaf_close = difflib.get_close_matches(leaf, siblings, n=1, cutoff=0.6)
        close = [f"{table}.{leaf_close[0]}" if table else leaf_close[0]] if leaf_close else []
    return f" (did you mean {close[0]!r}?)" if close else ""


_POSITION = re.compile(r"^(?P<message>.*?)\s*\(at line (?P<line>\d+), column (?P<column>\d+)\)$")


def _syntax_message(path: Path, exc: tomllib.TOMLDecodeError) -> str:
    # Python 3.11's message ends "(at line L, column C)"; later ones also have the attributes.
    text = str(exc).strip()
    match = _POSITION.match(text)
    if match is None:
        return f"{path}: invalid TOML: {text}"
    message = match["message"][:1].lower() + match["message"][1:]
    return f"{path}:{match['line']}:{match['column']}: invalid TOML: {message}"


def _as_text(path: Path, name: str, setting: Setting, value: Any) -> str:
    """The value as the environment spells it, or ConfigError naming what was expected."""
    text = _convert(setting.kind, value)
    if text is None:
        raise ConfigError(
            f"{path}: {name} must be {setting.kind.value}, not {_toml_type(value)}", hint=HINT
        )
    if "\0" in text:  # no environment variable can hold one
        raise ConfigError(f"{path}: {name} must not contain a NUL character", hint=HINT)
    if setting.choices and text not in setting.choices:
        raise ConfigError(f"{path}: {name} must be one of {', '.join(setting.choices)}", hint=HINT)
    return text


def _convert(kind: Kind, value: Any) -> str | None:
    if isinstance(value, bool):
        return ("1" if value else "0") if kind is Kind.BOOLEAN else None
    if kind is Kind.BOOLEAN:
        return None
    if isinstance(value, int) and kind in (Kind.INTEGER, Kind.NUMBER, Kind.SCALAR):
        return str(value)
    if isinstance(value, float) and kind in (Kind.NUMBER, Kind.SCALAR):
        return repr(value)
    if isinstance(value, str) and kind in (Kind.TEXT, Kind.LIST, Kind.SCALAR):
        return value
    if isinstance(value, int | float) and kind is Kind.TEXT:
        return str(value)  # `operator = 42`: a number is a fine string
    if isinstance(value, list) and kind in (Kind.LIST, Kind.WORDS):
        if not all(isinstance(item, str | int) and not isinstance(item, bool) for item in value):
            return None
        items = [str(item) for item in value]
        if kind is Kind.WORDS:
            return (
                None
                if any(not item or item.split() != [item] for item in items)
                else " ".join(items)
            )
        return ",".join(items)
    return None


def _toml_type(value: Any) -> str:
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a float"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "a date or time"


def load(
    option: str | None,
    known: Callable[[], Mapping[str, Setting]],
    environ: MutableMapping[str, str] | None = None,
    cwd: Path | None = None,
) -> Loaded:
    """Find the file, read it, set what it sets in ``environ`` (``os.environ``).

    ``known`` is called only when there is a file: walking the command tree is not free."""
    env = os.environ if environ is None else environ
    found = find(option, env, cwd)
    if found.path is None:
        return Loaded(found)
    values = read(found.path, known())
    return Loaded(found, values, apply(values, env))
