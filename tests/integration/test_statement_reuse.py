"""The hot transitions (claim, T4, the completions) build their statement once per outbox and
reuse it (``dispatch.outbox.forms.Built``): what changes from call to call must be a parameter,
never a value frozen into the first call's statement."""

from __future__ import annotations

from collections.abc import Hashable
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine

from dispatch.models import send_job
from dispatch.outbox.jobs import Completion
from dispatch.states import State
from dispatch.store import OutboxStore
from tests.support.outboxes import new_job

EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _built(store: OutboxStore) -> dict[Hashable, Any]:
    return store.forms.built.kept()


def test_reused_statements_take_each_call_s_values(engine: Engine) -> None:
    store = OutboxStore(engine.dialect.name)
    with engine.begin() as conn:
        store.enqueue(conn, [new_job(f"{i:064d}", EPOCH) for i in range(8)])
    with engine.begin() as conn:
        first = store.claim(conn, owner="a", limit=2, lease_seconds=60)
        started = store.start_sends(conn, [j.lease for j in first], margin_seconds=0, actor="a")
        done = store.complete(
            conn, [Completion(j.lease, State.SENT, 250, "ok a") for j in first], actor="a"
        )
    built = dict(_built(store))
    assert built  # each hot statement was kept
    with engine.begin() as conn:
        second = store.claim(conn, owner="b", limit=3, lease_seconds=600)
        # A margin longer than the lease left: T4's guard refuses every one.
        refused = store.start_sends(conn, [j.lease for j in second], margin_seconds=3600, actor="b")
        allowed = store.start_sends(conn, [second[0].lease], margin_seconds=0, actor="b")
        store.complete(conn, [Completion(second[0].lease, State.SENT, 251, "ok b")], actor="b")
        rows = conn.exec_driver_sql(
            "SELECT id, state, lease_owner, outcome_code, outcome_text FROM send_job ORDER BY id"
        ).all()
        expiries = dict(
            conn.execute(
                sa.select(send_job.c.id, send_job.c.lease_expires_at).where(
                    send_job.c.state == "claimed"
                )
            ).all()
        )
    assert _built(store).keys() == built.keys()  # same shapes: nothing built again
    assert all(_built(store)[k] is v for k, v in built.items())
    assert len(first) == 2  # each call's limit
    assert len(second) == 3
    assert set(started) == set(done) == {j.id for j in first}
    assert refused == {}
    assert set(allowed) == {second[0].id}
    by_id = {row[0]: tuple(row[1:]) for row in rows}
    assert by_id[first[0].id] == ("sent", None, 250, "ok a")
    assert by_id[second[0].id] == ("sent", None, 251, "ok b")
    for job in second[1:]:
        assert by_id[job.id] == ("claimed", "b", None, None)  # this call's owner
    assert expiries.keys() == {j.id for j in second[1:]}
    soon = datetime.now(UTC) + timedelta(seconds=300)
    assert all(at > soon for at in expiries.values()), expiries  # this call's 600 s, not 60 s
