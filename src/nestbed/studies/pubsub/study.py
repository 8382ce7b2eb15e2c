"""`nestbed study pubsub`: the local measurements, then a sweep of examples/pubsub.ns over the
no/low/high loss scenarios (one network, links reset between them), then tables, figures, report.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from nestbed.errors import UserError
from nestbed.results.folder import RunFolder
from nestbed.results.intervals import t_interval
from nestbed.studies.pubsub import delivery as dds
from nestbed.studies.pubsub.compression import available, get_compressor
from nestbed.studies.pubsub.formats import FORMATS, get_format
from nestbed.studies.pubsub.metrics import measure_raw, summarize
from nestbed.studies.pubsub.records import Shape
from nestbed.sweep.execute import Progress, run_sweep
from nestbed.sweep.spec import from_flags
from nestbed.sweep.table import write_tables

EXPERIMENT = Path(__file__).resolve().parents[4] / "examples" / "pubsub.ns"
CONFIDENCE = 0.95
GROUP = ["scenario", "qos", "format", "compressor", "level"]


# -- the loss scenarios ----------------------------------------------------------------------


def gilbert(plr: float, abl: float) -> tuple[float, float]:
    """Gilbert's (p, r) from a packet loss rate and an average burst length in packets, as the
    paper gives them: r = Q = 1/ABL, p = PLR·Q/(1−PLR) (every packet lost in the bad state)."""
    if not 0 <= plr < 1:
        raise UserError(
            f"packet loss rate {plr} is not a fraction in [0, 1); write 1.35 % as 0.0135"
        )
    if abl < 1:
        raise UserError(f"average burst length {abl} is below one packet; a burst has at least one")
    q = 1 / abl
    return plr * q / (1 - plr), q


@dataclass(frozen=True)
class Scenario:
    """A loss scenario: the paper's printed PLR (%) and ABL, and the values we use (see
    docs/pubsub.md: PLR is read as a percentage, an ABL below one packet as one packet)."""

    name: str
    printed_plr: float  # as printed in the paper (percent)
    printed_abl: float  # as printed in the paper (packets)

    @property
    def plr(self) -> float:
        return self.printed_plr / 100

    @property
    def abl(self) -> float:
        return max(self.printed_abl, 1.0)

    @property
    def p_r(self) -> tuple[float, float]:
        return (0.0, 1.0) if self.plr == 0 else gilbert(self.plr, self.abl)


SCENARIOS = {
    "none": Scenario("none", 0.0, 1.0),
    "low": Scenario("low", 1.35, 0.59),
    "high": Scenario("high", 5.05, 1.44),
}


# -- settings and name checks ----------------------------------------------------------------


def _usable_compressors() -> tuple[str, ...]:
    return tuple(name for name, reason in available().items() if reason is None)


@dataclass(frozen=True)
class Settings:
    """What the study measures; `quick()` is the few-minute version."""

    formats: tuple[str, ...] = tuple(FORMATS)
    compressors: tuple[str, ...] = field(default_factory=_usable_compressors)
    scenarios: tuple[str, ...] = tuple(SCENARIOS)
    qos: str = "both"
    repetitions: int = 5  # records per format × compressor × QoS in each network run
    local_repetitions: int = 20
    shape: Shape = field(default_factory=Shape)
    bandwidth: str = "100Mb"
    delay: str = "10ms"
    timeout_s: float = 3.0  # per message: no echo by then and it is counted lost
    seed: int = 0

    @classmethod
    def quick(cls) -> Settings:
        paper = [c for c in ("none", "zlib", "bzip2", "lzo") if c in _usable_compressors()]
        return cls(
            compressors=tuple(paper), qos="both", repetitions=2, local_repetitions=5,
            shape=Shape(alternates=2, waypoints=20, trajectory_points=100, sectors=10,
                        remarks_chars=600),
            timeout_s=1.0,
        )  # fmt: skip

    def with_(self, **changes: Any) -> Settings:
        """These settings with the given fields changed (None leaves a field alone)."""
        return replace(self, **{k: v for k, v in changes.items() if v is not None})


def check(settings: Settings) -> None:
    """Every name known and usable, every number sensible; a UserError naming the valid ones."""
    for name in settings.formats:
        get_format(name)
    for name in settings.compressors:
        get_compressor(name)  # unknown: lists the known ones; unavailable: says why
    for name in settings.scenarios:
        if name not in SCENARIOS:
            raise UserError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    dds.parse_qos(settings.qos)
    if not (settings.formats and settings.compressors and settings.scenarios):
        raise UserError("the study needs at least one format, compressor and scenario")
    if settings.repetitions < 1 or settings.local_repetitions < 1:
        raise UserError("repetitions must be at least 1")
    if settings.timeout_s <= 0:
        raise UserError(f"--timeout {settings.timeout_s} is not a positive number of seconds")


def _check_experiment(experiment: Path) -> None:
    if not experiment.is_file():
        raise UserError(f"{experiment}: no such experiment file; give --experiment FILE")


# -- the network half: a sweep of the experiment -------------------------------------------


def _shape_text(shape: Shape) -> str:
    if shape == Shape():
        return "default"
    return ",".join(str(v) for v in asdict(shape).values())


def points(settings: Settings) -> list[dict[str, str]]:
    """One sweep point per scenario; only the link's loss differs between them, so the sweep
    reuses one network."""
    common = {
        "bw": settings.bandwidth, "delay": settings.delay, "python": sys.executable,
        "qos": settings.qos, "formats": ",".join(settings.formats),
        "compressors": ",".join(settings.compressors),
        "repetitions": str(settings.repetitions), "shape": _shape_text(settings.shape),
        "timeout": f"{settings.timeout_s:g}", "seed": str(settings.seed),
    }  # fmt: skip
    found = []
    for name in settings.scenarios:
        p, r = SCENARIOS[name].p_r
        found.append(common | {"p": f"{p:.6g}", "r": f"{r:.6g}"})
    return found


def run_budget_s(settings: Settings) -> float:
    """A generous bound on one run: every message lost (each costs the timeout) plus the
    processing of the slowest formats and discovery."""
    messages = len(settings.formats) * len(settings.compressors) * settings.repetitions
    messages *= len(dds.parse_qos(settings.qos))
    return 120 + messages * (settings.timeout_s + 1.0)


def network(
    settings: Settings,
    folder: Path,
    experiment: Path = EXPERIMENT,
    progress: Callable[[int, int, dict[str, Any]], None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Runs the sweep (resuming one stopped in `folder`); returns its table and every
    message's row with its scenario."""
    _check_experiment(experiment)
    sweep = from_flags(experiment, [], [], points=points(settings), reuse_links=True,
                       timeout=run_budget_s(settings))  # fmt: skip
    rows = run_sweep(sweep, folder, progress=Progress(progress) if progress else None)
    table = write_tables(rows, folder)
    return table, collect(table, settings.scenarios)


