"""The server's parts without a server: one operation per experiment at a time, uploads
parsed in the sandbox under their project's stored name."""

from __future__ import annotations

import threading

import pytest
from server_helpers import LINE

from nestbed.errors import SpecError, UserError
from nestbed.server.definitions import parse
from nestbed.server.operations import Busy, Operation, Operations
from nestbed.server.schemas import ExperimentFile


def test_one_operation_per_experiment_at_a_time_and_each_end_is_reported():
    ended: list[Operation] = []
    release = threading.Event()
    ops = Operations(ended.append)
    first = ops.start(Operation("swapin", "net--a", "ada"), release.wait)
    with pytest.raises(Busy, match="net--a is busy with a swapin asked by ada"):
        ops.start(Operation("swapout", "net--a", "bob"), lambda: None)
    other = ops.start(Operation("swapin", "net--b", "ada"), lambda: None)  # another experiment
    assert ops.busy("net--a") and first.status == "running"
    release.set()
    ops.wait()
    assert {op.experiment: op.status for op in ended} == {"net--a": "done", "net--b": "done"}
    assert other.ended_at is not None

    def refused() -> None:
        raise UserError("experiment net--a is active")

    failed = ops.start(Operation("swapin", "net--a", "ada"), refused)
    ops.wait()
    assert failed.status == "failed" and failed.error == "experiment net--a is active"


def test_an_upload_is_parsed_under_its_projects_stored_name():
    found = parse("net", ExperimentFile(file_name="line.yaml", text=LINE), max_bytes=1 << 20)
    assert found.name == "line" and found.experiment.name == "net--line"
    assert found.fields()["source_file"] == "line.yaml"
    named = parse("net", ExperimentFile(file_name="x.yaml", text=LINE, name="other"), 1 << 20)
    assert named.experiment.name == "net--other"
    with pytest.raises(UserError, match="more than the server's limit of 10"):
        parse("net", ExperimentFile(file_name="line.yaml", text=LINE), max_bytes=10)


def test_an_ns_upload_runs_in_the_sandbox_which_reads_nothing_of_the_server():
    text = 'set ns [new Simulator]\nsource "/etc/passwd"\nset a [$ns node]\n$ns run\n'
    with pytest.raises(SpecError) as found:
        parse("net", ExperimentFile(file_name="evil.ns", text=text), 1 << 20)
    assert found.value.problems[0].file == "evil.ns"
    assert found.value.problems[0].line == 2 and "is refused" in found.value.problems[0].message


def test_the_loop_runs_its_policies_in_order_and_outlives_a_failing_tick():
    import asyncio

    from nestbed.server.loop import Loop

    seen: list[str] = []

    def admission(loop: Loop) -> None:
        seen.append("admission")

    def broken(loop: Loop) -> None:
        seen.append("broken")
        if seen.count("broken") == 1:
            raise RuntimeError("a policy's bug")

    loop = Loop(None, None, None, tick_s=0.001, policies=(admission, broken))  # type: ignore[arg-type]

    async def two_ticks() -> None:
        task = asyncio.create_task(loop.run())
        while loop.ticks < 2 and not task.done():
            await asyncio.sleep(0.001)
        task.cancel()

    asyncio.run(asyncio.wait_for(two_ticks(), 60))
    assert seen[:6] == ["admission", "broken", "admission", "broken", "admission", "broken"]
    assert loop.ticks >= 2  # the first tick raised (and was not counted), the loop went on


def test_an_operation_is_audited_before_anyone_can_see_it_end():
    # Its end was once set before its audit row was written: a client that saw it end (and
    # asked something next) found its own request audited before that end.
    seen_by_audit: list[str] = []
    operations = Operations(lambda op: seen_by_audit.append(op.status))
    op = operations.start(Operation("swapin", "exp", "ada"), lambda: None)
    for _ in range(1000):
        if op.status != "running":
            break
        threading.Event().wait(0.01)
    assert seen_by_audit == ["running"] and op.status == "done"
