"""``herald config`` never shows a secret: not a setting named as one (password, token, secret,
keys, auth, signing, private), not the password in a URL, not one repeated in another setting;
in the text table or in JSON, whether the secret came from the file or the environment."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from tests.support.examples import examples
from tests.support.factories import invoke

# Anything a TOML basic string holds without an escape (no quote, backslash or control).
SECRETS = st.text(
    alphabet=st.characters(
        codec="utf-8", exclude_categories=("Cc", "Cs", "Zl", "Zp"), exclude_characters='"\\'
    ),
    min_size=8,
    max_size=40,
).filter(lambda s: s.strip() == s)


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name in [n for n in os.environ if n.startswith("HERALD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def both_outputs(env: dict[str, str] | None = None) -> tuple[str, Any]:
    text = invoke("config", env=env)
    assert text.exit_code == 0, text.output
    as_json = invoke("config", "--json", env=env)
    assert as_json.exit_code == 0, as_json.output
    return text.output + as_json.output, json.loads(as_json.stdout)


def strings(document: Any) -> list[str]:
    if isinstance(document, dict):
        return [s for value in document.values() for s in strings(value)]
    if isinstance(document, list):
        return [s for value in document for s in strings(value)]
    return [document] if isinstance(document, str) else []


_BASELINES: dict[Path, str] = {}


def baseline(workdir: Path) -> str:
    """What `herald config` shows with no secret set (the same for every example)."""
    if workdir not in _BASELINES:
        (workdir / "herald.toml").unlink(missing_ok=True)
        _BASELINES[workdir] = both_outputs()[0]
    return _BASELINES[workdir]


def spellings(secret: str) -> set[str]:
    return {secret, quote(secret, safe=""), json.dumps(secret)[1:-1]}


@settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(secret=SECRETS, in_file=st.booleans())
def test_no_secret_is_shown(workdir: Path, secret: str, in_file: bool) -> None:
    # A secret that is a word of the output anyway ("database_url") says nothing.
    assume(not any(form in baseline(workdir) for form in spellings(secret)))
    encoded = quote(secret, safe="")
    values = {
        "dashboard_password": secret,
        "dashboard_token": secret,
        "signing_keys": f"k1:{secret}",
        "postmark_auth": f"user:{secret}",
        "mailgun_signing_key": secret,
        "database_url": f"postgresql://herald:{encoded}@db.internal:5432/herald",
        "smtp_url": f"smtps://mailer:{encoded}@relay.example:465",
        "public_url": "https://mail.example.com",
    }
    header_secret = {"HERALD_SECRET_CRM_TOKEN": secret}
    if in_file:
        lines = [f'{name} = "{value}"' for name, value in values.items()]
        lines += ["[secret]", f'crm_token = "{secret}"']
        (workdir / "herald.toml").write_text("\n".join(lines) + "\n", encoding="utf-8")
        env = None
    else:
        (workdir / "herald.toml").unlink(missing_ok=True)
        env = {f"HERALD_{name.upper()}": value for name, value in values.items()} | header_secret
    output, document = both_outputs(env)
    for form in spellings(secret):
        assert form not in output
        assert not any(form in shown for shown in strings(document))
    shown = {row["name"]: row for row in document["settings"]}
    for name in ("dashboard_password", "dashboard_token", "signing_keys", "secret.crm_token"):
        assert shown[name]["value"] == "***"
    assert shown["database_url"]["value"] == "postgresql://herald:***@db.internal:5432/herald"
    assert shown["smtp_url"]["value"] == "smtps://mailer:***@relay.example:465"
    assert shown["public_url"]["value"] == "https://mail.example.com"  # not a secret: shown


def test_a_secret_repeated_in_a_setting_that_is_not_one_is_scrubbed(workdir: Path) -> None:
    (workdir / "herald.toml").write_text(
        'dashboard_password = "correct-horse-battery"\n'
        'operator = "correct-horse-battery"\n'  # pasted in the wrong place
    )
    output, document = both_outputs()
    assert "correct-horse-battery" not in output
    assert {row["name"]: row["value"] for row in document["settings"]}["operator"] == "***"
