"""The anomaly paper reproduced on nestbed: examples/anomaly.ns run with captures and CPU
monitors, analyzed, and each sender/receiver pair's data transfers checked against its cause."""

from __future__ import annotations

import csv
import json
from collections import Counter
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from statistics import mean
from typing import Any

import pandas as pd

from nestbed.analysis import analyze, plots
from nestbed.analysis.cpu import read_cpu
from nestbed.errors import EnvironmentProblem, UserError
from nestbed.lifecycle.runs import run_alone
from nestbed.model import Experiment
from nestbed.model.options import RunOptions
from nestbed.results import markdown
from nestbed.results.folder import RunFolder, make_folder
from nestbed.spec import load
from nestbed.studies.anomaly.workload import TABLE2

EXAMPLE = Path(__file__).resolve().parents[4] / "examples" / "anomaly.ns"
NAME = "anomaly"


@dataclass(frozen=True)
class Pair:
    sender: str
    receiver: str
    expected: str
    role: str


PAIRS = (
    Pair("s-1", "r-1", "host anomaly", "CPU-starved sender"),
    Pair("s-2", "r-2", "normal", "clean"),
    Pair("s-3", "r-3", "network-limited", "lossy path"),
)


def _sizes(combos: tuple[tuple[int, int], ...]) -> str:
    return ",".join(f"{p // 1024}KB/{d // 1024 // 1024}MB" for p, d in combos)


@dataclass(frozen=True)
class Settings:
    """The file's parameters the study sets (see examples/anomaly.ns)."""

    sizes: str = _sizes(TABLE2)
    rounds: int = 1
    every_s: float = 300.0
    limit_s: float = 300.0
    quota: float = 0.1  # cores for the starved sender, its busy process and its monitor
    loss: float = 0.08  # each direction of the lossy path
    delay: str = "5ms"  # each way, every path
    bandwidth: str = "1Gb"
    cpumon_duty: float = 0.1
    file: Path = field(default=EXAMPLE)

    @classmethod
    def quick(cls) -> Settings:
        """Table 2's first combination only (16 KB / 8 MB): ten seconds of transfers."""
        return cls(sizes="16KB/8MB", limit_s=60.0)

    def parameters(self) -> dict[str, str]:
        return {"sizes": self.sizes, "rounds": str(self.rounds), "every": f"{self.every_s:g}",
                "limit": f"{self.limit_s:g}", "quota": f"{self.quota:g}",
                "loss": f"{self.loss:g}", "delay": self.delay, "bw": self.bandwidth}  # fmt: skip

    def timeout_s(self) -> float:
        """The longest the workload can take: every transfer at its time limit."""
        combos = self.sizes.count(",") + 1
        return (self.rounds - 1) * self.every_s + self.rounds * combos * 2 * self.limit_s + 60


