"""Herald's PostgreSQL sessions end a transaction left idle for two minutes, unless the server
already decides when (herald.db._bounded_idle_transactions): a frozen Herald process then holds
its row locks for two minutes at most. A value the operator set for the database or role is
kept, and through a transaction pooler nothing is set in the session. PostgreSQL only: the
setting is PostgreSQL's."""

from __future__ import annotations

import pytest
from sqlalchemy.engine import Engine

from herald.db import IDLE_IN_TRANSACTION_TIMEOUT, POOLER_VARIABLE, create_engine

SHOW = "SHOW idle_in_transaction_session_timeout"


def _url(engine: Engine) -> str:
    return engine.url.render_as_string(hide_password=False)


def _shown(url: str) -> str:
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            shown: str = conn.exec_driver_sql(SHOW).scalar_one()
            return shown
    finally:
        engine.dispose()


def test_a_session_ends_a_transaction_left_idle_for_two_minutes(pg: Engine) -> None:
    assert IDLE_IN_TRANSACTION_TIMEOUT == "2min"
    assert _shown(_url(pg)) == "2min"


def test_the_operators_own_setting_is_kept(pg: Engine) -> None:
    with pg.connect() as conn:
        database = conn.exec_driver_sql("SELECT current_database()").scalar_one()
        conn.exec_driver_sql(
            f'ALTER DATABASE "{database}" SET idle_in_transaction_session_timeout = 45000'
        )
        conn.commit()
    assert _shown(_url(pg)) == "45s"


def test_through_a_transaction_pooler_the_session_keeps_the_servers_value(
    pg: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(POOLER_VARIABLE, "transaction")
    assert _shown(_url(pg)) == "0"
