"""A real PostgreSQL server for tests: a throwaway cluster started once per test session
(``initdb`` into a temporary directory, as the ``postgres`` user when we are root since initdb
refuses root, ``pg_ctl start`` listening only on a Unix socket in that directory), stopped and
removed at the end of the session whatever happened; a fresh database on it per test.
``NESTBED_TEST_PG_URL`` points the tests at an existing server instead (its role needs
CREATEDB). Without PostgreSQL the tests that need it fail when ``CI`` is set and are skipped
otherwise. A conftest imports ``pg_server`` to offer the fixture."""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.engine import make_url

from nestbed.store import resolve_db_url

PG_URL_ENV = "NESTBED_TEST_PG_URL"
PG_USER = "postgres"
PG_START_TIMEOUT_S = 60


def pg_bindir() -> Path | None:
    """The directory of the newest installed ``initdb`` and ``pg_ctl``, or None."""
    found = [Path(p).parent for p in glob.glob("/usr/lib/postgresql/*/bin/initdb")]
    found.sort(key=lambda d: int(d.parent.name) if d.parent.name.isdigit() else 0)
    if found:
        return found[-1]
    on_path = shutil.which("initdb")
    return Path(on_path).parent if on_path else None


def _run(argv: list[str | Path], what: str, log: Path | None = None) -> None:
    done = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        server_log = log.read_text(errors="replace") if log and log.exists() else ""
        raise RuntimeError(
            f"{what} failed with exit code {done.returncode}: {' '.join(map(str, argv))}\n"
            f"stdout:\n{done.stdout}\nstderr:\n{done.stderr}\nserver log:\n{server_log}"
        )


@contextmanager
def throwaway_cluster(bindir: Path) -> Iterator[str]:
    """Start a private PostgreSQL cluster on a Unix socket; yield the URL of a database on it."""
    root = Path(tempfile.mkdtemp(prefix="nestbed-pg-"))
    as_owner: list[str | Path] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam(PG_USER)
        os.chown(root, owner.pw_uid, owner.pw_gid)
        as_owner = ["runuser", "-u", PG_USER, "--"]
    data, log = root / "data", root / "server.log"
    pg_ctl = [*as_owner, bindir / "pg_ctl", "-D", data, "-l", log]
    started = False
    try:
        initdb = [bindir / "initdb", "-D", data, "-U", PG_USER, "-A", "trust", "-E", "UTF8"]
        _run([*as_owner, *initdb, "--locale=C", "--no-sync"], "initdb")
        options = (
            f"-c listen_addresses='' -c unix_socket_directories={root} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        started = True  # from here on, always try to stop it
        _run(
            [*pg_ctl, "-w", "-t", str(PG_START_TIMEOUT_S), "-o", options, "start"],
            "pg_ctl start",
            log,
        )
        admin = sa.create_engine(
            f"postgresql+psycopg://{PG_USER}@/postgres?host={root}", isolation_level="AUTOCOMMIT"
        )
        with admin.connect() as conn:
            conn.exec_driver_sql("CREATE DATABASE nestbed_test")
        admin.dispose()
        yield f"postgresql+psycopg://{PG_USER}@/nestbed_test?host={root}"
    finally:
        if started:
            subprocess.run(
                [str(a) for a in [*pg_ctl, "-m", "immediate", "-w", "stop"]],
                capture_output=True,
                check=False,
            )
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def pg_server() -> Iterator[str]:
    """The URL of a PostgreSQL database whose server lets us create more databases."""
    given = os.environ.get(PG_URL_ENV)
    if given:
        yield resolve_db_url(given)
        return
    bindir = pg_bindir()
    if bindir is None:
        message = (
            "PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/initdb and no initdb on "
            f"PATH); install it with `make setup` (Debian package postgresql) or set {PG_URL_ENV}"
        )
        if os.environ.get("CI"):
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    with throwaway_cluster(bindir) as url:
        yield url


@contextmanager
def fresh_pg_database(server_url: str) -> Iterator[str]:
    """A new, empty database on the server of ``server_url``, dropped afterwards."""
    name = f"nestbed_t_{uuid.uuid4().hex[:12]}"
    admin = sa.create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        try:
            yield make_url(server_url).set(database=name).render_as_string(hide_password=False)
        finally:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        admin.dispose()
