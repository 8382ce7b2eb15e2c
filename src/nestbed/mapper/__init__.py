"""The mapper: places an experiment's virtual nodes, links and LANs onto a testbed's hosts,
switches and trunks (Emulab's `assign`, the Netbed paper §3.4 and §5.2). Pure: it reads text
handed to it and returns data; docs/mapper.md describes the model, the method and the formats.

    topology (IR, .top) ─┐
                         ├─ precheck ─ partition (METIS) ─ local search ─ check ─▶ Mapping
    testbed (hosts.yaml, .ptop) ─┘
"""

from nestbed.mapper.check import Cost, Evaluation, evaluate
from nestbed.mapper.problem import (
    Host,
    LanMember,
    Testbed,
    Topology,
    Trunk,
    VirtualLan,
    VirtualLink,
    VirtualNode,
)
from nestbed.mapper.solve import Mapping, Path, map_topology

__all__ = [
    "Cost",
    "Evaluation",
    "Host",
    "LanMember",
    "Mapping",
    "Path",
    "Testbed",
    "Topology",
    "Trunk",
    "VirtualLan",
    "VirtualLink",
    "VirtualNode",
    "evaluate",
    "map_topology",
]