def run(
    settings: Settings, results: Path, progress: Callable[[str], None] | None = None
) -> dict[str, Any]:
    """Runs the experiment, analyzes it, judges the pairs; writes ``results`` (run/,
    analysis/, pairs.csv, study.json, report.md, plots/) and returns study.json's content."""
    say = progress or (lambda _: None)
    if not settings.file.is_file():
        raise EnvironmentProblem(
            f"the study's experiment file {settings.file} is missing; run it from a nestbed "
            "checkout (it ships examples/anomaly.ns)"
        )
    folder = make_folder(results.resolve())
    loaded = load(settings.file, name=NAME, parameters=settings.parameters())
    exp = loaded.experiment
    nodes = {n.name for n in exp.nodes}
    missing = [n for p in PAIRS for n in (p.sender, p.receiver) if n not in nodes]
    if missing:
        raise UserError(f"{settings.file} has no node {missing[0]}; the study needs "
                        "s-1..s-3 and r-1..r-3 as in examples/anomaly.ns")  # fmt: skip
    say("running the experiment (three pairs, captures, CPU monitors on the senders)")
    senders = tuple(p.sender for p in PAIRS)
    options = RunOptions.make(capture=True, capture_nodes=senders, results=folder / "run",
                              cpumon=senders, cpumon_duty=settings.cpumon_duty,
                              timeout_s=settings.timeout_s())  # fmt: skip
    ran = run_alone(folder / "store.db", exp, options, source_text=loaded.text,
                    source_format="ns", source_file=str(settings.file))  # fmt: skip
    run_folder = RunFolder(folder / "run")
    pcaps = sorted(run_folder.pcaps.glob("*.pcap"))
    if not pcaps:
        raise EnvironmentProblem(f"the run captured nothing (outcome {ran['outcome']}); see "
                                 f"{run_folder.root}")  # fmt: skip
    say(f"analyzing {len(pcaps)} captures")
    cpu = run_folder.node_cpu
    addresses = exp.addresses()
    summary = analyze(pcaps, folder / "analysis", cpu=cpu if cpu.is_file() else None,
                      addresses=addresses)  # fmt: skip
    records = {p.sender: workload_records(run_folder, exp, p.sender) for p in PAIRS}
    pairs = [judge_pair(p, summary["transfers"], records[p.sender], addresses) for p in PAIRS]
    chosen = [t for p in pairs if (t := p.pop("example")) is not None]
    cpu_table = read_cpu(cpu) if cpu.is_file() else None
    drawn = plots.draw(folder / "analysis", chosen, cpu_table, 1.0, into=folder)
    study = {
        "settings": {**asdict(settings), "file": str(settings.file)},
        "run": {k: ran.get(k) for k in ("outcome", "reason", "duration_s", "results")},
        "pairs": pairs,
        "correct": sum(p["correct"] for p in pairs),
        "verdicts": summary["verdicts"],
        "plots": [f for f, _ in drawn],
        "analysis": str(folder / "analysis"),
    }
    _write(folder, study, drawn)
    return study


def workload_records(run_folder: RunFolder, exp: Experiment, node: str) -> list[dict[str, str]]:
    """The transfers.csv rows of the workload's sender(s) on ``node`` (every invocation)."""
    rows: list[dict[str, str]] = []
    for prog in exp.programs:
        if prog.node != node or " send " not in f" {prog.command} ":
            continue
        path = run_folder.program(prog.name) / "transfers.csv"
        if path.is_file():
            with path.open() as f:
                rows += list(csv.DictReader(f))
    return rows


def judge_pair(
    pair: Pair,
    transfers: list[dict[str, Any]],
    records: list[dict[str, str]],
    addresses: dict[str, list[str]],
) -> dict[str, Any]:
    """The pair's verdict: the most common among its data transfers (matched to the
    workload's records by the sender's port), with how many agreed and their figures."""
    ports = {int(r["local_port"]) for r in records if r["kind"] == "data" and r["local_port"]}
    mine = set(addresses.get(pair.sender, ()))
    data = [t for t in transfers if t["src"] in mine and t["sport"] in ports]
    counts = Counter(t["verdict"] for t in data)
    verdict = counts.most_common(1)[0][0] if counts else None
    evidence = [t["evidence"] for t in data]

    def avg(key: str) -> float | None:
        values = [e[key] for e in evidence if e.get(key) is not None]
        return mean(values) if values else None

    cpu = [e["cpu"]["available_mean"] for e in evidence if e.get("cpu")]
    ratios = [e["ratio"] for e in evidence if e.get("ratio") is not None]
    example = max((t for t in data if t["verdict"] == verdict), key=lambda t: t["bytes"],
                  default=None)  # fmt: skip
    return {
        **asdict(pair),
        "verdict": verdict,
        "correct": verdict == pair.expected,
        "data_transfers": len(data),
        "agreeing": counts.get(pair.expected, 0),
        "verdict_counts": dict(counts),
        "failed_transfers": sum(r["outcome"] != "ok" for r in records),
        "records": len(records),
        "throughput_bytes_per_s": avg("throughput_bytes_per_s"),
        "ideal_bytes_per_s": avg("ideal_bytes_per_s"),
        "ratio": avg("ratio"),
        "ratio_min": min(ratios, default=None),
        "ratio_max": max(ratios, default=None),
        "loss_rate": avg("loss_rate"),
        "rtt_p50_s": avg("rtt_p50_s"),
        "spacing_mean_s": avg("spacing_mean_s"),
        "idle_share": avg("idle_share"),
        "cpu_available_mean": mean(cpu) if cpu else None,
        "example": example,
    }


