"""The experiment store: experiments with their source, IR, state, history and runs.

SQLite by default (``$XDG_DATA_HOME/nestbed/nestbed.db``), PostgreSQL by URL; the schema is
versioned with alembic and brought up to date whenever a store is opened.

    with Store.open() as store:
        store.create_experiment("dumbbell", source_text=..., source_format="ns",
                                source_file="dumbbell.ns", ir_json=...)
        store.transition("dumbbell", State.SWAPPING_IN, expect_from=State.DEFINED)
"""

from nestbed.store.db import ENV_VAR, default_db_path, redact, resolve_db_url
from nestbed.store.experiments import Store
from nestbed.store.records import ExperimentRecord, RunRecord, StateChange
from nestbed.store.schema import SOURCE_FORMATS
from nestbed.store.states import DELETABLE, EDITABLE, TRANSITIONS, State

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
