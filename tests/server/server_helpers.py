"""Helpers of the server's tests (fixtures in conftest): a real `nestbed serve` process
on a free loopback port with a temporary SQLite store and the fake back end."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from nestbed.server.client import Client

REPO = Path(__file__).resolve().parents[2]
READY_TIMEOUT_S = 60  # how long a server on a loaded machine may take to answer at all
STOP_TIMEOUT_S = 60

LINE = """\
nodes: [{name: a}, {name: b}]
links:
  - {name: link0, members: [a, b], delay: 10ms}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Served:
    """One server's files and, while it runs, its process."""

    root: Path
    port: int = field(default_factory=free_port)
    process: subprocess.Popen | None = None
    admin_token: str = ""
    options: tuple[str, ...] = ()  # more options of `nestbed serve`
    store_url: str | None = None  # the server's store, if not SQLite in ``db``
    backend: str = "fake"  # the server's back end ($NESTBED_BACKEND)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def db(self) -> Path:
        return self.root / "store.db"

    @property
    def store(self) -> str:
        """What `nestbed serve --store` is given."""
        return self.store_url or str(self.db)

    @property
    def fake_root(self) -> Path:
        return self.root / "machine"

    @property
    def log(self) -> Path:
        return self.root / "server.log"

    def env(self, **extra: str) -> dict[str, str]:
        return dict(os.environ, PYTHONPATH=str(REPO / "src"), NESTBED_BACKEND=self.backend,
                    NESTBED_FAKE_ROOT=str(self.fake_root), COLUMNS="200",
                    NESTBED_DB=str(self.root / "not-the-server.db"), **extra)  # fmt: skip

    def nestbed(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "nestbed", *args], capture_output=True,
                              text=True, env=self.env(**env), timeout=120, cwd=self.root)  # fmt: skip

    def start(self) -> None:
        argv = [sys.executable, "-m", "nestbed", "serve", "--store", self.store, "--port",
                str(self.port), "--results-root", str(self.root / "results"),
                *self.options]  # fmt: skip
        with self.log.open("a") as log:
            self.process = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            env=self.env(), cwd=self.root)  # fmt: skip
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited at start:\n{self.log.read_text()}")
            with contextlib.suppress(OSError):
                urllib.request.urlopen(self.url + "/v1/health", timeout=5).close()
                return
            time.sleep(0.1)
        raise RuntimeError(f"the server did not answer:\n{self.log.read_text()}")

    def stop(self) -> int | None:
        """SIGTERM (as systemd stops it); its exit code."""
        process, self.process = self.process, None
        if process is None:
            return None
        process.send_signal(signal.SIGTERM)
        try:
            return process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise

    def controllers(self) -> dict[str, int]:
        """The pids of the controllers the server's swap-ins left running, by experiment."""
        found = {}
        for pid_file in self.fake_root.glob("*/controller.pid"):
            with contextlib.suppress(ValueError, OSError):
                found[pid_file.parent.name] = int(pid_file.read_text().split()[0])
        return found

    def client(self, token: str) -> Client:
        return Client(self.url, token, timeout_s=60)


@dataclass
class People:
    """ada leads project net, bob leads web, cy is a member of net; their tokens."""

    tokens: dict[str, str]

    def __getitem__(self, name: str) -> str:
        return self.tokens[name]


def wait_for(client: Client, path: str, kind: str, *, failed: bool = False) -> dict:
    """The experiment's status once its ``kind`` operation has ended; an AssertionError
    carrying the operation's error when it did not end as ``failed`` says (done, by
    default), so a failed operation shows why instead of a state that merely differs."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        found = client.request("GET", path + "/status")
        op = found.get("operation") or {}
        if op.get("kind") == kind and op.get("status") != "running":
            wanted = "failed" if failed else "done"
            assert op.get("status") == wanted, (
                f"{kind} of {path} ended {op.get('status')}, not {wanted}: {op.get('error')}; "
                f"state {found.get('state')}, error {found.get('error')}"
            )
            return found
        time.sleep(0.1)
    raise AssertionError(f"{kind} did not end: {found}")


@contextlib.contextmanager
def open_root(prefix: str, stored: tuple[str, ...]) -> Iterator[Path]:
    """A server's folder every user may enter (unlike pytest's, 0700), as a server's
    /var/lib/nestbed is, so the projects' identities reach their nodes' working folders; at
    the end the experiments ``stored`` (by stored name) are cleaned up on the Linux back end
    and the folder removed."""
    root = Path(tempfile.mkdtemp(prefix=prefix))
    root.chmod(0o711)
    try:
        yield root
    finally:
        server = Served(root, backend="linux")
        for name in stored:
            server.nestbed("--db", str(server.db), "cleanup", "--all", "--yes", name)
        shutil.rmtree(root, ignore_errors=True)
