"""A dashboard app on a test database, a launched campaign, and the state snapshots the
refusal tests compare before and after."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.engine import Engine
from starlette.applications import Starlette

from dispatch.models import send_job
from dispatch.signed_tokens import SigningKeys
from dispatch.states import State
from herald.app.common import Clock
from herald.app.launch import launch
from herald.mail_settings import MailSettings
from herald.serve.app import build_app
from herald.serve.dashboard import DashboardSettings
from tests.support.campaign_files import write_campaign

PASSWORD = "correct horse battery staple"
TOKEN = "tok-0123456789abcdef-script"
KEYS = SigningKeys.parse("k1:0123456789abcdef0123456789")
LAUNCH_AT = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def dashboard_app(
    engine: Engine,
    *,
    password: str | None = PASSWORD,
    token: str | None = TOKEN,
    clock: Clock | None = None,
) -> Starlette:
    settings = DashboardSettings.derived(password, token, KEYS)
    app = build_app(engine, MailSettings(signing_keys=KEYS), dashboard_settings=settings)
    if clock is not None:  # rebuilt with the clock the test controls
        from herald.serve import dashboard

        app = Starlette(routes=dashboard.routes(engine, settings, clock=clock))
    return app


def launched(engine: Engine, tmp_path: Path, recipients: int = 3) -> str:
    path, _ = write_campaign(tmp_path / "campaign", recipients=recipients)
    launch(engine, path, clock=lambda: LAUNCH_AT, actor="test")
    return "onboarding"


def keys(engine: Engine) -> list[str]:
    with engine.connect() as conn:
        return list(conn.execute(sa.text("select key from send_job order by key")).scalars())


def set_state(engine: Engine, state: State, chosen: list[str], **values: Any) -> None:
    """Put jobs in ``state`` the way a worker's crash or failure would leave them."""
    with engine.begin() as conn:  # through the table: its column types convert the values
        conn.execute(
            sa.update(send_job)
            .where(send_job.c.key.in_(chosen))
            .values(state=state.value, **values)
        )


def snapshot(engine: Engine) -> dict[str, Any]:
    """Everything an action could change: job states, the journal, suppressions, campaigns."""
    with engine.connect() as conn:
        return {
            "jobs": sorted(conn.execute(sa.text("select key, state from send_job")).all()),
            "events": conn.execute(sa.text("select count(*) from send_event")).scalar(),
            "suppression": sorted(
                conn.execute(sa.text("select address, scope from suppression")).all()
            ),
            "campaigns": sorted(conn.execute(sa.text("select name, status from campaign")).all()),
        }


def state_of(engine: Engine, key: str) -> str:
    with engine.connect() as conn:
        return str(
            conn.execute(sa.text("select state from send_job where key = :k"), {"k": key}).scalar()
        )
