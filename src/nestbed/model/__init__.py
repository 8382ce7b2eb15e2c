"""The experiment model: the IR every front end produces and every later layer reads.

Its names load on first use: a command that reads the IR as stored JSON (``nestbed show``)
and needs one of its pure formulas (``model.formulas``) does not load pydantic.
"""

from __future__ import annotations

import importlib

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from nestbed.model.ir import (
        IR_VERSION,
        Action,
        Agent,
        Application,
        Event,
        Experiment,
        GilbertElliott,
        Group,
        Inert,
        Link,
        Node,
        Port,
        Program,
        Queue,
        Route,
        Sequence,
        Shaping,
        Source,
        Timeline,
        Warning,  # noqa: A004 -- the IR's public name for a spec warning
        Where,
    )

__all__ = [
    "IR_VERSION",
    "Action",
    "Agent",
    "Application",
    "Event",
    "Experiment",
    "GilbertElliott",
    "Group",
    "Inert",
    "Link",
    "Node",
    "Port",
    "Program",
    "Queue",
    "Route",
    "Sequence",
    "Shaping",
    "Source",
    "Timeline",
    "Warning",
    "Where",
]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("nestbed.model.ir"), name)
    raise AttributeError(f"module 'nestbed.model' has no attribute {name!r}")
