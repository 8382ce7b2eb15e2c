"""A command driven through a terminal, as a user at a keyboard drives it: a pty made here
(``os.openpty``) is its stdin, stdout, stderr and controlling terminal (so a resize sends it
SIGWINCH), what it prints is read from the master end, keystrokes are written there."""

from __future__ import annotations

import fcntl
import os
import select
import statistics
import struct
import subprocess
import termios
import time
from pathlib import Path

from simulated import processes


class Typed:
    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path | None = None,
                 cols: int = 80, rows: int = 24):  # fmt: skip
        self.master, slave = os.openpty()
        self.resize(cols, rows)
        # setsid --ctty: the command leads a session whose terminal is this pty.
        self.process = subprocess.Popen(["setsid", "--ctty", *argv], stdin=slave,
                                        stdout=slave, stderr=slave, env=env, cwd=cwd)  # fmt: skip
        os.close(slave)
        self.seen = b""

    def resize(self, cols: int, rows: int) -> None:
        fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def type(self, text: str) -> None:
        os.write(self.master, text.encode())

    def expect(self, wanted: bytes, timeout_s: float = 120) -> bytes:
        """Reads until ``wanted`` has been printed; all printed so far."""
        deadline = time.monotonic() + timeout_s
        while wanted not in self.seen:
            left = deadline - time.monotonic()
            assert left > 0, f"{wanted!r} not printed in {timeout_s} s: {self.seen!r}"
            if select.select([self.master], [], [], left)[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # EIO: every holder of the terminal is gone
                    assert wanted in self.seen, f"ended before {wanted!r}: {self.seen!r}"
        return self.seen

    def echo_s(self, key: str = "x") -> float:
        """How long a keystroke takes to be echoed back."""
        before = len(self.seen)
        began = time.monotonic()
        self.type(key)
        while key.encode() not in self.seen[before:]:
            if select.select([self.master], [], [], 60)[0]:
                self.seen += os.read(self.master, 65536)
        return time.monotonic() - began

    def echoes(self) -> bool:
        """Whether this terminal echoes (a program that made it raw gave it back)."""
        return bool(termios.tcgetattr(self.master)[3] & termios.ECHO)

    def wait(self, timeout_s: float = 120) -> int:
        """Its exit status, reading what it still prints meanwhile."""
        deadline = time.monotonic() + timeout_s
        while self.process.poll() is None and time.monotonic() < deadline:
            if select.select([self.master], [], [], 0.1)[0]:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:
                    break
        return self.process.wait(max(0.0, deadline - time.monotonic()))

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        os.close(self.master)


def shell_session(typed: Typed, prompt: bool = True) -> None:
    """A shell's session in ``typed``: checks its terminal, a resize, the echo (timed), and
    ends it with ``exit 5``; a command it runs is stopped with Ctrl-C."""
    if prompt:
        typed.expect(b"# ")  # root's shell's prompt: this terminal is the shell's from now on
    typed.type("echo TTY=$(tty) ON=$(hostname)\r")
    said = typed.expect(b"TTY=/dev/pts/").decode(errors="replace")
    print(next(line for line in said.splitlines() if line.startswith("TTY=")))
    typed.resize(132, 50)  # every poll carrying the next line carries the size too
    typed.type("echo SIZE=$(stty size)\r")
    typed.expect(b"SIZE=50 132")
    # Ctrl-C, a byte here, is SIGINT there: the pty is the controlling terminal of the shell,
    # whose foreground command it ends.
    typed.type("sleep 615\r")
    deadline = time.monotonic() + 60
    while not processes("sleep 615") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes("sleep 615"), typed.seen
    typed.type("\x03")
    typed.type('echo BA""CK\r')  # its echo is not what it prints
    typed.expect(b"BACK")
    assert not processes("sleep 615")
    echoes = [typed.echo_s() for _ in range(9)]
    print(
        f"a keystroke's echo through the host's agent: median {statistics.median(echoes) * 1e3:.0f} ms, "
        f"max {max(echoes) * 1e3:.0f} ms of {len(echoes)} (load {os.getloadavg()[0]:.1f})"
    )
    typed.type("\x15exit 5\r")  # Ctrl-U: the x's typed are not a command
    assert typed.wait() == 5, typed.seen
    assert typed.echoes()  # raw while the shell had it, as it was since
