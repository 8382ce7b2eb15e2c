"""Helpers of the portal's tests: an HTTP session with the portal's cookie, which reads a
page's CSRF token and posts forms as a browser without JavaScript would."""

from __future__ import annotations

import http.cookiejar
import re
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from server_helpers import LINE, People, Served, wait_for

TIMEOUT_S = 60
EXP = "/v1/projects/net/experiments/line"
PAGE = "/portal/p/net/e/line"


def ran(served: Served, people: People) -> Path:
    """``line`` created, swapped in and out by ada; its run's folder."""
    ada = served.client(people["ada"])
    ada.request("PUT", EXP, {"file_name": "line.yaml", "text": LINE})
    ada.request("POST", EXP + "/swapin")
    wait_for(ada, EXP, "swapin")
    ada.request("POST", EXP + "/swapout")
    wait_for(ada, EXP, "swapout")
    runs = ada.request("GET", EXP + "/runs")
    assert len(runs) == 1 and runs[0]["manifest"] is not None, runs
    return Path(runs[0]["results_dir"])


def long_report(folder: Path, api: Any) -> None:
    """Replaces run 1's report with one of a 5 000-row table (l0 to l4999) ending in THE
    END, once the report drawn after the run (which would overwrite it) is there."""
    for _ in range(600):
        manifest = api.request("GET", EXP + "/runs/1")["manifest"]
        if (manifest.get("report") or {}).get("state") != "drawing":
            break
        time.sleep(0.1)
    rows = "".join(f"| l{i} | {i * 1000} |\n" for i in range(5000))
    (folder / "report.md").write_text(
        f"# line, run 1\n\n## Links\n\n| link | bytes |\n|---|---:|\n{rows}\n## Plots\n\nTHE END\n"
    )


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
