"""CSRF in a real Chromium: a page of another origin that posts the portal's forms with the
browser's cookies is refused, and the portal's own forms work.

The forging page is served by a second HTTP server on another port of 127.0.0.1: the same
*site* as the portal (ports do not make sites), so Chromium sends the portal's SameSite=Strict
cookies with its posts and only the CSRF token stands in the way; and the same page under
``localhost``, another site, whose posts carry no cookie at all."""

from __future__ import annotations

import contextlib
import http.server
import threading
from collections.abc import Iterator

from browser import browser, needs_chromium
from server_helpers import LINE, People, Served

pytestmark = needs_chromium

EXP = "/v1/projects/net/experiments/line"
PAGE = "/portal/p/net/e/line"


def forger(portal: str, path: str, fields: dict[str, str]) -> str:
    """A page that posts ``fields`` to the portal's ``path`` as soon as it loads."""
    inputs = "".join(f'<input type="hidden" name="{k}" value="{v}">' for k, v in fields.items())
    return (f'<!doctype html><title>prize</title><form id="f" method="post" '
            f'action="{portal}{path}">{inputs}</form>'
            '<script>document.getElementById("f").submit()</script>')  # fmt: skip


@contextlib.contextmanager
def other_origin(pages: dict[str, str]) -> Iterator[int]:
    """An HTTP server on another port of 127.0.0.1 serving ``pages`` (path to HTML)."""

    class Pages(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = pages.get(self.path, "").encode()
            self.send_response(200 if body else 404)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Pages)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def test_a_forged_post_from_another_origin_is_refused_and_the_portals_own_forms_work(
    served: Served, people: People
) -> None:
    ada = served.client(people["ada"])
    ada.request("PUT", EXP, {"file_name": "line.yaml", "text": LINE})
    pages = {
        "/delete": forger(served.url, PAGE + "/delete", {}),
        "/delete-guessed": forger(served.url, PAGE + "/delete", {"csrf": "0" * 64}),
        "/login": forger(served.url, "/portal/login", {"token": people["bob"]}),
    }
    with other_origin(pages) as port, browser(served.url) as b:
        b.login(people["ada"])
        for forged in ("/delete", "/delete-guessed", "/login"):
            b.page.goto(f"http://127.0.0.1:{port}{forged}")
            b.page.wait_for_url(served.url + "/portal/**")
            assert "CSRF token is missing or wrong" in b.page.inner_text("main"), forged
            assert b.page.title().startswith("Error 403"), forged
        # From another site (localhost is not 127.0.0.1's site) the cookies stay home.
        b.page.goto(f"http://localhost:{port}/delete")
        b.page.wait_for_url(served.url + "/portal/**")
        assert "Log in first" in b.page.inner_text("main")
        assert ada.request("GET", EXP)["state"] == "defined"
        # Still ada (the forged login did not make the browser bob's), and her forms work.
        b.go(PAGE)
        assert b.page.inner_text(".who") == "ada"
        b.page.locator("#swapin").click()
        b.page.wait_for_url(served.url + PAGE)
        assert ada.request("GET", EXP)["state"] in ("swapping-in", "active")
        # The only console errors: the refused posts' own status lines.
        assert all("403" in e or "401" in e for e in b.errors), b.errors
