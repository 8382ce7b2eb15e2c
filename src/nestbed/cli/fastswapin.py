"""`nestbed [--debug] [--db STORE] swapin NAME` of a stored experiment without typer, and
without rich unless a terminal shows its spinner: importing typer and rich's console was
some 60 ms of a 100-node swap-in's 0.85 s. What the command prints, and how it fails, is the
typer command's own (``swap_in``, which ``cli.lifecycle.swapin`` calls too; errors and
signals are ``main_entry``'s either way). Any other form (an experiment file, an option,
help, a server, a cluster) is left to the normal path.
"""

from __future__ import annotations

import time

TYPE_CHECKING = False  # not typing's: this path imports only what `swapin` uses
if TYPE_CHECKING:
    from collections.abc import Callable

    from nestbed.lifecycle import Testbed
    from nestbed.model.options import RunOptions


def command(args: list[str]) -> Callable[[], None] | None:
    """The swap-in ``args`` (after `nestbed`) ask for, ready to run, when it is a plain one
    of an experiment stored on this machine; else None."""
    from nestbed.cli.plain import fast_command, local_name

    found = local_name(args, "swapin")
    if found is None:
        return None
    given, name = found
    if is_file(name):
        return None  # an experiment file, defined (created or refreshed) first
    return fast_command(given, lambda: swap_in(lambda _tb: name))


def is_file(target: str) -> bool:
    """Whether `swapin TARGET` names an experiment file rather than a stored experiment."""
    from pathlib import Path

    path = Path(target)
    return bool(path.suffix) and path.is_file()


def swap_in(name_in: Callable[[Testbed], str], options: RunOptions | None = None) -> None:
    """Swaps in the experiment ``name_in`` gives (a stored one's name, or a file's, defined
    first) with ``options`` (None: the defaults) and prints what `nestbed swapin` prints."""
    from nestbed.cli.plain import progress, say, store, testbed

    with store() as db:
        tb = testbed(db)
        name = name_in(tb)
        start = time.monotonic()
        with progress(f"swapping in {name}") as update:
            active = tb.swap_in(name, options, update)
    p = active.plan
    if active.linktest is not None:
        from nestbed.cli.plain import out
        from nestbed.cli.render import linktest_tables

        out.print(linktest_tables(active.linktest.to_json()))
    say(
        f"experiment {name} is active: {len(p.nodes)} nodes, {len(p.emulated)} emulated links "
        f"({time.monotonic() - start:.2f} s); results in {active.results}"
    )
