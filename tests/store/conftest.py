"""Fixtures that run every store test twice: on SQLite in a temporary directory and on a real
PostgreSQL server (``pg_helpers``: a throwaway cluster for the session, a fresh database per
test)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from nestbed.store import Store, resolve_db_url
from pg_helpers import fresh_pg_database, pg_server

__all__ = ["pg_server"]  # a fixture: importing it here offers it to the tests


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of an empty database, once on each backend."""
    if request.param == "sqlite":
        yield resolve_db_url(str(tmp_path / "nestbed.db"))
        return
    with fresh_pg_database(request.getfixturevalue("pg_server")) as url:
        yield url


@pytest.fixture
def store(db_url: str) -> Iterator[Store]:
    """An open store on an empty database, closed after the test."""
    with Store.open(db_url) as opened:
        yield opened
