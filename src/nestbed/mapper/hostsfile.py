"""`hosts.yaml`: nestbed's own description of a testbed, read from its text.

    switches: [sw0, sw1]                 # optional: named by the hosts and trunks anyway
    trunks:
      - {name: t0, between: [sw0, sw1], bandwidth: 10Gb}
    hosts:
      - name: pc                         # with count: pc0, pc1, …
        count: 40
        switch: sw0
        cores: 8                         # nodes' CPU quotas add up to at most this
        memory: 32GB                     # nodes' memory limits add up to at most this
        slots: 64                        # nodes it may hold (default 8 per core, else 64)
        nic: 1Gb                         # its interface to its switch
        linkd_pps: 500000                # packets/s its link emulator carries
        types: [pc]                      # or {pc: 16}; default [pc]
        features: {gpu: 0}
    type_limits: {pc3000: 4}

Hosts without a switch share one switch named ``switch``.
"""

from __future__ import annotations

import math
from typing import Any

import yaml
from pydantic import Field, ValidationError

from nestbed.errors import UserError
from nestbed.mapper.problem import UNLIMITED_SLOTS, Host, Testbed, Trunk
from nestbed.model.base import Frozen
from nestbed.units import UnitError, parse_bandwidth, parse_size

DEFAULT_SWITCH = "switch"
SLOTS_PER_CORE = 8
DEFAULT_SLOTS = 64
CORES = "?+cores"
MEMORY = "?+memory_bytes"


class HostDoc(Frozen):
    name: str
    count: int | None = Field(default=None, ge=1)
    switch: str | None = None
    cores: int | None = Field(default=None, ge=1)
    memory: str | int | None = None
    slots: int | None = Field(default=None, ge=1)
    nic: str | int = "1Gb"
    linkd_pps: int | None = Field(default=None, ge=1)
    types: list[str] | dict[str, int] = ["pc"]
    features: dict[str, float] = {}
    unique: bool = False


class TrunkDoc(Frozen):
    name: str | None = None
    between: tuple[str, str]
    bandwidth: str | int


class TestbedDoc(Frozen):
    switches: list[str] = []
    trunks: list[TrunkDoc] = []
    hosts: list[HostDoc]
    type_limits: dict[str, int] = {}


def parse_hosts(text: str, file: str = "hosts.yaml") -> Testbed:
    try:
        data: Any = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise UserError(f"{file}: not YAML ({str(exc).splitlines()[0]}); fix its syntax") from None
    try:
        doc = TestbedDoc.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        place = ".".join(str(x) for x in first["loc"])
        raise UserError(f"{file}: {place}: {first['msg']}") from None
    try:
        return _testbed(doc)
    except UnitError as exc:
        raise UserError(f"{file}: {exc}") from None


def _testbed(doc: TestbedDoc) -> Testbed:
    hosts: list[Host] = []
    for spec in doc.hosts:
        slots = spec.slots or (spec.cores * SLOTS_PER_CORE if spec.cores else DEFAULT_SLOTS)
        types = dict.fromkeys(spec.types, slots) if isinstance(spec.types, list) else spec.types
        features = dict(spec.features)
        if spec.cores:
            features[CORES] = float(spec.cores)
        if spec.memory is not None:
            features[MEMORY] = float(parse_size(spec.memory, "memory"))
        names = (
            [spec.name] if spec.count is None else [f"{spec.name}{i}" for i in range(spec.count)]
        )
        for name in names:
            hosts.append(
                Host(
                    name,
                    spec.switch or DEFAULT_SWITCH,
                    parse_bandwidth(spec.nic),
                    types=types,
                    features=features,
                    linkd_pps=spec.linkd_pps,
                    unique=spec.unique,
                    cores=spec.cores or 0,
                    uplink=f"link-{name}",
                )
            )
    trunks = tuple(
        Trunk(
            t.name or f"trunk-{t.between[0]}-{t.between[1]}",
            *t.between,
            parse_bandwidth(t.bandwidth),
        )
        for t in doc.trunks
    )
    return Testbed(tuple(hosts), tuple(doc.switches), trunks, type_limits=dict(doc.type_limits))


def one_host(name: str, cores: int, types: set[str]) -> Testbed:
    """The testbed of one machine, nestbed's default: it is every type asked for at once, and
    only its cores bound the nodes' CPU quotas (its memory is not known here)."""
    return Testbed(
        (
            Host(
                name,
                DEFAULT_SWITCH,
                0,
                types={},
                static_types=dict.fromkeys(sorted(types) or ["pc"], UNLIMITED_SLOTS),
                features={CORES: float(cores), MEMORY: math.inf},
                cores=cores,
                uplink=f"link-{name}",
            ),
        ),
        (DEFAULT_SWITCH,),
    )
