"""Layering: pure layers (model, front ends, analysis) never import platform or I/O modules,
and no layer imports a higher one (../shared/DESIGN.md, "Rules that keep it simple")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[1] / "src" / "nestbed"

# Lower index = lower layer. A module may import its own layer and lower ones only.
LAYERS = [
    "errors",
    "units",
    "model",
    "spec",
    "api",
    "mapper",
    "store",
    "backend",
    "results",
    "analysis",
    "simulate",
    "linktest",
    "control",
    "swap",
    "runs",
    "live",
    "sweep",
    "studies",
    "cli",
]
PURE = {"errors", "units", "model", "spec", "api", "mapper"}
PLATFORM_MODULES = {"socket", "pyroute2", "ctypes", "fcntl"}
ALLOWED_SUBPROCESS = {"spec/ns"}  # the ns-2 front end runs tclsh, by design


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


MODULES = sorted(p for p in SRC.rglob("*.py") if _layer(p) in LAYERS)


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(SRC)) for p in MODULES])
def test_no_layer_imports_a_higher_one(path):
    mine = LAYERS.index(_layer(path))
    for name in _imports(path):
        parts = name.split(".")
        if parts[0] == "nestbed" and len(parts) > 1 and parts[1] in LAYERS:
            assert LAYERS.index(parts[1]) <= mine, f"{path.relative_to(SRC)} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=[str(p.relative_to(SRC)) for p in MODULES])
def test_pure_layers_do_no_platform_io(path):
    if _layer(path) not in PURE:
        return
    rel = str(path.relative_to(SRC))
    forbidden = PLATFORM_MODULES | (
        set() if any(rel.startswith(a) for a in ALLOWED_SUBPROCESS) else {"subprocess"}
    )
    assert not {n.split(".")[0] for n in _imports(path)} & forbidden, rel
