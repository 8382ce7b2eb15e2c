"""`nestbed [--debug] [--db STORE] status NAME [--json]` without typer: the command line's
framework (its import and the building of its commands) was a fifth of what `status` took.
What the command prints, and how it fails, is the typer command's own (``show``, which
``cli.active.status`` calls too; errors and signals are ``main_entry``'s either way). Any
other form (help, another option, a server) is left to the normal path.
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # not typing's: this path imports only what `status` uses
if TYPE_CHECKING:
    from collections.abc import Callable

SERVER_ENV = "NESTBED_SERVER"  # the --server option's variable: the client mode's status


def command(args: list[str]) -> Callable[[], None] | None:
    """The status ``args`` (after `nestbed`) ask for, ready to run, when it is a plain one
    of this machine's experiment; else None."""
    if os.environ.get(SERVER_ENV) is not None:
        return None
    debug, db, i = False, None, 0
    while i < len(args) and args[i].startswith("-"):
        word = args[i]
        if word == "--debug":
            debug, i = True, i + 1
        elif word == "--db" and i + 1 < len(args):
            db, i = args[i + 1], i + 2
        elif word.startswith("--db="):
            db, i = word.removeprefix("--db="), i + 1
        else:
            return None
    if args[i : i + 1] != ["status"]:
        return None
    rest = args[i + 1 :]
    as_json = "--json" in rest
    names = [word for word in rest if word != "--json"]
    if len(names) != 1 or names[0].startswith("-") or len(rest) > 1 + as_json:
        return None

    def run() -> None:
        from nestbed.cli.plain import state

        state.debug, state.db = debug, db
        try:
            show(names[0], as_json)
        except BrokenPipeError:  # the reader left (`| head`): exit 1, as click does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(1)

    return run


def show(name: str, as_json: bool) -> None:
    """Prints what `nestbed status NAME` prints of an active experiment of this machine."""
    from nestbed.cli.plain import out, print_json, reader, testbed

    with reader() as db:
        found = testbed(db).active(name)
    data = found.status()
    data["nodes"] = [{"node": n.name, "namespace": n.netns} for n in found.plan.nodes]
    if as_json:
        print_json(data)
        return
    from nestbed.cli.render import status_tables

    out.print(status_tables(data))
