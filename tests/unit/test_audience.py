"""Audience streaming (campaigns.audience): CSV and inline recipients, row problems, memory."""

from __future__ import annotations

import textwrap
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from campaigns.audience import Recipient, RowProblem, audience_source_files, iter_audience
from campaigns.errors import AudienceError, CampaignError
from campaigns.spec import LoadedCampaign, load_campaign
from templates.header_values import header_value_problem
from tests.support.examples import examples

STEPS = "steps: [{id: s, subject: Hi, text: hello}]\n"


def campaign_with_csv(folder: Path, csv_text: str | bytes, csv_ref: str = "people.csv") -> Path:
    csv_path = folder / "people.csv"
    if isinstance(csv_text, bytes):
        csv_path.write_bytes(csv_text)
    else:
        csv_path.write_text(csv_text, encoding="utf-8", newline="")
    yaml_path = folder / "c.yaml"
    yaml_path.write_text(
        f"name: c1\nfrom: news@acme.example\naudience: {csv_ref}\n{STEPS}", encoding="utf-8"
    )
    return yaml_path


def load_with_csv(folder: Path, csv_text: str | bytes) -> LoadedCampaign:
    return load_campaign(campaign_with_csv(folder, csv_text))


def test_csv_recipients_with_extra_columns_as_variables(tmp_path: Path) -> None:
    loaded = load_with_csv(
        tmp_path,
        "Email,Name,plan,City\r\n"
        "Ann@Example.COM,Ann Lee,gold,Paris\r\n"
        'bob@example.com,,silver,"Rome, Italy"\r\n',
    )
    assert list(iter_audience(loaded)) == [
        Recipient(
            email="Ann@example.com",
            name="Ann Lee",
            variables={
                "email": "Ann@Example.COM",
                "name": "Ann Lee",
                "plan": "gold",
                "City": "Paris",
            },
            line=2,
        ),
        Recipient(
            email="bob@example.com",
            name=None,
            variables={
                "email": "bob@example.com",
                "name": "",
                "plan": "silver",
                "City": "Rome, Italy",
            },
            line=3,
        ),
    ]
    assert audience_source_files(loaded) == [(tmp_path / "people.csv").resolve()]


def test_csv_with_byte_order_mark(tmp_path: Path) -> None:
    loaded = load_with_csv(tmp_path, "\ufeffemail,name\nann@example.com,Ann\n".encode())
    (recipient,) = iter_audience(loaded)
    assert isinstance(recipient, Recipient)
    assert recipient.email == "ann@example.com"
    assert recipient.variables == {"email": "ann@example.com", "name": "Ann"}


def test_missing_email_column_lists_found_columns(tmp_path: Path) -> None:
    loaded = load_with_csv(tmp_path, "Name,Mail,City\nAnn,ann@example.com,Paris\n")
    with pytest.raises(AudienceError) as caught:
        list(iter_audience(loaded))
    error = caught.value
    assert error.file == str((tmp_path / "people.csv").resolve())
    assert error.line == 1
    assert error.message == "no 'email' column (found columns: 'Name', 'Mail', 'City')"


def test_empty_csv_is_an_audience_error(tmp_path: Path) -> None:
    loaded = load_with_csv(tmp_path, "\n\n")
    with pytest.raises(AudienceError, match="the CSV file is empty"):
        list(iter_audience(loaded))


def test_repeated_columns_are_an_audience_error(tmp_path: Path) -> None:
    loaded = load_with_csv(tmp_path, "email,city,city\na@example.com,x,y\n")
    with pytest.raises(AudienceError, match="repeated column names: 'city'"):
        list(iter_audience(loaded))


