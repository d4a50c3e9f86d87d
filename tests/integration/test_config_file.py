"""``herald.toml``: where it is found, and that every setting has one precedence, option >
environment > file > default, seen through what real commands do (how many fires ``herald
schedule`` lists; which database file ``herald status`` names), not through the loader alone.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.support.factories import invoke, write_yaml
from tests.support.paths import HERALD

CAMPAIGN = """\
name: weekly
from: "Acme <news@acme.example>"
audience: [ann@example.com]
schedule: {cron: "0 9 * * sun"}
steps:
  - {id: digest, subject: "Digest", text: "Hello"}
"""
NOW = "2026-12-01T00:00Z"
LAYERS = ("option", "env", "file")
PRESENT = [combo for size in range(4) for combo in itertools.combinations(LAYERS, size)]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty working folder, and a user config folder of the test's own."""
    for name in [n for n in os.environ if n.startswith("HERALD_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    folder = tmp_path / "work"
    folder.mkdir()
    monkeypatch.chdir(folder)
    return folder


def fires(*args: str, env: dict[str, str] | None = None) -> int:
    campaign = write_yaml(Path.cwd().parent / "campaign", CAMPAIGN)
    result = invoke("schedule", str(campaign), "--json", "--now", NOW, *args, env=env)
    assert result.exit_code == 0, result.output
    return len(json.loads(result.stdout)["fires"])


@pytest.mark.parametrize("present", PRESENT, ids=lambda p: "+".join(p) or "none")
def test_an_option_without_its_own_variable(workdir: Path, present: tuple[str, ...]) -> None:
    # `herald schedule -n` is HERALD_SCHEDULE_COUNT and `[schedule] count` in the file.
    values = {"option": 2, "env": 3, "file": 4}
    if "file" in present:
        (workdir / "herald.toml").write_text("[schedule]\ncount = 4\n")
    args = ["-n", "2"] if "option" in present else []
    env = {"HERALD_SCHEDULE_COUNT": "3"} if "env" in present else None
    expected = next((values[layer] for layer in LAYERS if layer in present), 10)
    assert fires(*args, env=env) == expected


@pytest.mark.parametrize("present", PRESENT, ids=lambda p: "+".join(p) or "none")
def test_an_option_with_its_own_variable(workdir: Path, present: tuple[str, ...]) -> None:
    # --database-url / HERALD_DATABASE_URL / database_url: `herald status` names the file it
    # looked for (none exists) and creates nothing.
    paths = {layer: workdir.parent / f"{layer}.db" for layer in LAYERS}
    if "file" in present:
        (workdir / "herald.toml").write_text(f'database_url = "sqlite:///{paths["file"]}"\n')
    args = ["--database-url", f"sqlite:///{paths['option']}"] if "option" in present else []
    env = {"HERALD_DATABASE_URL": f"sqlite:///{paths['env']}"} if "env" in present else None
    expected = next((paths[layer] for layer in LAYERS if layer in present), workdir / "herald.db")
    result = invoke("status", *args, env=env)
    assert result.exit_code == 1, result.output
    assert result.output.splitlines()[0] == f"error: no database at {expected}"
    assert not any(path.exists() for path in [*paths.values(), workdir / "herald.db"])


@pytest.mark.parametrize("present", [p for p in PRESENT if "option" not in p])
def test_an_environment_only_setting(workdir: Path, present: tuple[str, ...]) -> None:
    if "file" in present:
        (workdir / "herald.toml").write_text('public_url = "https://file.example"\n')
    env = {"HERALD_PUBLIC_URL": "https://env.example"} if "env" in present else None
    result = invoke("config", "--json", env=env)
    assert result.exit_code == 0, result.output
    shown = setting(json.loads(result.stdout), "public_url")
    if "env" in present:
        assert (shown["value"], shown["source"]) == ("https://env.example", "environment")
    elif "file" in present:
        source = f"file {workdir / 'herald.toml'}"
        assert (shown["value"], shown["source"]) == ("https://file.example", source)
    else:
        assert (shown["value"], shown["source"]) == (None, "default")


def setting(document: dict[str, object], name: str) -> dict[str, object]:
    settings = document["settings"]
    assert isinstance(settings, list)
    (found,) = [s for s in settings if s["name"] == name]
    assert isinstance(found, dict)
    return found


# ---------------------------------------------------------------------- discovery


def test_discovery_order(workdir: Path, tmp_path: Path) -> None:
    """--config, then HERALD_CONFIG, then ./herald.toml, then the user's config folder."""
    xdg = tmp_path / "xdg" / "herald" / "herald.toml"
    xdg.parent.mkdir(parents=True)
    named = tmp_path / "named.toml"
    option = tmp_path / "option.toml"
    for path, count in [(xdg, 1), (workdir / "herald.toml", 2), (named, 3), (option, 4)]:
        path.write_text(f"[schedule]\ncount = {count}\n")
    assert fires("-n", "5") == 5  # and an option beats any file
    assert fires() == 2  # ./herald.toml before the user's
    assert fires(env={"HERALD_CONFIG": str(named)}) == 3
    # --config is the app's option, before the command: `herald --config FILE schedule ...`
    campaign = write_yaml(tmp_path / "campaign", CAMPAIGN)
    args = ["schedule", str(campaign), "--json", "--now", NOW]
    by_option = invoke("--config", str(option), *args, env={"HERALD_CONFIG": str(named)})
    assert len(json.loads(by_option.stdout)["fires"]) == 4
    (workdir / "herald.toml").unlink()
    assert fires() == 1  # the user's config folder
    xdg.unlink()
    assert fires() == 10  # no file: the default


def test_the_user_config_folder_defaults_to_dot_config(
    workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("XDG_CONFIG_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    path = tmp_path / "home" / ".config" / "herald" / "herald.toml"
    path.parent.mkdir(parents=True)
    path.write_text("[schedule]\ncount = 6\n")
    assert fires() == 6
    result = invoke("config", "--json")
    assert json.loads(result.stdout)["file"] == str(path)


def test_config_names_the_file_used_or_where_it_looked(workdir: Path, tmp_path: Path) -> None:
    result = invoke("config")
    assert result.exit_code == 0, result.output
    assert str(workdir / "herald.toml") in result.output
    assert str(tmp_path / "xdg" / "herald" / "herald.toml") in result.output
    assert "none" in result.output.splitlines()[0]
    (workdir / "herald.toml").write_text("[worker]\nconcurrency = 50\n")
    document = json.loads(invoke("config", "--json").stdout)
    assert document["file"] == str(workdir / "herald.toml")
    shown = setting(document, "worker.concurrency")
    assert shown == {
        "name": "worker.concurrency",
        "env": "HERALD_WORKER_CONCURRENCY",
        "value": "50",
        "source": f"file {workdir / 'herald.toml'}",
    }
    assert setting(document, "worker.lease")["source"] == "default"


def test_the_file_sets_nothing_after_the_command(workdir: Path) -> None:
    (workdir / "herald.toml").write_text("[schedule]\ncount = 4\n")
    assert fires() == 4
    assert "HERALD_SCHEDULE_COUNT" not in os.environ


def test_a_real_process_reads_the_file_of_its_working_folder(tmp_path: Path) -> None:
    folder = tmp_path / "work"
    folder.mkdir()
    (folder / "herald.toml").write_text(
        f'database_url = "sqlite:///{tmp_path / "from-file.db"}"\n[schedule]\ncount = 3\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HERALD_")}
    env["XDG_CONFIG_HOME"] = str(tmp_path / "xdg")
    campaign = write_yaml(tmp_path / "campaign", CAMPAIGN)
    done = subprocess.run(
        [str(HERALD), "schedule", str(campaign), "--json", "--now", NOW],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert len(json.loads(done.stdout)["fires"]) == 3
    status = subprocess.run(
        [str(HERALD), "status"],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 1
    assert f"no database at {tmp_path / 'from-file.db'}" in status.stderr
    assert sorted(p.name for p in folder.iterdir()) == ["herald.toml"]


# ---------------------------------------------------------------------- errors


def one_error(result_output: str) -> tuple[str, str]:
    lines = result_output.strip().splitlines()
    assert len(lines) == 2, result_output
    assert lines[1].strip().startswith("hint:"), result_output
    assert "Traceback" not in result_output
    return lines[0], lines[1]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[worker]\nconcurrency = \n", "herald.toml:2:15: invalid TOML: invalid value"),
        ('name = "a"\nname = "b"\n', "herald.toml:2:"),
        ("[worker]\nconcurency = 3\n", "unknown setting 'worker.concurency' (did you mean"),
        ('databse_url = "x"\n', "unknown setting 'databse_url' (did you mean 'database_url'?)"),
        ('[worker]\nconcurrency = "50"\n', "worker.concurrency must be an integer, not a string"),
        ("[worker]\nlease = true\n", "worker.lease must be a number, not a boolean"),
        ("[worker]\nuntil_idle = 1\n", "worker.until_idle must be true or false, not an integer"),
        ('metrics_port = "x"\n', "metrics_port must be an integer, not a string"),
        ("[dkim.keygen]\nalgorithm = 'dsa'\n", "dkim.keygen.algorithm must be one of rsa, ed25519"),
        ("signing_keys = [1.5]\n", "signing_keys must be a string or a list of strings, not an"),
        ('serve_host = "a"\n[serve]\nhost = "b"\n', "'serve_host' and 'serve.host' are the same"),
    ],
)
def test_a_bad_file_is_one_line_naming_it_exit_2(workdir: Path, text: str, expected: str) -> None:
    (workdir / "herald.toml").write_text(text)
    result = invoke("config")
    assert result.exit_code == 2, result.output
    error, _ = one_error(result.output)
    assert error.startswith(f"error: {workdir / 'herald.toml'}"), error
    assert expected in error, error


def test_the_unknown_name_is_checked_for_every_command(workdir: Path) -> None:
    (workdir / "herald.toml").write_text("[worker]\nconcurency = 3\n")
    result = invoke("status")
    assert result.exit_code == 2, result.output
    assert "did you mean 'worker.concurrency'?" in one_error(result.output)[0]
    assert not (workdir / "herald.db").exists()


def test_a_value_from_a_bad_file_is_never_shown(workdir: Path) -> None:
    (workdir / "herald.toml").write_text('[worker]\nconcurrency = "hunter2-secret"\n')
    result = invoke("config")
    assert result.exit_code == 2
    assert "hunter2" not in result.output


def test_a_named_file_that_is_missing(workdir: Path) -> None:
    result = invoke("--config", "nowhere.toml", "config")
    assert result.exit_code == 2, result.output
    assert "no configuration file nowhere.toml" in one_error(result.output)[0]
    result = invoke("config", env={"HERALD_CONFIG": "also-nowhere.toml"})
    assert result.exit_code == 2, result.output
    assert "also-nowhere.toml" in one_error(result.output)[0]


def test_secret_variables_for_campaign_headers(workdir: Path) -> None:
    # `[secret] crm_token` is HERALD_SECRET_CRM_TOKEN, any name under [secret] is allowed.
    (workdir / "herald.toml").write_text('[secret]\ncrm_token = "tok-1234567890"\n')
    document = json.loads(invoke("config", "--json").stdout)
    shown = setting(document, "secret.crm_token")
    assert (shown["env"], shown["value"]) == ("HERALD_SECRET_CRM_TOKEN", "***")


def test_the_example_file_is_valid(workdir: Path) -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "herald.toml"
    result = invoke("--config", str(example), "config", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.stdout)
    from_file = {s["name"] for s in document["settings"] if s["source"].startswith("file ")}
    assert {"database_url", "smtp_url", "worker.concurrency", "log_level"} <= from_file


def test_a_misspelt_variable_is_reported(workdir: Path) -> None:
    env = {"HERALD_WORKER_CONCURENCY": "3", "HERALD_SECRET_CRM": "x", "HERALD_QQQ": "1"}
    result = invoke("config", env=env)
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        "warning: not a Herald setting: HERALD_QQQ",
        "warning: not a Herald setting: HERALD_WORKER_CONCURENCY"
        " (did you mean HERALD_WORKER_CONCURRENCY?)",
    ]
    document = json.loads(invoke("config", "--json", env=env).stdout)
    assert document["unknown"] == [
        {"env": "HERALD_QQQ", "did_you_mean": None},
        {"env": "HERALD_WORKER_CONCURENCY", "did_you_mean": "HERALD_WORKER_CONCURRENCY"},
    ]


def test_an_empty_variable_counts_as_unset(workdir: Path) -> None:
    # click ignores an empty variable, so the file's value applies rather than the default.
    (workdir / "herald.toml").write_text("[schedule]\ncount = 4\n")
    assert fires(env={"HERALD_SCHEDULE_COUNT": ""}) == 4
