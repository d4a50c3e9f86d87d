"""The campaign YAML spec: loading, validation errors with file/line/field, durations, hashing."""

from __future__ import annotations

import re
import textwrap
from datetime import timedelta
from pathlib import Path

import pytest

from campaigns.addresses import Mailbox
from campaigns.durations import format_duration, parse_duration
from campaigns.errors import AudienceError, CampaignError, SpecError
from campaigns.spec import CampaignSpec, CsvAudience, InlineAudience, StepSpec, load_campaign

VALID_SPEC = """\
name: welcome-series
from: "Acme News <news@Acme.Example>"
reply_to: {address: help@acme.example, name: Acme Help}
audience:
  - ann@example.com
  - Bob <bob@EXAMPLE.com>
  - email: cara@example.com
    name: Cara
    plan: gold
    seats: 3
max_attempts: 7
steps:
  - id: welcome
    subject: "Welcome, {{ name }}"
    template: welcome.html
  - id: reminder
    after: 1d12h
    subject: Still there?
    text: Just checking in.
  - id: last_call
    after: 2w
    subject: Last call
    html: <p>Bye</p>
"""


def write(folder: Path, text: str, name: str = "welcome.yaml") -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


def spec_with_steps(steps: str, *, top: str = "") -> str:
    """A valid campaign around the given steps block (indented by two spaces)."""
    header = "name: c1\nfrom: news@acme.example\naudience: [ann@example.com]\n"
    return header + top + "steps:\n" + textwrap.dedent(steps)


def load_error(folder: Path, text: str) -> SpecError:
    path = write(folder, text)
    with pytest.raises(SpecError) as caught:
        load_campaign(path)
    return caught.value


def single_problem(error: SpecError) -> CampaignError:
    """The one problem reported: the error itself when it is a single error."""
    if error.problems:
        assert len(error.problems) == 1, [str(p) for p in error.problems]
        return error.problems[0]
    return error


# --- a valid spec ----------------------------------------------------------------------------


def test_valid_spec_round_trip(tmp_path: Path) -> None:
    (tmp_path / "welcome.html").write_text("<p>Hi {{ name }}</p>", encoding="utf-8")
    path = write(tmp_path, VALID_SPEC)

    loaded = load_campaign(path)
    spec = loaded.spec

    assert spec.name == "welcome-series"
    assert spec.sender == Mailbox("news@acme.example", "Acme News")
    assert spec.sender.domain() == "acme.example"
    assert spec.reply_to == Mailbox("help@acme.example", "Acme Help")
    assert spec.max_attempts == 7
    assert [step.id for step in spec.steps] == ["welcome", "reminder", "last_call"]
    assert [step.after for step in spec.steps] == [
        timedelta(0),
        timedelta(days=1, hours=12),
        timedelta(weeks=2),
    ]
    welcome, reminder, last_call = spec.steps
    assert isinstance(welcome, StepSpec)
    assert isinstance(reminder, StepSpec)
    assert isinstance(last_call, StepSpec)
    assert welcome.template == "welcome.html"
    assert reminder.text == "Just checking in."
    assert last_call.html == "<p>Bye</p>"
    assert all(step.channel == "email" for step in spec.steps)

    assert isinstance(spec.audience, InlineAudience)
    entries = spec.audience.entries
    assert [(e.email, e.name) for e in entries] == [
        ("ann@example.com", None),
        ("bob@example.com", "Bob"),
        ("cara@example.com", "Cara"),
    ]
    assert entries[1].variables == {"email": "bob@EXAMPLE.com", "name": "Bob"}
    assert entries[2].variables == {
        "email": "cara@example.com",
        "name": "Cara",
        "plan": "gold",
        "seats": "3",
    }

    assert loaded.path == path.resolve()
    assert loaded.base_dir == tmp_path.resolve()
    assert loaded.source == path.read_bytes()
    assert len(loaded.spec_hash) == 64
    assert loaded.template_path(welcome) == (tmp_path / "welcome.html").resolve()


