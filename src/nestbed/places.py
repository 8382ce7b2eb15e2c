"""Where nestbed keeps its machine state: one name for every layer that needs the folder.

Root's state lives under /run/nestbed (mode 0700), or under ``NESTBED_RUN_DIR`` where a
machine, or a test's simulated host, keeps it elsewhere.
"""

from __future__ import annotations

import os
from pathlib import Path

RUN_DIR = Path(os.environ.get("NESTBED_RUN_DIR", "/run/nestbed"))
