"""The web terminal in a real Chromium against a real server on the Linux back end (root,
setpriv): open it in a node of a swapped-in experiment, type a command and see its output
(as the project's identity, in the node's network), see the pty's size follow the window,
exit and see the session end; photographed, no console error. A page of another origin that
opens the same WebSocket with the browser's cookies is refused."""

from __future__ import annotations

import contextlib
import os
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import browser, needs_chromium
from server_helpers import LINE, open_root, wait_for
from test_portal_csrf_browser import other_origin

from nestbed.server.confinement import PROJECT_ID_BASE

pytestmark = [
    needs_chromium,
    pytest.mark.skipif(
        os.geteuid() != 0 or shutil.which("setpriv") is None,
        reason="a server on the Linux back end (root, setpriv)",
    ),
]

NET = "/v1/projects/net/experiments"
NAME = "i22x-terminal"


@pytest.fixture
def serve_backend() -> str:
    return "linux"


@pytest.fixture
def serve_root() -> Iterator[Path]:
    with open_root("i22x-", (f"net--{NAME}",)) as root:
        yield root


def test_the_web_terminal_runs_a_command_in_the_node(served, people):
    ada = served.client(people["ada"])
    ada.request("PUT", f"{NET}/{NAME}", {"file_name": "line.yaml", "text": LINE})
    ada.request("POST", f"{NET}/{NAME}/swapin")
    assert wait_for(ada, f"{NET}/{NAME}", "swapin")["state"] == "active"
    with contextlib.closing(sqlite3.connect(served.db)) as db:
        net_uid = PROJECT_ID_BASE + dict(db.execute("SELECT name, id FROM projects"))["net"]
    try:
        with browser(served.url) as b:
            b.login(people["ada"])
            b.go(f"/portal/p/net/e/{NAME}")
            b.page.get_by_role("link", name="Terminal").click()
            b.page.get_by_label("Node").select_option("a")
            b.page.get_by_role("button", name="Open a terminal").click()
            b.page.get_by_text("Connected: a shell in the node.").wait_for()
            rows = b.page.locator("#terminal .xterm-rows")
            rows.get_by_text("$").first.wait_for()  # the shell's prompt
            b.page.keyboard.type("echo uid=$(id -u) size=$(stty size | tr ' ' x)\n")
            rows.get_by_text(f"uid={net_uid} size=").wait_for()
            b.page.keyboard.type("ping -c 1 -W 5 b | grep -c '1 received'\n")
            rows.get_by_text("1", exact=True).wait_for()
            b.shot("terminal")
            said = rows.inner_text()
            size = said.split("size=")[-1].split()[0]  # the output line, not the typed one
            rows_n, cols_n = (int(x) for x in size.split("x"))
            assert rows_n > 10 and cols_n > 60, said  # the pty has the page's terminal size
            b.page.keyboard.type("exit 5\n")
            b.page.get_by_text("The session ended (exit 5).").wait_for()
            assert not b.errors, b.errors
            # A page of another origin on the same site (the browser sends the portal's
            # cookies with it) opening the terminal's WebSocket is refused before any shell.
            socket = served.url.replace("http", "ws") + f"/portal/p/net/e/{NAME}/nodes/a/session"
            opener = ("<!doctype html><title>waiting</title><script>const ws = new WebSocket("
                      f"{socket!r}); ws.onopen = () => {{ document.title = 'opened'; }}; "
                      "ws.onclose = () => { if (document.title === 'waiting') "
                      "document.title = 'refused'; };</script>")  # fmt: skip
            with other_origin({"/open": opener}) as port:
                b.page.goto(f"http://127.0.0.1:{port}/open")
                b.page.wait_for_function("document.title !== 'waiting'")
                assert b.page.title() == "refused"
        audit = ada.request("GET", "/v1/projects/net/audit")
        assert [r["outcome"] for r in audit if r["action"] == "session"] == ["ok: node a: shell"]
    finally:
        with contextlib.suppress(Exception):
            ada.request("POST", f"{NET}/{NAME}/swapout")
            wait_for(ada, f"{NET}/{NAME}", "swapout")
