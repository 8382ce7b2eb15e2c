"""The experiment's life: defined, swapped in, run, swapped out, cleaned up.

``Testbed`` (a store and a back end) owns the state machine and every step of it;
``Active`` is a swapped-in experiment and what a user does with it; ``runs`` holds whole
runs; ``live`` the Python API. Everything that runs experiments — the CLI, the API, sweeps,
linktest, validate, calibrate, the studies — comes through here.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from nestbed.lifecycle.active import Active
    from nestbed.lifecycle.testbed import Cleaned, Testbed

__all__ = ["Active", "Cleaned", "Testbed"]

_WHERE = {"Active": "active", "Cleaned": "testbed", "Testbed": "testbed"}


def __getattr__(name: str) -> Any:
    # On first use: a command that needs only `signals` (every CLI command) does not pay for
    # the models and the back end.
    if name in _WHERE:
        return getattr(importlib.import_module(f"nestbed.lifecycle.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'nestbed.lifecycle' has no attribute {name!r}")
