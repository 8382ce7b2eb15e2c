"""Helpers shared by the tests (imported as `nbtest`; pytest puts tests/ on the path)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "examples"


def semantic(exp: Any) -> Any:
    """The IR as plain data without where it came from (source, file:line, warnings)."""

    def strip(o: Any) -> Any:
        if isinstance(o, dict):
            return {k: strip(v) for k, v in o.items() if k not in ("where", "source", "warnings")}
        if isinstance(o, list | tuple):
            return [strip(x) for x in o]
        return o

    return strip(exp.model_dump(mode="json"))


def build(text: str) -> Any:
    """The IR of a YAML experiment given as (indented) text, as file t.yaml."""
    import textwrap

    from nestbed.spec import yaml as yaml_front_end
    from nestbed.spec.resolve import resolve

    document, locations = yaml_front_end.read(textwrap.dedent(text), "t.yaml")
    return resolve(document, file="t.yaml", locations=locations)


def experiment(text: str, name: str) -> Any:
    """Like build, named NAME-PID so that parallel test runs do not collide."""
    import os

    exp = build(text)
    return exp.model_copy(update={"name": f"{name}-{os.getpid()}"})


def swapping() -> Any:
    """Swaps in plans of experiments for a block (``with swapping() as swap: swap(exp)``),
    swaps them all out however it ends, and checks that nothing of them is left: no
    namespace, no run directory, none of its daemons (linkd, nestbed-sim) running."""
    import contextlib

    from nestbed.backend import linux
    from nestbed.backend.plan import plan

    @contextlib.contextmanager
    def block() -> Any:
        made = []

        def swap(exp: Any) -> Any:
            p = plan(exp)
            made.append(p)
            linux.swap_in(p)
            return p

        try:
            yield swap
        finally:
            pids = {
                p.experiment: [int(f.read_text()) for f in linux.run_dir(p).glob("*.pid")]
                for p in made
            }
            for p in made:
                linux.swap_out(p)
        for p in made:
            assert not set(p.namespaces) & set(linux.leftovers())
            assert not linux.run_dir(p).exists()
            running = [pid for pid in pids[p.experiment] if Path(f"/proc/{pid}").exists()]
            assert not running, f"daemons of {p.experiment} outlived swap-out: {running}"

    return block()


def until(condition: Callable[[], Any], what: str, deadline_s: float = 180) -> Any:
    """Waits for ``condition`` to be true (its value), failing with ``what`` at the deadline
    (generous: the machine is shared and loaded; never a measured threshold)."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        value = condition()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"still waiting after {deadline_s} s for {what}")


def receiving(p: Any, node: str, folder: Path, idle_s: float) -> tuple[str, Any, Path]:
    """A nestbed-probe receiver listening on UDP port 9000 of ``node`` in swapped-in plan
    ``p``, ending ``idle_s`` after its last packet: ``node``'s address, the process, and
    the log of what it received (its summary goes to ``folder``/recv.json)."""
    from nestbed.backend import linux
    from nestbed.binaries import probe_recv

    address = next(line.split()[0] for line in p.node(node).hosts.splitlines()
                   if line.endswith(f" {node}"))  # fmt: skip
    log = folder / "recv.csv"
    receiver = linux.start_in(
        p, node, probe_recv(f"{address}:9000", "--idle", f"{idle_s:g}", "--log", str(log)),
        stdout=open(folder / "recv.json", "w"),  # noqa: SIM115
    )  # fmt: skip
    linux.wait_listening(receiver, 9000, "udp")
    return address, receiver, log


def link_ports(p: Any, link: str, simulated: bool) -> dict[str, Any]:
    """The counters of ``link``'s ports in swapped-in plan ``p``, by node: nestbed-sim's for a
    simulated link, nestbed-linkd's for an emulated one (the same shape)."""
    from contextlib import closing

    from nestbed.backend import linux, sim

    if simulated:
        with closing(sim.SimChannel(linux.run_dir(p))) as channel:
            return channel.request("counters")["links"][link]["ports"]
    with linux.linkd(p) as client:
        return client.request("counters", link=link)["links"][link]["ports"]


def core_as_lan(text: str) -> str:
    """Experiment TEXT with its link ``core`` a LAN of the same members and options, named
    ``ether``."""
    start = text.index("  - {name: core,")
    rest = text.find("\n  - ", start)
    core = text[start : rest + 1 if rest >= 0 else len(text)]
    lan = core.replace("{name: core,", "{name: ether,")
    return text.replace(core, "").replace("links:\n", f"lans:\n{lan}links:\n")
