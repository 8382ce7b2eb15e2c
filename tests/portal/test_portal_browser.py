"""The portal in a real Chromium against a real server.

On the Linux back end (root): create from a file with an error and see its line marked, fix
it, swap in, watch the bottleneck's counters move with the experiment's own CBR, send a
link-down event and see the drops, swap out, open the run's report. On the fake back end: a
300-node topology as a searchable table beside a simplified graph, a dragged node's place
kept. Every page is photographed (build/screenshots/) and no page logs a console error."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from browser import browser, needs_chromium
from portal_helpers import PAGE, long_report, ran
from server_helpers import People, Served, wait_for

pytestmark = needs_chromium

GOOD = """\
# i23's browser test: a CBR of 2 Mb/s across a 10 Mb/s, 20 ms bottleneck until swap-out.
set ns [new Simulator]
source tb_compat.tcl
set a [$ns node]
set b [$ns node]
set bottleneck [$ns duplex-link $a $b 10Mb 20ms DropTail]
set udp0 [new Agent/UDP]
$ns attach-agent $a $udp0
set null0 [new Agent/Null]
$ns attach-agent $b $null0
$ns connect $udp0 $null0
set cbr0 [new Application/Traffic/CBR]
$cbr0 attach-agent $udp0
$cbr0 set packetSize_ 500
$cbr0 set rate_ 2Mb
$ns at 0.5 "$cbr0 start"
$ns run
"""
BAD = GOOD.replace("$ns duplex-link $a $b", "$ns duplex-link $a $zz")


class RealServed(Served):
    """A server on the Linux back end (the default when $NESTBED_BACKEND is not set)."""

    def env(self, **extra: str) -> dict[str, str]:
        found = super().env(**extra)
        del found["NESTBED_BACKEND"]
        return found


def namespaces() -> set[str]:
    done = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=False)
    return {line.split()[0] for line in done.stdout.splitlines() if line.strip()}


@pytest.fixture
def real(tmp_path: Path) -> Iterator[RealServed]:
    if os.geteuid() != 0:
        pytest.skip("the Linux back end needs root")
    server = RealServed(tmp_path)
    made = server.nestbed("serve", "--store", server.store, "--init-admin", "root")
    assert made.returncode == 0, made.stderr
    server.admin_token = made.stdout.strip().splitlines()[-1]
    server.start()
    try:
        yield server
    finally:
        client = server.client(server.admin_token)
        path = "/v1/projects/i23/experiments/portal"
        with contextlib.suppress(Exception):
            if client.request("GET", path)["state"] not in ("defined", "swapped"):
                client.request("POST", path + "/swapout")
                wait_for(client, path, "swapout")
        server.stop()


def cell(b, field: str) -> int:  # type: ignore[no-untyped-def]
    row = b.page.locator('#counters tr[data-key^="bottleneck|"]').first
    return int(row.locator(f'[data-f="{field}"]').inner_text() or 0)


def total(b, field: str) -> int:  # type: ignore[no-untyped-def]
    cells = b.page.locator(f'#counters tr[data-key^="bottleneck|"] [data-f="{field}"]')
    return sum(int(t or 0) for t in cells.all_inner_texts())


def send(b, event: str, said: str) -> None:  # type: ignore[no-untyped-def]
    b.page.get_by_label("Event").fill(event)
    b.page.get_by_role("button", name="Send").click()
    b.page.locator("#event-result").get_by_text(said).wait_for()


@pytest.mark.root
def test_create_fix_swap_in_watch_send_down_swap_out_report(
    real: RealServed, tmp_path: Path
) -> None:
    admin = real.client(real.admin_token)
    token = admin.request("POST", "/v1/users", {"name": "i23user"})["token"]
    admin.request("POST", "/v1/projects", {"name": "i23", "leader": "i23user"})
    bad = tmp_path / "portal.ns"
    bad.write_text(BAD)
    before = namespaces()
    with browser(real.url) as b:
        b.go("/portal/login")
        b.shot("login")
        b.login(token)
        b.go("/portal/new")
        b.page.get_by_label("Upload an ns").set_input_files(str(bad))
        b.page.get_by_role("button", name="Check and create").click()
        marked = b.page.locator("li.marked")
        marked.first.wait_for()
        assert marked.count() == 1 and "zz" in marked.first.inner_text()
        b.shot("create-with-problem")
        assert admin.request("GET", "/v1/projects/i23/experiments") == []

        b.page.get_by_label("Upload an ns").set_input_files([])
        b.page.get_by_label("File name of pasted text").fill("portal.ns")
        b.page.get_by_label("Pasted text", exact=True).fill(GOOD)
        b.page.get_by_role("button", name="Check and create").click()
        b.page.wait_for_url("**/portal/p/i23/e/portal")
        b.page.get_by_role("button", name="Swap in").click()
        b.page.wait_for_function("document.getElementById('state')?.textContent === 'active'",
                                 timeout=120_000)  # fmt: skip
        b.shot("experiment")
        status = admin.request("GET", "/v1/projects/i23/experiments/portal/status")
        made = {n["namespace"] for n in status["live"]["nodes"]}
        assert made <= namespaces() and not made & before

        b.go("/portal/p/i23/e/portal/live")
        b.page.locator('#counters tr[data-key^="bottleneck|"]').first.wait_for()
        first = total(b, "packets_out")
        b.page.wait_for_function(
            'n => [...document.querySelectorAll(\'#counters tr[data-key^="bottleneck|"] '
            "[data-f=packets_out]')].reduce((s, td) => s + Number(td.textContent), 0) > n",
            arg=first + 100,
        )  # the stream updates the page in place: no reload
        b.page.wait_for_function(  # the 2 Mb/s CBR, measured from the counters' bytes
            "[...document.querySelectorAll('#counters [data-f=throughput_bps]')]"
            ".some(td => / [kM]b\\/s$/.test(td.textContent))"
        )
        b.shot("live")
        drops = total(b, "drops")
        send(b, "bottleneck bandwidth 1Mb", "done at")  # the 2 Mb/s CBR now overflows its queue
        b.page.wait_for_function(
            'n => [...document.querySelectorAll(\'#counters tr[data-key^="bottleneck|"] '
            "[data-f=drops]')].reduce((s, td) => s + Number(td.textContent), 0) > n",
            arg=drops + 10,
        )
        send(b, "bottleneck down", "is down")
        b.page.wait_for_function(  # nothing crosses a link that is down
            "[...document.querySelectorAll('#counters tr[data-key^=\"bottleneck|\"]')]"
            ".every(tr => tr.querySelector('[data-f=state]').textContent === 'down' && "
            "tr.querySelector('[data-f=throughput_bps]').textContent === '0 b/s')"
        )
        b.page.locator("#events").get_by_text("bottleneck down").first.wait_for()
        b.shot("live-link-down")

        b.go("/portal/p/i23/e/portal/topology")
        b.page.wait_for_selector("#graph[data-drawn=yes]")
        b.page.locator("#link-table").get_by_text("a→b 10Mb 20ms").wait_for()
        b.shot("topology")

        b.go("/portal/p/i23/e/portal")
        b.page.get_by_role("button", name="Swap out").click()
        b.page.wait_for_function("document.getElementById('state')?.textContent === 'swapped'",
                                 timeout=120_000)  # fmt: skip
        b.go("/portal/")
        b.shot("experiments")
        b.go("/portal/p/i23/e/portal")
        b.page.get_by_role("link", name="run 1").click()
        if b.page.locator("#report .report").count() == 0:  # queued behind others' drawings
            b.page.get_by_role("button", name="Draw the report now").click()
        b.page.locator("#report .report").wait_for()
        assert b.page.locator("#outcome").inner_text() != "running"
        assert b.page.locator("#tables summary").count() >= 1
        b.shot("results")
        assert b.errors == []
    assert not made & namespaces()


@pytest.fixture
def big(tmp_path: Path) -> Iterator[Served]:
    server = Served(tmp_path)
    made = server.nestbed("serve", "--store", server.store, "--init-admin", "root")
    server.admin_token = made.stdout.strip().splitlines()[-1]
    server.start()
    try:
        yield server
    finally:
        server.stop()


def star(nodes: int) -> str:
    names = [f"n{i}" for i in range(nodes)]
    lines = ["nodes:"] + [f"  - {{name: {n}}}" for n in names] + ["links:"]
    lines += [f"  - {{name: l{i}, members: [n0, {n}], bandwidth: 100Mb, delay: {i % 7}ms}}"
              for i, n in enumerate(names[1:], 1)]  # fmt: skip
    return "\n".join(lines) + "\n"


def test_a_large_topology_is_a_table_beside_a_simplified_graph(big: Served) -> None:
    admin = big.client(big.admin_token)
    admin.request("POST", "/v1/projects", {"name": "i23", "leader": "root"})
    admin.request("PUT", "/v1/projects/i23/experiments/star",
                  {"file_name": "star.yaml", "text": star(300)})  # fmt: skip
    with browser(big.url) as b:
        b.login(big.admin_token)
        b.go("/portal/p/i23/e/star/topology")
        b.page.wait_for_selector("#graph.simplified[data-drawn=yes]")
        assert b.page.evaluate("window.nestbedTopology.nodes") == 300
        rows = b.page.locator("#node-table tbody tr")
        assert rows.count() == 300
        b.page.get_by_label("Search nodes").fill("n29")
        assert b.page.locator("#node-table tbody tr:not([hidden])").count() == 11  # n29, n290-n299
        b.shot("topology-large")
        box = b.page.locator("#graph").bounding_box()
        assert b.page.locator("#graph canvas.plain").count() == 1  # drawn plain, not by Cytoscape
        at = b.page.evaluate("window.nestbedTopology.renderedPosition('n:n5')")
        x, y = box["x"] + at["x"], box["y"] + at["y"]
        b.page.mouse.move(x, y)
        b.page.mouse.down()
        b.page.mouse.move(x + 60, y + 40, steps=5)
        b.page.mouse.up()
        b.page.get_by_text("Position saved.").wait_for()
        moved = b.page.evaluate("window.nestbedTopology.renderedPosition('n:n5')")
        b.page.get_by_label("Layout").select_option("grid")  # Cytoscape takes the graph over
        b.page.wait_for_function("window.nestbedTopology.cy?.nodes().length === 300")
        assert b.page.locator("#graph canvas.plain").count() == 0
        b.page.get_by_label("Search nodes").fill("n29")  # the search marks Cytoscape's nodes
        assert b.page.evaluate("window.nestbedTopology.cy.$('node.found').length") == 11
        assert b.errors == []
    assert moved != at
    kept = big.root / "results" / ".portal" / "positions" / "i23--star.json"
    saved = json.loads(kept.read_text())  # the node under the pointer (300 lie close together)
    assert len(saved) == 1 and next(iter(saved)) in {f"n{i}" for i in range(300)}


def test_a_long_reports_first_part_then_the_whole_swapped_in(
    served: Served, people: People
) -> None:
    long_report(ran(served, people), served.client(people["ada"]))
    with browser(served.url) as b:
        b.login(people["ada"])
        b.go(PAGE + "/runs/1")
        report = b.page.locator("#report .report")
        assert report.locator("tbody tr").count() < 5000
        more = b.page.get_by_role("link", name="Show the whole report")
        more.click()
        b.page.get_by_text("THE END").wait_for()
        assert report.locator("tbody tr").count() == 5000
        assert b.page.url == served.url + PAGE + "/runs/1"  # swapped in place
        assert more.count() == 0
        assert b.errors == []
