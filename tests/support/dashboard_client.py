"""A synchronous client for the dashboard's ASGI app that keeps cookies between requests
(httpx over ASGITransport: no server, no socket), and helpers to log in and read forms."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import httpx
from starlette.applications import Starlette

BASE = "http://herald.test"
CSRF = re.compile(r'name="csrf_token" value="([0-9a-f]+)"')


class DashClient:
    def __init__(self, app: Starlette, base_url: str = BASE) -> None:
        self.app = app
        self.base_url = base_url
        self.cookies = httpx.Cookies()

    def request(self, method: str, path: str, **kw: Any) -> httpx.Response:
        async def go() -> httpx.Response:
            transport = httpx.ASGITransport(app=self.app)
            async with httpx.AsyncClient(
                transport=transport, base_url=self.base_url, cookies=self.cookies
            ) as client:
                answer = await client.request(method, path, **kw)
                self.cookies = httpx.Cookies(client.cookies)
                return answer

        return asyncio.run(go())

    def get(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw: Any) -> httpx.Response:
        return self.request("POST", path, **kw)

    def login(self, secret: str) -> httpx.Response:
        answer = self.post("/login", data={"secret": secret, "next": "/"})
        assert answer.status_code == 303, answer.text
        return answer

    def csrf(self, path: str = "/suppressions") -> str:
        """The CSRF token a page's forms carry."""
        found = CSRF.search(self.get(path).text)
        assert found is not None, "no CSRF token on the page"
        return found[1]
