"""Issue 7 items 2, 7, 15 through the real ``herald`` CLI: a campaign reads only files inside
its folder, expands only exposed environment variables, and every problem names its file.

The secret is a variable set for the test: it must never appear in stdout or stderr, whatever
the campaign tries (``/proc/self/environ``, ``/etc/passwd``, ``..``, symlinks, FIFOs).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import Result

from tests.support.factories import invoke

SECRET = "s3cr3t-Pa55w0rd-never-shown"
HEAD = 'name: paths\nfrom: "Herald <news@herald.test>"\n'
STEP = "steps:\n  - id: welcome\n    subject: Hi\n    text: hello\n"


@pytest.fixture(autouse=True)
def _secret_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERALD_SMTP_URL", f"smtp://user:{SECRET}@relay.example:587")
    monkeypatch.setenv("HERALD_TEST_SECRET", SECRET)


def _campaign(folder: Path, audience: str, steps: str = STEP) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "campaign.yaml"
    path.write_text(f"{HEAD}audience: {audience}\n{steps}", encoding="utf-8")
    return path


def _refused(result: Result, *expected: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    assert SECRET not in result.output
    for text in expected:
        assert text in result.output, result.output


@pytest.mark.parametrize(
    ("audience", "expected"),
    [
        ("/proc/self/environ", "is absolute"),
        ("/etc/passwd", "is absolute"),
        ("../outside.csv", "leaves the campaign folder"),
        ("sub/../../outside.csv", "leaves the campaign folder"),
    ],
)
def test_audience_paths_that_leave_the_folder_are_refused_at_their_line(
    tmp_path: Path, audience: str, expected: str
) -> None:
    (tmp_path / "outside.csv").write_text(f"email\n{SECRET}@example.com\n")
    path = _campaign(tmp_path / "c", audience)
    for command in ("validate", "launch"):
        args = [command, str(path)]
        if command == "launch":
            args += ["--database-url", f"sqlite:///{tmp_path / 'h.db'}"]
        _refused(invoke(*args), f"{path}:3", "audience", expected)


def test_symlink_to_proc_environ_is_refused_without_reading_it(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "people.csv").symlink_to("/proc/self/environ")
    path = _campaign(folder, "people.csv")
    _refused(invoke("validate", str(path)), "people.csv", "outside the campaign folder")
    _refused(invoke("audience", "check", str(path)), "outside the campaign folder")


def test_symlinked_parent_directory_pointing_outside_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "people.csv").write_text(f"email\n{SECRET}@example.com\n")
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "data").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    path = _campaign(folder, "data/people.csv")
    _refused(invoke("validate", str(path)), "data/people.csv", "outside the campaign folder")


def test_symlink_inside_the_folder_is_fine(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    (folder / "lists").mkdir(parents=True)
    (folder / "lists" / "real.csv").write_text("email\nann@example.com\n")
    (folder / "people.csv").symlink_to(folder / "lists" / "real.csv")
    result = invoke("validate", str(_campaign(folder, "people.csv")))
    assert result.exit_code == 0, result.output


def test_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    os.mkfifo(folder / "people.csv")
    _refused(invoke("validate", str(_campaign(folder, "people.csv"))), "not a regular file")


@pytest.mark.parametrize("link", ["/proc/self/environ", "/etc/passwd"])
def test_template_symlinked_outside_is_refused(tmp_path: Path, link: str) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "welcome.txt").symlink_to(link)
    steps = "steps:\n  - id: welcome\n    subject: Hi\n    template: welcome.txt\n"
    path = _campaign(folder, "[ann@example.com]", steps)
    _refused(invoke("validate", str(path)), f"{path}:", "steps[0].template", "outside")


@pytest.mark.parametrize("template", ["/proc/self/environ", "../secret.txt"])
def test_template_path_leaving_the_folder_is_refused(tmp_path: Path, template: str) -> None:
    (tmp_path / "secret.txt").write_text(SECRET)
    steps = f"steps:\n  - id: welcome\n    subject: Hi\n    template: {template}\n"
    path = _campaign(tmp_path / "c", "[ann@example.com]", steps)
    _refused(invoke("validate", str(path)), f"{path}:7", "steps[0].template")


def test_include_of_a_symlink_to_environ_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "env.txt").symlink_to("/proc/self/environ")
    steps = "steps:\n  - id: welcome\n    subject: Hi\n    text: '{% include \"env.txt\" %}'\n"
    _refused(invoke("validate", str(_campaign(folder, "[ann@example.com]", steps))))


def test_header_row_of_a_secret_file_is_not_echoed(tmp_path: Path) -> None:
    """The error that used to print /proc/self/environ: a header without 'email' is quoted
    only as short, escaped excerpts of a few columns."""
    folder = tmp_path / "c"
    folder.mkdir()
    long_column = "X" * 500
    (folder / "people.csv").write_text(f"a\x1b[2J,b,c,d,e,{long_column}{SECRET},g\n")
    result = invoke("validate", str(_campaign(folder, "people.csv")))
    _refused(result, "no 'email' column", "'a\\x1b[2J'", "(7 in all)")
    assert long_column not in result.output
    assert "\x1b" not in result.output


# --- item 7: only exposed variables ----------------------------------------------------------

WEBHOOK = """\
steps:
  - id: notify
    channel: webhook
    url: https://hooks.example.com/in
    headers: {{Authorization: "Bearer ${{{variable}}}"}}
    body: {{email: "{{{{ email }}}}"}}
