"""What the command line's commands share that needs no typer: the consoles, the global
options' values, JSON output, and the one way to read the store and reach the testbed.

``common`` re-exports all of it for the commands built with typer; ``faststatus`` uses it
before typer is imported.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


class _State:
    debug = False
    db: str | None = None
    server: str | None = None  # client mode: the nestbed server's URL
    project: str | None = None


state = _State()


def print_json(data: Any) -> None:
    out.print_json(json.dumps(data), indent=2) if sys.stdout.isatty() else print(
        json.dumps(data, indent=2)
    )


def reader():  # type: ignore[no-untyped-def]
    """The store, for a command that only reads it: without SQLAlchemy where it is SQLite."""
    from nestbed.store.reader import open_for_reading

    return open_for_reading(state.db)


def testbed(db):  # type: ignore[no-untyped-def]
    """The life cycle of the experiments in ``db`` on this machine's back end."""
    from nestbed.backend import get
    from nestbed.lifecycle import Testbed

    return Testbed(db, get())
