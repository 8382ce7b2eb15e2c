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

TYPE_CHECKING = False  # not typing's: a plain `nestbed exec` imports nothing it need not
if TYPE_CHECKING:
    from typing import Any

# The module of each top-level command. A command imports and builds its own module's
# commands only: typer builds a click command of every registered one at each call (40-100
# ms for all of them), and the other modules' imports cost as much again. `--help`, no
# command or an unknown one loads them all, in this order (the order of --help).
COMMANDS = {
    "serve": "server", "server": "server", "batch": "server", "project": "server",
    "exemption": "server",
    "parse": "experiments", "convert": "experiments", "create": "experiments",
    "list": "experiments", "show": "experiments", "delete": "experiments",
    "swapin": "lifecycle", "swapout": "lifecycle", "run": "lifecycle", "cleanup": "lifecycle",
    "exec": "active", "shell": "active", "event": "active", "status": "active",
    "linktest": "active", "capture": "active",
    "sweep": "instruments", "simulate": "instruments", "compare": "instruments",
    "analyze": "instruments", "validate": "instruments", "report": "instruments",
    "agent": "agent", "ssh-agents": "agent", "hosts": "agent", "linkd-capacity": "agent",
    "map": "map", "study": "study",
    "calibrate": "calibrate",
}  # fmt: skip
_GLOBAL_WITH_VALUE = ("--db", "--cluster", "--server", "--project")
_registered: set[str] = set()


def _register(module: str) -> None:
    if module in _registered:
        return
    _registered.add(module)
    from nestbed.cli.common import app

    loaded = importlib.import_module(f"nestbed.cli.{module}")
    if module == "server":
        for group in ("server", "batch", "project", "exemption"):
            app.add_typer(getattr(loaded, group), name=group)
    elif module == "map":
        app.command(name="map")(loaded.map_command)
    elif module in ("study", "calibrate"):
        app.add_typer(getattr(loaded, module), name=module)


def register(argv: list[str] | None = None) -> Any:
    """The app with the commands ``argv`` needs: its command's module, or all of them."""
    from nestbed.cli.common import app

    command = _command(sys.argv[1:] if argv is None else argv)
    if command in COMMANDS:
        _register(COMMANDS[command])
    else:
        for module in dict.fromkeys(COMMANDS.values()):
            _register(module)
    return app


def _command(args: list[str]) -> str | None:
    """The command word of a command line (after the global options), if any."""
    i = 0
    while i < len(args):
        word = args[i]
        if word == "--help":
            return None
        if word in _GLOBAL_WITH_VALUE:
            i += 2
        elif word.startswith("-"):
            i += 1
        else:
            return word
    return None


def __getattr__(name: str) -> Any:
    if name == "app":  # every command, for those who call the app directly (tests)
        return register(["--help"])
    raise AttributeError(name)


def main_entry() -> None:
    """Entry point: run the app, turning nestbed's errors into one-line messages.

    Usage errors are click's (exit 2); anything not a ``NestbedError`` is a bug and keeps its
    traceback. A plain `nestbed exec` becomes its command before any of that is loaded, and a
    plain `nestbed status`, `nestbed swapin` or `nestbed swapout` runs without typer
    (``faststatus``, ``fastswapin``, ``fastswapout``); rich is loaded only to print what
    needs it (an error, a spinner).
    """
    from nestbed import settings

    try:
        settings.apply()  # before anything reads the environment (fastexec's checks)
    except Exception as exc:  # nestbed.errors loaded only then: fastexec's path needs none
        from nestbed.errors import UserError

        if not isinstance(exc, UserError):
            raise
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code)
    from nestbed.cli import fastexec

    fastexec.run(sys.argv[1:])
    from nestbed.cli import faststatus, fastswapin, fastswapout, plain
    from nestbed.cli.plain import state
    from nestbed.errors import NestbedError
    from nestbed.lifecycle import signals

    # SIGTERM and SIGHUP (timeout, systemd, a closed SSH session) stop a command as Ctrl-C
    # does: what was measured is kept, the experiment swapped out.
    signals.install()
    # A plain `nestbed status`, `swapin` or `swapout` runs without typer; everything else
    # through the app.
    args = sys.argv[1:]
    run = (
        faststatus.command(args)
        or fastswapin.command(args)
        or fastswapout.command(args)
        or register()
    )
    try:
        run()
        # A stop swallowed on the way (Python drops what a finalizer raises) still stops.
        signals.check()
    except signals.Interrupted as stop:
        plain.err.print(f"stopped by {stop.signal_name}", style="red", markup=False)
        sys.exit(stop.exit_code)
    except SystemExit as exc:
        # typer turns every KeyboardInterrupt into exit 130; the shell's code names the signal.
        stopped = signals.last()
        if exc.code in (0, None, 130) and stopped is not None:
            plain.err.print(f"stopped by {stopped.signal_name}", style="red", markup=False)
            sys.exit(stopped.exit_code)
        raise
    except NestbedError as exc:
        if state.debug:
            raise
        for line in str(exc).splitlines() or [type(exc).__name__]:
            plain.err.print(f"error: {line}", style="red", markup=False)
        sys.exit(exc.exit_code)


__all__ = ["app", "main_entry", "register"]
