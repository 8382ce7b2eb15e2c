"""Whether one host can take one virtual node: its type and slots, features and desires.

Emulab's rules (assign's file_formats.txt and its scorer): a desire the host lacks, or a feature
the node does not desire, costs its weight, and is a violation from weight 1 up; an additive
(``?+``) desire must fit the host's feature of the same name, summed over the host's nodes
(checked where the sum is known); global features (``*&``, ``*!``) are counted over the whole
testbed, also elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

from nestbed.mapper.problem import VIOLATION_WEIGHT, FeatureKind, Host, VirtualNode, feature_kind


@dataclass(frozen=True, slots=True)
class Fit:
    type: str | None  # the type the host is for this node; None when it cannot take it
    static: bool = False
    reason: str = ""  # why not: the end of "node N cannot go on host H: ..."
    soft_cost: float = 0.0  # weights of unmet soft desires and unwanted soft features


def node_type_on(node: VirtualNode, host: Host) -> tuple[str | None, bool, str]:
    for wanted in node.types:
        if wanted in host.static_types:
            if host.static_types[wanted] >= node.slots:
                return wanted, True, ""
        elif wanted in host.types and host.types[wanted] >= node.slots:
            return wanted, False, ""
    return None, False, f"it has no free {' or '.join(node.types)} slot"


def fit(node: VirtualNode, host: Host) -> Fit:
    type_, static, reason = node_type_on(node, host)
    if type_ is None:
        return Fit(None, reason=reason)
    soft = 0.0
    for desire, weight in node.desires.items():
        have = host.features.get(desire)
        if feature_kind(desire) is FeatureKind.ADDITIVE:
            if weight > (have or 0.0):
                return Fit(
                    None, reason=f"its {desire} is {have or 0:g}, below the {weight:g} wanted"
                )
        elif have is None:
            if weight >= VIOLATION_WEIGHT:
                return Fit(None, reason=f"it lacks feature {desire}")
            soft += weight
    for feature, cost in host.features.items():
        if feature in node.desires or feature_kind(feature) is not FeatureKind.PLAIN:
            continue
        if cost >= VIOLATION_WEIGHT:
            return Fit(None, reason=f"its feature {feature} is not desired by the node")
        soft += cost
    return Fit(type_, static, soft_cost=soft)