def test_line_of_points_at_yaml_lines(tmp_path: Path) -> None:
    (tmp_path / "welcome.html").write_text("hi", encoding="utf-8")
    loaded = load_campaign(write(tmp_path, VALID_SPEC))

    assert loaded.line_of("name") == 1
    assert loaded.line_of("from") == 2
    assert loaded.line_of("sender") == 2
    assert loaded.line_of("audience[2]") == 7
    assert loaded.line_of("audience[2].plan") == 9
    assert loaded.line_of("steps[1]") == 16
    assert loaded.line_of("steps[1].after") == 17
    assert loaded.line_of("steps[9].after") is None


def test_csv_audience_as_path_or_mapping(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "list.csv").write_text("email\nann@example.com\n", encoding="utf-8")
    for audience in ("data/list.csv", "{csv: data/list.csv}"):
        text = spec_with_steps(
            "  - {id: s1, subject: Hi, text: hello}\n", top="reply_to: r@acme.example\n"
        ).replace("[ann@example.com]", audience)
        loaded = load_campaign(write(tmp_path, text))
        assert loaded.spec.audience == CsvAudience(csv="data/list.csv")
        assert loaded.spec.reply_to == Mailbox("r@acme.example", None)


def test_spec_can_be_built_in_python_by_field_name() -> None:
    spec = CampaignSpec.model_validate(
        {
            "name": "py",
            "sender": "Py <py@example.com>",
            "audience": ["a@example.com"],
            "steps": [{"id": "s", "subject": "Hi", "text": "x", "after": "90m"}],
        }
    )
    assert spec.sender == Mailbox("py@example.com", "Py")
    assert spec.steps[0].after == timedelta(minutes=90)
    assert CampaignSpec.model_validate(spec.model_dump(by_alias=True)) == spec
    assert CampaignSpec.model_validate_json(spec.model_dump_json(by_alias=True)) == spec


# --- errors point at file, line and field ----------------------------------------------------


def test_invalid_yaml_syntax_reports_line_and_column(tmp_path: Path) -> None:
    error = load_error(tmp_path, "name: c1\nfrom: a@b.example\nsteps: [\n  - id: x\n")
    assert error.file == str(tmp_path / "welcome.yaml")
    assert error.line == 4
    assert "invalid YAML" in error.message
    assert "column" in error.message
    assert str(error).startswith(f"{tmp_path / 'welcome.yaml'}:4: invalid YAML")


def test_tab_indentation_gets_a_hint(tmp_path: Path) -> None:
    error = load_error(tmp_path, "name: c1\nsteps:\n\t- id: x\n")
    assert error.line == 3
    assert error.hint == "indent YAML with spaces, not tabs"


def test_unknown_top_level_key_suggests_closest(tmp_path: Path) -> None:
    text = spec_with_steps("  - {id: s1, subject: Hi, text: t}\n", top="max_atempts: 3\n")
    problem = single_problem(load_error(tmp_path, text))
    assert problem.line == 4
    assert problem.field is None
    assert problem.message == "unknown key 'max_atempts'"
    assert problem.hint == "did you mean 'max_attempts'?"


def test_unknown_step_key_suggests_closest(tmp_path: Path) -> None:
    text = spec_with_steps(
        """\
        - id: s1
          subject: Hi
          text: t
        - id: s2
          subjet: Hi
          text: t
        """
    )
    error = load_error(tmp_path, text)
    messages = {(p.line, p.field, p.message, p.hint) for p in error.problems}
    assert messages == {
        (9, "steps[1]", "unknown key 'subjet'", "did you mean 'subject'?"),
        (8, "steps[1]", "missing required key 'subject'", None),
    }
    assert (
        f"{tmp_path / 'welcome.yaml'}:9: steps[1]: unknown key 'subjet' (did you mean 'subject'?)"
        in str(error)
    )


def test_yaml_key_sender_is_not_an_alias_of_from(tmp_path: Path) -> None:
    text = (
        "name: c1\nsender: a@acme.example\naudience: [a@b.example]\n"
        "steps: [{id: s, subject: S, text: t}]\n"
    )
    error = load_error(tmp_path, text)
    by_message = {p.message: p for p in error.problems}
    assert by_message["unknown key 'sender'"].line == 2
    assert by_message["unknown key 'sender'"].hint == "did you mean 'from'?"
    assert "missing required key 'from'" in by_message


