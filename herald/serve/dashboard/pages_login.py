"""``/login`` and ``/logout``: the one form that works without a session."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import BaseRoute, Route

from herald.serve.dashboard import auth
from herald.serve.dashboard.auth import Session
from herald.serve.dashboard.web import Dashboard, is_https, safe_next, text_field


def routes(dash: Dashboard) -> list[BaseRoute]:
    async def login_form(request: Request) -> Response:
        target = safe_next(request.query_params.get("next"))
        if dash.session_of(request) is not None:
            return RedirectResponse(target, status_code=303)
        return dash.render(request, "dashboard/login.html", next=target, error=None)

    async def login(request: Request) -> Response:
        if not dash.origin_ok(request):
            return dash.error(request, 403, "Refused: the request came from another site.")
        if dash.limiter.blocked():
            return dash.render(
                request,
                "dashboard/login.html",
                status=429,
                next="/",
                error="Too many failed logins: try again in a few minutes.",
            )
        form = await dash.form(request)
        if form is None:
            return dash.error(request, 413, "The form is too large.")
        target = safe_next(text_field(form, "next"))
        which = auth.login_for(dash.settings, text_field(form, "secret"))
        if which is None:
            dash.limiter.failed()
            return dash.render(
                request,
                "dashboard/login.html",
                status=401,
                next=target,
                error="That is not the dashboard password or token.",
            )
        response = RedirectResponse(target, status_code=303)
        response.set_cookie(
            auth.COOKIE,
            auth.new_cookie(dash.settings, which, dash.clock()),
            max_age=int(dash.settings.session_hours * 3600),
            path="/",
            httponly=True,
            samesite="strict",
            secure=is_https(request),
        )
        return response

    async def logout(request: Request, session: Session, _form: object) -> Response:
        response = RedirectResponse("/login", status_code=303)
        response.delete_cookie(
            auth.COOKIE, path="/", httponly=True, samesite="strict", secure=is_https(request)
        )
        return response

    return [
        Route("/login", login_form, methods=["GET"]),
        Route("/login", login, methods=["POST"]),
        Route("/logout", dash.action(logout), methods=["POST"]),
    ]
