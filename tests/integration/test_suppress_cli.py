"""`herald suppress add|remove|import|list` and campaigns.suppression, on SQLite and PostgreSQL.

Entries are stored by mailbox identity, in a scope; launch stores each job's list scope
(None for transactional campaigns); a bad import names every bad row as FILE:LINE and writes
nothing; no command ends in a traceback (``invoke`` checks it).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.suppression import SuppressionError, entries, suppress, unsuppress
from dispatch.models import send_job, suppression
from tests.support.factories import cli, launch, write_yaml


def rows(engine: Engine) -> list[tuple[str, str, str, str]]:
    s = suppression.c
    with engine.connect() as conn:
        found = conn.execute(
            sa.select(s.address, s.scope, s.reason, s.source).order_by(s.address, s.scope)
        )
        return [tuple(r) for r in found]


def test_the_public_function_stores_the_identity_in_its_scope(engine: Engine) -> None:
    with engine.begin() as conn:
        assert suppress(conn, '"Ann"@Bücher.Example', "complaint", scope="global", source="arf")
        assert not suppress(conn, "ann@xn--bcher-kva.example", "again", scope="global")
        assert suppress(conn, "ANN@bücher.example", "unsubscribed", scope="List:News")
    assert rows(engine) == [
        ("ann@xn--bcher-kva.example", "global", "complaint", "arf"),
        ("ann@xn--bcher-kva.example", "list:news", "unsubscribed", "manual"),
    ]
    with engine.begin() as conn:
        assert unsuppress(conn, "Ann@BÜCHER.example", scope="list:news") is True
        assert [e.scope for e in entries(conn, address="ann@bücher.example")] == ["global"]


@pytest.mark.parametrize(
    ("address", "scope", "reason", "message"),
    [
        ("no-at-sign", "global", "x", "invalid address"),
        ("a@b.example", "topic:news", "x", "invalid scope"),
        ("a@b.example", "list:", "x", "invalid scope"),
        ("a@b.example", "list:Bad Name", "x", "invalid scope"),
        ("a@b.example", "global", "  ", "reason is empty"),
        ("a@b.example", "global", "two\nlines", "control character"),
    ],
)
def test_the_public_function_refuses_bad_input(
    engine: Engine, address: str, scope: str, reason: str, message: str
) -> None:
    with engine.begin() as conn, pytest.raises(SuppressionError, match=message):
        suppress(conn, address, reason, scope=scope)
    assert rows(engine) == []


def test_launch_gives_each_job_its_campaigns_list_scope(engine: Engine, tmp_path: Path) -> None:
    common = (
        "from: news@herald.test\naudience: [a@example.com]\n"
        "steps: [{id: s, subject: hi, text: hi}]\n"
    )
    launch(engine, write_yaml(tmp_path / "a", f"name: digest\n{common}"))
    launch(engine, write_yaml(tmp_path / "b", f"name: weekly\nlist: news\n{common}"))
    launch(engine, write_yaml(tmp_path / "c", f"name: receipt\ntransactional: true\n{common}"))
    with engine.connect() as conn:
        found = dict(conn.execute(sa.select(send_job.c.campaign, send_job.c.list_scope)).all())
    assert found == {"digest": "list:digest", "weekly": "list:news", "receipt": None}


def test_add_list_and_remove(db_url: str, engine: Engine) -> None:
    added = cli(
        db_url, "suppress", "add", "Ann@Example.com", '"ann"@EXAMPLE.com', "bob@example.com",
        "--reason", "asked by phone", "--json",
    )  # fmt: skip
    assert added.exit_code == 0, added.output
    assert json.loads(added.stdout) == {
        "scope": "global",
        "added": 2,
        "already": 0,
        "duplicates": 1,
        "unsent_jobs_stopped": 0,
        "addresses": ["ann@example.com", "bob@example.com"],
    }
    again = cli(db_url, "suppress", "add", "ANN@example.com", "--scope", "list:news")
    assert again.exit_code == 0
    assert "ann@example.com: suppressed in list:news" in again.stdout
    listed = json.loads(cli(db_url, "suppress", "list", "--json").stdout)
    assert listed["count"] == 3
    assert [
        (e["address"], e["scope"], e["reason"], e["source"]) for e in listed["suppressions"]
    ] == [
        ("ann@example.com", "global", "asked by phone", "manual"),
        ("ann@example.com", "list:news", "manual", "manual"),
        ("bob@example.com", "global", "asked by phone", "manual"),
    ]
    only = json.loads(cli(db_url, "suppress", "list", "--scope", "list:news", "--json").stdout)
    assert [e["address"] for e in only["suppressions"]] == ["ann@example.com"]
    text = cli(db_url, "suppress", "list")
    assert "asked by phone" in text.stdout
    assert "3 suppression(s)" in text.stdout

    removed = cli(db_url, "suppress", "remove", '"Ann"@example.com')
    assert removed.exit_code == 0
    assert "no longer suppressed in global" in removed.stdout
    assert "still suppressed in list:news" in removed.stderr
    missing = cli(db_url, "suppress", "remove", "ann@example.com")
    assert missing.exit_code == 1
    assert "ann@example.com is not suppressed in global" in missing.stderr
    assert [r[:2] for r in rows(engine)] == [
        ("ann@example.com", "list:news"),
        ("bob@example.com", "global"),
    ]


def test_add_counts_the_unsent_jobs_it_will_stop(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    audience = (
        "audience: [ann@example.com, bob@example.com]\nsteps: [{id: s, subject: hi, text: hi}]\n"
    )
    launch(engine, write_yaml(tmp_path / "a", f"name: news\nfrom: n@herald.test\n{audience}"))
    launch(engine, write_yaml(tmp_path / "b", f"name: other\nfrom: n@herald.test\n{audience}"))
    listed = cli(db_url, "suppress", "add", "ANN@example.com", "--scope", "list:news", "--json")
    assert json.loads(listed.stdout)["unsent_jobs_stopped"] == 1
    everywhere = cli(db_url, "suppress", "add", "ann@example.com", "--json")
    assert json.loads(everywhere.stdout)["unsent_jobs_stopped"] == 2


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["add", "bad@"], "invalid address 'bad@'"),
        (["add", "a@b.example", "--scope", "everything"], "invalid scope 'everything'"),
        (["add", "a@b.example", "--reason", ""], "the reason is empty"),
        (["remove", "a@b.example", "--scope", "list:"], "invalid scope"),
        (["list", "--scope", "nope"], "invalid scope 'nope'"),
    ],
)
def test_invalid_input_is_one_line_and_exit_2(
    db_url: str, engine: Engine, args: list[str], message: str
) -> None:
    cli(db_url, "suppress", "add", "keep@example.com")
    result = cli(db_url, "suppress", *args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert [r[0] for r in rows(engine)] == ["keep@example.com"]


def test_import_csv_with_scopes_and_reasons(db_url: str, engine: Engine, tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(
        "\ufeffName,Email,Reason,Scope\n"
        "Ann,ANN@example.com,,\n"
        'Quoted,"""a,b""@Example.com",complaint,\n'
        "Bo,bo@example.com,unsubscribed,list:news\n"
        "\n"
        'Ann again,"""ann""@example.com",,\n',
        encoding="utf-8",
    )
    result = cli(db_url, "suppress", "import", str(path), "--reason", "from listmonk", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert (report["added"], report["already"], report["duplicates"]) == (3, 0, 1)
    assert rows(engine) == [
        ('"a,b"@example.com', "global", "complaint", "import"),
        ("ann@example.com", "global", "from listmonk", "import"),
        ("bo@example.com", "list:news", "unsubscribed", "import"),
    ]
    again = cli(db_url, "suppress", "import", str(path))
    assert again.exit_code == 0
    assert "0 added, 3 already suppressed, 1 duplicate(s)" in again.stdout


def test_import_a_plain_list_keeps_quoted_local_parts(
    db_url: str, engine: Engine, tmp_path: Path
) -> None:
    path = tmp_path / "list.txt"
    path.write_text('# exported 2026-12-01\r\n"a,b"@q.example\r\n\r\nX@Q.example\r\n')
    result = cli(db_url, "suppress", "import", str(path), "--scope", "list:news")
    assert result.exit_code == 0, result.output
    assert [r[:2] for r in rows(engine)] == [
        ('"a,b"@q.example', "list:news"),
        ("x@q.example", "list:news"),
    ]


@pytest.mark.parametrize(
    ("content", "problems"),
    [
        (
            'email,scope\nok@example.com,\nbad,\nfine@example.com,topic:x\n"x\ny"@a.example,\n',
            [":3: invalid address 'bad'", ":4: invalid scope 'topic:x'", ":5: invalid address"],
        ),
        ("ok@example.com\nnot an address\n\nx@@y.example\n", [":2:", ":4:"]),
        (b"ok@example.com\n\xff\xfe@example.com\n", [":2: not UTF-8 text"]),
        ('email\nok@example.com\n"unterminated\x00\n', [":3: invalid address"]),
        ('email\nok@example.com\n"' + "a" * 200_000 + '"@x.example\n', [":3: unreadable CSV"]),
    ],
)
def test_a_bad_import_names_every_bad_line_and_imports_nothing(
    db_url: str, engine: Engine, tmp_path: Path, content: str | bytes, problems: list[str]
) -> None:
    path = tmp_path / "bad.csv"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    result = cli(db_url, "suppress", "import", str(path))
    assert result.exit_code == 2, result.output
    for problem in problems:
        assert f"{path}{problem}" in result.stderr, result.stderr
    assert "nothing was imported" in result.stderr
    assert rows(engine) == []


@pytest.mark.parametrize("kind", ["missing", "directory", "empty"])
def test_an_unusable_file_is_one_line(
    db_url: str, engine: Engine, tmp_path: Path, kind: str
) -> None:
    path = tmp_path / "x.csv"
    if kind == "directory":
        path.mkdir()
    if kind == "empty":
        path.write_text("email\n\n")
    result = cli(db_url, "suppress", "import", str(path))
    assert result.exit_code == 2
    expected = {"missing": "no such file", "directory": "not a regular file", "empty": "no addr"}
    assert expected[kind] in result.stderr
    assert rows(engine) == []
