"""SQLite's journal INSERT (one constant statement, executemany'd by the driver with plain
tuples) writes exactly the rows the Core INSERT wrote: same job ids, tokens, states, actor and
detail, hostile text included (NUL shown as ``\\x00`` by ForeignText), ``at`` on the database
clock.

The driver-level form exists for speed only (the drain writes three events per job, and
SQLAlchemy's per-row parameter processing cost more than SQLite's insert).
"""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import event

from dispatch.outbox import sqlcore
from dispatch.states import State, T, Transition
from herald.db import create_engine
from tests.support.examples import examples

texts = st.text(alphabet=st.characters(codec="utf-8"), max_size=40) | st.sampled_from(
    ["", 'it\'s "quoted"', "a\x00b", "\x01\x1f\x7f", "é😀中", "\\x00", "'); --"]
)
rows = st.lists(
    st.tuples(
        st.integers(min_value=1, max_value=2**62),
        st.integers(min_value=0, max_value=2**62),
        st.none() | texts,
    ),
    max_size=8,
)
# Transitions with one source, with several (a source is then named), and T1 (no source).
parts = st.lists(
    st.tuples(st.sampled_from([T.SENT, T.START_SEND, T.CLAIM, T.DATA_UNKNOWN, T.ENQUEUE]), rows),
    min_size=1,
    max_size=3,
)


def _source(transition: Transition) -> State | None:
    """None where the transition's single source (or none, T1) is implied; else its last."""
    return None if len(transition.sources) <= 1 else max(transition.sources)


def _write(template: Path, directory: Path, fast: bool, written: Any, actor: str) -> list[Any]:
    path = directory / f"{uuid.uuid4().hex}.db"
    shutil.copyfile(template, path)
    engine = create_engine(f"sqlite:///{path}")
    write = sqlcore._journal_sqlite if fast else sqlcore._journal_core
    try:
        with engine.begin() as conn:
            for transition, batch in written:
                write(conn, [(transition, batch)], actor, _source(transition))
            return list(
                conn.exec_driver_sql(
                    "SELECT job_id, token, from_state, to_state, actor, detail,"
                    " abs(at - (julianday('now') - 2440587.5) * 86400.0) < 60"
                    " FROM send_event ORDER BY id"
                )
            )
    finally:
        engine.dispose()


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(written=parts, actor=texts)
def test_driver_journal_writes_what_the_core_insert_wrote(
    sqlite_template: Path, tmp_path: Path, written: Any, actor: str
) -> None:
    fast = _write(sqlite_template, tmp_path, True, written, actor)
    core = _write(sqlite_template, tmp_path, False, written, actor)
    assert fast == core
    assert len(fast) == sum(len(batch) for _, batch in written)
    assert all(row[-1] == 1 for row in fast)  # ``at`` is now, on the database clock
    assert all("\x00" not in (row[5] or "") for row in fast)


def test_journal_each_takes_the_driver_form_on_sqlite(
    sqlite_template: Path, tmp_path: Path
) -> None:
    path = tmp_path / "herald.db"
    shutil.copyfile(sqlite_template, path)
    engine = create_engine(f"sqlite:///{path}")
    compiled: list[bool] = []

    def seen(conn: Any, cursor: Any, statement: str, params: Any, context: Any, many: Any) -> None:
        if statement.startswith("INSERT INTO send_event"):
            compiled.append(context.compiled is not None)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        with engine.begin() as conn:
            sqlcore.journal(conn, T.SENT, [(1, 2, "250 a\x00b")], "w", source=State.SENDING)
            row = conn.exec_driver_sql(
                "SELECT job_id, token, from_state, to_state, actor, detail FROM send_event"
            ).one()
    finally:
        engine.dispose()
    assert tuple(row) == (1, 2, "sending", "sent", "w", "250 a\\x00b")
    assert compiled == [False]  # the constant driver statement, not a Core INSERT
