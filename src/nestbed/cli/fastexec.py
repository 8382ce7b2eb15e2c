"""`nestbed exec NAME NODE [--] CMD...` without the command line's libraries: taken before
typer is imported, it reads the experiment's state from the store with sqlite3 and the node's
namespace and cgroup from the file swap-in wrote (``backend.entry``), then becomes the command
(exec, no fork): its exit status, signals, stdin and terminal are the command's own, as with
`ip netns exec`. Anything it cannot decide on its own (another back end, a server, a store
that is not SQLite, an experiment that is not active, a node it does not know, options) is
left to the normal path, which says what is wrong in one sentence.
"""

from __future__ import annotations

import os
import sqlite3
import sys

ACTIVE = "active"  # store.states.State.ACTIVE, as the database keeps it


def command(args: list[str]) -> list[str] | None:
    """The argv that enters the node, when ``args`` (after `nestbed`) are a plain `exec` of
    an active experiment of this machine's back end; else None."""
    if len(args) < 4 or args[0] != "exec" or args[1].startswith("-") or args[2].startswith("-"):
        return None
    name, node, argv = args[1], args[2], args[3:]
    if argv[0] == "--":
        argv = argv[1:]
    if not argv or os.environ.get("NESTBED_SERVER") or os.environ.get("NESTBED_CLUSTER"):
        return None
    if os.environ.get("NESTBED_BACKEND", "linux") != "linux" or _state(name) != ACTIVE:
        return None
    from nestbed.backend import entry
    from nestbed.places import run_root

    return entry.command(os.path.join(run_root(), name), node, argv)


def _state(name: str) -> str | None:
    """The experiment's state in a SQLite store, read-only; None when it cannot be read."""
    from nestbed.store.paths import sqlite_path

    path = sqlite_path(None)
    if path is None or not os.path.isfile(path):
        return None
    # A URI's own characters escaped (urllib.parse costs milliseconds to import).
    uri = path.replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    try:
        connection = sqlite3.connect(f"file:{uri}?mode=ro", uri=True, timeout=30)
    except sqlite3.Error:
        return None
    try:
        row = connection.execute("SELECT state FROM experiments WHERE name = ?", (name,)).fetchone()
    except sqlite3.Error:
        return None
    finally:
        connection.close()
    return row[0] if row else None


def run(args: list[str]) -> None:
    """Becomes the command ``args`` asks for, or returns (to the normal path)."""
    argv = command(args)
    if argv is None:
        return
    sys.stdout.flush()
    os.execvp(argv[0], argv)
