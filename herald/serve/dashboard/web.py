"""What every dashboard page and action shares: templates, security headers, the session
check, CSRF and Origin checks, flash messages and redirects.

Pages are Jinja2 templates with autoescape on: every value from the database reaches the
HTML escaped (nothing is marked safe). Each response carries a Content-Security-Policy whose
only script is the page's own, allowed by a per-response nonce.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import jinja2
import sqlalchemy as sa
from starlette.datastructures import FormData, UploadFile
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from herald.app.common import Clock, utc_now
from herald.serve.dashboard import auth
from herald.serve.dashboard.auth import Session
from herald.serve.dashboard.settings import DashboardSettings

FLASH_COOKIE = "herald_flash"
MAX_FORM = 64 * 1024  # the largest form is the suppression one: a few hundred bytes

Page = Callable[[Request, Session], Awaitable[Response]]
Action = Callable[[Request, Session, FormData], Awaitable[Response]]

_ENVIRONMENT = jinja2.Environment(
    loader=jinja2.PackageLoader("herald.serve", "templates"),
    autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
    undefined=jinja2.StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


def when(value: datetime | str | None) -> str:
    """A time as people read it: ``2026-03-01 09:00:05 UTC`` (an ISO string keeps its zone)."""
    if value is None or value == "":
        return ""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    if moment.utcoffset() == timedelta(0):
        return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
    return moment.strftime("%Y-%m-%d %H:%M:%S %z")


_ENVIRONMENT.filters["when"] = when


def _policy(nonce: str) -> str:
    # style-src allows inline style attributes (the e-mail HTML of a preview has them, inside
    # a sandboxed frame that runs no script); scripts need the nonce; images are ours or data:
    # (a preview never fetches a remote image: no tracking pixel fires from the dashboard).
    return (
        "default-src 'none'; "
        f"script-src 'nonce-{nonce}'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
        "connect-src 'self'; form-action 'self'; frame-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'"
    )


def security_headers(nonce: str) -> dict[str, str]:
    return {
        "Content-Security-Policy": _policy(nonce),
        "X-Content-Type-Options": "nosniff",
        "Referrer-Policy": "no-referrer",
        "Cache-Control": "no-store",
        "X-Frame-Options": "DENY",
    }


def safe_next(target: str | None) -> str:
    """A local path to go to after login; anything else (another host, ``//x``) is ``/``."""
    if not target or not target.startswith("/") or target.startswith("//") or "\\" in target:
        return "/"
    parts = urlsplit(target)
    if parts.scheme or parts.netloc:
        return "/"
    return target


def is_https(request: Request) -> bool:
    forwarded = request.headers.get("x-forwarded-proto", "").split(",")[0].strip().lower()
    return request.url.scheme == "https" or forwarded == "https"


@dataclass
class Dashboard:
    engine: sa.Engine
    settings: DashboardSettings
    clock: Clock = utc_now
    limiter: auth.LoginLimiter = field(init=False)

    def __post_init__(self) -> None:
        self.limiter = auth.LoginLimiter(self.clock)

    # --- who
    def session_of(self, request: Request) -> Session | None:
        found = auth.bearer(self.settings, request.headers.get("authorization"))
        if found is not None:
            return found
        return auth.read_cookie(self.settings, request.cookies.get(auth.COOKIE), self.clock())

    def origin_ok(self, request: Request) -> bool:
        """Whether a POST comes from this site's own pages.

        Browsers say where a request comes from in ``Sec-Fetch-Site`` and ``Origin``. Our
        pages send ``Referrer-Policy: no-referrer``, under which a browser's ``Origin`` for a
        form POST is ``null``: then ``Sec-Fetch-Site: same-origin`` must vouch for it. Another
        origin named in either header is refused. Scripts send neither and pass on to the CSRF
        token or bearer check.
        """
        site = request.headers.get("sec-fetch-site")
        if site is not None and site not in ("same-origin", "none"):
            return False
        origin = request.headers.get("origin")
        if origin is None:
            return True
        if origin == "null":
            return site == "same-origin"
        hosts = {request.headers.get("host", "")}
        if self.settings.public_url:
            hosts.add(urlsplit(self.settings.public_url).netloc)
        return urlsplit(origin).netloc in hosts - {""}

    # --- answers
    def render(
        self,
        request: Request,
        template: str,
        *,
        session: Session | None = None,
        status: int = 200,
        fragment: bool = False,
        **context: Any,
    ) -> HTMLResponse:
        """``template`` as a page (``fragment``: a part the page fetches, which leaves the
        flash message for the page it was meant for)."""
        nonce = secrets.token_urlsafe(16)
        flash = None
        if session is not None and not session.bearer and not fragment:
            flash = auth.read_flash(self.settings, session, request.cookies.get(FLASH_COOKIE))
        text = _ENVIRONMENT.get_template(template).render(
            nonce=nonce,
            session=session,
            csrf_token="" if session is None else auth.csrf_token(self.settings, session),
            flash=flash,
            path=request.url.path,
            **context,
        )
        response = HTMLResponse(text, status_code=status, headers=security_headers(nonce))
        if request.cookies.get(FLASH_COOKIE) and not fragment:
            response.delete_cookie(FLASH_COOKIE, path="/", httponly=True, samesite="strict")
        return response

    def error(self, request: Request, status: int, message: str) -> HTMLResponse:
        return self.render(request, "dashboard/error.html", status=status, message=message)

    def back(self, request: Request, session: Session, location: str, flash: str) -> Response:
        """303 to ``location`` (a local path) with ``flash`` shown there once."""
        response = RedirectResponse(safe_next(location), status_code=303)
        if not session.bearer:
            response.set_cookie(
                FLASH_COOKIE,
                auth.sign_flash(self.settings, session, flash),
                max_age=60,
                path="/",
                httponly=True,
                samesite="strict",
                secure=is_https(request),
            )
        return response

    # --- guards
    def page(self, handler: Page) -> Callable[[Request], Awaitable[Response]]:
        """A GET that needs a session: without one, 303 to the login page and back."""

        async def guarded(request: Request) -> Response:
            session = self.session_of(request)
            if session is None:
                wanted = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                return RedirectResponse(f"/login?next={quote(wanted, safe='')}", status_code=303)
            return await handler(request, session)

        return guarded

    def action(self, handler: Action) -> Callable[[Request], Awaitable[Response]]:
        """A POST that changes something: a session, a same-origin request and the session's
        CSRF token (bearer requests carry no cookie, so need no token); 403 otherwise, before
        the form is even read."""

        async def guarded(request: Request) -> Response:
            session = self.session_of(request)
            if session is None:
                return self.error(request, 403, "Log in first: this action needs a session.")
            if not self.origin_ok(request):
                return self.error(request, 403, "Refused: the request came from another site.")
            form = await self.form(request)
            if form is None:
                return self.error(request, 413, "The form is too large.")
            token = form.get("csrf_token")
            if not session.bearer and not auth.csrf_ok(
                self.settings, session, token if isinstance(token, str) else None
            ):
                return self.error(
                    request,
                    403,
                    "Refused: the form's security token is missing or wrong."
                    " Reload the page and try again.",
                )
            return await handler(request, session, form)

        return guarded

    async def form(self, request: Request) -> FormData | None:
        """The urlencoded form (what browsers and ``curl -d`` send), read up to ``MAX_FORM``
        bytes (None beyond). Any other body is an empty form, so it fails the CSRF check."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > MAX_FORM:
            return None
        body = bytearray()
        async for chunk in request.stream():
            body += chunk
            if len(body) > MAX_FORM:
                return None
        kind = request.headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "application/x-www-form-urlencoded":
            return FormData()
        try:
            pairs = parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=50)
        except (UnicodeDecodeError, ValueError):
            return FormData()
        fields: list[tuple[str, str | UploadFile]] = list(pairs)
        return FormData(fields)


def text_field(form: FormData, name: str) -> str:
    value = form.get(name)
    return value if isinstance(value, str) else ""
