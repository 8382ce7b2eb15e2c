"""The server's settings: where it listens, which store it owns, where runs write, limits."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nestbed.server.idle import IdleSettings

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8722
MAX_FILE_BYTES = 1 << 20
"""The largest experiment file the API accepts (Emulab's biggest ns files are tens of kB)."""
MAX_BODY_BYTES = 2 * MAX_FILE_BYTES
"""The largest request body: a file sent as a JSON string may grow by its escapes."""
TICK_S = 5.0
"""How often the background loop runs admission, the batch queue and idle checks."""
MAX_SESSIONS = 8
"""The exec and shell sessions one user may have open at once (``session_limit``)."""


@dataclass(frozen=True, kw_only=True)
class ServerConfig:
    """What ``nestbed serve`` was told (``store``: a path or URL as ``--db`` takes it)."""

    store: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    results_root: Path
    tick_s: float = TICK_S
    max_file_bytes: int = MAX_FILE_BYTES
    idle: IdleSettings = field(default_factory=IdleSettings)
    hosts: Path | None = None  # this machine's hosts.yaml: its capacity for admission
    # Projects whose programs run as root, unconfined (the admin's --trusted-project)
    trusted_projects: frozenset[str] = frozenset()
    # Exec and shell sessions one user may have open at once (None: no limit)
    max_sessions: int | None = MAX_SESSIONS
