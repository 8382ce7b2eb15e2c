"""Back ends: where an experiment's network lives (``base.Backend``), chosen by name.

``linux`` builds networks on this machine (root); ``fake`` records what it would build, for
tests without root. Importing this package imports neither: each is loaded when asked for,
since the Linux one pulls in pyroute2.
"""

from __future__ import annotations

import os

from nestbed.backend.base import Backend
from nestbed.errors import UserError

NAMES = ("linux", "fake")
ENV = "NESTBED_BACKEND"  # the default back end's name (tests choose the fake one)


def get(name: str | None = None) -> Backend:
    """The back end called ``name`` (default: $NESTBED_BACKEND, else linux)."""
    name = name or os.environ.get(ENV) or "linux"
    if name == "linux":
        from nestbed.backend.linux import LinuxBackend

        return LinuxBackend()
    if name == "fake":
        from nestbed.backend.fake import FakeBackend

        return FakeBackend()
    raise UserError(f"there is no back end called {name!r}; use one of {', '.join(NAMES)}")
