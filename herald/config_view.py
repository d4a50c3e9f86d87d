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
