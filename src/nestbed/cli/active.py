"""Commands on an active experiment: exec, shell, event, status, linktest, capture."""

from __future__ import annotations

import contextlib
import signal
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from nestbed.cli.common import JsonOption, app, err, out, print_json, reader, remote, testbed
from nestbed.errors import UserError

TIMED_OUT = 124  # the exit status of a command that ran out of time, as timeout(1)'s
HANGUP_WAIT_S = 10  # how long a stopped `shell` waits for its shell on another host to end


def active(name: str, node: str | None = None):  # type: ignore[no-untyped-def]
    """An active experiment (and a check that ``node`` is one of its nodes)."""
    with reader() as db:
        found = testbed(db).active(name)
    if node is not None:
        found.node(node)
    return found


@app.command("exec", context_settings={"allow_interspersed_args": False})
def exec_(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    node: Annotated[str, typer.Argument(help="Node name.")],
    command: Annotated[list[str], typer.Argument(help="Command and arguments (after --).")],
    timeout: Annotated[
        float | None,
        typer.Option(
            "--timeout", help="Stop the command after SECONDS (exit status 124).", min=0.001
        ),
    ] = None,
) -> None:
    """Run a command inside a node of an active experiment; its exit status is passed on
    (through the server's API with --server or NESTBED_SERVER)."""
    if command[:1] == ["--"]:
        command = command[1:]
    if not command:
        raise UserError("no command given; write it after the node, e.g. -- ping -c 1 b")
    if remote() is not None:
        from nestbed.cli import session

        raise typer.Exit(session.exec_(name, node, command, timeout))
    found = active(name, node)
    try:
        code = found.exec(node, command, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        err.print(f"{' '.join(command)} in node {node} ran out of its {timeout:g} s; stopped")
        raise typer.Exit(TIMED_OUT) from None
    # Killed by signal N: 128 + N, as the shell reports it (and as the fast path's exec does).
    raise typer.Exit(code if code >= 0 else 128 - code)


@app.command()
def shell(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    node: Annotated[str, typer.Argument(help="Node name.")],
) -> None:
    """Open an interactive shell inside a node of an active experiment (through the
    server's API with --server or NESTBED_SERVER)."""
    import os

    if remote() is not None:
        from nestbed.cli import session

        raise typer.Exit(session.shell(name, node))
    found = active(name, node)
    user_shell = os.environ.get("SHELL") or "/bin/sh"
    if found.backend.work_elsewhere:
        code = _shell_elsewhere(found, node, user_shell)
    else:
        code = found.exec(node, [user_shell]).returncode
    raise typer.Exit(code if code >= 0 else 128 - code)


def _shell_elsewhere(found, node: str, user_shell: str) -> int:  # type: ignore[no-untyped-def]
    """`shell` in a node on another host; its exit status. With this terminal, the shell gets
    a terminal of its own there, led by it as a login shell leads this one, and this
    terminal carries its bytes; without, it reads its commands from this standard input,
    passed on as it comes, as a local shell reads them."""
    import os

    tty = os.isatty(0) and os.isatty(1)
    if tty:
        shell = found.start(node, ["setsid", "--ctty", user_shell], stdin=0, stdout=1, stderr=2)
    else:
        shell = found.start(node, [user_shell], stdin=subprocess.PIPE, stdout=1, stderr=2)
    try:
        if not tty:
            with contextlib.suppress(BrokenPipeError):  # it ended before reading all of it
                while data := os.read(0, 65536):
                    shell.stdin.write(data)
                    shell.stdin.flush()
                shell.stdin.close()
        return shell.wait()
    except BaseException:  # this command stopped (SIGHUP: its terminal closed)
        shell.signal_group(signal.SIGHUP)  # as a terminal's hangup ends a local shell
        with contextlib.suppress(subprocess.TimeoutExpired):
            shell.wait(HANGUP_WAIT_S)
        raise


@app.command(context_settings={"allow_interspersed_args": False})
def event(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    words: Annotated[
        list[str], typer.Argument(help="[now|+SECONDS] OBJECT VERB [ARGS...], e.g. link0 down")
    ],
    as_json: JsonOption = False,
) -> None:
    """Send an event to an active experiment (Emulab's tevc): now, or in SECONDS (through
    the server's API with --server or NESTBED_SERVER)."""
    after = 0.0
    if words and (words[0] == "now" or words[0].startswith("+")):
        when, words = words[0], words[1:]
        if when != "now":
            try:
                after = float(when[1:])
            except ValueError:
                raise UserError(
                    f"'{when}' is not a time; write now or +SECONDS, e.g. +2.5"
                ) from None
    if len(words) < 2:
        raise UserError("an event is OBJECT VERB [ARGS...], for example: link0 down")
    if (server := remote()) is not None:
        reply = server.event(name, words[0], words[1], words[2:], after)
    else:
        reply = active(name).event(words[0], words[1], words[2:], after_s=after)
    if as_json:
        print_json(reply)
        return
    if "scheduled_s" in reply:
        out.print(f"scheduled at {reply['scheduled_s']:.3f} s into the run")
        return
    row = reply["event"]
    if row["outcome"] != "ok":
        raise UserError(f"event {' '.join(words)} failed: {row['message']}")
    detail = f": {row['message']}" if row["message"] else ""
    out.print(f"done at {row['actual_s']:.3f} s into the run{detail}")


@app.command()
def status(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    as_json: JsonOption = False,
) -> None:
    """Show an active experiment: nodes, links with live counters, programs and traffic."""
    if (server := remote()) is not None:
        return server.status(name, as_json)
    from nestbed.cli import faststatus

    faststatus.show(name, as_json)


@app.command()
def linktest(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    level: Annotated[
        int,
        typer.Option(
            "--level", help="1 latency, 2 + routing, 3 + loss, 4 + bandwidth (as Emulab's)."
        ),
    ] = 3,
    as_json: JsonOption = False,
) -> None:
    """Check that an active experiment's links, routes and shaping are what its file asked
    for; exits with 1 when a check fails."""
    found = active(name)
    if as_json:
        report, folder = found.run_linktest(level)
    else:
        with err.status(f"linktest of {name}, level {level}") as status:
            report, folder = found.run_linktest(level, status.update)
    data = report.to_json() | {"folder": str(folder) if folder else None}
    if as_json:
        print_json(data)
    else:
        from nestbed.cli.render import linktest_tables

        out.print(linktest_tables(data))
        if folder:
            out.print(f"report in {folder}")
    if report.failures:
        raise typer.Exit(1)


@app.command()
def capture(
    name: Annotated[str, typer.Argument(help="Experiment name.")],
    link: Annotated[str, typer.Argument(help="Link or LAN name.")],
    duration: Annotated[
        float | None, typer.Option(help="Seconds to capture (default: until Ctrl-C).")
    ] = None,
    output: Annotated[
        Path, typer.Option("--output", "-o", help="Folder for the pcap files.")
    ] = Path("."),
) -> None:
    """Capture packets at every end of a link or LAN (one pcap per member node)."""
    found = active(name)
    with err.status(f"capturing on {link} (Ctrl-C stops)"):
        files = found.capture(link, output, duration)
    for f in files:
        out.print(str(f))
