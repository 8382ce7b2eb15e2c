"""The `nestbed` command line: one sub-command per verb, `--json` wherever data is printed.

Commands live in one module per family: ``experiments`` (parse, convert, create, list, show,
delete), ``lifecycle`` (swapin, swapout, run, cleanup), ``active`` (exec, shell, event,
status, linktest, capture), ``instruments`` (sweep, simulate, compare, analyze, validate),
``map`` (the mapper), ``calibrate``, ``study``, ``server`` (``serve`` and the shared
testbed's accounts) and ``remote`` (list, show, create, swapin, swapout, status and delete
against a server, with ``--server``); ``common`` holds what they share, ``render`` the
tables.

Only nestbed's own errors are caught: they print one line per problem and exit with their
category's code (user 2, environment 3, internal 4). Anything else is a bug and, with
`--debug`, shows its traceback.
"""

from __future__ import annotations

import importlib
import sys

from nestbed.cli.calibrate import calibrate
from nestbed.cli.common import app, err, state
from nestbed.cli.map import map_command
from nestbed.cli.server import batch, exemption, project, server
from nestbed.cli.study import study
from nestbed.errors import NestbedError
from nestbed.lifecycle import signals

# Each family registers its commands when imported, in this order (the order of --help).
for _family in ("experiments", "lifecycle", "active", "instruments", "agent"):
    importlib.import_module(f"nestbed.cli.{_family}")
app.command(name="map")(map_command)
app.add_typer(study, name="study")
app.add_typer(calibrate, name="calibrate")
app.add_typer(server, name="server")
app.add_typer(batch, name="batch")
app.add_typer(project, name="project")
app.add_typer(exemption, name="exemption")


def main_entry() -> None:
    """Entry point: run the app, turning nestbed's errors into one-line messages.

    Usage errors are click's (exit 2); anything not a ``NestbedError`` is a bug and keeps its
    traceback.
    """
    # SIGTERM and SIGHUP (timeout, systemd, a closed SSH session) stop a command as Ctrl-C
    # does: what was measured is kept, the experiment swapped out.
    signals.install()
    try:
        app()
        # A stop swallowed on the way (Python drops what a finalizer raises) still stops.
        signals.check()
    except signals.Interrupted as stop:
        err.print(f"stopped by {stop.signal_name}", style="red", markup=False)
        sys.exit(stop.exit_code)
    except SystemExit as exc:
        # typer turns every KeyboardInterrupt into exit 130; the shell's code names the signal.
        stopped = signals.last()
        if exc.code in (0, None, 130) and stopped is not None:
            err.print(f"stopped by {stopped.signal_name}", style="red", markup=False)
            sys.exit(stopped.exit_code)
        raise
    except NestbedError as exc:
        if state.debug:
            raise
        for line in str(exc).splitlines() or [type(exc).__name__]:
            err.print(f"error: {line}", style="red", markup=False)
        sys.exit(exc.exit_code)


__all__ = ["app", "main_entry"]