def test_missing_steps(tmp_path: Path) -> None:
    problem = single_problem(
        load_error(tmp_path, "name: c1\nfrom: a@acme.example\naudience: [b@example.com]\n")
    )
    assert problem.message == "missing required key 'steps'"
    assert problem.line is None
    assert problem.file == str(tmp_path / "welcome.yaml")


def test_empty_steps(tmp_path: Path) -> None:
    text = "name: c1\nfrom: a@acme.example\naudience: [b@example.com]\nsteps: []\n"
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (4, "steps")
    assert problem.message == "a campaign needs at least one step"


def test_duplicate_step_ids_name_the_id_and_its_line(tmp_path: Path) -> None:
    text = spec_with_steps(
        """\
        - id: hello
          subject: Hi
          text: t
        - id: again
          subject: Hi
          text: t
        - id: hello
          subject: Hi
          text: t
        """
    )
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (11, "steps[2].id")
    assert "duplicate step id 'hello'" in problem.message
    assert "steps[0]" in problem.message


def test_invalid_after(tmp_path: Path) -> None:
    text = spec_with_steps(
        """\
        - id: s1
          subject: Hi
          text: t
        - id: s2
          subject: Hi
          text: t
          after: 3x
        """
    )
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (11, "steps[1].after")
    assert problem.message.startswith("invalid duration '3x'")
    assert problem.hint == "use e.g. 0, 90m, 3d"
    assert str(problem).startswith(f"{tmp_path / 'welcome.yaml'}:11: steps[1].after: invalid")


def test_invalid_from_address(tmp_path: Path) -> None:
    text = (
        "name: c1\naudience: [b@example.com]\nfrom: News <news@>\n"
        "steps: [{id: s, subject: S, text: t}]\n"
    )
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (3, "from")
    assert problem.message == "invalid address 'News <news@>': domain is empty"


def test_invalid_from_mapping_key(tmp_path: Path) -> None:
    text = spec_with_steps(
        "  - {id: s1, subject: Hi, text: t}\n", top="reply_to: {adress: a@b.cd}\n"
    )
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (4, "reply_to")
    assert problem.hint == "did you mean 'address'?"


def test_header_injection_in_subject(tmp_path: Path) -> None:
    text = spec_with_steps(
        """\
        - id: s1
          subject: "Hi\\r\\nBcc: everyone@example.com"
          text: t
        """
    )
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (6, "steps[0].subject")
    assert problem.message == "header injection: line break in subject"


def test_header_injection_from_block_scalar_subject(tmp_path: Path) -> None:
    text = spec_with_steps(
        """\
        - id: s1
          subject: |
            Hi there
          text: t
        """
    )
    problem = single_problem(load_error(tmp_path, text))
    assert problem.field == "steps[0].subject"
    assert "header injection" in problem.message
    assert problem.hint is not None
    assert "one line" in problem.hint


def test_header_injection_in_from_name(tmp_path: Path) -> None:
    text = (
        'name: c1\nfrom: "Acme\\nBcc: all@example.com <news@acme.example>"\n'
        "audience: [b@example.com]\nsteps: [{id: s, subject: S, text: t}]\n"
    )
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (2, "from")
    assert "header injection: line break in" in problem.message


def test_header_injection_in_from_mapping_name(tmp_path: Path) -> None:
    text = (
        'name: c1\nfrom: {address: news@acme.example, name: "Acme\\r\\nX-Evil: 1"}\n'
        "audience: [b@example.com]\nsteps: [{id: s, subject: S, text: t}]\n"
    )
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (2, "from")
    assert "header injection: line break in display name" in problem.message


@pytest.mark.parametrize("step_id", ["Welcome", "-lead", "has space", "x" * 65, "ü"])
def test_bad_step_id(tmp_path: Path, step_id: str) -> None:
    text = spec_with_steps(f'  - {{id: "{step_id}", subject: Hi, text: t}}\n')
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (5, "steps[0].id")
    assert problem.message == f"invalid step id {step_id!r}"
    assert problem.hint is not None
    assert "lower-case" in problem.hint


def test_step_id_that_yaml_reads_as_a_number(tmp_path: Path) -> None:
    text = spec_with_steps("  - {id: 1, subject: Hi, text: t}\n")
    problem = single_problem(load_error(tmp_path, text))
    assert problem.field == "steps[0].id"
    assert problem.message == "expected text, got the number 1"
    assert problem.hint == "put the value in quotes"


