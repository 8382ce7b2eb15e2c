"""What the command line's commands share that needs no typer: the consoles, the global
options' values and the fast paths' parser of them, JSON output, progress and one-line
messages, and the one way to reach the store and the testbed.

``common`` re-exports all of it for the commands built with typer; ``faststatus`` and
``fastswapout`` use it before typer is imported. The consoles (rich, some 40-60 ms to import)
are made on first use: a fast path that prints a plain line to a pipe never loads rich.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

    from rich.console import Console

SERVER_ENV = "NESTBED_SERVER"  # the --server option's variable: client mode
# What makes rich treat a stream as a terminal other than the stream itself (rich's
# Console.is_terminal and is_interactive): with any of them set, rich decides.
_RICH_TERMINAL_ENV = ("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE")
# What rich's emoji replacement looks at (its pattern is ``:\S*?:``, with a variant suffix).
_EMOJI = re.compile(r":\S*?:")


class _State:
    debug = False
    db: str | None = None
    server: str | None = None  # client mode: the nestbed server's URL
    project: str | None = None


state = _State()
_consoles: dict[str, Console] = {}


def __getattr__(name: str) -> Any:
    # `out` (stdout) and `err` (stderr): made once, when first asked for.
    if name in ("out", "err"):
        if name not in _consoles:
            from rich.console import Console

            _consoles[name] = Console(stderr=name == "err", highlight=False, soft_wrap=True)
        return _consoles[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _console(name: str) -> Console:
    return __getattr__(name)  # type: ignore[no-any-return]


def print_json(data: Any) -> None:
    _console("out").print_json(json.dumps(data), indent=2) if sys.stdout.isatty() else print(
        json.dumps(data, indent=2)
    )


def _plain_text(text: str) -> bool:
    """Whether rich prints ``text`` as it is: printable ASCII with no markup (``[``), nothing
    rich could take for an emoji code (``:name:``, two colons with no space between) and no
    tab or control character, which rich would change."""
    return text.isascii() and text.isprintable() and "[" not in text and not _EMOJI.search(text)


def say(text: str) -> None:
    """Prints a line as ``out.print(text)`` does, without loading rich where that is the
    text itself (no styles, no wrapping: soft_wrap)."""
    if "out" in _consoles or not _plain_text(text):
        _console("out").print(text)
        return
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def _rich_shows_progress() -> bool:
    """Whether rich could show a spinner on stderr: a terminal, or the environment says so."""
    if any(name in os.environ for name in _RICH_TERMINAL_ENV):
        return True
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):
        return False


@contextlib.contextmanager
def progress(text: str) -> Iterator[Callable[[str], None]]:
    """``err.status(text)``: a spinner while the block runs, where rich would show one; what
    the block is given changes its text (``status.update``)."""
    if "err" not in _consoles and not _rich_shows_progress():
        # rich would write nothing: a transient status off a terminal leaves no trace
        yield lambda _text: None
        return
    with _console("err").status(text) as status:
        yield status.update


class GlobalOptions(NamedTuple):
    """A command line the fast paths may take: `nestbed [--debug] [--db STORE] WORD ARGS`."""

    debug: bool
    db: str | None
    args: list[str]  # what follows the command word


def global_options(args: list[str], word: str) -> GlobalOptions | None:
    """The global options before command ``word`` and what follows it, when ``args`` (after
    `nestbed`) carry no other global option and no server is set (its environment variable
    included); else None (the normal path)."""
    if os.environ.get(SERVER_ENV) is not None:
        return None
    debug, db, i = False, None, 0
    while i < len(args) and args[i].startswith("-"):
        option = args[i]
        if option == "--debug":
            debug, i = True, i + 1
        elif option == "--db" and i + 1 < len(args):
            db, i = args[i + 1], i + 2
        elif option.startswith("--db="):
            db, i = option.removeprefix("--db="), i + 1
        else:
            return None
    if args[i : i + 1] != [word]:
        return None
    return GlobalOptions(debug, db, args[i + 1 :])


def local_name(args: list[str], word: str) -> tuple[GlobalOptions, str] | None:
    """The global options and the one name of `nestbed [--debug] [--db STORE] WORD NAME`
    (``args``, after `nestbed`) for an experiment of this machine (no server, no cluster in
    the environment); else None (the normal path)."""
    from nestbed.backend import CLUSTER_ENV

    if os.environ.get(CLUSTER_ENV) is not None:
        return None
    given = global_options(args, word)
    if given is None or len(given.args) != 1 or given.args[0].startswith("-"):
        return None
    return given, given.args[0]


def fast_command(given: GlobalOptions, body: Callable[[], None]) -> Callable[[], None]:
    """``body`` run as the typer app runs a command: the global options set first, and a
    reader that left (`| head`) ends it with exit 1, as click does."""

    def run() -> None:
        state.debug, state.db = given.debug, given.db
        try:
            body()
        except BrokenPipeError:
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)

    return run


def reader():  # type: ignore[no-untyped-def]
    """The store, for a command that only reads it: without SQLAlchemy where it is SQLite."""
    from nestbed.store.reader import open_for_reading

    return open_for_reading(state.db)


def store():  # type: ignore[no-untyped-def]
    """The store the command works on (--db, NESTBED_DB, or the user's default): without
    SQLAlchemy where it is SQLite at the current schema (``store.writer``)."""
    from nestbed.store.writer import open_for_writing

    return open_for_writing(state.db)


def testbed(db):  # type: ignore[no-untyped-def]
    """The life cycle of the experiments in ``db`` on this machine's back end."""
    from nestbed.backend import get
    from nestbed.lifecycle import Testbed

    return Testbed(db, get())
