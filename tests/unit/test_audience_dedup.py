"""De-duplication within an audience by mailbox identity: the first row of a mailbox is sent to,
each later row is reported (naming its line and the line it repeats), by `herald validate` and
`herald audience check` alike."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from campaigns.addresses import mailbox_identity, normalise_address
from campaigns.audience import MailboxDeduper, Recipient
from tests.support.examples import examples
from tests.support.factories import invoke

# Spellings of three mailboxes, and one other mailbox that only looks alike.
SPELLINGS = {
    "dup@y.example": ["dup@y.example", '"dup"@y.example', '"d\\up"@y.example', "DUP@Y.EXAMPLE"],
    "ann@bücher.example": [
        "ann@bücher.example",
        "Ann@BÜCHER.example",
        "ann@xn--bcher-kva.example",
        '"a\\nn"@XN--BCHER-KVA.example',
    ],
    '"john doe"@x.example': ['"john doe"@x.example', '"John\\ Doe"@X.example'],
    '"john  doe"@x.example': ['"john  doe"@x.example'],
}


@settings(max_examples=examples(200), deadline=None)
@given(
    st.lists(
        st.sampled_from([(mailbox, s) for mailbox, group in SPELLINGS.items() for s in group]),
        max_size=20,
    )
)
def test_the_first_row_of_each_mailbox_is_kept_and_later_rows_name_it(
    rows: list[tuple[str, str]],
) -> None:
    deduper = MailboxDeduper()
    first_line: dict[str, int] = {}
    for line, (mailbox, spelling) in enumerate(rows, start=2):
        recipient = Recipient(normalise_address(spelling), None, {}, line)
        found = deduper.first_row_of(recipient)
        identity = mailbox_identity(mailbox)
        if identity in first_line:
            assert found == f"line {first_line[identity]}"
        else:
            assert found is None
            first_line[identity] = line


def write_campaign(folder: Path, emails: list[str]) -> Path:
    with (folder / "people.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["email", "name"])
        writer.writerows([email, f"N{i}"] for i, email in enumerate(emails))
    path = folder / "c.yaml"
    path.write_text(
        "name: dedup\nfrom: news@herald.test\naudience: people.csv\n"
        "steps: [{id: s, subject: 'Hi {{ name }}', text: hello}]\n"
    )
    return path


EMAILS = ["dup@y.example", '"dup"@y.example', "other@y.example", '"d\\up"@y.example']


def test_validate_names_each_duplicate_row_and_the_row_it_repeats(tmp_path: Path) -> None:
    path = write_campaign(tmp_path, EMAILS)
    result = invoke("validate", str(path))
    assert result.exit_code == 0, result.output
    assert 'line 3 ("dup"@y.example): same mailbox as line 2; sent once' in result.stderr
    assert 'line 5 ("d\\up"@y.example): same mailbox as line 2; sent once' in result.stderr
    assert "2 duplicate address(es)" in result.stderr

    result = invoke("validate", str(path), "--json")
    report = json.loads(result.stdout)
    assert report["recipients"] == 4
    assert report["messages"] == 2
    assert report["duplicates"] == 2
    assert report["duplicate_rows"] == [
        {"where": 'line 3 ("dup"@y.example)', "first": "line 2"},
        {"where": 'line 5 ("d\\up"@y.example)', "first": "line 2"},
    ]


def test_audience_check_names_each_duplicate_row(tmp_path: Path) -> None:
    write_campaign(tmp_path, EMAILS)
    result = invoke("audience", "check", str(tmp_path / "people.csv"))
    assert result.exit_code == 0, result.output
    assert 'note: line 5 ("d\\up"@y.example): same mailbox as line 2' in result.stderr
    assert "4 recipient(s), 0 invalid row(s), 2 duplicate(s)" in result.stdout

    result = invoke("audience", "check", str(tmp_path / "people.csv"), "--json")
    assert json.loads(result.stdout)["duplicate_rows"] == [
        {"where": 'line 3 ("dup"@y.example)', "first": "line 2"},
        {"where": 'line 5 ("d\\up"@y.example)', "first": "line 2"},
    ]