def test_invalid_rows_are_reported_and_valid_rows_still_yielded(tmp_path: Path) -> None:
    csv_text = (
        "email,name\n"  # 1
        "ann@example.com,Ann\n"  # 2
        "bob@,Bob\n"  # 3
        "\n"  # 4: empty line, skipped
        '"carl@example.com","Carl\nBcc: x@example.com"\n'  # 5-6: a line break inside the name
        "dora@example.com,Dora\n"  # 7
        ",Nobody\n"  # 8
        "eve@example.com,Eve,extra\n"  # 9
        ",\n"  # 10: a row of empty cells, skipped
        "  Finn@Example.com  ,Finn\n"  # 11
    )
    results = list(iter_audience(load_with_csv(tmp_path, csv_text)))
    assert [(type(r).__name__, r.line) for r in results] == [
        ("Recipient", 2),
        ("RowProblem", 3),
        ("RowProblem", 5),
        ("Recipient", 7),
        ("RowProblem", 8),
        ("RowProblem", 9),
        ("Recipient", 11),
    ]
    problems = [r for r in results if isinstance(r, RowProblem)]
    assert problems == [
        RowProblem(3, "invalid address 'bob@': domain is empty"),
        RowProblem(5, "header injection: line break in name"),
        RowProblem(8, "email is empty"),
        RowProblem(9, "row has 3 fields but the header has 2"),
    ]
    recipients = [r for r in results if isinstance(r, Recipient)]
    assert [r.email for r in recipients] == [
        "ann@example.com",
        "dora@example.com",
        "Finn@example.com",
    ]
    assert recipients[2].variables["email"] == "  Finn@Example.com  "


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.text(
        st.characters(exclude_categories=["Cs"])
        | st.sampled_from(list("\x00\x1b\x7f\x85\u2028\t ")),
        max_size=12,
    )
)
def test_a_name_is_one_a_to_header_can_hold_or_its_row_is_refused(
    tmp_path: Path, name: str
) -> None:
    """Whatever a CSV's name cell holds (NUL, escapes, C1 controls, Unicode separators), its row
    is refused with its line, or the name is a header value: never a name that no message can
    carry or that PostgreSQL cannot store (a NUL stopped a scheduled occurrence's snapshot)."""
    row = '"' + name.replace('"', '""') + '"'
    loaded = load_with_csv(tmp_path, f"email,name\r\nann@example.com,{row}\r\n")
    [result] = list(iter_audience(loaded))
    if isinstance(result, RowProblem):
        assert result.line == 2
        assert header_value_problem(name) is not None
    else:
        assert result.name is None or header_value_problem(result.name) is None
        assert "\x00" not in (result.name or "")


CELL = st.text(
    st.characters(exclude_categories=["Cs"]) | st.sampled_from(list('\x00\x1b@." ,')),
    max_size=14,
)


