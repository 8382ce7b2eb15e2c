"""Names, determinism, parameters and the Python API of the ns front end."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from ns_helpers import CORPUS, line

from nestbed.errors import EnvironmentProblem, Problem, UserError
from nestbed.spec.ns import LIBRARY, translate


def names(t) -> dict[str, list[str]]:  # type: ignore[no-untyped-def]
    d = t.document
    return {
        "nodes": [n.name for n in d.nodes],
        "links": [x.name for x in d.links],
        "lans": [x.name for x in d.lans],
        "agents": [x.name for x in d.agents],
        "applications": [x.name for x in d.applications],
        "programs": [x.name for x in d.programs],
    }


NAMES = [
    ("set n0 [$ns node]", "nodes", ["n0"]),
    ("set n(3) [$ns node]", "nodes", ["n-3"]),
    ("set n(a,b) [$ns node]", "nodes", []),  # ',' is not allowed: an error, a default name
    ("set x [set y [$ns node]]", "nodes", ["y"]),
    ("set n0 [$ns node]\nset A $n0", "nodes", ["n0"]),
    ("set ::g [$ns node]", "nodes", ["g"]),
    ("$ns node\n$ns node\nset node0 [$ns node]", "nodes", ["node1", "node2", "node0"]),
    (
        "set a [$ns node]\nset b [$ns node]\n$ns duplex-link $a $b 1Mb 1ms DropTail\nset link0 [$ns duplex-link $a $b 1Mb 1ms DropTail]",
        "links",
        ["link1", "link0"],
    ),
    ('set a [$ns node]\n$ns make-lan "$a" 1Mb 1ms', "lans", ["lan0"]),
    (
        "set a [$ns node]\nforeach c {UDP Null TCP TCPSink} {\n  $ns attach-agent $a [new Agent/$c]\n}",
        "agents",
        ["udp0", "null0", "tcp0", "tcpsink0"],
    ),
    (
        "set a [$ns node]\nset u [new Agent/UDP]\n$ns attach-agent $a $u\n[new Application/Traffic/CBR] attach-agent $u\n[new Application/Traffic/CBR] attach-agent $u",
        "applications",
        ["cbr0", "cbr1"],
    ),
    ("set a [$ns node]\n$a program-agent -command ls", "programs", ["program0"]),
]


@pytest.mark.parametrize(("body", "kind", "expected"), NAMES)
def test_names(run, body: str, kind: str, expected: list[str]) -> None:
    t = run(body)
    got = names(t)[kind]
    if expected:
        assert got == expected
    else:
        assert got == ["node0"] and t.errors


def test_names_in_events_are_final_names(run) -> None:
    t = run('$ns at 1 "[$ns node] frob"\n$ns at 2 "[$ns event-timeline] start"')
    assert [(e.object, e.verb) for e in t.document.events] == [
        ("node0", "frob"),
        ("timeline0", "start"),
    ]


def test_same_file_same_bytes(tmp_path: Path) -> None:
    outputs = set()
    for _ in range(2):
        done = subprocess.run(
            ["tclsh", str(LIBRARY), str(CORPUS / "events.ns")],
            capture_output=True,
            check=True,
            cwd=tmp_path,
        )
        outputs.add(done.stdout)
    assert len(outputs) == 1


@pytest.mark.parametrize("path", sorted(CORPUS.rglob("*.ns")), ids=lambda p: p.name)
def test_corpus_translation_is_deterministic(path: Path) -> None:
    assert translate(path) == translate(path)


def test_corpus_files_translate_without_problems() -> None:
    for path in sorted(CORPUS.glob("*.ns")):
        t = translate(path)
        assert (t.errors, t.warnings) == ([], []), path


def test_tree_has_100_nodes_and_99_links() -> None:
    t = translate(CORPUS / "tree.ns")
    assert len(t.document.nodes) == 100 and len(t.document.links) == 99
    assert t.document.links[98].name == "l-99"
    assert t.document.links[98].members == ["n-49", "n-99"]


def test_parameters_override_opt_and_template_parameters(run) -> None:
    body = "set opt(rate) 1Mb\n$ns define-template-parameter SIZE 3\nset n [$ns node]\ntb-set-node-os $n os$SIZE"
    t = run(body, parameters={"rate": "9Mb", "SIZE": "7"})
    assert t.document.env == {"rate": "9Mb"}
    assert t.document.parameters == {"SIZE": "7"}
    assert t.document.nodes[0].os == "os7"
    assert t.locations["env.rate"] == ("t.ns", line(1))
    assert t.locations["parameters.SIZE"] == ("t.ns", line(2))
    assert t.warnings == []


def test_unused_parameter_warns(run) -> None:
    t = run("set n [$ns node]", parameters={"nope": "1"})
    assert t.warnings == [
        Problem(
            "parameter 'nope' is given but the file neither sets opt(nope) nor defines it with define-template-parameter; it is ignored",
            "t.ns",
            1,
        )
    ]


def test_missing_file_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="does not exist"):
        translate(tmp_path / "nope.ns")


def test_missing_tclsh_is_an_environment_problem(tmp_path: Path) -> None:
    path = tmp_path / "a.ns"
    path.write_text("set ns [new Simulator]\n")
    with pytest.raises(
        EnvironmentProblem,
        match=r"tclsh is not installed; run `make setup` or `apt-get install tcl`",
    ):
        translate(path, tclsh="no-such-tclsh-here")


def test_endless_loop_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "loop.ns"
    path.write_text("set ns [new Simulator]\nwhile 1 {}\n")
    t = translate(path, timeout_s=1)
    assert t.errors == [
        Problem(
            "the script did not finish within 1 s (an endless loop?); fix the loop or make the experiment smaller",
            "loop.ns",
        )
    ]
