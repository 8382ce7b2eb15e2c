"""Helpers of the portal's tests: an HTTP session with the portal's cookie, which reads a
page's CSRF token and posts forms as a browser without JavaScript would."""

from __future__ import annotations

import http.cookiejar
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

TIMEOUT_S = 60


@dataclass
class Reply:
    status: int
    text: str
    url: str
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""


@dataclass
class Session:
    base: str
    jar: http.cookiejar.CookieJar = field(default_factory=http.cookiejar.CookieJar)

    @classmethod
    def login(cls, base: str, token: str) -> Session:
        session = cls(base)
        reply = session.post("/portal/login", {"token": token, "csrf": session.csrf("/login")},
                             csrf=False)  # fmt: skip
        assert reply.status == 200 and reply.url.endswith("/portal/"), reply.text[:500]
        return session

    def open(self, request: urllib.request.Request) -> Reply:
        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(self.jar))
        try:
            with opener.open(request, timeout=TIMEOUT_S) as r:
                body = r.read()
                return Reply(
                    r.status, body.decode("utf-8", "replace"), r.url, dict(r.headers), body
                )
        except urllib.error.HTTPError as e:
            body = e.read()
            return Reply(e.code, body.decode("utf-8", "replace"), e.url, dict(e.headers), body)

    def get(self, path: str) -> Reply:
        return self.open(urllib.request.Request(self.base + path))

    def csrf(self, page_path: str = "/") -> str:
        """The CSRF token of the portal's page ``page_path`` (the login page's before login)."""
        page = self.get("/portal" + page_path)
        found = re.search(r'name="csrf-token" content="([0-9a-f]+)"', page.text)
        assert found, page.text[:500]
        return found.group(1)

    def post(self, path: str, fields: dict[str, str], csrf: bool = True) -> Reply:
        if csrf:
            fields = {"csrf": self.csrf(), **fields}
        data = urllib.parse.urlencode(fields).encode()
        return self.open(urllib.request.Request(self.base + path, data=data, method="POST"))
