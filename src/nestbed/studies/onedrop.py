"""The TCP one-drop study (Netbed paper, Section 7.1): examples/onedrop.ns simulated in ns-2 and
emulated with the same data segment dropped, side by side: does each stack recover it by fast
retransmit?"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from nestbed.errors import EnvironmentProblem
from nestbed.lifecycle.runs import run_alone
from nestbed.model.options import RunOptions
from nestbed.results import markdown
from nestbed.results.folder import RunFolder, make_folder
from nestbed.results.seqplot import SeqTrace, read_tcp_table
from nestbed.simulate import compare, simulate
from nestbed.spec import load

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "onedrop.ns"
FLOW = "ftp"
SEGMENT = 14  # the segment ns-2's validation test drops
# Packets entering the bottleneck before that segment: ns-2 sends the SYN first; Linux's
# first is r1's ARP request, then the SYN and the handshake's ACK (docs/simulate.md).
ORDINALS = {"ns-2": SEGMENT + 1, "Linux": SEGMENT + 3}


def chosen(trace: SeqTrace, recoveries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The recovery of the SEGMENT-th distinct segment sent, if it was dropped."""
    sent = np.unique(trace.sent_seq)
    if sent.size < SEGMENT:
        return None
    return next((r for r in recoveries if r["seq"] == sent[SEGMENT - 1]), None)


def run(results: Path, progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """Simulates and emulates the example into RESULTS (ns2/, linux/), compares them
    (compare/) and writes study.json and report.md; returns study.json's content."""
    say = progress or (lambda _: None)
    if not EXAMPLE.is_file():
        raise EnvironmentProblem(
            f"the study's experiment file {EXAMPLE} is missing; run it from a nestbed checkout "
            "(it ships examples/onedrop.ns)"
        )
    folder = make_folder(results.resolve())
    say("simulating in ns-2")
    simulate(EXAMPLE, folder / "ns2", parameters={"drop": str(ORDINALS["ns-2"])}, duration=None)
    say("emulating (Linux TCP, drop by ordinal in nestbed-linkd, captures)")
    loaded = load(EXAMPLE, parameters={"drop": str(ORDINALS["Linux"])})
    options = RunOptions(capture=True, results=folder / "linux")
    ran = run_alone(folder / "store.db", loaded.experiment, options, source_text=loaded.text,
                    source_format="ns", source_file=str(EXAMPLE))  # fmt: skip
    say("comparing")
    compared = compare([folder / "ns2", folder / "linux"], output=folder / "compare")
    stacks = {}
    for stack, run_folder in (("ns-2", folder / "ns2"), ("Linux", folder / "linux")):
        run = RunFolder(run_folder)
        table = run.tcp_flow(FLOW)
        if not table.is_file():
            raise EnvironmentProblem(f"{run_folder} has no TCP segment table ({table.name}); "
                                     f"see its {run.relative(run.report)}")  # fmt: skip
        trace = read_tcp_table(table, stack)
        recoveries = trace.recoveries()
        stacks[stack] = {
            "ordinal": ORDINALS[stack],
            "unit": trace.unit,
            "chosen": chosen(trace, recoveries),
            "drops": recoveries,
        }
    both = all((s["chosen"] or {}).get("recovery") == "fast retransmit" for s in stacks.values())
    study = {
        "file": str(EXAMPLE),
        "segment": SEGMENT,
        "emulated_run": {k: ran.get(k) for k in ("outcome", "reason", "results")},
        "stacks": stacks,
        "both_fast_retransmit": both,
        "throughput_bps": _throughput(compared),
        "plot": str(folder / "compare" / "plots" / f"tcp-{FLOW}.png"),
    }
    (folder / "study.json").write_text(json.dumps(study, indent=2) + "\n")
    (folder / "report.md").write_text(_report(study))
    return study


def _throughput(compared: dict[str, Any]) -> dict[str, float | None]:
    flows = [f for f in compared["flows"] if f["flow"] == FLOW]
    return flows[0]["metrics"].get("throughput_bps", {}).get("values", {}) if flows else {}


def _stack_row(stack: str, s: dict[str, Any]) -> list[object]:
    """One stack's row: its chosen segment's drop and recovery, and the other drops."""
    c = s["chosen"]
    others = [d for d in s["drops"] if d is not c]
    other = "; ".join(f"{s['unit']} {d['seq']:g}: {d['recovery']}" for d in others) or "none"
    if c is None:
        return [stack, s["ordinal"], "not dropped", "—", "—", "—", other]
    after = f"{c['resent_s'] - c['dropped_s']:.3f} s" if c["resent_s"] is not None else "—"
    return [stack, s["ordinal"], f"{s['unit']} {c['seq']:g}", c["duplicate_acks"], after,
            c["recovery"], other]  # fmt: skip


def _report(study: dict[str, Any]) -> str:
    lines = ["# The TCP one-drop study (Netbed paper, Section 7.1)", "",
             f"`{study['file']}`: segment {study['segment']} of a NewReno transfer dropped as it "
             "enters the bottleneck, in ns-2 and in emulation (Linux's TCP).", ""]  # fmt: skip
    lines += markdown.table(
        ["stack", "drop by ordinal", "the chosen segment", "duplicate ACKs", "resent after",
         "recovery", "other drops"],
        [_stack_row(stack, s) for stack, s in study["stacks"].items()],
        align=["left", "right", "left", "right", "right", "left", "left"],
    )  # fmt: skip
    verdict = "Both stacks recover the chosen segment by fast retransmit."
    if not study["both_fast_retransmit"]:
        verdict = "The stacks do **not** both recover the chosen segment by fast retransmit."
    rates = ", ".join(f"{label} {v / 1e3:.0f} kb/s" for label, v in
                      study["throughput_bps"].items() if v is not None)  # fmt: skip
    lines += [
        "",
        verdict,
        "",
        f"Throughput of the transfer: {rates}.",
        "",
        "![sequence numbers over time](compare/plots/tcp-ftp.png)",
        "",
        "All of the comparison: `compare/compare.md`; the runs: `ns2/`, `linux/`.",
    ]
    return "\n".join(lines) + "\n"