PAIR_COLUMNS = ("role", "sender", "receiver", "expected", "verdict", "correct",
                "data_transfers", "agreeing", "failed_transfers", "throughput_bytes_per_s",
                "ideal_bytes_per_s", "ratio", "ratio_min", "ratio_max", "loss_rate",
                "rtt_p50_s", "spacing_mean_s", "idle_share", "cpu_available_mean")  # fmt: skip


def _write(folder: Path, study: dict[str, Any], drawn: list[tuple[str, str]]) -> None:
    pd.DataFrame(study["pairs"], columns=list(PAIR_COLUMNS)).to_csv(
        folder / "pairs.csv", index=False
    )
    (folder / "study.json").write_text(json.dumps(study, indent=1) + "\n")
    lines = ["# Throughput anomalies: the reproduction study", "",
             f"Run: {study['run']['outcome']} ({study['run']['results']}); analysis: "
             f"{study['analysis']}/report.md.", "",
             f"**{study['correct']} of {len(study['pairs'])} pairs classified as expected.**",
             ""]  # fmt: skip
    cells = [pair_cells(p) for p in study["pairs"]]
    rows = [[c[k] for k in REPORT_COLUMNS] for c in cells]
    lines += markdown.table(list(REPORT_COLUMNS.values()), rows)
    lines += ["", "Plots: the largest data transfer of each pair.", ""]
    lines += [f"![{caption}]({file})" for file, caption in drawn]
    (folder / "report.md").write_text("\n".join(lines) + "\n")


# report.md's columns: a key of pair_cells and its heading.
REPORT_COLUMNS = {"pair": "Pair", "expected": "Expected", "verdict": "Verdict",
                  "agreeing": "Data transfers agreeing", "failed": "Failed",
                  "throughput": "Throughput", "ideal": "Ideal", "loss": "Loss",
                  "mean spacing": "Mean spacing", "CPU available": "CPU available"}  # fmt: skip


def pair_cells(p: dict[str, Any]) -> dict[str, str]:
    """One pair's figures as text, by column: report.md's table and the CLI's pick from them."""
    ratio = p["ratio_min"], p["ratio_max"]
    return {
        "pair": f"{p['role']} ({p['sender']} → {p['receiver']})",
        "expected": p["expected"],
        "verdict": p["verdict"] or "—",
        "agreeing": f"{p['agreeing']} / {p['data_transfers']}",
        "failed": f"{p['failed_transfers']} / {p['records']}",
        "throughput": _rate(p["throughput_bytes_per_s"]),
        "ideal": _rate(p["ideal_bytes_per_s"]),
        "of ideal": f"{ratio[0]:.2f}–{ratio[1]:.2f}" if ratio[0] is not None else "—",
        "loss": _pct(p["loss_rate"]),
        "mean spacing": _ms(p["spacing_mean_s"]),
        "CPU available": _num(p["cpu_available_mean"]),
    }


def _rate(v: float | None) -> str:
    return f"{8 * v / 1e6:.3g} Mb/s" if v else "—"


def _pct(v: float | None) -> str:
    return f"{100 * v:.2g} %" if v is not None else "—"


def _ms(v: float | None) -> str:
    return f"{1e3 * v:.3g} ms" if v is not None else "—"


def _num(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "—"
