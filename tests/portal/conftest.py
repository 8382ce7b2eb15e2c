"""Fixtures of the portal's tests: the server tests' real `nestbed serve` (ada leads
project net, bob leads web, cy is a member of net), and plain HTTP sessions that log in to
the portal as a person would (cookie and CSRF token)."""

from __future__ import annotations

import sys
from pathlib import Path

# The server's test helpers and fixtures, as when the server's tests run beside these.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "server"))

import pytest
from portal_helpers import Session
from server_helpers import People, Served

from server.conftest import people, serve_backend, serve_options, serve_root, serve_store, served

__all__ = ["people", "serve_backend", "serve_options", "serve_root", "serve_store", "served"]


@pytest.fixture
def ada(served: Served, people: People) -> Session:
    return Session.login(served.url, people["ada"])


@pytest.fixture
def bob(served: Served, people: People) -> Session:
    return Session.login(served.url, people["bob"])
