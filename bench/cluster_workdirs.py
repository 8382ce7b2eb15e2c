"""Benchmark (issue 21): what bringing a node's working folder back from its host costs a run.

The whole command a user types, `nestbed --cluster ADDR run FILE --duration 1`, of the
dumbbell on three hosts simulated on this machine (tests/cluster/simulated.py), whose program
on h3 copies SIZE MiB of random bytes into its working folder there, timed with the code
before (``--before DIR``: a tree whose ``src/`` holds that code, e.g. ``git archive COMMIT
src | tar -x -C DIR``, and whose ``target`` links to this one's, where its agents find the
Rust programs) and with this tree's, alternately; this tree's must bring the file back
byte for byte. Each round starts a simulated cluster for one code (a child process of its
own, so that each has its own hosts), runs once untimed (a new cluster's first run is 2-3 s
slower), then every size there, and stops it. Medians of ROUNDS rounds; the load average at
the end. As root.

    sudo PYTHONPATH=src python bench/cluster_workdirs.py --before /tmp/before
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
ROUNDS = 3
SIZES_MIB = (0, 8, 48)  # below the 64 MiB a node's folder brings back at most
PROGRAM = """
programs:
  - {{name: writer, node: h3, command: "head -c {size} {source} > data.bin"}}
events:
  - {{at: 0.1, object: writer, verb: start}}
"""


def one_round(src: Path, source: Path) -> dict[int, float]:
    """In a child: a simulated cluster running ``src``'s agents; each size's whole run."""
    sys.path[:0] = [str(HERE / "tests" / "cluster"), str(HERE / "tests")]
    import simulated

    simulated.SRC = src  # its agents run that code
    found = {}
    with simulated.started(3, slots=2) as (machines, agents), tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "PYTHONPATH": str(src),
               "NESTBED_RUN_DIR": str(machines.run_dir("controller"))}  # fmt: skip
        env.pop("NESTBED_BACKEND", None)
        for size in (0, *SIZES_MIB):  # the first, untimed: a new cluster's first run is slow
            name = f"i21kbench{os.getpid()}s{size}{len(found)}"
            file = Path(tmp) / f"{name}.yaml"
            text = PROGRAM.format(size=size * 2**20, source=source)
            file.write_text(simulated.DUMBBELL + text)
            results = Path(tmp) / name
            argv = [sys.executable, "-m", "nestbed", "--db", str(Path(tmp) / "store.db"),
                    "--cluster", agents.address, "run", str(file), "--duration", "1",
                    "--results", str(results)]  # fmt: skip
            began = time.perf_counter()
            done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600)
            found[size] = time.perf_counter() - began  # the warm-up's is overwritten
            if done.returncode != 0:
                raise SystemExit(f"the run failed: {done.stdout}{done.stderr}")
            back = results / "work" / "h3" / "data.bin"
            # This tree's code brings the file back whole (the code before, compared with,
            # may not bring it back at all: it is not judged).
            if src == HERE / "src" and (
                not back.exists() or back.read_bytes() != source.read_bytes()[: size * 2**20]
            ):
                raise SystemExit(f"{back}: not what this code brings back")
    return found


def main() -> None:
    if "--round" in sys.argv:  # the child
        src, source = Path(sys.argv[2]), Path(sys.argv[3])
        print(json.dumps(one_round(src, source)))
        return
    before = Path(sys.argv[sys.argv.index("--before") + 1]) / "src"
    codes = {"before": before, "after": HERE / "src"}
    times: dict[str, dict[int, list[float]]] = {c: {s: [] for s in SIZES_MIB} for c in codes}
    with tempfile.NamedTemporaryFile(prefix="i21k-bench-", dir="/tmp") as source:
        source.write(os.urandom(max(SIZES_MIB) * 2**20))
        source.flush()
        os.chmod(source.name, 0o644)
        for _ in range(ROUNDS):
            for code, src in codes.items():
                child = subprocess.run(
                    [sys.executable, __file__, "--round", str(src), source.name],
                    env={**os.environ, "PYTHONPATH": str(src)},
                    capture_output=True, text=True, check=True, timeout=1200,
                )  # fmt: skip
                for size, took in json.loads(child.stdout.splitlines()[-1]).items():
                    times[code][int(size)].append(took)
    print("| MiB in h3's working folder | before: run (s) | after: run (s) | came back |")
    print("|---|---|---|---|")
    for size in SIZES_MIB:
        b, a = (statistics.median(times[c][size]) for c in codes)
        print(f"| {size} | {b:.2f} | {a:.2f} | {'yes' if size else '-'} (after) |")
    print(f"(medians of {ROUNDS}; every run: {json.dumps(times)}); load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
