"""The controller on the Linux back end (root): a real network, real traffic through
nestbed-linkd, captures and TCP segment tables. Everything it makes is swapped out at the end
and checked gone."""

from __future__ import annotations

import os

import pytest
from control_helpers import rows, wait_for

from nestbed.backend.plan import plan
from nestbed.control.client import ControllerClient
from nestbed.model.options import ControllerStart, RunOptions
from nestbed.results import manifest
from nestbed.results.folder import RunFolder
from nestbed.spec import load

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="builds network namespaces (root)")

FLOWS = """
routing: static
nodes:
  - {name: a}
  - {name: b}
links:
  - {name: l0, members: [a, b], bandwidth: 20Mb, delay: 5ms}
agents:
  - {name: udp0, type: udp, node: a, peer: null0}
  - {name: null0, type: null, node: b, peer: udp0}
  - {name: tcp0, type: tcp, node: a, peer: sink0}
  - {name: sink0, type: tcpsink, node: b, peer: tcp0}
applications:
  - {name: cbr0, type: cbr, agent: udp0, packet_size: 500, rate: 1Mb}
  - {name: ftp0, type: ftp, agent: tcp0}
events:
  - {at: 0.1, object: cbr0, verb: start}
  - {at: 0.1, object: ftp0, verb: send, args: ["200000"]}
  - {at: 1.1, object: cbr0, verb: stop}
"""


def test_a_run_on_a_real_network_measures_its_flows_and_links(tmp_path):
    from nestbed.backend.linux import LinuxBackend

    source = tmp_path / "i19c-ctl.yaml"
    source.write_text(FLOWS)
    exp = load(source, name=f"i19c-ctl-{os.getpid()}").experiment
    p = plan(exp)
    backend = LinuxBackend()
    backend.swap_in(p)
    client = ControllerClient(backend, p)
    try:
        ir = backend.run_dir(p) / "ir.json"
        ir.write_text(exp.to_json())
        start = ControllerStart(backend="linux", ir=ir, results=tmp_path / "run",
                                options=RunOptions(capture=True, report=False))  # fmt: skip
        client.launch(start)
        wait_for(lambda: client.request("status")["pending_events"] == 0, "the last event")
        wait_for(lambda: not client.request("status")["flows"][1]["running"], "ftp0's end")
        assert client.request("finish")["outcome"] == "completed"
        client.request("shutdown", timeout=10)
    finally:
        client.close()
        backend.swap_out(p)
    assert not [t for t in backend.traces() if p.tag in t or exp.name in t]
    folder = RunFolder(start.results)
    flows = {r["flow"]: r for r in rows(folder.flows)}
    assert int(flows["cbr0"]["packets_received"]) > 0
    assert int(flows["ftp0"]["bytes_received"]) == 200_000
    assert {r["link"] for r in rows(folder.link_counters)} == {"l0"}
    assert rows(folder.tcp_flow("ftp0"))  # segments read from the captures
    assert all(e["outcome"] == "ok" for e in rows(folder.events))
    assert manifest.read(start.results)["outcome"] == "completed"
