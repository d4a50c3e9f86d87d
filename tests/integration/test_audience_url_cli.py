"""`herald audience check`, and `validate` / `launch` with a URL audience: output and exit codes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.egress_support.servers import LocalHTTPServer, Reply
from tests.support.factories import invoke

GOOD_CSV = b"email,name\nann@example.com,Ann\nbob@example.com,Bob\nann@example.com,Ann\n"
BAD_CSV = b"email,name\nann@example.com,Ann\nbob@,Bob\ncat@example.com\n"


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LocalHTTPServer]:
    routes = {
        "/good.csv": Reply(body=GOOD_CSV),
        "/bad.csv": Reply(body=BAD_CSV),
        "/export": Reply(headers={"Content-Type": "text/plain"}, body=GOOD_CSV),
        "/stream": Reply(
            headers={"Content-Type": "application/x-ndjson; charset=utf-8"},
            body=b'{"email": "a@example.com"}\n{"email": "b@example.com"}\n',
        ),
        "/busy.csv": Reply(status=503),
    }
    with LocalHTTPServer(routes) as local:
        monkeypatch.setenv("HERALD_EGRESS_ALLOW", "127.0.0.1/32")
        monkeypatch.setenv("HERALD_EGRESS_ALLOW_HTTP", "1")
        monkeypatch.setenv("HERALD_EGRESS_PORTS", str(local.port))
        yield local


def test_check_a_good_url(server: LocalHTTPServer) -> None:
    result = invoke("audience", "check", server.url("/good.csv"))
    assert result.exit_code == 0, result.output
    assert "(csv): 3 recipient(s), 0 invalid row(s), 1 duplicate(s)" in result.output


def test_check_lists_invalid_rows_and_exits_2(server: LocalHTTPServer) -> None:
    result = invoke("audience", "check", server.url("/bad.csv"))
    assert result.exit_code == 2, result.output
    assert "line 3: invalid address 'bob@': domain is empty" in result.output
    assert "line 4: row has 1 fields but the header has 2" in result.output
    assert "1 recipient(s), 2 invalid row(s)" in result.output


def test_check_json_output(server: LocalHTTPServer) -> None:
    result = invoke("audience", "check", server.url("/bad.csv"), "--json")
    assert result.exit_code == 2
    report = json.loads(result.output[: result.output.rindex("}") + 1])
    assert (report["ok"], report["recipients"], report["invalid"]) == (False, 1, 2)
    assert report["problems"][0] == {
        "where": "line 3",
        "error": "invalid address 'bob@': domain is empty",
    }


def test_check_a_denied_url_exits_2_without_contacting_it(
    server: LocalHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("HERALD_EGRESS_ALLOW")
    result = invoke("audience", "check", server.url("/good.csv"))
    assert result.exit_code == 2, result.output
    assert "refused by the egress policy" in result.output
    assert "loopback (127.0.0.0/8)" in result.output
    assert server.requests == []


def test_check_needs_a_format_it_cannot_infer(server: LocalHTTPServer) -> None:
    unknown = invoke("audience", "check", server.url("/export"))
    assert unknown.exit_code == 2, unknown.output
    assert "cannot tell the audience's format (Content-Type: 'text/plain')" in unknown.output
    given = invoke("audience", "check", server.url("/export"), "--format", "csv")
    assert given.exit_code == 0, given.output
    by_type = invoke("audience", "check", server.url("/stream"))
    assert by_type.exit_code == 0, by_type.output
    assert "(ndjson): 2 recipient(s)" in by_type.output


def test_check_a_temporary_failure_exits_1(server: LocalHTTPServer) -> None:
    result = invoke("audience", "check", server.url("/busy.csv"))
    assert result.exit_code == 1, result.output
    assert "answered 503 Service Unavailable" in result.output


def test_check_sends_headers_with_environment_references(
    server: LocalHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HERALD_SECRET_CRM_TOKEN", "t0k3n")
    result = invoke(
        "audience",
        "check",
        server.url("/good.csv"),
        "-H",
        "Authorization: Bearer ${HERALD_SECRET_CRM_TOKEN}",
    )
    assert result.exit_code == 0, result.output
    assert server.requests[0].headers["authorization"] == "Bearer t0k3n"
    bad = invoke("audience", "check", server.url("/good.csv"), "-H", "X-A: ${NOT SET}")
    assert bad.exit_code == 2
    assert "invalid environment variable reference" in bad.output


def test_check_local_files_and_campaigns(tmp_path: Path, server: LocalHTTPServer) -> None:
    people = tmp_path / "people.json"
    people.write_text(json.dumps([{"email": "a@example.com"}, {"email": "nope"}]))
    result = invoke("audience", "check", str(people))
    assert result.exit_code == 2, result.output
    assert "element 2: invalid address 'nope'" in result.output

    campaign = tmp_path / "c.yaml"
    campaign.write_text(
        "name: c\nfrom: n@acme.example\n"
        f"audience: {{url: '{server.url('/good.csv')}'}}\n"
        "steps: [{id: s, subject: Hi, text: hi}]\n"
    )
    result = invoke("audience", "check", str(campaign))
    assert result.exit_code == 0, result.output
    assert "3 recipient(s), 0 invalid row(s)" in result.output

    missing = invoke("audience", "check", str(tmp_path / "nope.csv"))
    assert missing.exit_code == 2
    odd = tmp_path / "people.txt"
    odd.write_text("email\na@example.com\n")
    assert invoke("audience", "check", str(odd)).exit_code == 2
    assert invoke("audience", "check", str(odd), "--format", "CSV").exit_code == 0
    assert invoke("audience", "check", str(odd), "--format", "xml").exit_code == 2


def write_campaign(folder: Path, url: str, strict: bool) -> Path:
    path = folder / "campaign.yaml"
    path.write_text(
        "name: crm\nfrom: news@acme.example\n"
        f"audience: {{url: '{url}', strict: {str(strict).lower()}}}\n"
        "steps: [{id: s, subject: 'Hi {{ name }}', text: hi}]\n"
    )
    return path


def test_validate_and_launch_refuse_a_strict_audience_with_invalid_rows(
    tmp_path: Path, server: LocalHTTPServer
) -> None:
    path = write_campaign(tmp_path, server.url("/bad.csv"), strict=True)
    validate = invoke("validate", str(path))
    assert validate.exit_code == 2, validate.output
    assert "line 3: invalid address 'bob@'" in validate.output
    db = f"sqlite:///{tmp_path / 'h.db'}"
    launch = invoke("launch", str(path), "--database-url", db)
    assert launch.exit_code == 2, launch.output
    assert "line 4: row has 1 fields" in launch.output
    engine = sa.create_engine(db)
    with engine.connect() as conn:
        for table in ("campaign", "send_job", "audience_fetch", "audience_snapshot"):
            assert conn.execute(sa.text(f"select count(*) from {table}")).scalar_one() == 0
    engine.dispose()


def test_launch_a_non_strict_audience_sends_to_the_valid_rows(
    tmp_path: Path, server: LocalHTTPServer
) -> None:
    path = write_campaign(tmp_path, server.url("/bad.csv"), strict=False)
    db = f"sqlite:///{tmp_path / 'h.db'}"
    launch = invoke("launch", str(path), "--database-url", db)
    assert launch.exit_code == 0, launch.output
    engine = sa.create_engine(db)
    with engine.connect() as conn:
        jobs = conn.execute(sa.text("select recipient from send_job")).scalars().all()
        rejects = conn.execute(sa.text("select reject_count from audience_fetch")).scalar_one()
    engine.dispose()
    assert jobs == ["ann@example.com"]
    assert rejects == 2


def test_cli_launch_fetches_once_and_a_relaunch_fetches_nothing(
    tmp_path: Path, server: LocalHTTPServer
) -> None:
    path = write_campaign(tmp_path, server.url("/bad.csv"), strict=False)
    db = f"sqlite:///{tmp_path / 'h.db'}"
    first = invoke("launch", str(path), "--database-url", db, "--json")
    assert first.exit_code == 0, first.output
    assert json.loads(first.stdout)["rejected_rows"] == 2
    assert "2 audience row(s) rejected and skipped" in first.stderr
    assert len(server.requests) == 1, "check and fan-out must share one fetch"
    again = invoke("launch", str(path), "--database-url", db, "--json")
    assert again.exit_code == 0, again.output
    assert json.loads(again.stdout)["new_jobs"] == 0
    assert len(server.requests) == 1, "a relaunch reads the snapshot, never the source"
