"""`python -m nestbed.linktest`: a linktest of an active experiment during its run, as its
controller starts it for a `$ns linktest` event.

It reads the experiment as swapped in (ir.json in the run folder), asks the controller for
the links as events have left them (their shaping now, the ones down), tests, then sets aside
the checks of links an event changed meanwhile, writes the report into the results folder,
and prints its summary as one JSON line for the controller.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from nestbed.backend import get
from nestbed.backend.plan import plan
from nestbed.backend.sockets import SocketClient
from nestbed.linktest import around
from nestbed.linktest.expect import with_links
from nestbed.model import Experiment, Link

KEPT_IR = "ir.json"  # the experiment as swapped in, in the back end's run folder
CONTROL_SOCKET = "control.sock"  # the controller's (nestbed.control.client.SOCKET)


def links_now(run_dir: Path) -> dict[str, Any]:
    """The controller's status: the links ({"links": {name: up|down}, "changed_links": [...]}),
    its elapsed time and the traffic running."""
    with SocketClient(run_dir / CONTROL_SOCKET, "the controller", timeout=60) as client:
        return client.request("status")


def _changed(view: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {link["name"]: link for link in view["changed_links"]}


def _down(view: dict[str, Any]) -> set[str]:
    return {name for name, state in view["links"].items() if state == "down"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m nestbed.linktest")
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--backend", required=True)
    parser.add_argument("--level", type=int, required=True)
    parser.add_argument("--results", type=Path, required=True)
    args = parser.parse_args(argv)
    # Imported here: linktest's statistics (scipy) take a second; a bad argument need not.
    from nestbed.linktest.run import linktest, set_aside, write

    exp = Experiment.from_json((args.run_dir / KEPT_IR).read_text())
    before = links_now(args.run_dir)
    changed = [Link.model_validate(x) for x in before["changed_links"]]
    report = linktest(
        plan(exp),
        with_links(exp, changed),
        args.level,
        down=_down(before),
        backend=get(args.backend),
    )
    after = links_now(args.run_dir)
    was, now = _changed(before), _changed(after)
    moved = {name for name in was.keys() | now.keys() if was.get(name) != now.get(name)}
    set_aside(report, moved | (_down(before) ^ _down(after)))
    # The file's own later events and traffic during the levels: not tested, never failed.
    spans = around.windows(before["elapsed_s"], after["elapsed_s"], report.level_seconds)
    running = [f["flow"] for f in before.get("flows") or [] if f.get("running")]
    around.set_aside(report, around.not_tested(exp, plan(exp), spans, running))
    folder = write(report, args.results)
    summary = {**report.to_json()["counts"], "level": args.level, "folder": str(folder)}
    print(json.dumps(summary), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
