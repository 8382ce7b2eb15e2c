"""Helpers of the simulation tests: the prelude of test bodies and the `sim` fixture's type."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

PRELUDE = "set ns [new Simulator]\nsource tb_compat.tcl\n$ns rtproto Static\n"

# sim(BODY or PATH, parameters=..., duration=...) -> (summary, results folder)
Simulate = Callable[..., tuple[dict[str, Any], Path]]
