"""Where the store is when nobody says (and the variable that says): no database library
needed to know it."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "NESTBED_DB"
"""The environment variable that overrides the default database location."""

DB_FILE_NAME = "nestbed.db"


def default_db_path(environ: dict[str, str] | None = None) -> Path:
    """The default SQLite file: ``$XDG_DATA_HOME/nestbed/nestbed.db``, ``~/.local/share`` if unset.

    As the XDG specification says, a relative ``XDG_DATA_HOME`` is ignored.
    """
    env = os.environ if environ is None else environ
    xdg = env.get("XDG_DATA_HOME", "")
    base = Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".local" / "share"
    return base / "nestbed" / DB_FILE_NAME


def sqlite_file(explicit: str | None, environ: dict[str, str] | None = None) -> Path | None:
    """The SQLite file of the store ``explicit``, ``$NESTBED_DB`` or the default names, when
    it is given as a path (or not given); None for a URL."""
    env = os.environ if environ is None else environ
    value = explicit or env.get(ENV_VAR, "")
    if not value:
        return default_db_path(env)
    if "://" in value:
        return None
    return Path(value).expanduser().absolute()
