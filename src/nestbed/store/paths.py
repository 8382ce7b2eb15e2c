"""Where the store is when nobody says (and the variable that says): no database library
needed to know it, nor pathlib (`nestbed exec`'s fast path finds the store with os.path)."""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

ENV_VAR = "NESTBED_DB"
"""The environment variable that overrides the default database location."""

DB_FILE_NAME = "nestbed.db"


def default_db_path(environ: dict[str, str] | None = None) -> Path:
    """The default SQLite file: ``$XDG_DATA_HOME/nestbed/nestbed.db``, ``~/.local/share`` if unset.

    As the XDG specification says, a relative ``XDG_DATA_HOME`` is ignored.
    """
    from pathlib import Path

    return Path(_default(os.environ if environ is None else environ))


def _default(env: Mapping[str, str]) -> str:
    xdg = env.get("XDG_DATA_HOME", "")
    home = os.path.expanduser("~")  # what Path.home() answers
    base = xdg if xdg and os.path.isabs(xdg) else os.path.join(home, ".local", "share")
    return os.path.join(base, "nestbed", DB_FILE_NAME)


def sqlite_path(explicit: str | None, environ: dict[str, str] | None = None) -> str | None:
    """``sqlite_file`` as a string."""
    env = os.environ if environ is None else environ
    value = explicit or env.get(ENV_VAR, "")
    if not value:
        return _default(env)
    if "://" in value:
        return None
    return os.path.join(os.getcwd(), os.path.expanduser(value))  # as Path.absolute(): no ".."


def sqlite_file(explicit: str | None, environ: dict[str, str] | None = None) -> Path | None:
    """The SQLite file of the store ``explicit``, ``$NESTBED_DB`` or the default names, when
    it is given as a path (or not given); None for a URL."""
    from pathlib import Path

    path = sqlite_path(explicit, environ)
    return None if path is None else Path(path)