def collect(table: pd.DataFrame, scenarios: Sequence[str]) -> pd.DataFrame:
    """Every run's programs/publish/delivery.csv, with the run's scenario (points are in
    scenario order) and outcome."""
    frames = []
    for _, run in table.iterrows():
        path = RunFolder(Path(str(run["results"]))).program("publish") / dds.ROWS_FILE
        if not path.exists():
            continue
        rows = pd.read_csv(path, keep_default_na=True)
        rows.insert(0, "scenario", scenarios[int(run["index"])])
        rows["run_outcome"] = run["outcome"]
        frames.append(rows)
    if not frames:
        return pd.DataFrame(columns=["scenario", *dds.COLUMNS])
    return pd.concat(frames, ignore_index=True)


# -- aggregation -----------------------------------------------------------------------------


def summarize_delivery(rows: pd.DataFrame) -> pd.DataFrame:
    """Per scenario × QoS × format × compressor: messages, lost (count and fraction), and over
    the delivered messages the mean and 95 % interval of the delivery time and of the latency
    (serialize + compress + delivery + decompress + deserialize)."""
    if rows.empty:
        return pd.DataFrame()
    rows = rows.copy()
    parts = ["serialize_s", "compress_s", "delivery_s", "decompress_s", "deserialize_s"]
    for c in [*parts, "lost", "stream_bytes", "efficiency"]:
        rows[c] = pd.to_numeric(rows[c], errors="coerce")
    rows["latency_s"] = rows[parts].sum(axis=1, min_count=len(parts))
    out = []
    for key, group in rows.groupby(GROUP, sort=False):
        row: dict[str, Any] = dict(zip(GROUP, key, strict=True))
        lost = int(group["lost"].fillna(1).sum())
        row |= {"messages": len(group), "lost": lost, "lost_fraction": lost / len(group),
                "delivered": len(group) - lost,
                "stream_bytes_mean": float(group["stream_bytes"].mean()),
                "efficiency_mean": float(group["efficiency"].mean())}  # fmt: skip
        for metric in ("delivery_s", "latency_s"):
            mean, _, low, high = t_interval(group.loc[group["lost"] == 0, metric], CONFIDENCE)
            row |= {f"{metric}_mean": mean, f"{metric}_low": low, f"{metric}_high": high}
        out.append(row)
    return pd.DataFrame(out)


