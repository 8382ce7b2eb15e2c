"""Cluster tests on simulated machines build real namespaces: they need root.

The simulated cluster (three hosts, an agent holding at most two nodes on each, a scheduler
on the underlay) is started once for the whole session and shared by the tests that need no
fresh one: each leaves it as it found it (every experiment swapped out, every agent up)."""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root to create network namespaces")
    for item in items:
        if "root" in item.keywords and "tests/cluster/" in str(item.path):
            item.add_marker(skip)


@pytest.fixture(scope="session")
def simulated_cluster():
    """(machines, agents) of the session's simulated cluster; stopped and removed at the end."""
    from simulated import started

    with started(3, slots=2) as (machines, agents):
        yield machines, agents
