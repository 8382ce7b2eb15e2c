"""The experiment store: experiments with their source, IR, state, history and runs.

SQLite by default (``$XDG_DATA_HOME/nestbed/nestbed.db``), PostgreSQL by URL; the schema is
versioned with alembic and brought up to date whenever a store is opened.

    with Store.open() as store:
        store.create_experiment("dumbbell", source_text=..., source_format="ns",
                                source_file="dumbbell.ns", ir_json=...)
        store.transition("dumbbell", State.SWAPPING_IN, expect_from=State.DEFINED)
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: `nestbed exec` reads store.paths, under this package
if TYPE_CHECKING:
    from typing import Any

    from nestbed.store.db import redact, resolve_db_url
    from nestbed.store.definitions import SOURCE_FORMATS
    from nestbed.store.experiments import Store
    from nestbed.store.paths import ENV_VAR, default_db_path
    from nestbed.store.records import ExperimentRecord, RunRecord, StateChange
    from nestbed.store.states import DELETABLE, EDITABLE, TRANSITIONS, State

# Every name loads on first use: SQLAlchemy only with ``Store`` (the commands that only read
# a SQLite store, store.reader, do without it), and `nestbed exec` finds the store through
# ``store.paths`` alone.
_LAZY = {"Store": "experiments", "redact": "db", "resolve_db_url": "db",
         "SOURCE_FORMATS": "definitions", "ENV_VAR": "paths", "default_db_path": "paths",
         "ExperimentRecord": "records", "RunRecord": "records", "StateChange": "records",
         "DELETABLE": "states", "EDITABLE": "states", "TRANSITIONS": "states",
         "State": "states"}  # fmt: skip

__all__ = [
    "DELETABLE",
    "EDITABLE",
    "ENV_VAR",
    "SOURCE_FORMATS",
    "TRANSITIONS",
    "ExperimentRecord",
    "RunRecord",
    "State",
    "StateChange",
    "Store",
    "default_db_path",
    "redact",
    "resolve_db_url",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f"nestbed.store.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'nestbed.store' has no attribute {name!r}")
