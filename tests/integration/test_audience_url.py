"""URL audiences against real local servers: streaming, snapshots, strictness, the guard.

127.0.0.1 is reachable only because each test puts it on the operator allowlist
(HERALD_EGRESS_ALLOW) the way an operator would; everything else, including other loopback
addresses, stays refused. No DNS: every URL uses the 127.0.0.1 literal.
"""

from __future__ import annotations

import json
import threading
import tracemalloc
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import Engine

from campaigns.audience import Recipient, RowProblem, iter_audience
from campaigns.audience_url import AudienceUnavailable
from campaigns.control import register
from campaigns.errors import AudienceError
from campaigns.spec import LoadedCampaign, load_campaign
from campaigns.store import CampaignStore
from scheduler.check import CheckReport, check_campaign
from scheduler.fanout import FanoutResult, materialise
from scheduler.snapshot import ensure_snapshot, iter_snapshot
from scheduler.store import SnapshotStore
from tests.egress_support.servers import LocalHTTPServer, Reply, SeenRequest, redirect
from tests.support.factories import launch

LAUNCH = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
BodyWriter = Callable[[Callable[[bytes], None], threading.Event], None]


def csv_rows(count: int, *, bad: dict[int, str] | None = None) -> BodyWriter:
    """A CSV body of ``count`` rows written in chunks; ``bad`` maps row number -> raw line."""
    bad = bad or {}

    def write(out: Callable[[bytes], None], stopping: threading.Event) -> None:
        out(b"email,name,plan\n")
        chunk: list[str] = []
        for i in range(1, count + 1):
            chunk.append(bad.get(i, f"user{i:05d}@example.com,User {i},gold\n"))
            if len(chunk) == 1000:
                out("".join(chunk).encode())
                chunk.clear()
        out("".join(chunk).encode())

    return write


def csv_reply(count: int, *, bad: dict[int, str] | None = None) -> Reply:
    return Reply(headers={"Content-Type": "text/csv"}, stream=csv_rows(count, bad=bad))


@pytest.fixture
def allow_local(monkeypatch: pytest.MonkeyPatch) -> Callable[[LocalHTTPServer], None]:
    """Put 127.0.0.1 (only) and the server's port on the operator allowlist."""

    def allow(server: LocalHTTPServer) -> None:
        monkeypatch.setenv("HERALD_EGRESS_ALLOW", "127.0.0.1/32")
        monkeypatch.setenv("HERALD_EGRESS_ALLOW_HTTP", "1")
        monkeypatch.setenv("HERALD_EGRESS_PORTS", str(server.port))

    return allow


def write_campaign(folder: Path, audience: str, *, name: str = "crm") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "campaign.yaml"
    path.write_text(
        f"name: {name}\n"
        "from: news@acme.example\n"
        f"audience: {audience}\n"
        "steps:\n"
        "  - id: hello\n"
        "    subject: Hi {{ name }}\n"
        "    text: Your plan is {{ plan }}.\n",
        encoding="utf-8",
    )
    return path


def url_campaign(folder: Path, url: str, extra: str = "") -> LoadedCampaign:
    return load_campaign(write_campaign(folder, f'{{url: "{url}"{extra}}}'))


def check_and_launch(engine: Engine, loaded: LoadedCampaign) -> tuple[CheckReport, FanoutResult]:
    """What `herald launch` does: check (snapshotting), register, fan out."""
    with engine.connect() as conn:
        existing = CampaignStore(engine.dialect.name).get(conn, loaded.spec.name)
    occurrence_at = existing.launched_at if existing else LAUNCH
    report = check_campaign(loaded, occurrence_at, engine=engine)
    assert report.ok, report.problems
    return report, launch(engine, loaded, now=occurrence_at)


def count(engine: Engine, table: str) -> int:
    with engine.connect() as conn:
        return int(conn.execute(sa.text(f"select count(*) from {table}")).scalar_one())


# --- streaming, memory, snapshot -----------------------------------------------------------


