"""The browser of the portal's tests: Debian's chromium driven by Playwright (its own
browser download is not available here), a 1280×800 window, console errors collected, and
screenshots of each page written to build/screenshots/ for a reviewer."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = Path(__file__).resolve().parents[2] / "build" / "screenshots"
VIEWPORT = {"width": 1280, "height": 800}

needs_chromium = pytest.mark.skipif(
    not CHROMIUM.exists(), reason="Debian's chromium is not installed (make setup installs it)"
)


@dataclass
class Browser:
    page: Any
    base: str
    errors: list[str] = field(default_factory=list)

    def shot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        path = SCREENSHOTS / f"{name}.png"
        self.page.screenshot(path=str(path))
        return path

    def go(self, path: str) -> None:
        self.page.goto(self.base + path)

    def login(self, token: str) -> None:
        self.go("/portal/login")
        self.page.get_by_label("API token").fill(token)
        self.page.get_by_role("button", name="Log in").click()
        self.page.wait_for_url("**/portal/")


@contextlib.contextmanager
def browser(base: str) -> Iterator[Browser]:
    from playwright.sync_api import sync_playwright

    assert shutil.which(str(CHROMIUM))
    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=str(CHROMIUM))
        try:
            page = chromium.new_page(viewport=VIEWPORT)
            page.set_default_timeout(60_000)
            found = Browser(page, base)
            page.on("console", lambda m: m.type == "error" and found.errors.append(m.text))
            page.on("pageerror", lambda e: found.errors.append(str(e)))
            yield found
        finally:
            chromium.close()
