"""What the store hands back about a shared testbed (its accounts, audit, batch queue and
policies): immutable records, apart from ``records`` so that a command on this machine's
experiments does not make their classes (``records`` names them too, on first use)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from nestbed.store.records import ExperimentRecord

# -- a shared testbed's accounts (``store.accounts``) -------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class UserRecord:
    """A user of a shared testbed; an admin creates users and projects."""

    id: int
    name: str
    is_admin: bool
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectRecord:
    """A project: its members see and act on its experiments, nobody else does."""

    id: int
    name: str
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class Membership:
    """One user's role (``leader`` or ``member``) in one project."""

    project: str
    user: str
    role: str
    added_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class TokenRecord:
    """An API token as stored: its owner and label, never the token itself."""

    id: int
    user: str
    label: str | None
    created_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class OwnedExperiment:
    """A project's experiment: its name in the project, who created it, and the stored
    experiment (whose own name, ``PROJECT--NAME``, is unique on the machine)."""

    project: str
    name: str
    creator: str | None
    experiment: ExperimentRecord


@dataclass(frozen=True, slots=True, kw_only=True)
class AuditRecord:
    """One row of the audit log: who (None: the server itself) did what, to which
    experiment of which project, when, and how it ended."""

    id: int
    at: datetime
    actor: str | None
    action: str
    project: str | None
    experiment: str | None
    outcome: str


@dataclass(frozen=True, slots=True, kw_only=True)
class BatchRecord:
    """One submission of an experiment to the batch queue, as stored (``server.batch``
    decides its moves)."""

    id: int
    project: str
    experiment: str  # its name in the project
    stored_name: str  # PROJECT--NAME
    submitted_by: str | None
    submitted_at: datetime
    priority: int
    state: str
    attempts: int
    last_failure_at: datetime | None
    last_failure: str
    passed_over: int


@dataclass(frozen=True, slots=True, kw_only=True)
class ProjectSettingsRecord:
    """A project's own policy settings; None: the server's default."""

    project: str
    idle_s: float | None = None
    warn_before_s: float | None = None
    max_duration_s: float | None = None  # 0: no maximum
    priority_min: int | None = None
    priority_max: int | None = None
    updated_at: datetime | None = None
    updated_by: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ExemptionRecord:
    """An idle-swap exemption asked for an experiment, and its leader's decision."""

    id: int
    project: str
    experiment: str  # its name in the project
    stored_name: str  # PROJECT--NAME
    asked_by: str | None
    asked_at: datetime
    reason: str
    until: datetime | None  # None: until it is swapped out
    state: str  # asked, granted, refused
    decided_by: str | None
    decided_at: datetime | None
    note: str
