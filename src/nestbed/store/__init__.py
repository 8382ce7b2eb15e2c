"""The experiment store: experiments with their source, IR, state, history and runs.

SQLite by default (``$XDG_DATA_HOME/nestbed/nestbed.db``), PostgreSQL by URL; the schema is
versioned with alembic and brought up to date whenever a store is opened.

    with Store.open() as store:
        store.create_experiment("dumbbell", source_text=..., source_format="ns",
                                source_file="dumbbell.ns", ir_json=...)
        store.transition("dumbbell", State.SWAPPING_IN, expect_from=State.DEFINED)
"""

from typing import TYPE_CHECKING, Any

from nestbed.store.definitions import SOURCE_FORMATS
from nestbed.store.paths import ENV_VAR, default_db_path
from nestbed.store.records import ExperimentRecord, RunRecord, StateChange
from nestbed.store.states import DELETABLE, EDITABLE, TRANSITIONS, State

if TYPE_CHECKING:
    from nestbed.store.db import redact, resolve_db_url
    from nestbed.store.experiments import Store

# SQLAlchemy loads on first use of these: the commands that only read a SQLite store
# (store.reader) do without it.
_LAZY = {"Store": "experiments", "redact": "db", "resolve_db_url": "db"}

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
