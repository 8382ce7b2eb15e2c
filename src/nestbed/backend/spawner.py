"""nestbed-spawn's client: an experiment's programs started by a small process of their own
instead of the controller, so what a start costs is not spent under the controller's global
interpreter lock, where the programs due at one instant took turns.

The controller starts one ``Spawner`` per run, before its t0. A start sends the program's
argv (already entering its node: ``Backend.entering``), environment, output files and,
where it was handed over ahead of its time, that time, on a socket. nestbed-spawn forks the
program's process at once; a process due later waits for its time itself (woken first: a
real-time priority until it has read the clock), then execs. The answer says its pid and
when it began (its clock just before the exec) once the exec has succeeded. nestbed-spawn
copies the program's output into its files (at most a limit each) and reports its exit and
the end of its output. Answers and notes come on one pipe, which one thread here reads and
hands to each program (``Spawned``, a ``Popen`` to the code that waits for and stops
programs). The protocol is ``crates/nestbed-spawn/src/protocol.rs``.
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
from typing import Any

from nestbed.errors import InternalError

CLOSE_WAIT_S = 5.0  # how long closing waits for nestbed-spawn to go before killing it


class Spawned:
    """A program nestbed-spawn started: its pid, status and ``wait`` as a ``Popen``'s, the
    ``time.monotonic()`` its process began its command (``started_at``: by the process's own
    clock, just before its first ``exec``; at its time if it was handed over ahead), when
    that ``exec`` was seen to have succeeded (``exec_at``), and the end of its output
    (``output_ended``). Should nestbed-spawn end before it does, its wait ends with no status
    (``returncode`` None)."""

    def __init__(self, args: Sequence[str]) -> None:
        self.args = list(args)
        self.pid = 0
        self.returncode: int | None = None
        self.started_at = self.exec_at = 0.0
        self.answer: dict[str, Any] = {}  # nestbed-spawn's answer to its start
        self.answered = threading.Event()
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

    def take(self, message: dict[str, Any]) -> None:
        """Takes an answer or note about it from nestbed-spawn (the reader's thread)."""
        if "pid" in message or "errno" in message:
            self.answer = message
            self.answered.set()
        elif "exit" in message:
            self.returncode = message["exit"]
            self.exited.set()
        else:
            self.closed.set()

    def lost(self) -> None:
        """nestbed-spawn ended: nothing more will come."""
        for event in (self.answered, self.exited, self.closed):
            event.set()


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
        self.sending = threading.Lock()  # a request is one write of whole lines
        self.numbers = itertools.count(1)
        self.running: dict[int, Spawned] = {}
        # Taken where a start is added to ``running`` and where the reader, at
        # nestbed-spawn's end, takes what is running as lost: a start after that end is
        # refused rather than left waiting for an answer nobody will give.
        self.ending = threading.Lock()
        self.ended = False
        self.closing = False
        self.reader = threading.Thread(target=self._read, name="spawner-reader", daemon=True)
        self.reader.start()

    def start(
        self,
        argv: Sequence[str],
        env: Mapping[str, str],
        stdout: Path,
        stderr: Path,
        limit: int,
        at: float | None = None,
    ) -> Spawned:
        """Starts ``argv`` with exactly ``env``, in a session of its own, input from
        /dev/null, its output into ``stdout`` and ``stderr`` (``limit`` bytes each); once its
        ``exec`` has succeeded. An ``OSError`` when it could not (a file, a command not found).
        At ``at`` (a ``time.monotonic()``) if given, not before: a start handed over ahead
        of its time begins then, however late this process's threads run.

        Starts asked for together are sent without waiting for each other's answers, and
        nestbed-spawn forks the next without waiting for one's ``exec``."""
        spawned = Spawned(argv)
        number = next(self.numbers)
        request = {
            "id": number, "argv": list(argv), "env": [f"{k}={v}" for k, v in env.items()],
            "stdout": str(stdout), "stderr": str(stderr), "limit": limit,
        }  # fmt: skip
        if at is not None:
            request["at_ns"] = round(at * 1e9)
        with self.ending:
            if self.ended:
                raise InternalError("nestbed-spawn ended; programs can no longer be started")
            self.running[number] = spawned  # before its answer can come
        try:
            with self.sending:
                self.socket.sendall(json.dumps(request).encode() + b"\n")
        except OSError as exc:
            self.running.pop(number, None)
            raise InternalError(
                f"nestbed-spawn could not be asked to start a program: {exc}"
            ) from exc
        spawned.answered.wait()
        answer = spawned.answer
        if "pid" not in answer:
            self.running.pop(number, None)
            if answer.get("errno"):
                raise OSError(answer["errno"], os.strerror(answer["errno"]), answer["filename"])
            if not answer:
                raise InternalError("nestbed-spawn ended; programs can no longer be started")
            raise InternalError(f"nestbed-spawn refused a request: {answer['error']}")
        spawned.pid = answer["pid"]
        spawned.started_at, spawned.exec_at = answer["began_ns"] / 1e9, answer["exec_ns"] / 1e9
        return spawned

    def close(self) -> None:
        """Ends nestbed-spawn (its programs have ended: the run's end saw to it)."""
        self.closing = True
        self.socket.close()
        try:
            self.process.wait(CLOSE_WAIT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self.reader.join()

    def _read(self) -> None:
        """Hands each answer and note to its program."""
        assert self.process.stdout is not None
        with self.process.stdout as messages:
            for line in messages:
                message = json.loads(line)
                spawned = self.running.get(message.get("id"))  # (None: a request it could
                if spawned is None:  # not read, which only a bug of ours sends)
                    print(f"nestbed-spawn said {line!r}", file=sys.stderr, flush=True)
                    continue
                spawned.take(message)
                if spawned.exited.is_set() and spawned.closed.is_set():
                    del self.running[message["id"]]
        with self.ending:
            self.ended = True
            lost = list(self.running.values())
        if any(s.pid for s in lost) and not self.closing:
            pids = ", ".join(str(s.pid) for s in lost if s.pid)
            print(f"nestbed-spawn ended while programs ran (pids {pids}); their status "
                  "is unknown", file=sys.stderr, flush=True)  # fmt: skip
        for spawned in lost:
            spawned.lost()
        self.running.clear()
