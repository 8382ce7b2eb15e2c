"""`nestbed [--debug] [--db STORE] swapout NAME` without typer, and without rich unless a
terminal shows its spinner: of a 100-node chain's swap-out (0.55 s), importing typer and
rich's console was a fifth. What the command prints, and how it fails, is the typer
command's own (``swap_out``, which ``cli.lifecycle.swapout`` calls too; errors and signals
are ``main_entry``'s either way). Any other form (help, another option, a server, a cluster)
is left to the normal path.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: this path imports only what `swapout` uses
if TYPE_CHECKING:
    from collections.abc import Callable


def command(args: list[str]) -> Callable[[], None] | None:
    """The swap-out ``args`` (after `nestbed`) ask for, ready to run, when it is a plain one
    of an experiment of this machine; else None."""
    from nestbed.cli.plain import fast_command, local_name

    found = local_name(args, "swapout")
    if found is None:
        return None
    given, name = found
    return fast_command(given, lambda: swap_out(name))


def swap_out(name: str) -> None:
    """Swaps out experiment ``name`` of this machine and prints what `nestbed swapout NAME`
    prints."""
    from nestbed.cli.plain import progress, say, store, testbed

    with store() as db:
        with progress(f"swapping out {name}"):
            testbed(db).swap_out(name)
        runs = db.runs(name)
    where = f"; results in {runs[-1].results_dir}" if runs else ""
    say(f"experiment {name} is swapped out{where}")
