"""Common base of every model type: frozen, keyword-only, unknown keys rejected."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict

# Names become host names and interface names, so Emulab's rule applies (see issue 2).
NAME_PATTERN = r"^[-0-9A-Za-z]+$"
NAME_RE = re.compile(NAME_PATTERN)
# Programs, agents, applications, timelines, sequences and groups name no host or interface, so
# Emulab lets them contain '_' too (`prog_simple`, `tcp_src`).
OBJECT_NAME_PATTERN = r"^[-0-9A-Za-z_]+$"
OBJECT_NAME_RE = re.compile(OBJECT_NAME_PATTERN)


class Frozen(BaseModel):
    """An immutable record that rejects unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid", validate_default=True)
