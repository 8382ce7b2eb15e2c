"""What the store hands back: immutable records of experiments, state changes and runs (a
shared testbed's own records are ``shared_records``'s)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from nestbed.store.states import State

if TYPE_CHECKING:
    from nestbed.store.shared_records import (
        AuditRecord,
        BatchRecord,
        ExemptionRecord,
        Membership,
        OwnedExperiment,
        ProjectRecord,
        ProjectSettingsRecord,
        TokenRecord,
        UserRecord,
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class ExperimentRecord:
    """One stored experiment: its source, its IR, and where it is in its life cycle.

    ``error`` holds the reason given when the experiment last became ``failed``; it is cleared
    when the experiment is next swapped in.
    """

    id: int
    name: str
    source_text: str
    source_format: str
    source_file: str | None
    source_sha256: str
    ir_json: str
    ir_sha256: str
    state: State
    created_at: datetime
    updated_at: datetime
    state_changed_at: datetime
    error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class StateChange:
    """One row of an experiment's audit trail; ``from_state`` is None for its creation."""

    id: int
    experiment: str
    from_state: State | None
    to_state: State
    at: datetime
    reason: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class RunRecord:
    """One run of an experiment; ``ended_at`` and ``outcome`` stay None while it runs."""

    id: int
    experiment: str
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None
    results_dir: str


# A shared testbed's records (``store.shared_records``) are named here too, made on first use.
__all__ = [
    "AuditRecord",
    "BatchRecord",
    "ExemptionRecord",
    "ExperimentRecord",
    "Membership",
    "OwnedExperiment",
    "ProjectRecord",
    "ProjectSettingsRecord",
    "RunRecord",
    "StateChange",
    "TokenRecord",
    "UserRecord",
]


def __getattr__(name: str) -> Any:
    if name in __all__:  # one of the shared testbed's (this module's own are found first)
        from nestbed.store import shared_records

        return getattr(shared_records, name)
    raise AttributeError(f"module 'nestbed.store.records' has no attribute {name!r}")
