"""Cluster tests on simulated machines build real namespaces: they need root."""

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
