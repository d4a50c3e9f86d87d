"""``/suppressions``: search, add and remove entries of the suppression list through
herald.app.suppress (the same checks as ``herald suppress``)."""

from __future__ import annotations

from urllib.parse import quote

from starlette.concurrency import run_in_threadpool
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route

from campaigns.errors import CampaignError
from campaigns.suppression import Suppression
from herald.app import suppress
from herald.serve.dashboard import reads
from herald.serve.dashboard.auth import Session
from herald.serve.dashboard.web import Dashboard, text_field

PATH = "/suppressions"


def matching(entries: list[Suppression], query: str) -> list[Suppression]:
    """Entries whose address, scope, reason or source contains ``query`` (any case)."""
    needle = query.strip().casefold()
    if not needle:
        return entries
    return [
        e
        for e in entries
        if any(needle in field.casefold() for field in (e.address, e.scope, e.reason, e.source))
    ]


def routes(dash: Dashboard) -> list[BaseRoute]:
    async def listing(request: Request, session: Session) -> Response:
        query = request.query_params.get("q", "")[:320]
        entries = await run_in_threadpool(suppress.list_entries, dash.engine)
        found = matching(entries, query)
        return dash.render(
            request,
            "dashboard/suppressions.html",
            session=session,
            q=query,
            entries=found[: reads.MAX_ROWS],
            matched=len(found),
            total=len(entries),
            limit=reads.MAX_ROWS,
        )

    async def add(request: Request, session: Session, form: FormData) -> Response:
        address = text_field(form, "address").strip()
        scope = text_field(form, "scope").strip() or "global"
        reason = text_field(form, "reason").strip() or f"added in the dashboard ({session.actor})"
        try:
            added = await run_in_threadpool(
                lambda: suppress.add(dash.engine, [address], scope=scope, reason=reason)
            )
        except CampaignError as exc:
            return dash.back(request, session, PATH, f"Not added: {exc}")
        mailbox = (added.added or added.already)[0]
        said = (
            f"{mailbox} is now suppressed ({added.scope})."
            if added.added
            else f"{mailbox} was already suppressed ({added.scope})."
        )
        if added.stopped_jobs:
            said += f" {added.stopped_jobs} unsent message(s) to it will not go out."
        return dash.back(request, session, f"{PATH}?q={quote(mailbox)}", said)

    async def remove(request: Request, session: Session, form: FormData) -> Response:
        address = text_field(form, "address").strip()
        scope = text_field(form, "scope").strip() or "global"
        try:
            removed = await run_in_threadpool(
                lambda: suppress.remove(dash.engine, address, scope=scope)
            )
        except CampaignError as exc:
            return dash.back(request, session, PATH, f"Not removed: {exc}")
        if not removed.removed:
            said = f"{removed.mailbox} was not suppressed ({removed.scope})."
        else:
            said = f"{removed.mailbox} is no longer suppressed ({removed.scope})."
        if removed.other_scopes:
            said += f" Still suppressed in: {', '.join(removed.other_scopes)}."
        return dash.back(request, session, PATH, said)

    return [
        Route(PATH, dash.page(listing), methods=["GET"]),
        Route(PATH, dash.action(add), methods=["POST"]),
        Route(f"{PATH}/remove", dash.action(remove), methods=["POST"]),
    ]