def test_bad_campaign_name(tmp_path: Path) -> None:
    text = spec_with_steps("  - {id: s, subject: Hi, text: t}\n").replace("c1", "Welcome Series")
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (1, "name")
    assert problem.message == "invalid campaign name 'Welcome Series'"


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("0", "must be at least 1, got the number 0"),
        ("21", "must be at most 20, got the number 21"),
        ("true", "expected a whole number, got the yes/no value true"),
        ('"5"', "expected a whole number, got '5'"),
    ],
)
def test_max_attempts_out_of_range(tmp_path: Path, value: str, message: str) -> None:
    text = spec_with_steps("  - {id: s, subject: Hi, text: t}\n", top=f"max_attempts: {value}\n")
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (4, "max_attempts")
    assert problem.message == message


def test_duplicate_yaml_keys(tmp_path: Path) -> None:
    text = spec_with_steps(
        """\
        - id: s1
          subject: Hi
          text: t
          subject: Hello
        """
    )
    error = load_error(tmp_path, text)
    assert not error.problems
    assert error.line == 8
    assert error.message == "duplicate key 'subject' (first defined on line 6)"


def test_top_level_list(tmp_path: Path) -> None:
    error = load_error(tmp_path, "- name: c1\n- steps: []\n")
    assert error.line == 1
    assert "top level must be a mapping" in error.message
    assert "a list" in error.message


def test_empty_file(tmp_path: Path) -> None:
    error = load_error(tmp_path, "")
    assert "the file is empty" in error.message


def test_step_without_body(tmp_path: Path) -> None:
    text = spec_with_steps("  - {id: s, subject: Hi}\n")
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (5, "steps[0]")
    assert problem.message == "step has no body"


def test_unsupported_channel(tmp_path: Path) -> None:
    text = spec_with_steps("  - {id: s, subject: Hi, text: t, channel: sms}\n")
    problem = single_problem(load_error(tmp_path, text))
    assert problem.field == "steps[0].channel"
    assert problem.message == "must be 'email' or 'webhook', got 'sms'"


def test_inline_audience_problems_point_at_items(tmp_path: Path) -> None:
    text = """\
    name: c1
    from: a@acme.example
    audience:
      - ok@example.com
      - email: "bob@"
        city: Paris
      - city: Rome
      - 42
    steps: [{id: s, subject: S, text: t}]
    """
    error = load_error(tmp_path, text)
    found = {(p.line, p.field, p.message) for p in error.problems}
    assert found == {
        (5, "audience[1].email", "invalid address 'bob@': domain is empty"),
        (7, "audience[2]", "recipient has no 'email'"),
        (8, "audience[3]", "expected an address or a mapping with 'email', got the number 42"),
    }


def test_audience_of_wrong_shape(tmp_path: Path) -> None:
    text = spec_with_steps("  - {id: s, subject: S, text: t}\n").replace(
        "[ann@example.com]", "{sql: select * from people}"
    )
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (3, "audience")
    assert "expected a list of recipients, a CSV file path" in problem.message


def test_all_problems_are_reported_sorted_by_line(tmp_path: Path) -> None:
    text = """\
    name: c1
    from: nobody
    audience: [a@example.com]
    max_attempts: 99
    steps:
      - id: s1
        subject: Hi
        text: t
        after: -1d
    """
    error = load_error(tmp_path, text)
    assert [(p.line, p.field) for p in error.problems] == [
        (2, "from"),
        (4, "max_attempts"),
        (9, "steps[0].after"),
    ]
    assert all(isinstance(p, SpecError) for p in error.problems)
    assert error.message.startswith("3 problems:\n")
    for problem in error.problems:
        assert f"  {problem}" in str(error)


def test_unreadable_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError) as caught:
        load_campaign(tmp_path / "missing.yaml")
    assert caught.value.file == str(tmp_path / "missing.yaml")
    assert "cannot read campaign file" in caught.value.message


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.yaml"
    path.write_bytes(b"name: c1\nsubject: caf\xe9\n")
    with pytest.raises(SpecError) as caught:
        load_campaign(path)
    assert (caught.value.line, caught.value.message) == (2, "the file is not valid UTF-8")


