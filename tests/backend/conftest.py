"""Back-end tests build real namespaces: they need root, and must leave nothing behind."""

from __future__ import annotations

import os

import pytest


@pytest.fixture(scope="session", autouse=True)
def nothing_leaked():
    if os.geteuid() != 0:
        yield
        return
    from nestbed.backend.linux import traces

    before = _everything(traces())
    yield
    leaked = _everything(traces()) - before
    assert not leaked, f"left behind by the tests: {sorted(leaked)}"


def _everything(marked: list[str]) -> set[str]:
    """nestbed's traces, every nb- namespace, marked or not (an empty namespace made by
    mistake carries no mark, and would otherwise escape the check), and nestbed's parent
    cgroups."""
    from pyroute2 import netns

    from nestbed.backend.cgroups import PARENT, Cgroups
    from nestbed.errors import EnvironmentProblem

    found = set(marked) | {f"namespace {n}" for n in netns.listnetns() if n.startswith("nb-")}
    try:
        hierarchies = set(Cgroups.detect().hierarchies.values())
    except EnvironmentProblem:
        hierarchies = set()
    return found | {f"cgroup {h / PARENT}" for h in hierarchies if (h / PARENT).exists()}


@pytest.fixture
def store(tmp_path):
    """A store of the test's own, whose experiments are swapped out at the end however the
    test ended."""
    from nestbed.store import State, Store

    db = Store.open(str(tmp_path / "store.db"))
    yield db
    for record in db.list():
        if record.state not in (State.DEFINED, State.SWAPPED):
            _linux(db).swap_out(record.name)
    db.close()


def _linux(db):  # type: ignore[no-untyped-def]
    from nestbed.backend.linux import LinuxBackend
    from nestbed.lifecycle import Testbed

    return Testbed(db, LinuxBackend())


@pytest.fixture
def testbed(store):
    """The life cycle of the test's store on this machine's Linux back end."""
    return _linux(store)


@pytest.fixture
def swapped():
    """Swaps in plans of experiments for one test; all swapped out however the test ends."""
    from nbtest import swapping

    with swapping() as swap:
        yield swap


def pytest_collection_modifyitems(items):
    if os.geteuid() == 0:
        return
    skip = pytest.mark.skip(reason="needs root to create network namespaces")
    for item in items:
        if "root" in item.keywords:
            if os.environ.get("CI"):
                item.add_marker(pytest.mark.xfail(reason="CI must run as root", strict=True))
            item.add_marker(skip)
