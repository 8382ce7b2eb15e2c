"""What the API accepts and answers, as pydantic models: every field typed and bounded,
unknown fields refused, so a bad request is a 422 naming the field before anything runs."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from nestbed.server.config import MAX_FILE_BYTES
from nestbed.store.schema import ACCOUNT_NAME_PATTERN

ACCOUNT_NAME = Field(pattern=f"^{ACCOUNT_NAME_PATTERN}$", max_length=32)
EXPERIMENT_NAME_PATTERN = r"^[-0-9A-Za-z]{1,64}$"
FILE_NAME_PATTERN = r"^[A-Za-z0-9][-A-Za-z0-9_.]{0,99}\.(ns|tcl|yaml|yml)$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# -- requests ----------------------------------------------------------------------------------


class NewUser(Strict):
    name: str = ACCOUNT_NAME
    admin: bool = False


class NewToken(Strict):
    label: str | None = Field(default=None, max_length=64)


class NewProject(Strict):
    name: str = ACCOUNT_NAME
    leader: str = ACCOUNT_NAME


class MemberRole(Strict):
    role: Literal["leader", "member"] = "member"


class ExperimentFile(Strict):
    """An experiment file sent as text: ``file_name`` gives its format (.ns, .tcl, .yaml,
    .yml) and its name in error messages; ``name`` overrides the experiment's name."""

    file_name: str = Field(pattern=FILE_NAME_PATTERN)
    text: str = Field(max_length=MAX_FILE_BYTES)
    name: str | None = Field(default=None, pattern=EXPERIMENT_NAME_PATTERN)
    parameters: dict[str, str] = Field(default_factory=dict, max_length=100)


class SwapIn(Strict):
    """A swap-in's options (a subset of the CLI's; results go where the server keeps them)."""

    capture: bool = False
    linktest: int | None = Field(default=None, ge=1, le=4)
    linktest_strict: bool = False


class Run(SwapIn):
    """A whole run: swap in, run until the events end or ``duration_s``, swap out."""

    duration_s: float | None = Field(default=None, gt=0, le=7 * 24 * 3600)


class BatchSubmit(Strict):
    """A batch submission: higher ``priority`` starts first; FIFO within a priority."""

    priority: int = Field(default=0, ge=-100, le=100)


DAY_S = 24 * 3600.0


class SettingsChange(Strict):
    """A project's settings to change; a field given as null goes back to the server's
    default, a field left out stays as it is. Times in seconds; a maximum duration of 0
    means none."""

    idle_s: float | None = Field(default=None, gt=0, le=30 * DAY_S)
    warn_before_s: float | None = Field(default=None, ge=0, le=DAY_S)
    max_duration_s: float | None = Field(default=None, ge=0, le=365 * DAY_S)
    priority_min: int | None = Field(default=None, ge=-100, le=100)
    priority_max: int | None = Field(default=None, ge=-100, le=100)


class ExemptionAsk(Strict):
    """An owner's request that idle swap-out spare an experiment (and its maximum duration),
    for a reason, until a time or (``until`` null) until it is swapped out."""

    reason: str = Field(min_length=1, max_length=1000)
    until: datetime | None = None


class ExemptionDecision(Strict):
    note: str = Field(default="", max_length=1000)


# -- replies -----------------------------------------------------------------------------------


class User(BaseModel):
    name: str
    admin: bool
    created_at: datetime


class Token(BaseModel):
    id: int
    user: str
    label: str | None
    created_at: datetime


class NewTokenReply(Token):
    token: str  # shown once: the server keeps only its hash


class Member(BaseModel):
    project: str
    user: str
    role: str


class Project(BaseModel):
    name: str
    created_at: datetime
    members: list[Member]


class Whoami(BaseModel):
    user: User
    projects: list[Member]


class Operation(BaseModel):
    """The last long operation asked of an experiment on this server."""

    kind: str
    actor: str | None
    status: Literal["running", "done", "failed"]
    started_at: datetime
    ended_at: datetime | None
    error: str | None


class Experiment(BaseModel):
    project: str
    name: str
    stored_name: str  # its name in the store and on the machine: PROJECT--NAME
    creator: str | None
    state: str
    error: str | None
    source_file: str | None
    source_format: str
    source_sha256: str
    created_at: datetime
    updated_at: datetime
    operation: Operation | None = None
    warning: str | None = None  # the server's last warning since it swapped in (idle.warn)


class Run_(BaseModel):
    id: int
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None
    results_dir: str


class ExperimentDetail(Experiment):
    ir: dict[str, Any]
    runs: list[Run_]
    warnings: list[str]


class AuditRow(BaseModel):
    id: int
    at: datetime
    actor: str | None
    action: str
    project: str | None
    experiment: str | None
    outcome: str


class Status(Experiment):
    live: dict[str, Any] | None  # the controller's status while active
    notices: list[AuditRow]  # what the server itself did or warned of (idle, reconcile)


class BatchEntry(BaseModel):
    id: int
    project: str
    experiment: str
    submitted_by: str | None
    submitted_at: datetime
    priority: int
    state: str
    attempts: int
    last_failure_at: datetime | None
    last_failure: str
    passed_over: int


class Problem(BaseModel):
    file: str | None
    line: int | None
    message: str


class ErrorReply(BaseModel):
    detail: str
    problems: list[Problem] = []


class ProjectSettings(BaseModel):
    """The settings in force (the project's own where set, else the server's) and ``own``:
    those the project set itself."""

    project: str
    idle_s: float
    warn_before_s: float
    max_duration_s: float | None  # None: no maximum
    priority_min: int | None  # None: no limit
    priority_max: int | None
    own: SettingsChange
    updated_at: datetime | None
    updated_by: str | None


class Exemption(BaseModel):
    id: int
    project: str
    experiment: str
    asked_by: str | None
    asked_at: datetime
    reason: str
    until: datetime | None
    state: str  # asked, granted, refused
    decided_by: str | None
    decided_at: datetime | None
    note: str
    in_force: bool = False  # granted and not expired
