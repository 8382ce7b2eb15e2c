"""`$ns linktest` during a run: linktest as a child process
(``python -m nestbed.linktest``), so the controller stays small and its later events stay on
time; the child asks the controller for the links as events left them, and prints its
summary as one JSON line, which `status` then lists."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from nestbed.results.folder import RunFolder

WAIT_S = 120  # a run that ends during a linktest waits this long for its report


class Linktests:
    """The linktests started by events of one run, and their summaries."""

    def __init__(self, backend: str, run_dir: Path, folder: RunFolder):
        self.backend, self.run_dir, self.folder = backend, run_dir, folder
        self.lock = threading.Lock()
        self.threads: list[threading.Thread] = []
        self.processes: list[subprocess.Popen] = []
        self.summaries: list[dict[str, Any]] = []

    def argv(self, level: int) -> list[str]:
        return [
            sys.executable, "-m", "nestbed.linktest", "--run-dir", str(self.run_dir),
            "--backend", self.backend, "--level", str(level), "--results", str(self.folder.root),
        ]  # fmt: skip

    def start(self, level: int) -> str:
        with self.lock:
            process = subprocess.Popen(
                self.argv(level),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            self.processes.append(process)
            thread = threading.Thread(
                target=self._collect, args=(process, level), name="linktest", daemon=True
            )
            self.threads.append(thread)
        thread.start()
        return f"linktest level {level} started; its report goes to linktest/ in the results"

    def _collect(self, process: subprocess.Popen, level: int) -> None:
        out, err = process.communicate()
        if err:
            sys.stderr.write(err)  # the controller's log keeps linktest's own
            sys.stderr.flush()
        summary: dict[str, Any] = {"level": level}
        lines = out.strip().splitlines()
        try:
            if process.returncode != 0 or not lines:
                raise ValueError
            summary |= json.loads(lines[-1])
        except ValueError:
            last = err.strip().splitlines()[-1] if err.strip() else "no output"
            summary["error"] = f"linktest exited with {process.returncode}: {last}"
        with self.lock:
            self.summaries.append(summary)

    def finished(self) -> list[dict[str, Any]]:
        with self.lock:
            return list(self.summaries)

    def wait(self) -> None:
        """At the end of the run: waits for linktests under way, then stops any still going
        after WAIT_S (it would measure a network being taken down)."""
        for thread in list(self.threads):
            thread.join(WAIT_S)
        for process in list(self.processes):
            if process.poll() is None:
                process.kill()
        for thread in list(self.threads):
            thread.join()
