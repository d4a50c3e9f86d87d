"""herald.app.reload: what a SIGHUP asks for, and what is re-executed."""

from __future__ import annotations

import sys

import pytest

from herald.app import reload
from herald.app.reload import ReloadRequest, command_line, on_sighup, reexec_if_requested


@pytest.fixture(autouse=True)
def fresh_request(monkeypatch: pytest.MonkeyPatch) -> ReloadRequest:
    request = ReloadRequest()
    monkeypatch.setattr(reload, "reload_request", request)
    return request


def test_sighup_stops_once_and_asks_for_a_reload(fresh_request: ReloadRequest) -> None:
    stops: list[int] = []
    handler = on_sighup(lambda: stops.append(1), stopping=lambda: False)
    handler()
    handler()  # a second SIGHUP changes nothing
    assert stops == [1]
    assert fresh_request.requested


def test_sighup_after_sigterm_is_not_turned_into_a_restart(
    fresh_request: ReloadRequest,
) -> None:
    stops: list[int] = []
    on_sighup(lambda: stops.append(1), stopping=lambda: True)()
    assert stops == []
    assert not fresh_request.requested


def test_a_stop_signal_after_sighup_cancels_the_reload(fresh_request: ReloadRequest) -> None:
    assert fresh_request.request()
    assert fresh_request.cancel()
    assert not fresh_request.requested
    assert not fresh_request.cancel()


def test_the_same_command_line_is_reexecuted(fresh_request: ReloadRequest) -> None:
    executed: list[tuple[str, list[str]]] = []
    reexec_if_requested(lambda path, argv: executed.append((path, argv)))
    assert executed == []  # no SIGHUP: returns
    fresh_request.request()
    with pytest.raises(SystemExit):
        reexec_if_requested(lambda path, argv: executed.append((path, argv)))
    assert executed == [(sys.executable, command_line())]
    assert command_line()[1:] == sys.orig_argv[1:]
