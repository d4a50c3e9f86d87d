"""``herald serve`` as a process: the dashboard is on with a secret (its pages behind the
login), off without one (404, and one start-up line saying how to enable it)."""

from __future__ import annotations

import httpx

from tests.support.dashboard_setup import PASSWORD
from tests.support.serve_process import herald_serve

KEYS = {"HERALD_SIGNING_KEYS": "k1:0123456789abcdef0123456789"}


def test_dashboard_off_without_a_secret(db_url: str) -> None:
    with herald_serve(db_url, KEYS) as served:
        assert httpx.get(f"{served.base_url}/").status_code == 404
        assert httpx.get(f"{served.base_url}/login").status_code == 404
    notes = [line for line in served.lines if "dashboard off" in line]
    assert len(notes) == 1
    assert "HERALD_DASHBOARD_PASSWORD" in notes[0]


def test_dashboard_on_with_a_password(db_url: str) -> None:
    with (
        herald_serve(db_url, {**KEYS, "HERALD_DASHBOARD_PASSWORD": PASSWORD}) as served,
        httpx.Client(base_url=served.base_url) as client,
    ):
        first = client.get("/")
        assert (first.status_code, first.headers["location"]) == (303, "/login?next=%2F")
        answer = client.post("/login", data={"secret": PASSWORD})
        assert answer.status_code == 303
        assert client.get("/").status_code == 200
    assert any("dashboard at /" in line for line in served.lines)
    assert not any(PASSWORD in line for line in served.lines)
