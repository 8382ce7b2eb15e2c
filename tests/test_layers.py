"""Layering: which layer may import which, as one table (DESIGN's picture, left to right),
pure layers doing no platform I/O, and the Linux back end reached only through the life
cycle (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nestbed"

_BASE = {"errors", "units", "places"}
_PURE_IR = _BASE | {"model"}
# The user's configuration file (settings) is read where commands and the API begin.
_MACHINE = _PURE_IR | {"binaries", "backend", "results", "settings"}
# For each layer, the layers it may import (besides itself). A layer missing here fails.
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "units": {"errors"},
    "binaries": {"errors"},
    "places": set(),
    "settings": {"errors"},
    "model": _BASE,
    "spec": _PURE_IR,
    "api": _PURE_IR | {"spec"},
    "mapper": _PURE_IR | {"spec"},
    "store": {"errors"},
    "backend": _PURE_IR | {"binaries", "mapper"},  # the cluster back end places nodes
    "results": _PURE_IR,
    "analysis": _PURE_IR | {"binaries", "results"},
    "simulate": _PURE_IR | {"spec", "results"},
    "linktest": _MACHINE,
    "control": _MACHINE,
    "lifecycle": _MACHINE | {"spec", "store", "control", "linktest"},
    "sweep": _MACHINE | {"spec", "store", "lifecycle"},
    "studies": _MACHINE | {"api", "spec", "store", "lifecycle", "analysis", "simulate", "sweep"},
    # The server (issue 22) drives the life cycle for many users; nothing below it knows it.
    # Its app mounts the web portal (issue 23), which renders pages through the server's API.
    "server": _MACHINE | {"spec", "mapper", "store", "lifecycle", "portal"},
    "portal": _MACHINE | {"spec", "mapper", "store", "lifecycle", "server"},
    "cli": _MACHINE
    | {"spec", "mapper", "store", "lifecycle", "analysis", "simulate", "linktest", "sweep"}
    | {"studies", "server"},
    "__init__": {"api", "lifecycle"},
    "__main__": {"cli"},
}
PURE = {"errors", "units", "model", "spec", "api", "mapper"}
# Pure modules of layers that also do I/O elsewhere (the server's policies).
PURE_MODULES = {"server/admission.py", "server/batch.py"}
PLATFORM_MODULES = {"socket", "pyroute2", "ctypes", "fcntl"}
ALLOWED_SUBPROCESS = {"spec/ns"}  # the ns-2 front end runs tclsh, by design
LINUX = "nestbed.backend.linux"
LINUX_USERS = {"backend", "lifecycle"}


def _layer(path: Path) -> str:
    return path.relative_to(SRC).parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


MODULES = sorted(SRC.rglob("*.py"))
IDS = [str(p.relative_to(SRC)) for p in MODULES]


def test_every_layer_is_in_the_table():
    assert {_layer(p) for p in MODULES} <= set(ALLOWED)


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_a_layer_imports_only_what_the_table_allows(path):
    mine = _layer(path)
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] == "nestbed" and len(parts) > 1 and parts[1] != mine:
            assert parts[1] in ALLOWED[mine], f"{path.relative_to(SRC)} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_only_the_life_cycle_reaches_the_linux_back_end(path):
    if _layer(path) in LINUX_USERS:
        return
    names = _imports(path)
    assert LINUX not in names, f"{path.relative_to(SRC)} imports {LINUX}"
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module == "nestbed.backend":
            assert "linux" not in {a.name for a in node.names}, path.relative_to(SRC)


@pytest.mark.parametrize("path", MODULES, ids=IDS)
def test_pure_layers_do_no_platform_io(path):
    rel = str(path.relative_to(SRC))
    if _layer(path) not in PURE and rel not in PURE_MODULES:
        return
    forbidden = PLATFORM_MODULES | (
        set() if any(rel.startswith(a) for a in ALLOWED_SUBPROCESS) else {"subprocess"}
    )
    assert not {n.split(".")[0] for n in _imports(path)} & forbidden, rel
