"""herald.app.db_wait: the backoff schedule, the wait setting, which failures are waited for,
and the wait loop on a fake clock (no real sleeping)."""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import pytest
import sqlalchemy.exc
from hypothesis import given
from hypothesis import strategies as st

from herald.app.db_wait import Backoff, open_waiting, wait_seconds, waitable_reason
from herald.errors import ConfigError, DatabaseError

URL = "postgresql://herald:hunter2@db.internal:5432/herald"


def driver_error(message: str) -> DatabaseError:
    """What ``open_engine`` raises: our DatabaseError caused by SQLAlchemy's wrapper."""
    orig = Exception(message)
    wrapped = sqlalchemy.exc.OperationalError("SELECT 1", {}, orig)
    try:
        raise DatabaseError(f"cannot open the database: {message}") from wrapped
    except DatabaseError as exc:
        return exc


@given(
    st.floats(0.01, 5),
    st.floats(1.1, 4),
    st.floats(1, 120),
    st.floats(0, 0.5),
    st.lists(st.floats(0, 0.999999), min_size=1, max_size=40),
)
def test_delays_start_small_grow_and_never_pass_the_ceiling(
    first: float, factor: float, ceiling: float, jitter: float, draws: list[float]
) -> None:
    backoff = Backoff(first=first, factor=factor, ceiling=ceiling, jitter=jitter)
    randoms = iter(draws)
    delays = backoff.delays(lambda: next(randoms))
    got = [next(delays) for _ in draws]
    assert all(0 < d <= ceiling for d in got)
    assert got[0] <= first * (1 + jitter) + 1e-9
    # Without jitter the schedule doubles (by ``factor``) up to the ceiling and stays there.
    exact = Backoff(first=first, factor=factor, ceiling=ceiling, jitter=0).delays(lambda: 0.5)
    plain = [next(exact) for _ in draws]
    assert plain == sorted(plain)
    assert plain[0] == min(first, ceiling)


def test_the_default_schedule_is_half_a_second_doubling_to_thirty() -> None:
    delays = Backoff(jitter=0).delays(lambda: 0.5)
    assert [next(delays) for _ in range(9)] == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]


@pytest.mark.parametrize(
    ("value", "service", "expected"),
    [
        (None, True, math.inf),
        (None, False, 0.0),
        ("", True, math.inf),
        ("forever", False, math.inf),
        (" Inf ", False, math.inf),
        ("0", True, 0.0),
        ("12.5", True, 12.5),
    ],
)
def test_the_wait_setting(value: str | None, service: bool, expected: float) -> None:
    assert wait_seconds(value, service=service) == expected


@given(st.text(max_size=30))
def test_any_wait_setting_is_seconds_or_a_config_error(text: str) -> None:
    try:
        seconds = wait_seconds(text, service=True)
    except ConfigError as exc:
        assert "HERALD_DATABASE_WAIT" in exc.message
    else:
        assert seconds >= 0
        assert not math.isnan(seconds)


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        (
            'connection failed: connection to server at "127.0.0.1", port 5432 failed: '
            "Connection refused\n\tIs the server running on that host?",
            "connection refused",
        ),
        ("FATAL:  the database system is starting up", "the server is starting up"),
        ("FATAL:  the database system is shutting down", "the server is shutting down"),
        ("FATAL:  sorry, too many clients already: too many connections", "too many connections"),
        ("FATAL:  remaining connection slots are reserved for roles", "too many connections"),
        ("server closed the connection unexpectedly", "the connection was closed"),
        ("FATAL:  terminating connection due to administrator command", "the server terminated"),
        ("some new error text from a future libpq", "the database is not available"),
    ],
)
def test_a_server_that_is_not_ready_is_waited_for(message: str, reason: str) -> None:
    found = waitable_reason(driver_error(message))
    assert found is not None
    assert found.startswith(reason)


