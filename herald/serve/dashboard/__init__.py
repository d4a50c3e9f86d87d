"""The web dashboard of ``herald serve``: campaigns with live progress, a campaign's steps and
sends over time, the in-doubt queue, dead letters, suppressions and stored messages.

``routes(engine, settings)`` is what ``herald.serve.app.build_app`` mounts; with neither
``HERALD_DASHBOARD_PASSWORD`` nor ``HERALD_DASHBOARD_TOKEN`` it is empty (every page 404s).
docs/operations/dashboard.md describes the pages and the security model.
"""

from __future__ import annotations

import sqlalchemy as sa
from starlette.routing import BaseRoute

from herald.app.common import Clock, utc_now
from herald.serve.dashboard import (
    pages_campaigns,
    pages_jobs,
    pages_login,
    pages_preview,
    pages_suppressions,
)
from herald.serve.dashboard.settings import DashboardSettings
from herald.serve.dashboard.web import Dashboard

__all__ = ["DashboardSettings", "routes"]


def routes(
    engine: sa.Engine, settings: DashboardSettings, *, clock: Clock = utc_now
) -> list[BaseRoute]:
    if not settings.enabled:
        return []
    dash = Dashboard(engine, settings, clock)
    return [
        *pages_login.routes(dash),
        *pages_campaigns.routes(dash),
        *pages_jobs.routes(dash),
        *pages_suppressions.routes(dash),
        *pages_preview.routes(dash),
    ]