@settings(max_examples=examples(200), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(email=CELL | st.just("ann@example.com"), name=CELL, city=CELL)
def test_no_nul_of_a_row_reaches_a_stored_text_column(
    tmp_path: Path, email: str, name: str, city: str
) -> None:
    """What a snapshot or an enrollment stores as text (address, name, the reason a row was
    refused) never holds a NUL, which PostgreSQL refuses: the address and name are checked, a
    reason quotes data escaped (campaigns.errors.excerpt). Other cells are template variables,
    stored as JSON, where a NUL is an escape."""

    def quoted(cell: str) -> str:
        return '"' + cell.replace('"', '""') + '"'

    text = f"email,name,city\r\n{quoted(email)},{quoted(name)},{quoted(city)}\r\n"
    loaded = load_with_csv(tmp_path, text)
    for result in iter_audience(loaded):
        if isinstance(result, RowProblem):
            assert "\x00" not in result.reason
        else:
            assert "\x00" not in result.email
            assert "\x00" not in (result.name or "")


def test_duplicates_are_not_filtered_here(tmp_path: Path) -> None:
    loaded = load_with_csv(tmp_path, "email\na@example.com\nA@EXAMPLE.com\n")
    emails = [r.email for r in iter_audience(loaded) if isinstance(r, Recipient)]
    assert emails == ["a@example.com", "A@example.com"]


def test_csv_outside_the_campaign_folder_is_refused(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    (tmp_path / "campaigns").mkdir()
    (tmp_path / "data" / "list.csv").write_text("email\na@example.com\n", encoding="utf-8")
    yaml_path = tmp_path / "campaigns" / "c.yaml"
    yaml_path.write_text(
        f"name: c1\nfrom: n@acme.example\naudience: ../data/list.csv\n{STEPS}", encoding="utf-8"
    )
    with pytest.raises(CampaignError) as caught:
        load_campaign(yaml_path)
    assert (caught.value.file, caught.value.line) == (str(yaml_path), 3)
    assert "leaves the campaign folder" in str(caught.value)


def test_csv_that_disappeared_names_the_file_as_written(tmp_path: Path) -> None:
    loaded = load_with_csv(tmp_path, "email\na@example.com\n")
    (tmp_path / "people.csv").unlink()
    with pytest.raises(AudienceError) as caught:
        list(iter_audience(loaded))
    assert caught.value.file == loaded.file
    assert repr(str(tmp_path / "people.csv")) in caught.value.message
    assert "no such file" in caught.value.message


def test_csv_path_that_is_a_folder(tmp_path: Path) -> None:
    loaded = load_with_csv(tmp_path, "email\na@example.com\n")
    (tmp_path / "people.csv").unlink()
    (tmp_path / "people.csv").mkdir()
    with pytest.raises(AudienceError, match="not a regular file"):
        list(iter_audience(loaded))


def test_csv_that_is_not_utf8(tmp_path: Path) -> None:
    loaded = load_with_csv(tmp_path, b"email,name\na@example.com,Ren\xe9e\n")
    with pytest.raises(AudienceError, match="not valid UTF-8"):
        list(iter_audience(loaded))


def test_inline_entries_with_variables_and_lines(tmp_path: Path) -> None:
    yaml_path = tmp_path / "c.yaml"
    yaml_path.write_text(
        textwrap.dedent(
            """\
            name: c1
            from: news@acme.example
            audience:
              - ann@Example.com
              - "Bob Builder <bob@example.com>"
              - email: Cara@Example.com
                Name: Cara
                discount: 15
                vip: true
            steps: [{id: s, subject: Hi, text: hello}]
            """
        ),
        encoding="utf-8",
    )
    loaded = load_campaign(yaml_path)
    assert audience_source_files(loaded) == []
    assert list(iter_audience(loaded)) == [
        Recipient("ann@example.com", None, {"email": "ann@Example.com"}, 4),
        Recipient(
            "bob@example.com", "Bob Builder", {"email": "bob@example.com", "name": "Bob Builder"}, 5
        ),
        Recipient(
            "Cara@example.com",
            "Cara",
            {"email": "Cara@Example.com", "name": "Cara", "discount": "15", "vip": "true"},
            6,
        ),
    ]


def test_csv_is_streamed_not_loaded_whole(tmp_path: Path) -> None:
    # 50,000 rows (3 MB) read whole would peak at over 30 MB of Python objects, and even the
    # raw text alone is three times the bound; streamed, the peak is some 40 KB whatever the
    # file's size. (tracemalloc makes every allocation slow, so the file is no bigger.)
    rows = 50_000
    csv_path = tmp_path / "people.csv"
    with csv_path.open("w", encoding="utf-8", newline="") as stream:
        stream.write("email,name,plan,city\n")
        for index in range(rows):
            stream.write(f"user{index}@example.com,User Number {index},gold,Somewhere Far Away\n")
    assert csv_path.stat().st_size > 3_000_000
    yaml_path = tmp_path / "c.yaml"
    yaml_path.write_text(
        f"name: c1\nfrom: news@acme.example\naudience: people.csv\n{STEPS}", encoding="utf-8"
    )
    loaded = load_campaign(yaml_path)

    count = 0
    last_line = 0
    tracemalloc.start()
    try:
        for result in iter_audience(loaded):
            assert isinstance(result, Recipient)
            count += 1
            last_line = result.line
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert count == rows
    assert last_line == rows + 1
    assert peak < 1024 * 1024, f"peak {peak} bytes: the CSV is not being streamed"
