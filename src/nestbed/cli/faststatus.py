"""`nestbed [--debug] [--db STORE] status NAME [--json]` without typer: the command line's
framework (its import and the building of its commands) was a fifth of what `status` took.
What the command prints, and how it fails, is the typer command's own (``show``, which
``cli.active.status`` calls too; errors and signals are ``main_entry``'s either way). Any
other form (help, another option, a server) is left to the normal path.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: this path imports only what `status` uses
if TYPE_CHECKING:
    from collections.abc import Callable


def command(args: list[str]) -> Callable[[], None] | None:
    """The status ``args`` (after `nestbed`) ask for, ready to run, when it is a plain one
    of this machine's experiment; else None."""
    from nestbed.cli.plain import fast_command, global_options

    given = global_options(args, "status")
    if given is None:
        return None
    rest = given.args
    as_json = "--json" in rest
    names = [word for word in rest if word != "--json"]
    if len(names) != 1 or names[0].startswith("-") or len(rest) > 1 + as_json:
        return None
    return fast_command(given, lambda: show(names[0], as_json))


def show(name: str, as_json: bool) -> None:
    """Prints what `nestbed status NAME` prints of an active experiment of this machine."""
    from nestbed.cli.plain import print_json, reader, testbed

    with reader() as db:
        found = testbed(db).active(name)
    data = found.status()
    data["nodes"] = [{"node": n.name, "namespace": n.netns} for n in found.plan.nodes]
    if as_json:
        print_json(data)
        return
    from nestbed.cli.plain import out
    from nestbed.cli.render import status_tables

    out.print(status_tables(data))
