"""Bad input at the CLI: a clear message, exit code 2, no traceback, nothing in the database.

Every case runs through both ``herald validate FILE`` (no database) and ``herald launch FILE``
(on SQLite and PostgreSQL, via the ``db_url`` fixture), in-process with typer's CliRunner.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine
from typer.testing import Result

from tests.support.factories import invoke
from tests.support.paths import EXAMPLES

HEAD = """\
name: bad-input
from: "Herald Tests <news@herald.test>"
"""

INLINE_AUDIENCE = """\
audience:
  - ann@example.com
  - Bob <bob@example.com>
"""

ONE_STEP = """\
steps:
  - id: welcome
    subject: "Welcome"
    text: "Hello {{ email }}"
"""


@dataclass(frozen=True)
class Case:
    """Files to write into a fresh folder (the campaign is ``campaign.yaml``) and what the
    combined output must contain."""

    id: str
    files: dict[str, str]
    expect: tuple[str, ...]
    # Substrings that must NOT appear (e.g. recipients that render fine).
    reject: tuple[str, ...] = ()
    campaign: str = "campaign.yaml"


def _sandbox_case(case_id: str, expression: str) -> Case:
    return Case(
        f"sandbox-{case_id}",
        {
            "campaign.yaml": HEAD
            + INLINE_AUDIENCE
            + "steps:\n"
            + "  - id: evil\n"
            + '    subject: "Hi"\n'
            + "    template: evil.txt\n",
            "evil.txt": f"Hello\n{expression}\n",
        },
        # The step, the template file and its line, and that the operation was refused.
        expect=("evil", "unsafe", "evil.txt", "line 2"),
        # Nothing of Python's internals leaks into the report.
        reject=("<class", "__subclasses__()", "built-in"),
    )


CASES: list[Case] = [
    Case(
        "missing-file",
        {},
        campaign="does-not-exist.yaml",
        expect=("does-not-exist.yaml", "no such file"),
    ),
    Case(
        "invalid-yaml",
        {
            "campaign.yaml": HEAD
            + INLINE_AUDIENCE
            + "steps:\n  - id: welcome\n    subject: [unclosed\n    text: hi\n"
        },
        # The flow sequence opened on line 8 runs into line 9.
        expect=("campaign.yaml:9", "invalid YAML", "line 8"),
    ),
    Case(
        "unknown-key",
        {
            "campaign.yaml": HEAD
            + INLINE_AUDIENCE
            + "steps:\n  - id: welcome\n    subjet: Welcome\n    text: hi\n"
        },
        # line 8 is the misspelt key
        expect=("campaign.yaml:8", "unknown key 'subjet'", "did you mean 'subject'?"),
    ),
    Case(
        "unknown-top-level-key",
        {"campaign.yaml": HEAD + "audiense:\n  - ann@example.com\n" + ONE_STEP},
        expect=("campaign.yaml:3", "unknown key 'audiense'", "did you mean 'audience'?"),
    ),
    Case(
        "missing-template",
        {
            "campaign.yaml": HEAD
            + INLINE_AUDIENCE
            + "steps:\n  - id: welcome\n    subject: Welcome\n    template: nope.html\n"
        },
        expect=("campaign.yaml:9", "nope.html", "no such file", "steps[0].template"),
    ),
    Case(
        "template-syntax-error-file",
        {
            "campaign.yaml": HEAD
            + INLINE_AUDIENCE
            + "steps:\n  - id: welcome\n    subject: Welcome\n    template: broken.html\n",
            "broken.html": "<p>Hello</p>\n<p>{% if email %}yes</p>\n",
        },
        expect=("welcome", "syntax error", "broken.html", "line 2"),
        reject=("step welcome: step welcome",),  # the step is named once
    ),
    Case(
        "template-syntax-error-inline-subject",
        {
            "campaign.yaml": HEAD
            + INLINE_AUDIENCE
            + "steps:\n  - id: welcome\n    subject: 'Hi {{ name '\n    text: hi\n"
        },
        expect=("welcome", "syntax error in subject"),
        reject=("step welcome: step welcome",),
    ),
    Case(
        "undefined-variable-for-some-recipients",
        {
            "campaign.yaml": HEAD
            + "audience:\n"
            + "  - email: ann@example.com\n"  # line 4
            + "    nickname: Annie\n"
            + "  - email: bob@example.com\n"  # line 6: no nickname
            + "  - email: cat@example.com\n"  # line 7
            + "    nickname: Kitty\n"
            + "  - dan@example.com\n"  # line 9: no nickname
            + "steps:\n"
            + "  - id: welcome\n"
            + '    subject: "Hi {{ nickname }}"\n'
            + "    text: Hello\n"
        },
        expect=(
            "line 6 (bob@example.com)",
            "line 9 (dan@example.com)",
            "undefined variable 'nickname'",
            "welcome",
            "2 problem(s)",
        ),
        reject=("ann@example.com", "cat@example.com"),
    ),
    Case(
        "invalid-address-inline",
        {
            "campaign.yaml": HEAD
            + "audience:\n  - ann@example.com\n  - not-an-address\n"  # line 5
            + ONE_STEP
        },
        expect=("campaign.yaml:5", "audience[1]", "invalid address 'not-an-address'"),
    ),
    Case(
        "invalid-address-from",
        {"campaign.yaml": "name: bad-input\nfrom: 'News <news@>'\n" + INLINE_AUDIENCE + ONE_STEP},
        expect=("campaign.yaml:2", "from", "invalid address"),
    ),
    Case(
        "header-injection-subject",
        {
            "campaign.yaml": HEAD
            + INLINE_AUDIENCE
            + "steps:\n  - id: welcome\n"
            + '    subject: "Hi\\r\\nBcc: victim@example.org"\n'  # line 8
            + "    text: hi\n"
        },
        expect=("campaign.yaml:8", "steps[0].subject", "header injection"),
    ),
    Case(
        "header-injection-recipient-name",
        {
            "campaign.yaml": HEAD
            + "audience:\n"
            + "  - ann@example.com\n"
            + '  - {email: bob@example.com, name: "Bob\\nBcc: victim@example.org"}\n'  # line 5
            + ONE_STEP
        },
        expect=("campaign.yaml:5", "header injection", "name"),
    ),
    Case(
        "header-injection-sender-name",
        {
            "campaign.yaml": "name: bad-input\n"
            + 'from: {address: news@herald.test, name: "News\\r\\nBcc: victim@example.org"}\n'
            + INLINE_AUDIENCE
            + ONE_STEP
        },
        expect=("campaign.yaml:2", "from"),
    ),
    Case(
        "header-injection-subject-via-variable",
        {
            "campaign.yaml": HEAD
            + "audience:\n"
            + "  - {email: ann@example.com, city: Paris}\n"
            + '  - {email: bob@example.com, city: "Rome\\r\\nBcc: victim@example.org"}\n'
            + "steps:\n  - id: welcome\n"
            + '    subject: "News from {{ city }}"\n'
            + "    text: hi\n"
        },
        expect=("line 5 (bob@example.com)", "welcome", "header injection"),
        reject=("ann@example.com",),
    ),
    Case(
        "header-injection-csv-name",
        {
            "campaign.yaml": HEAD + "audience: people.csv\n" + ONE_STEP,
            "people.csv": 'email,name\nann@example.com,Ann\nbob@example.com,"Bob\nBcc: x@y.z"\n',
        },
        expect=("line 3", "header injection"),
    ),
    _sandbox_case("mro", "{{ ''.__class__.__mro__ }}"),
    _sandbox_case("subclasses", "{{ ''.__class__.__mro__[1].__subclasses__() }}"),
    _sandbox_case("attr-filter", "{{ ''|attr('__class__') }}"),
    _sandbox_case("globals", "{{ lipsum.__globals__ }}"),
    _sandbox_case("cycler-init", "{{ cycler.__init__.__globals__ }}"),
    _sandbox_case("format", "{{ '{0.__class__}'.format(email) }}"),
    _sandbox_case("mutate", "{{ [1, 2].append(3) }}"),
    Case(
        "duplicate-step-ids",
        {
            "campaign.yaml": HEAD
            + INLINE_AUDIENCE
            + "steps:\n"
            + "  - id: welcome\n    subject: A\n    text: a\n"
            + "  - id: welcome\n    subject: B\n    text: b\n"  # line 10
        },
        expect=("campaign.yaml:10", "duplicate step id 'welcome'", "steps[0]", "steps[1]"),
    ),
    Case(
        "empty-audience-inline",
        {"campaign.yaml": HEAD + "audience: []\n" + ONE_STEP},
        expect=("campaign.yaml:3", "audience", "empty"),
    ),
    Case(
        "empty-audience-csv",
        {
            "campaign.yaml": HEAD + "audience: people.csv\n" + ONE_STEP,
            "people.csv": "email,name\n",
        },
        expect=("audience", "empty"),
    ),
    Case(
        "csv-without-email-column",
        {
            "campaign.yaml": HEAD + "audience: people.csv\n" + ONE_STEP,
            "people.csv": "mail,name\nann@example.com,Ann\n",
        },
        expect=("people.csv", "no 'email' column", "'mail'"),
    ),
    Case(
        "missing-csv",
        {"campaign.yaml": HEAD + "audience: nobody.csv\n" + ONE_STEP},
        expect=("campaign.yaml:3", "nobody.csv", "no such file"),
    ),
    Case(
        "invalid-after-duration",
        {
            "campaign.yaml": HEAD
            + INLINE_AUDIENCE
            + "steps:\n"
            + "  - id: welcome\n    subject: A\n    text: a\n"
            + "  - id: later\n    after: 3x\n    subject: B\n    text: b\n"  # after: line 11
        },
        expect=("campaign.yaml:11", "steps[1].after", "invalid duration '3x'", "90m"),
    ),
    Case(
        "csv-row-bad-address",
        {
            "campaign.yaml": HEAD + "audience: people.csv\n" + ONE_STEP,
            "people.csv": (
                "email,name\nann@example.com,Ann\nbob@,Bob\ncat@example.com,Cat\n"
                "dan@example..com,Dan\n"
            ),
        },
        expect=("line 3", "invalid address 'bob@'", "line 5", "dan@example..com"),
        reject=("ann@example.com", "cat@example.com"),
    ),
]


def _write(folder: Path, case: Case) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in case.files.items():
        (folder / name).write_text(text, encoding="utf-8")
    return folder / case.campaign


def _check_output(result: Result, case: Case) -> None:
    output = result.output
    assert result.exit_code == 2, f"exit {result.exit_code}, output:\n{output}"
    assert "Traceback" not in output, output
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    for wanted in case.expect:
        assert wanted in output, f"{wanted!r} missing from:\n{output}"
    for unwanted in case.reject:
        assert unwanted not in output, f"{unwanted!r} should not be in:\n{output}"


def _row_counts(engine: Engine) -> dict[str, int]:
    with engine.connect() as conn:
        return {
            table: conn.execute(sa.text(f"select count(*) from {table}")).scalar_one()
            for table in ("campaign", "occurrence", "send_job", "send_event")
        }


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_validate_rejects_bad_input(tmp_path: Path, case: Case) -> None:
    path = _write(tmp_path / "c", case)
    result = invoke("validate", str(path))
    _check_output(result, case)


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_launch_rejects_bad_input_and_writes_nothing(
    tmp_path: Path, case: Case, db_url: str, engine: Engine
) -> None:
    path = _write(tmp_path / "c", case)
    result = invoke("launch", str(path), "--database-url", db_url)
    _check_output(result, case)
    assert _row_counts(engine) == {"campaign": 0, "occurrence": 0, "send_job": 0, "send_event": 0}


def test_validate_json_lists_each_failing_recipient(tmp_path: Path) -> None:
    case = next(c for c in CASES if c.id == "undefined-variable-for-some-recipients")
    path = _write(tmp_path / "c", case)
    result = invoke("validate", "--json", str(path))
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    report = json.loads(result.stdout)
    assert report["ok"] is False
    assert report["recipients"] == 4
    assert report["messages"] == 2
    assert report["problem_count"] == 2
    problems = report["problems"]
    assert len(problems) == 2
    wheres = [p["where"] for p in problems]
    assert any("bob@example.com" in w and "line 6" in w for w in wheres), wheres
    assert any("dan@example.com" in w and "line 9" in w for w in wheres), wheres
    assert not any("ann@example.com" in w or "cat@example.com" in w for w in wheres)
    assert all(p["step"] == "welcome" for p in problems)
    assert all("undefined variable 'nickname'" in p["error"] for p in problems)


def test_validate_example_is_ok() -> None:
    result = invoke("validate", str(EXAMPLES / "welcome.yaml"))
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert "ok: welcome-2026: 3 recipient(s), 3 step(s), 9 message(s)" in result.output
