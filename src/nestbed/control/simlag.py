"""The simulated part's lag behind real time during a run, into the results folder.

nestbed-sim samples how late ns-3's real-time scheduler runs its events and logs the worst of
each second; a run whose simulator fell behind by more than the experiment allows is marked
in its manifest's reason, so its figures are never silently wrong.
"""

from __future__ import annotations

from nestbed.backend import sim
from nestbed.backend.plan import Plan
from nestbed.backend.sim import Simulator
from nestbed.results.folder import RunFolder
from nestbed.results.tables import write_table

LAG_COLUMNS = ("t_s", "lag_max_s")


class SimulationLag:
    """Reads the lag nestbed-sim logs from the moment the run starts (a reused network's
    simulator started before it)."""

    def __init__(self, plan: Plan, simulator: Simulator):
        self.simulation = plan.simulation
        self.simulator = simulator
        logged = simulator.log() if self.simulation else None
        self.start = 0 if logged is None else logged[1]

    def record(self, folder: RunFolder) -> list[str]:
        """Writes the run's lag table; what to say if the simulator fell behind."""
        if self.simulation is None:
            return []
        logged = self.simulator.log(self.start)
        if logged is None:
            return ["the simulated part left no log of its lag behind real time"]
        text = logged[0]
        lag = sim.lag(text)
        problems = []
        # What nestbed-sim said during the run, beside its lag table.
        kept = folder.simulation_lag.with_name("nestbed-sim.log")
        kept.parent.mkdir(parents=True, exist_ok=True)
        kept.write_text(text)
        if not self.simulator.running():
            words = [line for line in text.strip().splitlines() if not _lag_line(line)]
            last = " / ".join(words[-3:]) or "no output"
            problems.append(
                f"nestbed-sim, the simulated part, ended during the run: {last} (see "
                f"{folder.relative(kept)})"
            )
        rows = [{"t_s": t, "lag_max_s": lag_s} for t, lag_s in lag.per_second_s]
        write_table(folder.simulation_lag, LAG_COLUMNS, rows)
        limit = self.simulation.hard_limit_s
        late = [lag_s for _, lag_s in lag.per_second_s if lag_s > limit]
        if late:
            problems.append(
                f"the simulated part fell behind real time by up to {max(late) * 1e3:.1f} ms, "
                f"more than the {_duration(limit)} allowed, in {len(late)} of "
                f"{len(lag.per_second_s)} seconds (see {folder.relative(folder.simulation_lag)})"
            )
        return problems


def _duration(seconds: float) -> str:
    """`5 ms`, `250 µs`: a hard limit as a reader of the reason wants it."""
    return f"{seconds * 1e3:g} ms" if seconds >= 1e-3 else f"{seconds * 1e6:g} µs"


def _lag_line(line: str) -> bool:
    return line.startswith(("lag ", "worst_lag_s ")) or line == "ready"