"""


@pytest.mark.parametrize("variable", ["HERALD_SMTP_URL", "HERALD_TEST_SECRET", "HOME"])
def test_webhook_header_naming_an_unexposed_variable_fails_validate(
    tmp_path: Path, variable: str
) -> None:
    path = _campaign(tmp_path / "c", "[ann@example.com]", WEBHOOK.format(variable=variable))
    result = invoke("validate", str(path))
    _refused(
        result,
        f"{path}:8",
        "steps[0].headers.Authorization",
        "step notify",
        f"environment variable {variable} is not exposed",
        "HERALD_SECRET_",
    )


def test_exposed_variables_pass_validate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in ("HERALD_SECRET_HOOK", "CRM_TOKEN"):
        path = _campaign(
            tmp_path / variable, "[ann@example.com]", WEBHOOK.format(variable=variable)
        )
        if variable == "CRM_TOKEN":
            assert invoke("validate", str(path)).exit_code == 2
            monkeypatch.setenv("HERALD_SECRET_VARS", "OTHER,CRM_TOKEN")
        result = invoke("validate", str(path))
        assert result.exit_code == 0, result.output


def test_herald_settings_cannot_be_listed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HERALD_SECRET_VARS", "HERALD_SMTP_URL")
    path = _campaign(
        tmp_path / "c", "[ann@example.com]", WEBHOOK.format(variable="HERALD_SMTP_URL")
    )
    _refused(invoke("validate", str(path)), "HERALD_SMTP_URL is not exposed")


def test_url_audience_header_is_refused_before_any_request(tmp_path: Path) -> None:
    # Port 9 on loopback: nothing listens, and nothing must be tried (the check comes first).
    audience = '{url: "https://127.0.0.1:9/x.csv", headers: {X-Key: "${HERALD_SMTP_URL}"}}'
    path = _campaign(tmp_path / "c", audience)
    result = invoke("validate", "--json", str(path))
    assert result.exit_code == 2, result.output
    assert SECRET not in result.output
    (problem,) = json.loads(result.stdout)["problems"]
    assert problem["file"] == str(path)
    assert problem["field"] == "audience.headers.X-Key"
    assert "HERALD_SMTP_URL is not exposed" in problem["error"]


# --- item 15: every problem names its file ---------------------------------------------------


def test_row_and_render_problems_name_their_files(tmp_path: Path) -> None:
    folder = tmp_path / "c"
    folder.mkdir()
    (folder / "people.csv").write_text(
        "email,name\nann@example.com,Ann\nbob@@example.com,Bob\n", encoding="utf-8"
    )
    steps = "steps:\n  - id: welcome\n    subject: 'Hi {{ nme }}'\n    text: hello\n"
    path = _campaign(folder, "people.csv", steps)
    result = invoke("validate", str(path))
    assert result.exit_code == 2, result.output
    csv_file = str(folder / "people.csv")
    assert f"{csv_file}: line 3: invalid address 'bob@@example.com'" in result.output
    assert (
        f"{csv_file}: line 2 (ann@example.com): step welcome: steps[0].subject ({path}:6):"
        in result.output
    )
    report = json.loads(invoke("validate", "--json", str(path)).stdout)
    by_where = {p["where"]: p for p in report["problems"]}
    assert by_where["line 3"]["file"] == csv_file
    render = by_where["line 2 (ann@example.com)"]
    assert (render["file"], render["field"], render["step"]) == (
        csv_file,
        "steps[0].subject",
        "welcome",
    )


def test_syntax_error_names_campaign_file_line_step_and_field(tmp_path: Path) -> None:
    steps = "steps:\n  - id: welcome\n    subject: Hi\n    text: 'hello {{ name }'\n"
    path = _campaign(tmp_path / "c", "[ann@example.com]", steps)
    result = invoke("validate", str(path))
    assert result.exit_code == 2, result.output
    assert f"{path}:7: steps[0].text: step welcome: syntax error in text" in result.output
