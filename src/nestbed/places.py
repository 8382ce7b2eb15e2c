"""Where nestbed keeps its machine state: one name for every layer that needs the folder.

Root's state lives under /run/nestbed (mode 0700), or under ``NESTBED_RUN_DIR`` where a
machine, or a test's simulated host, keeps it elsewhere. A string, not a Path: `nestbed
exec`'s fast path reads it, and pathlib would cost it tens of milliseconds to import.
"""

from __future__ import annotations

import os


def run_root() -> str:
    """The folder of this machine's experiments' state."""
    return os.environ.get("NESTBED_RUN_DIR", "/run/nestbed")
