"""What the portal derives from a definition is made once per IR digest, and a topology once
per digest, hosts and positions file: kept while they stay, made anew when one changes."""

from __future__ import annotations

import json

from nestbed.portal import derived, graph

IR = {
    "nodes": [{"name": f"n{i}"} for i in range(graph.LARGE + 1)],
    "links": [
        {"name": f"l{i}", "ports": [{"node": "n0"}, {"node": f"n{i}"}]}
        for i in range(1, graph.LARGE + 1)
    ],
    "lans": [{"name": "lan0", "ports": [{"node": "n1"}, {"node": "n2"}]}],
    "warnings": [{"message": "careful"}],
}


def test_a_definition_is_read_once_per_digest() -> None:
    text = json.dumps(IR)
    found = derived.definition("digest-a", text)
    assert derived.definition("digest-a", "not read again: the digest is kept") is found
    assert found.counts == {"nodes": 201, "links": 200, "lans": 1, "programs": 0, "events": 0}
    assert found.large and found.warnings == ["careful"] and found.link_rows == []
    assert {"n0", "lan:lan0"} <= found.keys and "lan0" not in found.keys
    small = {"nodes": IR["nodes"][:2], "links": IR["links"][:1]}
    assert derived.definition("digest-b", json.dumps(small)).link_rows[0]["name"] == "l1"


def test_a_topology_is_kept_until_its_positions_or_hosts_change() -> None:
    found = derived.definition("digest-c", json.dumps(IR))
    reads: list[int] = []

    def saved() -> dict[str, dict[str, float]]:
        reads.append(1)
        return {"n5": {"x": 1.0, "y": 2.0}}

    first = derived.topology("digest-c", found, {}, saved, ("stamp", 1))
    assert derived.topology("digest-c", found, {}, saved, ("stamp", 1)) is first
    assert len(reads) == 1  # the positions file is read when the topology is made, only
    elements = {e["data"]["id"]: e for e in json.loads(first.elements_json)}
    assert elements["n:n5"]["position"] == {"x": 1.0, "y": 2.0}  # over the layered layout
    assert "position" in elements["n:n6"] and first.preset
    assert first.node_table.count("<tr>") == 201
    moved = derived.topology("digest-c", found, {}, saved, ("stamp", 2))
    assert moved is not first and len(reads) == 2
    placed = derived.topology("digest-c", found, {"n0": "h1"}, saved, ("stamp", 2))
    assert placed is not moved and "<td>h1</td>" in placed.node_table
