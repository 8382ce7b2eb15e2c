"""A swap-in killed between creating a namespace and marking it: the namespace is still
known as nestbed's (swap-in wrote it down first), so cleanup removes it; a stranger's
namespace of the same prefix stays."""

from __future__ import annotations

import os
import subprocess

import pytest

from nbtest import experiment
from nestbed.backend import linux
from nestbed.backend.plan import plan
from nestbed.lifecycle import Testbed

pytestmark = pytest.mark.root

TWO = """
nodes: [{name: a}, {name: b}]
links: [{members: [a, b], delay: 1ms}]
"""


def test_a_claimed_but_unmarked_namespace_is_removed_by_cleanup_and_a_strangers_is_not(store):
    exp = experiment(TWO, "claim")
    p = plan(exp)
    stranger = f"nb-stranger{os.getpid()}"
    linux._claim(p)  # as swap-in does before it creates anything
    half_built = p.namespaces[1]
    subprocess.run(["ip", "netns", "add", half_built], check=True)  # created, never marked
    subprocess.run(["ip", "netns", "add", stranger], check=True)
    try:
        assert half_built in linux.leftovers() and stranger not in linux.leftovers()
        testbed = Testbed(store, linux.LinuxBackend())
        testbed.define(exp)
        done = testbed.cleanup(exp.name)  # never a global cleanup in a test
        assert f"namespace {half_built}" in done.removed
        listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
        assert half_built not in listed and stranger in listed
        assert p.tag not in linux._claimed()
    finally:
        subprocess.run(["ip", "netns", "delete", half_built], check=False, capture_output=True)
        subprocess.run(["ip", "netns", "delete", stranger], check=False)
        linux._unclaim(p.tag)
