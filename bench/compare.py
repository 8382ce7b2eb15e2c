"""Benchmark: simulated (ns-2) against emulated runs of the shipped CBR example, as issue 8's
targets put it: throughput within 2 %, mean one-way delay within 0.5 ms plus serialization.
The dumbbell as shipped (its CBR shares the bottleneck with a TCP transfer), with its CBR
alone (the FTP's start removed; 2 Mb/s into the 2 Mb/s bottleneck, a queue at utilization 1),
and alone at 1 Mb/s; each emulated RUNS times against one simulation (ns-2 is
deterministic); medians over the runs. Needs root and ns-2."""

from __future__ import annotations

import os
import statistics
import tempfile
from pathlib import Path

from nestbed.backend import get as get_backend
from nestbed.lifecycle import Testbed
from nestbed.lifecycle.runs import run
from nestbed.model.options import RunOptions
from nestbed.simulate import compare, simulate
from nestbed.spec import load
from nestbed.store import Store

RUNS = 3
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "dumbbell.ns"
# Serialization nestbed-linkd adds per 500-byte CBR packet (66 bytes of Ethernet framing) over
# the dumbbell's three hops (docs/simulate.md).
HOPS_BPS = (100e6, 10e6, 100e6)
EXTRA_MS = sum(66 * 8 / bps * 1e3 for bps in HOPS_BPS)


def variants(folder: Path) -> dict[str, Path]:
    shipped = EXAMPLE.read_text()
    alone = folder / "dumbbell-cbr.ns"
    alone.write_text(shipped.replace('$ns at 2 "$ftp0 start"', "").replace("; $ftp0 stop", ""))
    half = folder / "dumbbell-cbr-1Mb.ns"
    half.write_text(alone.read_text().replace("rate_ 2Mb", "rate_ 1Mb"))
    return {"dumbbell (as shipped)": EXAMPLE, "dumbbell, CBR alone": alone,
            "dumbbell, CBR 1 Mb/s": half}  # fmt: skip


def emulate(store: Store, file: Path, results: Path) -> Path:
    name = f"cmp{os.getpid()}{file.stem.replace('-', '')}"
    if store.find(name) is None:
        loaded = load(file)
        ir = loaded.experiment.to_json()
        store.create_experiment(name, source_text=loaded.text, source_format="ns",
                                source_file=str(file), ir_json=ir)  # fmt: skip
    run(Testbed(store, get_backend()), name, RunOptions(results=results, report=False))
    return results


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        store = Store.open(str(folder / "store.db"))
        print(f"{'experiment':24} {'throughput Δ':>13} {'delay sim':>10} {'delay emu':>10} "
              f"{'Δ delay':>9} {'allowed':>8}")  # fmt: skip
        for label, file in variants(folder).items():
            sim = folder / f"{file.stem}-ns2"
            simulate(file, sim, parameters=None, duration=None)
            throughput, delays = [], []
            for k in range(RUNS):
                emu = emulate(store, file, folder / f"{file.stem}-emu{k}")
                cbr = next(f for f in compare([sim, emu])["flows"] if f["flow"] == "cbr0")
                m = cbr["metrics"]
                throughput.append(m["throughput_bps"]["differences"][emu.name]["relative"])
                delays.append(list(m["delay_mean_ms"]["values"].values()))
            t = statistics.median(throughput)
            d_sim = statistics.median(d[0] for d in delays)
            d_emu = statistics.median(d[1] for d in delays)
            print(f"{label:24} {t * 100:+12.2f}% {d_sim:9.3f}ms {d_emu:9.3f}ms "
                  f"{d_emu - d_sim:+8.3f}ms {0.5 + EXTRA_MS:7.3f}ms")  # fmt: skip
        store.close()


if __name__ == "__main__":
    main()
