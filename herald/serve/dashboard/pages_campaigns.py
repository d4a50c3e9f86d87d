"""``/`` (campaigns with live progress), ``/fragments/campaigns`` (the table alone, fetched by
the page every 2 s) and ``/campaigns/<name>`` (steps, rates, sends over time, schedule)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from campaigns.control import CampaignNotFound, CampaignStateError
from herald.app.operator import Action, change_status
from herald.app.status import status
from herald.db import reading
from herald.errors import UsageError
from herald.serve.dashboard import reads
from herald.serve.dashboard.auth import Session
from herald.serve.dashboard.chart import Chart, sends_chart
from herald.serve.dashboard.web import Dashboard, text_field

_SETTLED = ("sent", "failed", "cancelled")


@dataclass(frozen=True)
class CampaignLine:
    name: str
    status: str
    sent: int
    total: int
    settled: int
    in_doubt: int
    failed: int
    pending: int
    trigger: str
    next_fire: str | None
    timezone: str | None
    pause_reason: str | None
    scheduler_note: str | None

    @property
    def percent(self) -> int:
        return 100 * self.settled // self.total if self.total else 0


def _line(doc: dict[str, Any]) -> CampaignLine:
    totals = doc["totals"]
    return CampaignLine(
        name=doc["name"],
        status=doc["status"],
        sent=totals["sent"],
        total=sum(totals.values()),
        settled=sum(totals[s] for s in _SETTLED),
        in_doubt=totals["in_doubt"],
        failed=totals["failed"],
        pending=totals["pending"],
        trigger=doc["trigger"],
        next_fire=doc.get("next_fire_local") or doc.get("next_fire"),
        timezone=doc.get("timezone"),
        pause_reason=doc.get("pause_reason"),
        scheduler_note=doc.get("scheduler_note"),
    )


@dataclass(frozen=True)
class StepLine:
    step: str
    total: int
    counts: dict[str, int]
    per_minute: float  # sends per minute over the last reads.RATE_WINDOW
    percent_sent: int


def routes(dash: Dashboard) -> list[BaseRoute]:
    def lines() -> list[CampaignLine]:
        return [_line(doc) for doc in status(dash.engine, clock=dash.clock)["campaigns"]]

    async def campaigns(request: Request, session: Session) -> Response:
        found = await run_in_threadpool(lines)
        return dash.render(request, "dashboard/campaigns.html", session=session, campaigns=found)

    async def fragment(request: Request, session: Session) -> Response:
        found = await run_in_threadpool(lines)
        return dash.render(
            request,
            "dashboard/_campaigns_table.html",
            session=session,
            fragment=True,
            campaigns=found,
        )

    def detail_of(name: str) -> tuple[CampaignLine, list[StepLine], Chart | None] | None:
        try:
            doc = status(dash.engine, name, clock=dash.clock)["campaigns"][0]
        except UsageError:
            return None
        since = dash.clock() - reads.RATE_WINDOW
        minutes = reads.RATE_WINDOW.total_seconds() / 60
        with reading(dash.engine) as conn:
            order = reads.step_order(conn, name)
            recent = reads.recent_sends(conn, name, since)
            buckets = reads.sends_over_time(conn, name)
        by_step = {s["step"]: s for s in doc["steps"]}
        ordered = [s for s in order if s in by_step] + sorted(set(by_step) - set(order))
        steps = []
        for step in ordered:
            counts = by_step[step]["counts"]
            total = by_step[step]["total"]
            steps.append(
                StepLine(
                    step,
                    total,
                    counts,
                    round(recent.get(step, 0) / minutes, 1),
                    100 * counts["sent"] // total if total else 0,
                )
            )
        return _line(doc), steps, None if buckets is None else sends_chart(buckets)

    async def campaign(request: Request, session: Session) -> Response:
        name = str(request.path_params["name"])
        found = await run_in_threadpool(detail_of, name)
        if found is None:
            return dash.error(request, 404, f"No campaign named {name}.")
        line, steps, chart = found
        return dash.render(
            request,
            "dashboard/campaign.html",
            session=session,
            campaign=line,
            steps=steps,
            chart=chart,
            states=list(steps[0].counts) if steps else [],
        )

    async def control(request: Request, session: Session, form: FormData) -> Response:
        name = text_field(form, "campaign")
        asked = text_field(form, "action")
        where = f"/campaigns/{quote(name, safe='')}"
        actions: dict[str, Action] = {"pause": "pause", "resume": "resume"}
        if asked not in actions:
            return dash.back(request, session, where, "Unknown action.")
        action = actions[asked]
        try:
            result = await run_in_threadpool(
                lambda: change_status(dash.engine, name, action, actor=session.actor)
            )
        except (CampaignNotFound, CampaignStateError) as exc:
            return dash.back(request, session, where, str(exc))
        return dash.back(request, session, where, f"Campaign {name} is now {result.status}.")

    return [
        Route("/", dash.page(campaigns), methods=["GET"]),
        Route("/fragments/campaigns", dash.page(fragment), methods=["GET"]),
        Route("/campaigns/{name:path}", dash.page(campaign), methods=["GET"]),
        Route("/campaigns/control", dash.action(control), methods=["POST"]),
    ]
