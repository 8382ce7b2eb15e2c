"""Fixtures of the server's tests: a real `nestbed serve` process (``server_helpers``) with
an admin made with `--init-admin`, stopped at the end however the test ends, with any
controller it left behind; and three users in two projects."""

from __future__ import annotations

import contextlib
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from server_helpers import People, Served

from pg_helpers import pg_server

__all__ = ["pg_server"]  # a fixture: importing it here offers it to the tests


@pytest.fixture
def serve_options() -> tuple[str, ...]:
    """More options of the test's `nestbed serve` (a module overrides it)."""
    return ()


@pytest.fixture
def serve_store() -> str | None:
    """The URL of the test's server store (a module overrides it); None: SQLite in tmp."""
    return None


@pytest.fixture
def serve_root(tmp_path: Path) -> Path:
    """The folder of the test's server: store, results, log (a module overrides it)."""
    return tmp_path


@pytest.fixture
def serve_backend() -> str:
    """The back end of the test's server (a module overrides it)."""
    return "fake"


@pytest.fixture
def served(
    serve_root: Path, serve_options: tuple[str, ...], serve_store: str | None, serve_backend: str
) -> Iterator[Served]:
    """A running server with an admin (token in ``admin_token``)."""
    server = Served(serve_root, options=serve_options, store_url=serve_store,
                    backend=serve_backend)  # fmt: skip
    made = server.nestbed("serve", "--store", server.store, "--init-admin", "root")
    assert made.returncode == 0, made.stderr
    server.admin_token = made.stdout.strip().splitlines()[-1]
    try:
        server.start()
        yield server
    finally:
        server.stop()
        for pid in server.controllers().values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def people(served: Served) -> People:
    admin = served.client(served.admin_token)
    tokens = {}
    for name in ("ada", "bob", "cy"):
        tokens[name] = admin.request("POST", "/v1/users", {"name": name})["token"]
    admin.request("POST", "/v1/projects", {"name": "net", "leader": "ada"})
    admin.request("POST", "/v1/projects", {"name": "web", "leader": "bob"})
    served.client(tokens["ada"]).request("PUT", "/v1/projects/net/members/cy", {"role": "member"})
    return People(tokens)
