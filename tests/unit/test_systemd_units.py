"""deploy/systemd/*.service: the commands they start exist with the options they pass, the
service settings the operations guide promises are there, and systemd itself accepts them
(``systemd-analyze verify``, when the machine has it)."""

from __future__ import annotations

import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from typer.main import get_command

from herald.cli import app
from tests.support.paths import HERALD, REPO_ROOT

UNITS = REPO_ROOT / "deploy" / "systemd"
EXPECTED = {
    "herald-worker@.service": "worker",
    "herald-scheduler.service": "scheduler",
    "herald-serve.service": "serve",
}
PROMISED = {
    "Type": "simple",
    "Restart": "on-failure",
    "ExecReload": "/bin/kill -HUP $MAINPID",
    "KillSignal": "SIGTERM",
    "EnvironmentFile": "/etc/herald/herald.env",
    "User": "herald",
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "PrivateTmp": "yes",
    "RestartPreventExitStatus": "2",
}


def parse_unit(path: Path) -> dict[str, dict[str, list[str]]]:
    """systemd's ini dialect: sections, repeatable keys, ``#``/``;`` comments, ``\\`` joins."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    pending = ""
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = pending + raw.strip()
        pending = ""
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if not line or line[0] in "#;":
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"{path.name}: {line!r} outside a section"
        key, sep, value = line.partition("=")
        assert sep, f"{path.name}: {line!r} is not key=value"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


def commands() -> dict[str, Any]:
    """The herald subcommands by name (typer's click group, whichever click it vendors)."""
    found: dict[str, Any] = get_command(app).commands  # type: ignore[attr-defined]
    return found


def test_there_is_a_unit_for_each_long_running_command() -> None:
    assert sorted(p.name for p in UNITS.glob("*.service")) == sorted(EXPECTED)


@pytest.mark.parametrize(("name", "command"), sorted(EXPECTED.items()))
def test_each_unit_starts_a_real_command_with_valid_options(name: str, command: str) -> None:
    service = parse_unit(UNITS / name)["Service"]
    (exec_start,) = service["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0].endswith("/herald")
    assert argv[1] == command
    subcommand = commands()[command]
    # Parses the options exactly as the command line would; an unknown option or a bad value
    # raises here (nothing runs: make_context only parses).
    ctx = subcommand.make_context(command, argv[2:])
    if command == "worker":
        grace = float(ctx.params["shutdown_grace"])
        assert float(service["TimeoutStopSec"][0]) > grace + 10, "SIGKILL before the grace ends"


def test_a_unit_with_an_unknown_option_would_be_caught() -> None:
    with pytest.raises(Exception, match="No such option: --concurency"):
        commands()["worker"].make_context("worker", ["--concurency", "20"])
    with pytest.raises(Exception, match="greater than or equal to 1"):
        commands()["worker"].make_context("worker", ["--concurrency", "0"])


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_unit_has_the_promised_service_settings(name: str) -> None:
    unit = parse_unit(UNITS / name)
    service = unit["Service"]
    for key, value in PROMISED.items():
        assert service.get(key) == [value], f"{name}: {key}={service.get(key)}"
    assert service["ReadWritePaths"], "SQLite needs its directory writable"
    assert "TimeoutStopSec" in service
    assert unit["Install"]["WantedBy"] == ["multi-user.target"]
    assert "postgresql.service" in unit["Unit"]["After"][0]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="systemd-analyze absent")
def test_systemd_accepts_the_units(tmp_path: Path) -> None:
    # verify insists that ExecStart's binary exists: point it at this checkout's herald.
    for name in EXPECTED:
        text = (UNITS / name).read_text(encoding="utf-8")
        (tmp_path / name).write_text(text.replace("/srv/herald/.venv/bin/herald", str(HERALD)))
    (tmp_path / "herald-worker@1.service").write_text(
        (tmp_path / "herald-worker@.service").read_text()
    )
    names = [n for n in EXPECTED if "@." not in n] + ["herald-worker@1.service"]
    result = subprocess.run(
        ["systemd-analyze", "verify", *(str(tmp_path / n) for n in names)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "Unknown key" not in result.stderr
    assert "ignoring" not in result.stderr, result.stderr