# -- the whole study -------------------------------------------------------------------------


@dataclass
class Outcome:
    folder: Path
    local: pd.DataFrame
    delivery: pd.DataFrame
    runs: dict[str, str]  # scenario → run outcome
    figures: list[Path]
    report: Path

    def to_json(self) -> dict[str, Any]:
        return {
            "folder": str(self.folder),
            "runs": self.runs,
            "figures": [str(p) for p in self.figures],
            "report": str(self.report),
            "tables": sorted(str(p) for p in self.folder.glob("*.csv")),
        }


def run(
    settings: Settings,
    folder: Path,
    *,
    experiment: Path = EXPERIMENT,
    progress: Callable[[str], None] = lambda text: None,
) -> Outcome:
    """Measures locally, runs the network sweep, writes tables, figures and report.md."""
    from nestbed.backend import get as get_backend
    from nestbed.studies.pubsub import plots, report

    check(settings)
    _check_experiment(experiment)  # before minutes of local measurements
    get_backend().require_ready()
    folder.mkdir(parents=True, exist_ok=True)
    progress("local measurements")
    formats = [get_format(n) for n in settings.formats]
    compressors = [get_compressor(n) for n in settings.compressors]
    raw = measure_raw(formats, compressors, repetitions=settings.local_repetitions,
                      seed=settings.seed, shape=settings.shape)  # fmt: skip
    raw.to_csv(folder / "local.csv", index=False)
    local = summarize(raw)
    local.to_csv(folder / "local_summary.csv", index=False)

    def ran(done: int, total: int, row: dict[str, Any]) -> None:
        progress(f"network runs: {done} of {total} done")

    progress(f"network runs: 0 of {len(settings.scenarios)} done")
    table, messages = network(settings, folder / "sweep", experiment, ran)
    messages.to_csv(folder / "delivery.csv", index=False)
    delivery = summarize_delivery(messages)
    delivery.to_csv(folder / "delivery_summary.csv", index=False)
    runs = {settings.scenarios[int(r["index"])]: str(r["outcome"]) for _, r in table.iterrows()}
    progress("figures and report")
    figures = list(plots.write_figures(local, folder, delivery=delivery))
    path = report.write(folder, settings=settings, local=local, delivery=delivery, runs=runs,
                        figures=figures)  # fmt: skip
    return Outcome(folder, local, delivery, runs, figures, path)
