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


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """A failed test on the session's simulated cluster shows what its agents and scheduler
    logged about lost connections so far: a host that vanished mid-test says why there (the
    logs go with the cluster at the session's end)."""
    outcome = yield
    report = outcome.get_result()
    cluster = item.funcargs.get("simulated_cluster") if hasattr(item, "funcargs") else None
    if report.when == "call" and report.failed and cluster is not None:
        _, agents = cluster
        said = agents.lost()
        report.sections.append(("the agents' lost connections", "\n".join(said) or "(none)"))
