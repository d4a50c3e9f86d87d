"""``/in-doubt`` (held messages, their evidence, resolve buttons) and ``/dead`` (failed jobs,
retry). The decisions go through herald.app.operator, journaled with actor
``dashboard:<login>`` like every operator action."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from dispatch.states import State
from herald.app.operator import Changed, resolve_in_doubt, retry_dead
from herald.db import reading
from herald.errors import HeraldError
from herald.serve.dashboard import reads
from herald.serve.dashboard.auth import Session
from herald.serve.dashboard.web import Dashboard, text_field

OUTCOMES = {"sent": State.SENT, "failed": State.FAILED, "resend": State.PENDING}
DONE = {
    "sent": "marked sent (it will not be sent again)",
    "failed": "marked failed (not sent)",
    "resend": "queued to be sent again",
}


def _said(changed: Changed, key: str, done: str, unchanged: str) -> str:
    short = key[:16]
    if changed.keys:
        return f"Job {short}: {done}."
    if key in changed.superseded:
        return (
            f"Job {short} was not changed: a newer version of campaign"
            f" {changed.superseded[key]} replaced its message."
        )
    return f"Job {short} was not changed: {unchanged}."


def routes(dash: Dashboard) -> list[BaseRoute]:
    def held(state: State) -> list[reads.HeldJob]:
        with reading(dash.engine) as conn:
            return reads.held_jobs(conn, state)

    async def in_doubt(request: Request, session: Session) -> Response:
        jobs = await run_in_threadpool(held, State.IN_DOUBT)
        return dash.render(
            request, "dashboard/in_doubt.html", session=session, jobs=jobs, limit=reads.MAX_ROWS
        )

    async def dead(request: Request, session: Session) -> Response:
        jobs = await run_in_threadpool(held, State.FAILED)
        return dash.render(
            request, "dashboard/dead.html", session=session, jobs=jobs, limit=reads.MAX_ROWS
        )

    async def resolve(request: Request, session: Session, form: FormData) -> Response:
        key, outcome = text_field(form, "key").strip(), text_field(form, "outcome")
        if outcome not in OUTCOMES:
            return dash.back(request, session, "/in-doubt", "Choose sent, failed or resend.")
        try:
            changed = await run_in_threadpool(
                lambda: resolve_in_doubt(
                    dash.engine,
                    [key],
                    target=OUTCOMES[outcome],
                    actor=session.actor,
                    why="decided in the dashboard",
                )
            )
        except HeraldError as exc:
            return dash.back(request, session, "/in-doubt", exc.message)
        said = _said(changed, key, DONE[outcome], "it is no longer in doubt")
        return dash.back(request, session, "/in-doubt", said)

    async def retry(request: Request, session: Session, form: FormData) -> Response:
        key = text_field(form, "key").strip()
        try:
            changed = await run_in_threadpool(
                lambda: retry_dead(dash.engine, [key], actor=session.actor)
            )
        except HeraldError as exc:
            return dash.back(request, session, "/dead", exc.message)
        said = _said(changed, key, "queued again with fresh attempts", "it is no longer failed")
        return dash.back(request, session, "/dead", said)

    return [
        Route("/in-doubt", dash.page(in_doubt), methods=["GET"]),
        Route("/in-doubt/resolve", dash.action(resolve), methods=["POST"]),
        Route("/dead", dash.page(dead), methods=["GET"]),
        Route("/dead/retry", dash.action(retry), methods=["POST"]),
    ]