@pytest.mark.parametrize(
    "message",
    [
        'FATAL:  password authentication failed for user "herald"',
        'FATAL:  database "herlad" does not exist',
        'FATAL:  role "nobody" does not exist',
        "FATAL:  no pg_hba.conf entry for host",
        "fe_sendauth: no password supplied",
        'invalid connection option "sslmdoe"',
        "FATAL:  permission denied for database herald",
    ],
)
def test_a_setting_that_cannot_work_is_not_waited_for(message: str) -> None:
    assert waitable_reason(driver_error(message)) is None


def test_our_own_errors_and_sqlite_paths_are_not_waited_for() -> None:
    assert waitable_reason(ConfigError("malformed database URL")) is None
    assert waitable_reason(DatabaseError("cannot create the database file /x/y.db")) is None
    assert waitable_reason(driver_error("unable to open database file"), sqlite=True) is None
    assert waitable_reason(driver_error("disk I/O error"), sqlite=True) is None
    assert waitable_reason(driver_error("database is locked"), sqlite=True) is not None


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def failing(times: int, message: str) -> tuple[list[int], Callable[[], str]]:
    calls: list[int] = []

    def open_database() -> str:
        calls.append(1)
        if len(calls) <= times:
            raise driver_error(message)
        return "engine"

    return calls, open_database


def test_it_retries_with_backoff_and_logs_one_line_per_attempt(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeTime()
    calls, open_database = failing(4, "Connection refused")
    caplog.set_level(logging.INFO, logger="herald.service")
    got = open_waiting(
        open_database,
        url=URL,
        max_wait=math.inf,
        clock=fake.clock,
        sleep=fake.sleep,
        unit_random=lambda: 0.5,
    )
    assert got == "engine"
    assert len(calls) == 5
    assert fake.slept == [0.5, 1, 2, 4]
    waiting = [r for r in caplog.records if getattr(r, "event", None) == "database_waiting"]
    assert [getattr(r, "attempt", None) for r in waiting] == [1, 2, 3, 4]
    assert all(getattr(r, "reason", None) == "connection refused" for r in waiting)
    assert all(r.levelno == logging.WARNING for r in waiting)
    assert "hunter2" not in caplog.text
    assert "db.internal" in caplog.text
    ready = [r for r in caplog.records if getattr(r, "event", None) == "database_ready"]
    assert len(ready) == 1


def test_it_gives_up_at_the_deadline_with_one_error() -> None:
    fake = FakeTime()
    _calls, open_database = failing(1000, "the database system is starting up")
    with pytest.raises(DatabaseError) as raised:
        open_waiting(
            open_database,
            url=URL,
            max_wait=10,
            clock=fake.clock,
            sleep=fake.sleep,
            unit_random=lambda: 0.5,
        )
    assert sum(fake.slept) == pytest.approx(10)  # the last sleep is cut to the deadline
    assert "gave up after 10 s" in raised.value.message
    assert "starting up" in raised.value.message
    assert "hunter2" not in raised.value.message


def test_no_wait_raises_the_first_failure_as_it_is() -> None:
    fake = FakeTime()
    calls, open_database = failing(1, "Connection refused")
    with pytest.raises(DatabaseError) as raised:
        open_waiting(
            open_database,
            url=URL,
            max_wait=0,
            clock=fake.clock,
            sleep=fake.sleep,
        )
    assert raised.value.message == "cannot open the database: Connection refused"
    assert len(calls) == 1
    assert fake.slept == []


def test_a_wrong_password_fails_at_once_even_with_forever(
    caplog: pytest.LogCaptureFixture,
) -> None:
    fake = FakeTime()
    calls, open_database = failing(1000, 'FATAL:  password authentication failed for user "h"')
    with pytest.raises(DatabaseError):
        open_waiting(
            open_database,
            url=URL,
            max_wait=math.inf,
            clock=fake.clock,
            sleep=fake.sleep,
        )
    assert len(calls) == 1
    assert fake.slept == []
    assert not [r for r in caplog.records if getattr(r, "event", None) == "database_waiting"]