def test_50000_rows_stream_into_the_snapshot_in_constant_memory(
    tmp_path: Path, engine: Engine, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    with LocalHTTPServer({"/list.csv": csv_reply(50_000)}) as server:
        allow_local(server)
        loaded = url_campaign(tmp_path, server.url("/list.csv"))
        tracemalloc.start()
        try:
            snapshot = ensure_snapshot(engine, loaded, LAUNCH)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert (snapshot.rows, snapshot.rejects, snapshot.format) == (50_000, 0, "csv")
    assert peak < 20 * 1024 * 1024, f"peak {peak / 1e6:.1f} MB"
    assert count(engine, "audience_snapshot") == 50_000
    assert len(server.requests) == 1
    rows = iter_snapshot(engine, snapshot)
    assert next(rows) == Recipient(
        "user00001@example.com",
        "User 1",
        {"email": "user00001@example.com", "name": "User 1", "plan": "gold"},
        2,
    )
    assert sum(1 for _ in rows) == 49_999


def test_relaunch_reuses_the_snapshot_and_fetches_once(
    tmp_path: Path, engine: Engine, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    served = {"count": 3}

    def listing(request: SeenRequest) -> Reply:
        # Each fetch would see a longer list: a refetch would show up as new jobs.
        served["count"] += 1
        return csv_reply(served["count"])

    with LocalHTTPServer({"/list.csv": listing}) as server:
        allow_local(server)
        loaded = url_campaign(tmp_path, server.url("/list.csv"))
        first_check, first = check_and_launch(engine, loaded)
        second_check, second = check_and_launch(engine, load_campaign(loaded.path))
    assert len(server.requests) == 1
    assert (first_check.recipients, first.new_jobs) == (4, 4)
    assert (second_check.recipients, second.new_jobs, second.existing_jobs) == (4, 0, 4)
    assert count(engine, "send_job") == 4


def test_an_unfinished_snapshot_is_taken_over_and_refetched(
    tmp_path: Path, engine: Engine, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    with LocalHTTPServer({"/list.csv": csv_reply(5)}) as server:
        allow_local(server)
        loaded = url_campaign(tmp_path, server.url("/list.csv"))
        # A launch that crashed mid-fetch left a token, half its rows, and no 'complete'.
        store = SnapshotStore(engine.dialect.name)
        with engine.begin() as conn:
            store.begin(conn, "crm", LAUNCH, token="dead", url=server.url("/list.csv"))
            stale = [
                {"position": p, "line": p, "email": None, "name": None, "variables": None}
                | {"problem": "stale"}
                for p in (1, 2, 3)
            ]
            assert store.append(
                conn, "crm", LAUNCH, token="dead", format="csv", rows=stale, rejects=3
            )
        snapshot = ensure_snapshot(engine, loaded, LAUNCH)
        with engine.begin() as conn:
            # The crashed writer's next batch matches nothing.
            assert not store.append(
                conn, "crm", LAUNCH, token="dead", format="csv", rows=[], rejects=0
            )
    assert (snapshot.rows, snapshot.rejects) == (5, 0)
    assert [item.line for item in iter_snapshot(engine, snapshot)] == [2, 3, 4, 5, 6]


def test_a_fetch_that_breaks_off_leaves_no_snapshot(
    tmp_path: Path, engine: Engine, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    def truncated(out: Callable[[bytes], None], stopping: threading.Event) -> None:
        out(b"email\n" + b"".join(b"u%d@example.com\n" % i for i in range(3000)))

    # Content-Length promises more than is sent, so the body ends early: a network failure.
    reply = Reply(headers={"Content-Length": "999999"}, stream=truncated)
    with LocalHTTPServer({"/list.csv": reply}) as server:
        allow_local(server)
        loaded = url_campaign(tmp_path, server.url("/list.csv"))
        with pytest.raises(AudienceUnavailable, match="cannot fetch the audience"):
            ensure_snapshot(engine, loaded, LAUNCH, batch=500)
    assert count(engine, "audience_fetch") == 0
    assert count(engine, "audience_snapshot") == 0


# --- invalid rows, strictness ------------------------------------------------------------


BAD_ROWS = {2: "bob@,Bob,gold\n", 5: "cat@example.com,Cat\n"}  # CSV lines 3 and 6


def test_strict_audience_with_invalid_rows_is_refused_with_line_numbers(
    tmp_path: Path, engine: Engine, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    with LocalHTTPServer({"/list.csv": csv_reply(6, bad=BAD_ROWS)}) as server:
        allow_local(server)
        loaded = url_campaign(tmp_path, server.url("/list.csv"))
        report = check_campaign(loaded, LAUNCH, engine=engine)
        assert not report.ok
        assert [(p.where, p.error) for p in report.problems] == [
            ("line 3", "invalid address 'bob@': domain is empty"),
            ("line 6", "row has 2 fields but the header has 3"),
        ]
        assert report.recipients == 4
        # Refused before registration: nothing is kept, not even the snapshot.
        assert count(engine, "audience_fetch") == 0
        assert count(engine, "campaign") == 0
        # Fan-out refuses a strict audience with rejects on its own too (a launch that did
        # not check against the snapshot), and forgets the refused snapshot as well ...
        registration = register(engine, loaded, now=LAUNCH)
        with pytest.raises(AudienceError, match="2 invalid row"):
            materialise(engine, loaded, registration.campaign.launched_at)
        assert count(engine, "send_job") == count(engine, "audience_fetch") == 0
        # ... so once the source is fixed, the same occurrence fetches the fixed list.
        server.routes["/list.csv"] = csv_reply(6)
        assert materialise(engine, loaded, registration.campaign.launched_at).new_jobs == 6
    assert len(server.requests) == 3


def test_non_strict_audience_launches_valid_rows_and_records_rejects(
    tmp_path: Path, engine: Engine, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    with LocalHTTPServer({"/list.csv": csv_reply(6, bad=BAD_ROWS)}) as server:
        allow_local(server)
        loaded = url_campaign(tmp_path, server.url("/list.csv"), ", strict: false")
        report, result = check_and_launch(engine, loaded)
    assert (report.recipients, report.rejected) == (4, 2)
    assert [(p.where, p.error) for p in report.rejects] == [
        ("line 3", "invalid address 'bob@': domain is empty"),
        ("line 6", "row has 2 fields but the header has 3"),
    ]
    assert (result.new_jobs, result.skipped_rows) == (4, 2)
    store = SnapshotStore(engine.dialect.name)
    with engine.connect() as conn:
        fetch = store.get(conn, "crm", LAUNCH)
        rejects = store.rejects(conn, "crm", LAUNCH, limit=10)
    assert fetch is not None
    assert (fetch.row_count, fetch.reject_count) == (6, 2)
    assert rejects == [
        (3, "invalid address 'bob@': domain is empty"),
        (6, "row has 2 fields but the header has 3"),
    ]


def test_json_array_rows_are_numbered_by_element(
    tmp_path: Path, engine: Engine, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    people = [
        {"email": "ann@example.com", "name": "Ann", "plan": "gold", "seats": 3},
        {"name": "No Email", "plan": "x"},
        "not an object",
        {"Email": "dan@example.com", "NAME": "Dan", "plan": None},
    ]
    body = json.dumps(people, indent=2).encode()
    reply = Reply(headers={"Content-Type": "application/json"}, body=body)
    with LocalHTTPServer({"/people": reply}) as server:
        allow_local(server)
        loaded = url_campaign(tmp_path, server.url("/people"), ", strict: false")
        report, result = check_and_launch(engine, loaded)
        snapshot = ensure_snapshot(engine, loaded, LAUNCH)
    assert snapshot.format == "json"  # inferred from the Content-Type
    assert [(p.where, p.error) for p in report.rejects] == [
        ("element 2", "no 'email' key"),
        ("element 3", "expected an object with an 'email' key, got str value"),
    ]
    items = list(iter_snapshot(engine, snapshot))
    assert items[0] == Recipient(
        "ann@example.com",
        "Ann",
        {"email": "ann@example.com", "name": "Ann", "plan": "gold", "seats": "3"},
        1,
        "element",
    )
    assert items[3] == Recipient(
        "dan@example.com",
        "Dan",
        {"email": "dan@example.com", "name": "Dan", "plan": ""},
        4,
        "element",
    )
    assert result.new_jobs == 2


def test_ndjson_rows_are_numbered_by_line(
    tmp_path: Path, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    body = b'{"email": "a@example.com"}\n\n{"email": "b@"}\nnot json\n{"email": "c@example.com"}'
    with LocalHTTPServer({"/people.ndjson": Reply(body=body)}) as server:
        allow_local(server)
        items = list(iter_audience(url_campaign(tmp_path, server.url("/people.ndjson"))))
    assert [(type(i).__name__, i.where) for i in items] == [
        ("Recipient", "line 1"),
        ("RowProblem", "line 3"),
        ("RowProblem", "line 4"),
        ("Recipient", "line 5"),
    ]
    assert isinstance(items[2], RowProblem)
    assert items[2].reason.startswith("invalid JSON: Expecting value")


# --- the guard, headers and secrets --------------------------------------------------------


def test_redirect_to_a_loopback_address_outside_the_allowlist_is_refused(
    tmp_path: Path, engine: Engine, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    with LocalHTTPServer({}) as server:
        server.routes["/list.csv"] = redirect(f"http://127.0.0.2:{server.port}/list.csv")
        allow_local(server)
        loaded = url_campaign(tmp_path, server.url("/list.csv"))
        with pytest.raises(AudienceError, match=r"refused by the egress policy") as caught:
            check_campaign(loaded, LAUNCH, engine=engine)
    assert "loopback (127.0.0.0/8)" in str(caught.value)
    assert "127.0.0.2" in str(caught.value)
    assert [r.path for r in server.requests] == ["/list.csv"]
    assert count(engine, "audience_fetch") == 0


def test_without_the_allowlist_the_local_server_is_never_contacted(tmp_path: Path) -> None:
    with LocalHTTPServer({"/list.csv": csv_reply(2)}) as server:
        loaded = url_campaign(tmp_path, server.url("/list.csv"))
        with pytest.raises(AudienceError, match="refused by the egress policy"):
            list(iter_audience(loaded))
    assert server.requests == []


def test_header_secrets_come_from_the_environment_and_are_never_stored(
    tmp_path: Path,
    engine: Engine,
    monkeypatch: pytest.MonkeyPatch,
    allow_local: Callable[[LocalHTTPServer], None],
) -> None:
    with LocalHTTPServer({"/list.csv": csv_reply(2)}) as server:
        allow_local(server)
        headers = ', headers: {Authorization: "Bearer ${HERALD_SECRET_CRM_TOKEN}", X-Tenant: acme}'
        loaded = url_campaign(tmp_path, server.url("/list.csv"), headers)
        monkeypatch.delenv("HERALD_SECRET_CRM_TOKEN", raising=False)
        with pytest.raises(
            AudienceError, match="environment variable HERALD_SECRET_CRM_TOKEN is not set"
        ):
            list(iter_audience(loaded))
        assert server.requests == []
        monkeypatch.setenv("HERALD_SECRET_CRM_TOKEN", "s3cr3t-t0ken")
        check_and_launch(engine, loaded)
    (seen,) = server.requests
    assert seen.headers["authorization"] == "Bearer s3cr3t-t0ken"
    assert seen.headers["x-tenant"] == "acme"
    with engine.connect() as conn:
        stored = [
            str(value)
            for table in ("campaign", "audience_fetch", "audience_snapshot", "send_job")
            for row in conn.execute(sa.text(f"select * from {table}"))
            for value in row
        ]
    assert not any("s3cr3t" in value for value in stored)
    assert any("${HERALD_SECRET_CRM_TOKEN}" in value for value in stored)  # the spec, as written


@pytest.mark.parametrize(
    ("status", "error"), [(404, AudienceError), (503, AudienceUnavailable)], ids=["404", "503"]
)
def test_an_error_answer_is_reported_not_parsed(
    tmp_path: Path,
    allow_local: Callable[[LocalHTTPServer], None],
    status: int,
    error: type[AudienceError],
) -> None:
    with LocalHTTPServer({"/list.csv": Reply(status=status, body=b"email\na@example.com\n")}) as s:
        allow_local(s)
        loaded = url_campaign(tmp_path, s.url("/list.csv"))
        with pytest.raises(error, match=f"answered {status}") as caught:
            list(iter_audience(loaded))
    assert type(caught.value) is error


def test_unknown_format_asks_for_one(
    tmp_path: Path, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    reply = Reply(headers={"Content-Type": "text/plain"}, body=b"email\na@example.com\n")
    with LocalHTTPServer({"/export": reply}) as server:
        allow_local(server)
        with pytest.raises(AudienceError, match="cannot tell the audience's format") as caught:
            list(iter_audience(url_campaign(tmp_path / "a", server.url("/export"))))
        assert caught.value.hint is not None
        assert "csv, json or ndjson" in caught.value.hint
        explicit = url_campaign(tmp_path / "b", server.url("/export"), ", format: csv")
        assert [r.email for r in iter_audience(explicit) if isinstance(r, Recipient)] == [
            "a@example.com"
        ]


def test_stopping_early_ends_the_download(
    tmp_path: Path, allow_local: Callable[[LocalHTTPServer], None]
) -> None:
    with LocalHTTPServer({"/list.csv": csv_reply(50_000)}) as server:
        allow_local(server)
        rows = iter_audience(url_campaign(tmp_path, server.url("/list.csv")))
        assert isinstance(next(rows), Recipient)
        rows.close()  # type: ignore[attr-defined]
        # The background reader is gone, not parked on a full queue.
        assert not [t for t in threading.enumerate() if t.name == "egress-blocking"]
