"""nestbed-spawn's client: an experiment's programs started by a small process of their own
instead of the controller, so what a start costs is not spent under the controller's global
interpreter lock, where the programs due at one instant took turns.

The controller starts one ``Spawner`` per run, before its t0. A start sends the program's
argv (already entering its node: ``Backend.entering``), environment and output files on a
socket and reads back its pid and the time its process began; ``nestbed-spawn`` copies the
program's output into its files (at most a limit each) and reports its exit and the end of
its output on a pipe, which one thread here reads (``Spawned``, a ``Popen`` to the code that
waits for and stops programs). The protocol is ``crates/nestbed-spawn/src/protocol.rs``.
"""

from __future__ import annotations

import itertools
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

from nestbed.errors import InternalError

CLOSE_WAIT_S = 5.0  # how long closing waits for nestbed-spawn to go before killing it


class Spawned:
    """A program nestbed-spawn started: its pid, status and ``wait`` as a ``Popen``'s, the
    ``time.monotonic()`` just after its process began its command (``started_at``), and the
    end of its output (``output_ended``). Should nestbed-spawn end before it does, its wait
    ends with no status (``returncode`` None)."""

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.pid = 0
        self.returncode: int | None = None
        self.started_at = 0.0
        self.exited = threading.Event()
        self.closed = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int | None:
        if not self.exited.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return self.returncode

    def output_ended(self, timeout: float | None) -> bool:
        """Whether both its output streams have ended (its files complete) within
        ``timeout``: a child it left in the background may hold them open."""
        return self.closed.wait(timeout)


class Spawner:
    """One nestbed-spawn process and the programs it started."""

    def __init__(self, binary: str) -> None:
        ours, theirs = socket.socketpair()
        with theirs:
            # A session of its own: a terminal's Ctrl-C is the controller's to handle. It
            # ends when this end of the socket closes, the controller's death included.
            self.process = subprocess.Popen(
                [binary], stdin=theirs, stdout=subprocess.PIPE, start_new_session=True
            )
        self.socket = ours
        self.answers = ours.makefile("rb")
        self.lock = threading.Lock()  # one request at a time: its answer is the next line
        self.numbers = itertools.count(1)
        self.running: dict[int, Spawned] = {}
        self.closing = False
        self.reader = threading.Thread(target=self._notes, name="spawner-notes", daemon=True)
        self.reader.start()

    def start(
        self, argv: Sequence[str], env: Mapping[str, str], stdout: Path, stderr: Path, limit: int
    ) -> Spawned:
        """Starts ``argv`` with exactly ``env``, in a session of its own, input from
        /dev/null, its output into ``stdout`` and ``stderr`` (``limit`` bytes each); once it
        has begun. An ``OSError`` when it could not (a file, a command not found)."""
        spawned = Spawned(argv)
        number = next(self.numbers)
        request = {
            "id": number, "argv": list(argv), "env": [f"{k}={v}" for k, v in env.items()],
            "stdout": str(stdout), "stderr": str(stderr), "limit": limit,
        }  # fmt: skip
        self.running[number] = spawned  # before its notes can come
        try:
            with self.lock:
                self.socket.sendall(json.dumps(request).encode() + b"\n")
                line = self.answers.readline()
        except OSError as exc:
            self.running.pop(number, None)
            raise InternalError(
                f"nestbed-spawn could not be asked to start a program: {exc}"
            ) from exc
        if not line:
            self.running.pop(number, None)
            raise InternalError("nestbed-spawn ended; programs can no longer be started")
        answer = json.loads(line)
        if "pid" not in answer:
            self.running.pop(number, None)
            if answer.get("errno"):
                raise OSError(answer["errno"], os.strerror(answer["errno"]), answer["filename"])
            raise InternalError(f"nestbed-spawn refused a request: {answer['error']}")
        spawned.pid, spawned.started_at = answer["pid"], answer["started_ns"] / 1e9
        return spawned

    def close(self) -> None:
        """Ends nestbed-spawn (its programs have ended: the run's end saw to it)."""
        self.closing = True
        self.answers.close()
        self.socket.close()
        try:
            self.process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join()

    def _notes(self) -> None:
        """Hands each note to its program: its exit status, the end of its output."""
        assert self.process.stdout is not None
        with self.process.stdout as notes:
            for line in notes:
                note = json.loads(line)
                spawned = self.running.get(note["id"])
                if spawned is None:
                    continue
                if "exit" in note:
                    spawned.returncode = note["exit"]
                    spawned.exited.set()
                else:
                    spawned.closed.set()
                if spawned.exited.is_set() and spawned.closed.is_set():
                    del self.running[note["id"]]
        lost = list(self.running.values())
        if lost and not self.closing:
            pids = ", ".join(str(s.pid) for s in lost)
            print(f"nestbed-spawn ended while programs ran (pids {pids}); their status "
                  "is unknown", file=sys.stderr, flush=True)  # fmt: skip
        for spawned in lost:
            spawned.exited.set()
            spawned.closed.set()
        self.running.clear()
