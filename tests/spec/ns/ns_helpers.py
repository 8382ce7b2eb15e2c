"""Helpers for the ns front end tests: corpus paths, document paths, line numbers, ns-2."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

PRELUDE = "source tb_compat.tcl\nset ns [new Simulator]\n"
PRELUDE_LINES = PRELUDE.count("\n")
CORPUS = Path(__file__).resolve().parents[2] / "corpus" / "ns"


def line(n: int) -> int:
    """The file line of line N (from 1) of a test body."""
    return n + PRELUDE_LINES


def get(document: Any, path: str) -> Any:
    """The value at a dotted PATH of a document dumped without None fields."""
    value = document.model_dump(exclude_none=True) if hasattr(document, "model_dump") else document
    for part in path.split("."):
        value = value[int(part)] if isinstance(value, list) else value[part]
    return value


def has_ns() -> bool:
    return shutil.which("ns") is not None


def require_ns() -> None:
    """Skips without ns-2, or fails when running in CI (where setup installs it)."""
    if has_ns():
        return
    if os.environ.get("CI"):
        pytest.fail(
            "ns-2 (`ns`) is not installed but CI is set; `make setup` installs Debian's ns2"
        )
    pytest.skip("ns-2 (`ns`) is not installed")