def test_yaml_alias_bomb_is_refused(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 8)]
    error = load_error(tmp_path, "\n".join(lines) + "\n")
    assert "expands to more than" in error.message


def test_missing_template_file(tmp_path: Path) -> None:
    text = spec_with_steps("  - {id: s, subject: S, template: nope.html}\n")
    problem = single_problem(load_error(tmp_path, text))
    assert (problem.line, problem.field) == (5, "steps[0].template")
    assert str((tmp_path / "nope.html").resolve()) in problem.message


def test_missing_csv_is_an_audience_error_naming_the_path(tmp_path: Path) -> None:
    text = spec_with_steps("  - {id: s, subject: S, text: t}\n").replace(
        "[ann@example.com]", "people.csv"
    )
    with pytest.raises(AudienceError) as caught:
        load_campaign(write(tmp_path, text))
    assert caught.value.line == 3
    assert str((tmp_path / "people.csv").resolve()) in caught.value.message


# --- spec_hash ------------------------------------------------------------------------------


def test_spec_hash_follows_template_and_csv_contents(tmp_path: Path) -> None:
    template = tmp_path / "body.html"
    template.write_text("<p>v1</p>", encoding="utf-8")
    audience = tmp_path / "people.csv"
    audience.write_text("email\nann@example.com\n", encoding="utf-8")
    text = spec_with_steps("  - {id: s, subject: S, template: body.html}\n").replace(
        "[ann@example.com]", "people.csv"
    )
    path = write(tmp_path, text)

    first = load_campaign(path).spec_hash
    assert load_campaign(path).spec_hash == first

    template.write_text("<p>v2</p>", encoding="utf-8")
    second = load_campaign(path).spec_hash
    assert second != first

    audience.write_text("email\nann@example.com\nbob@example.com\n", encoding="utf-8")
    third = load_campaign(path).spec_hash
    assert third not in (first, second)

    path.write_text(text + "# a comment\n", encoding="utf-8")
    assert load_campaign(path).spec_hash not in (first, second, third)


def test_spec_hash_does_not_depend_on_folder(tmp_path: Path) -> None:
    for folder in ("one", "two"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "body.txt").write_text("same", encoding="utf-8")
        write(tmp_path / folder, spec_with_steps("  - {id: s, subject: S, template: body.txt}\n"))
    hashes = {load_campaign(tmp_path / f / "welcome.yaml").spec_hash for f in ("one", "two")}
    assert len(hashes) == 1


# --- durations -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (0, timedelta(0)),
        ("0", timedelta(0)),
        ("90s", timedelta(seconds=90)),
        ("90m", timedelta(minutes=90)),
        ("3h", timedelta(hours=3)),
        ("3d", timedelta(days=3)),
        ("2w", timedelta(weeks=2)),
        ("1d12h", timedelta(days=1, hours=12)),
        (" 1d 12h ", timedelta(days=1, hours=12)),
        ("1w2d3h4m5s", timedelta(weeks=1, days=2, hours=3, minutes=4, seconds=5)),
        ("3650d", timedelta(days=3650)),
    ],
)
def test_parse_duration(raw: str | int, expected: timedelta) -> None:
    assert parse_duration(raw) == expected


@pytest.mark.parametrize(
    ("raw", "reason"),
    [
        ("3x", "unknown unit 'x'"),
        ("-3d", "negative"),
        (-1, "negative"),
        (90, "a number needs a unit"),
        ("90", "a number needs a unit"),
        ("", "it is empty"),
        ("3D", "unknown unit 'D'"),
        ("1.5h", "expected a number followed by a unit"),
        ("12h1d", "largest to smallest"),
        ("1d1d", "appears twice"),
        ("d", "expected a number followed by a unit"),
        ("3651d", "longer than the maximum"),
        ("9" * 30 + "w", "longer than the maximum"),
        (True, "expected a duration"),
    ],
)
def test_parse_duration_rejects(raw: str | int, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        parse_duration(raw)


@pytest.mark.parametrize("text", ["0", "45s", "1m30s", "1d12h", "2w", "1w2d3h4m5s"])
def test_format_duration_inverts_parse(text: str) -> None:
    assert format_duration(parse_duration(text)) == text
