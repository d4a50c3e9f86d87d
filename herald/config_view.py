"""The effective settings, as ``herald config`` shows them: value, where it came from, secrets
masked.

A value is masked whole when its setting's name says it is a secret (password, token, secret,
keys, auth, signing, private); a URL is shown with its credentials replaced
(``dispatch.egress.redact``); and every credential found either way is then scrubbed from every
value shown, in any spelling, so a password repeated in another setting is not shown there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dispatch.egress.redact import MASK, Redactor, redact_setting, redact_url, url_secrets
from herald.config import Loaded
from herald.config_names import PREFIX, SECRET_TABLE, Setting, is_secret

VARIES = "(depends on the command)"


@dataclass(frozen=True)
class Shown:
    name: str
    env: str
    value: str | None  # masked; None: unset
    source: str  # "environment", "file PATH", "default"

    def as_json(self) -> dict[str, Any]:
        return {"name": self.name, "env": self.env, "value": self.value, "source": self.source}


def effective(
    known: Mapping[str, Setting], loaded: Loaded, environ: Mapping[str, str]
) -> list[Shown]:
    """Every setting, sorted by name, with its value (masked) and its source."""
    settings = dict(known)
    # HERALD_SECRET_* variables (from the environment or the file) are settings too.
    secret_prefix = f"{PREFIX}_{SECRET_TABLE.upper()}_"
    for env in [*environ, *loaded.values]:
        if env.startswith(secret_prefix) and env not in settings:
            name = f"{SECRET_TABLE}.{env.removeprefix(secret_prefix).lower()}"
            settings[env] = Setting(name=name, env=env)
    raw = {env: environ.get(env) or None for env in settings}
    scrub = Redactor(_credentials(settings, raw))
    rows = []
    for env, setting in settings.items():
        value = raw[env]
        if value is not None:
            source = f"file {loaded.found.path}" if env in loaded.applied else "environment"
            shown: str | None = _masked(setting, value, scrub)
        else:
            source = "default"
            shown = VARIES if setting.varies else setting.default
            if shown is not None:
                shown = _masked(setting, shown, scrub)
        rows.append(Shown(setting.name, env, shown, source))
    return sorted(rows, key=lambda row: row.name)


# Variables of Herald's test suite and of the configuration file's own option.
NOT_SETTINGS = ("HERALD_CONFIG", "HERALD_TEST_", "HERALD_REQUIRE_POSTGRES")


def unknown_variables(
    known: Mapping[str, Setting], environ: Mapping[str, str]
) -> list[tuple[str, str | None]]:
    """``HERALD_*`` variables that are no setting (typos, which would be ignored silently), each
    with the closest setting's variable if one is close."""
    import difflib

    prefix = f"{PREFIX}_"
    secret_prefix = f"{prefix}{SECRET_TABLE.upper()}_"
    suffixes = {env.removeprefix(prefix): env for env in known}
    found: list[tuple[str, str | None]] = []
    for env in sorted(environ):
        if not env.startswith(prefix) or env in known or env.startswith(secret_prefix):
            continue
        if env == NOT_SETTINGS[0] or env.startswith(NOT_SETTINGS[1:]):
            continue
        close = difflib.get_close_matches(env.removeprefix(prefix), list(suffixes), 1, 0.8)
        found.append((env, suffixes[close[0]] if close else None))
    return found


def _credentials(settings: Mapping[str, Setting], raw: Mapping[str, str | None]) -> list[str]:
    found: list[str] = []
    for env, value in raw.items():
        if value is None:
            continue
        if is_secret(settings[env].name) or is_secret(env):
            found += [value, *value.split(",")]
            found += [part.partition(":")[2] for part in value.split(",")]  # kid:secret lists
        found += url_secrets(value)
    return [secret for secret in found if secret]


def _masked(setting: Setting, value: str, scrub: Redactor) -> str:
    if setting.secret or is_secret(setting.env):
        return MASK
    shown = redact_setting(value) if "://" in value else redact_url(value)
    return scrub(shown)
