"""The public-style corpus (tests/corpus/ns/public): every file parses, and to the topology
real ns-2 builds from it with the stub tb_compat.tcl.

ns-2 runs each file with ns2_topology.tcl, whose `$ns run` prints the nodes (with the global
variables holding them), the node pairs joined by links and the LANs with their members;
nestbed's IR must have the same nodes in the same order, named by one of those variables
(Emulab's rule), the same links and the same LANs. The corpus together uses every tb-*
command of Emulab's documentation.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from ns_helpers import CORPUS, require_ns

from nestbed.spec import load
from nestbed.spec.ns import STUB

PUBLIC = CORPUS / "public"
FILES = sorted(PUBLIC.glob("*.ns"))
DUMPER = Path(__file__).resolve().parent / "ns2_topology.tcl"

# The tb-* commands of Emulab's ns extensions documentation (and DETER's additions).
DOCUMENTED = """
tb-set-hardware tb-set-node-os tb-set-ip tb-set-ip-interface tb-set-ip-link tb-set-ip-lan
tb-set-netmask tb-set-ip-routing tb-set-node-rpms tb-set-node-startup tb-set-node-startcmd
tb-set-node-tarfiles tb-set-tarfiles tb-set-node-cmdline tb-set-link-loss tb-set-lan-loss
tb-set-node-lan-delay tb-set-node-lan-bandwidth tb-set-node-lan-loss tb-set-node-lan-params
tb-set-link-simplex-params tb-set-lan-simplex-params tb-set-endnodeshaping tb-set-noshaping
tb-use-endnodeshaping tb-force-endnodeshaping tb-set-multiplexed tb-set-useveth
tb-set-link-encap tb-set-allowcolocate tb-set-colocate-factor tb-make-soft-vtype
tb-make-hard-vtype tb-make-weighted-vtype tb-fix-node tb-set-node-failure-action
tb-set-link-failure-action tb-set-sync-server tb-set-cpu-usage tb-set-mem-usage
tb-set-link-est-bandwidth tb-set-lan-est-bandwidth tb-set-link-backfill tb-set-lan-backfill
tb-set-uselatestwadata tb-set-usewatunnels tb-set-wasolver-weights tb-set-security-level
tb-use-ipassign tb-set-ipassign-args tb-set-node-usesharednode tb-set-node-memsize
tb-bind-parent tb-fix-current-resources tb-set-encapsulate tb-set-jail-os tb-set-delay-os
tb-set-node-service tb-add-node-service-hook tb-add-node-attribute tb-elab-in-elab
tb-set-elabinelab-cvstag tb-elabinelab-singlenet tb-set-elabinelab-attribute
tb-set-dpdb tb-set-node-plab-role tb-set-node-plab-plcnet tb-use-physnaming
""".split()  # noqa: SIM905 - a list of words reads better than 68 quoted strings


def test_the_corpus_is_large_and_covers_every_documented_command() -> None:
    assert len(FILES) >= 60
    used = set()
    for path in FILES:
        used |= set(re.findall(r"\btb-[a-z-]+", path.read_text()))
    assert sorted(set(DOCUMENTED) - used) == []


def ns2_topology(path: Path, tmp_path: Path) -> dict:
    for other in PUBLIC.iterdir():
        if other.is_file():
            shutil.copy(other, tmp_path / other.name)
    shutil.copy(STUB, tmp_path / "tb_compat.tcl")
    shutil.copy(DUMPER, tmp_path / "ns2_topology.tcl")
    (tmp_path / "run.tcl").write_text(
        f"source tb_compat.tcl\nsource ns2_topology.tcl\nsource {path.name}\n"
    )
    done = subprocess.run(
        ["ns", "run.tcl"], cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False
    )
    lines = [x for x in done.stdout.splitlines() if x.startswith("NB-TOPOLOGY ")]
    assert done.returncode == 0 and lines, done.stdout[-2000:] + done.stderr[-2000:]
    return json.loads(lines[-1].removeprefix("NB-TOPOLOGY "))


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_parses_to_the_topology_ns2_builds(path: Path, tmp_path: Path) -> None:
    require_ns()
    exp = load(path).experiment
    ns2 = ns2_topology(path, tmp_path)
    names = [n.name for n in exp.nodes]
    assert len(names) == len(ns2["nodes"]), (names, ns2["nodes"])
    for name, candidates in zip(names, ns2["nodes"], strict=True):
        if candidates:
            assert name in candidates, (name, candidates)
    index = {name: i for i, name in enumerate(names)}
    links = {tuple(sorted(index[p.node] for p in link.ports)) for link in exp.links}
    assert links == {tuple(pair) for pair in ns2["links"]}
    lans = [sorted(index[p.node] for p in lan.ports) for lan in exp.lans]
    assert lans == [sorted(lan["members"]) for lan in ns2["lans"]]
    for lan, theirs in zip(exp.lans, ns2["lans"], strict=True):
        if theirs["names"]:
            assert lan.name in theirs["names"], (lan.name, theirs["names"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_converts_to_yaml_and_to_ns_and_back(path: Path, tmp_path: Path) -> None:
    """`nestbed convert` keeps the meaning of every corpus file, in both directions (or says in
    one sentence what ns syntax cannot express: simulated nodes, per-direction queue types)."""
    from nbtest import semantic
    from nestbed.errors import UserError
    from nestbed.spec import yaml as yaml_front_end
    from nestbed.spec.export import to_document, to_ns
    from nestbed.spec.resolve import resolve

    exp = load(path).experiment
    text = yaml_front_end.write(to_document(exp))
    document, locations = yaml_front_end.read(text, "c.yaml")
    assert semantic(resolve(document, file="c.yaml", locations=locations)) == semantic(exp)
    try:
        ns_text = to_ns(exp)
    except UserError as exc:
        assert str(exc).endswith("convert to yaml") or "convert to yaml to keep" in str(exc)
        return
    converted = tmp_path / f"{exp.name}.ns"
    converted.write_text(ns_text)
    assert semantic(load(converted).experiment) == semantic(exp)


def test_the_stub_and_the_front_end_know_the_same_commands() -> None:
    """Every tb-* and nb-* command nestbed reads is a no-op in the stub for plain ns-2, and every
    inert one has its reason."""
    from nestbed.spec.ns import LIBRARY
    from nestbed.spec.resolve import INERT_REASONS

    words = re.compile(r"\b(?:tb|nb)-[a-z-]*[a-z]\b")
    library = LIBRARY.read_text()
    # tb-set-sync-server-noop is a method of $ns (without effect), not a command
    ours = set(words.findall(library)) - {"nb-ns", "tb-set-sync-server-noop"}
    assert sorted(ours - set(words.findall(STUB.read_text()))) == []
    inert = library[
        library.index("foreach ::nb::cmd {") : library.index("} {\n    proc ::$::nb::cmd")
    ]
    assert sorted(set(words.findall(inert)) - set(INERT_REASONS)) == []
