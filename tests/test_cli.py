"""The command line, run as a user runs it: a real process, real files, a real store."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DUMBBELL = REPO / "examples" / "dumbbell.yaml"


def nestbed(
    *args: str, db: Path | None = None, cwd: Path | None = None
) -> subprocess.CompletedProcess:
    env = dict(os.environ, COLUMNS="200")
    if db is not None:
        env["NESTBED_DB"] = str(db)
    return subprocess.run(
        [sys.executable, "-m", "nestbed", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        timeout=60,
    )


def test_parse_prints_a_summary():
    result = nestbed("parse", str(DUMBBELL))
    assert result.returncode == 0, result.stderr
    for text in (
        "experiment dumbbell: 6 nodes, routing static",
        "r1 → r2",
        "10Mb 20ms droptail 100 packets",
        "bottleneck │ down",
    ):
        assert text in result.stdout


def test_parse_json_is_the_ir_and_deterministic():
    first, second = (
        nestbed("parse", "--json", str(DUMBBELL)),
        nestbed("parse", "--json", str(DUMBBELL)),
    )
    assert first.returncode == 0 and first.stdout == second.stdout
    ir = json.loads(first.stdout)
    assert ir["name"] == "dumbbell" and len(ir["links"]) == 5


def test_a_bad_file_gives_one_line_per_problem_and_exit_2(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "nodes: [{name: a}, {name: b}]\nlinks:\n  - {members: [a, b], bandwidth: 10MB}\n"
    )
    result = nestbed("parse", str(bad))
    assert result.returncode == 2
    assert result.stderr.strip() == (
        "error: bad.yaml:3: link link0: bandwidth '10MB' has unknown unit 'MB'; write bits per second "
        "with b, kb, Mb or Gb (for example 10Mb); bytes (B) are not accepted"
    )
    assert "Traceback" not in result.stderr


def test_missing_file_and_unknown_format(tmp_path):
    result = nestbed("parse", str(tmp_path / "nope.yaml"))
    assert (result.returncode, result.stderr.strip()) == (
        2,
        f"error: {tmp_path / 'nope.yaml'}: no such experiment file; check the path",
    )
    odd = tmp_path / "x.txt"
    odd.write_text("")
    assert nestbed("parse", str(odd)).returncode == 2


def test_usage_error_exits_2():
    result = nestbed("parse")
    assert result.returncode == 2 and "Missing argument" in result.stderr


def test_create_list_show_delete(tmp_path):
    db = tmp_path / "store.db"
    created = nestbed("create", str(DUMBBELL), "--name", "db1", "--json", db=db)
    assert created.returncode == 0, created.stderr
    assert json.loads(created.stdout)["state"] == "defined"
    listed = json.loads(nestbed("list", "--json", db=db).stdout)
    assert [r["name"] for r in listed] == ["db1"]
    shown = json.loads(nestbed("show", "db1", "--json", db=db).stdout)
    assert shown["ir"]["name"] == "db1" and shown["source_format"] == "yaml"
    again = nestbed("create", str(DUMBBELL), "--name", "db1", db=db)
    assert again.returncode == 2 and "already exists" in again.stderr
    assert nestbed("delete", "db1", db=db).returncode == 0
    assert json.loads(nestbed("list", "--json", db=db).stdout) == []
    missing = nestbed("show", "db1", db=db)
    assert missing.returncode == 2 and "db1" in missing.stderr


def test_db_option_beats_the_environment(tmp_path):
    explicit = tmp_path / "explicit.db"
    assert (
        nestbed("--db", str(explicit), "create", str(DUMBBELL), db=tmp_path / "env.db").returncode
        == 0
    )
    assert explicit.exists()
    assert json.loads(nestbed("list", "--json", db=tmp_path / "env.db").stdout) == []


@pytest.mark.parametrize("target", ["yaml", "ns"])
def test_convert_round_trips(tmp_path, target):
    out = tmp_path / f"converted.{target}"
    result = nestbed("convert", str(DUMBBELL), "--to", target, "-o", str(out))
    assert result.returncode == 0, result.stderr
    original = json.loads(nestbed("parse", "--json", str(DUMBBELL)).stdout)
    converted = json.loads(nestbed("parse", "--json", "--name", "dumbbell", str(out)).stdout)
    from nbtest import semantic
    from nestbed.model import Experiment

    assert semantic(Experiment.model_validate(original)) == semantic(
        Experiment.model_validate(converted)
    )


def test_convert_to_an_unknown_format():
    result = nestbed("convert", str(DUMBBELL), "--to", "xml")
    assert (result.returncode, result.stderr.strip()) == (
        2,
        "error: --to 'xml' is not a format; use --to yaml or --to ns",
    )


def test_files_that_are_not_utf8_and_unwritable_outputs_are_one_line_errors(tmp_path):
    latin = tmp_path / "latin.yaml"
    latin.write_bytes(b"nodes: [{name: caf\xe9}]\n")
    result = nestbed("parse", str(latin))
    assert (
        result.returncode == 2
        and "is not UTF-8 text" in result.stderr
        and "Traceback" not in result.stderr
    )
    result = nestbed("convert", str(DUMBBELL), "--to", "ns", "-o", str(tmp_path / "no" / "x.ns"))
    assert result.returncode == 2 and "cannot write" in result.stderr


def test_convert_to_ns_keeps_event_arguments_literal(tmp_path):
    source = tmp_path / "ev.yaml"
    source.write_text(
        "nodes: [{name: a}, {name: b}]\nlinks: [{members: [a, b], drop_packets: [3, 5]}]\n"
        "programs: [{name: p0, node: a, command: ls}]\n"
        'events:\n  - {at: 1, object: p0, verb: set, args: [command, "echo [pwd] $x"]}\n'
        '  - {at: 2, object: ns, verb: log, args: ["x{y"]}\n'
    )
    out = tmp_path / "ev.ns"
    assert nestbed("convert", str(source), "--to", "ns", "-o", str(out)).returncode == 0
    parsed = json.loads(nestbed("parse", "--json", "--name", "ev", str(out)).stdout)
    assert [e["args"] for e in parsed["events"]] == [["command", "echo [pwd] $x"], ["x{y"]]
    assert [p["egress"]["drop_ordinals"] for p in parsed["links"][0]["ports"]] == [[3, 5], [3, 5]]


def test_report_draws_a_runs_report_again_and_refuses_what_is_no_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "manifest.json").write_text(json.dumps({"experiment": "x", "outcome": "completed"}))
    (run / "events.csv").write_text(
        "index,source,planned_s,actual_s,error_ms,object,verb,args,outcome,message\n"
        "0,static,1.0,1.001,1,link0,down,,ok,\n"
    )
    result = nestbed("report", str(run), "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["report"] == str(run / "report.md")
    assert json.loads((run / "manifest.json").read_text())["report"]["drawn_by"] == "nestbed report"
    assert "## Events" in (run / "report.md").read_text()
    missing = nestbed("report", str(tmp_path))
    assert missing.returncode == 2 and "has no manifest.json" in missing.stderr


def test_every_command_is_found_in_its_own_module_and_loads_no_other():
    # `nestbed CMD` imports and builds CMD's module only; the table must name every
    # command, or a new one would be found only by `--help`.
    import subprocess
    import sys

    import typer.main

    import nestbed.cli as cli

    group = typer.main.get_command(cli.app)
    assert set(group.commands) == set(cli.COMMANDS)  # type: ignore[attr-defined]
    code = (
        "import sys\nimport nestbed.cli as cli\ncli.register(sys.argv[1:])\n"
        "print(' '.join(m.rsplit('.', 1)[1] for m in sys.modules if m.startswith('nestbed.cli.')))"
    )
    for argv, expected in ((["--db", "x.db", "swapout", "n"], "lifecycle"),
                           (["status", "--json", "n"], "active")):  # fmt: skip
        done = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True,
                              text=True, check=True)  # fmt: skip
        loaded = set(done.stdout.split()) - {"common", "plain"}
        assert loaded == {expected}, (argv, loaded)


@pytest.mark.parametrize("example", ["pubsub", "lan"])  # Gilbert-Elliott loss; a LAN
def test_show_prints_the_summary_it_printed_from_the_models_without_loading_them(tmp_path, example):
    # tests/golden: `nestbed parse` of the example as printed from the IR's models (before
    # `show` and `parse` printed from its JSON).
    expected = (REPO / "tests" / "golden" / f"summary-{example}.txt").read_text()
    source = REPO / "examples" / f"{example}.ns"
    assert nestbed("parse", str(source)).stdout == expected
    db = tmp_path / "store.db"
    assert nestbed("create", str(source), db=db).returncode == 0
    env = dict(os.environ, COLUMNS="200", NESTBED_DB=str(db))
    shown = subprocess.run([sys.executable, "-X", "importtime", "-m", "nestbed", "show", example],
                           capture_output=True, text=True, env=env, timeout=60)  # fmt: skip
    header, _, summary = shown.stdout.partition("\n")
    assert header.startswith(f"{example}: defined (from {source}, sha256 ")
    assert summary == expected
    assert " pydantic" not in shown.stderr
