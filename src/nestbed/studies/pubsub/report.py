"""report.md of the pub/sub study: each of the paper's conclusions beside the figure this run
measured for it, and whether the two agree."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
from scipy import stats

from nestbed.results import markdown
from nestbed.studies.pubsub.compression import available

# The paper's tree-based formats (XML, JSON, YAML); msgpack is flexible too but binary, and is
# reported beside them, not among them.
TREE = ("xml-dom", "xml-sax", "json", "yaml-full", "yaml-compact")
FIG4_FORMATS = ("json", "xml-sax", "yaml-compact")  # the three the paper compresses
PAPER_COMPRESSORS = ("zlib", "bzip2", "lzo")


@dataclass(frozen=True)
class Finding:
    section: str
    claim: str  # the paper's
    ours: str  # what this run measured
    verdict: str  # agrees, partly, differs, not measured


class _Missing(Exception):
    """The run did not measure what a finding needs."""


def _need(frame: pd.DataFrame | None, what: str) -> pd.DataFrame:
    if frame is None or frame.empty:
        raise _Missing(what)
    return frame


def _f(x: float, digits: int = 3) -> str:
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}g}"


def _ms(x: float) -> str:
    if x is None or math.isnan(x):
        return "n/a"
    return "none delivered" if math.isinf(x) else f"{x * 1e3:.3g} ms"


def _verdict(*conditions: bool) -> str:
    if all(conditions):
        return "agrees"
    return "partly" if any(conditions) else "differs"


def _local(local: pd.DataFrame, compressor: str = "none") -> pd.DataFrame:
    rows = local[local["compressor"] == compressor].set_index("format")
    return _need(rows, f"local measurements without compression ({compressor})")


def _tree(index: Sequence[str]) -> list[str]:
    found = [f for f in TREE if f in index]
    if len(found) < 2:
        raise _Missing("at least two of the tree-based formats (XML, JSON, YAML)")
    return found


def _order(series: pd.Series) -> str:
    return ", ".join(f"{k} {_f(v)}" for k, v in series.sort_values(ascending=False).items())


def _order_ms(series: pd.Series) -> str:
    return ", ".join(f"{k} {_ms(v)}" for k, v in series.sort_values().items())


def _qos_for_latency(delivery: pd.DataFrame) -> str:
    # Reliable QoS repairs losses, so its latency includes them; best effort's only counts the
    # messages that happened to survive.
    return "reliable" if "reliable" in set(delivery["qos"]) else str(delivery["qos"].iloc[0])


def _scenario(delivery: pd.DataFrame, scenario: str, qos: str) -> pd.DataFrame:
    rows = delivery[(delivery["scenario"] == scenario) & (delivery["qos"] == qos)]
    return _need(rows, f"network runs of scenario {scenario} with QoS {qos}")


def _lossy(delivery: pd.DataFrame) -> list[str]:
    found = [s for s in dict.fromkeys(delivery["scenario"]) if s != "none"]
    if not found:
        raise _Missing("a lossy scenario (low or high)")
    return found


# -- the findings, in the paper's order --------------------------------------------------------


def _cdr_most_efficient(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    eff = _local(local)["efficiency_mean"]
    best = eff.idxmax()
    return Finding(
        "§4.2, Fig. 2A", "CDR has the highest serialization efficiency.",
        f"efficiency (content / stream bytes): {_order(eff)}.", _verdict(best == "cdr"),
    )  # fmt: skip


def _tree_far_below_cdr(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    eff = _local(local)["efficiency_mean"]
    tree = eff[_tree(eff.index)]
    cdr = eff.get("cdr", math.nan)
    return Finding(
        "§4.2, Fig. 2A",
        "The tree-based formats are far less efficient than CDR (mean 0.0854).",
        f"tree-based mean {_f(tree.mean())} against CDR {_f(cdr)} "
        f"({_f(cdr / tree.mean(), 2)}× as efficient); the paper's ratio was about 11×.",
        _verdict(tree.mean() < cdr / 2),
    )


def _json_yaml_compact_most_efficient(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    eff = _local(local)["efficiency_mean"]
    tree = eff[_tree(eff.index)].sort_values(ascending=False)
    top, worst = set(tree.index[:2]), tree.index[-1]
    return Finding(
        "§4.2, Fig. 2A",
        "Among tree-based formats JSON (0.114) and compact YAML (0.105) are the most efficient, "
        "XML (0.0678) the least.",
        f"{_order(tree)}.",
        _verdict(top == {"json", "yaml-compact"}, worst.startswith("xml")),
    )


def _efficiency_drives_delivery(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    qos = _qos_for_latency(_need(delivery, "network runs"))
    rows = _scenario(delivery, "none", qos)
    rows = rows[rows["compressor"] == "none"].set_index("format")
    eff = _local(local)["efficiency_mean"]
    both = pd.DataFrame({"eff": eff, "delivery": rows["delivery_s_mean"]}).dropna()
    if len(both) < 3:
        raise _Missing("delivery times of at least three formats without loss")
    rho = float(stats.spearmanr(both["eff"], both["delivery"]).statistic)
    return Finding(
        "§4.2, Fig. 2D",
        "Delivery time is higher for formats of lower efficiency (more bytes to send).",
        f"no loss, {qos}: delivery {_order_ms(both['delivery'])}; Spearman ρ between "
        f"efficiency and delivery time {_f(rho, 2)} over {len(both)} formats.",
        _verdict(rho < -0.5),
    )


def _cdr_fastest(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    rows = _local(local)
    ser, des = rows["serialize_s_mean"], rows["deserialize_s_mean"]
    return Finding(
        "§4.2, Fig. 2B-C",
        "CDR has the fastest serialization and deserialization.",
        f"serialization {_order_ms(ser)}; deserialization {_order_ms(des)}. (Cyclone DDS's "
        "Python CDR code is interpreted while json, msgpack and libyaml are C, so CDR's "
        "place here measures the implementations as much as the formats.)",
        _verdict(ser.idxmin() == "cdr", des.idxmin() == "cdr"),
    )


def _serialization_ranking(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    ser = _local(local)["serialize_s_mean"]
    tree = ser[_tree(ser.index)].sort_values()
    fastest, slowest = set(tree.index[:2]), set(tree.index[-2:])
    return Finding(
        "§4.2, Fig. 2B",
        "Among tree-based formats JSON and compact YAML serialize fastest, full YAML and XML "
        "slowest.",
        f"{_order_ms(tree)}.",
        _verdict(
            fastest == {"json", "yaml-compact"}, slowest <= {"yaml-full", "xml-dom", "xml-sax"}
        ),
    )


def _deserialization_ranking(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    des = _local(local)["deserialize_s_mean"]
    tree = des[_tree(des.index)].sort_values()
    ratio = ""
    if {"yaml-full", "xml-sax"} <= set(tree.index):
        ratio = f"; full YAML takes {_f(tree['yaml-full'] / tree['xml-sax'], 2)}× XML SAX's time"
    return Finding(
        "§4.2, Fig. 2C",
        "Deserialization: XML with DOM is slowest, JSON fastest among tree-based formats; YAML "
        "is close to XML with SAX.",
        f"{_order_ms(tree)}{ratio}.",
        _verdict(tree.index[-1] == "xml-dom", tree.index[0] == "json"),
    )


def _compressed_beats_cdr(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    cdr = _local(local).loc["cdr", "efficiency_mean"] if "cdr" in _local(local).index else None
    if cdr is None:
        raise _Missing("CDR")
    comps = [c for c in dict.fromkeys(local["compressor"]) if c != "none"]
    if not comps:
        raise _Missing("a compressor")
    parts, wins = [], []
    for comp in comps:
        rows = _local(local, comp)
        here = [f for f in FIG4_FORMATS if f in rows.index]
        beat = [f for f in here if rows.loc[f, "efficiency_mean"] > cdr]
        wins.append(len(beat) == len(here))
        parts.append(f"{comp}: {len(beat)} of {len(here)}")
    return Finding(
        "§6.2, Fig. 4C",
        "Compressed, the tree-based formats (JSON, XML SAX, compact YAML) exceed CDR's efficiency.",
        f"formats above uncompressed CDR's {_f(cdr)}: {'; '.join(parts)}.",
        _verdict(*wins),
    )


def _per_compressor(local: pd.DataFrame, metric: str) -> pd.Series:
    rows = local[(local["format"].isin(FIG4_FORMATS)) & (local["compressor"] != "none")]
    return _need(rows, "compressed tree-based formats").groupby("compressor")[metric].mean()


def _bzip2_best_and_slowest(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    eff = _per_compressor(local, "efficiency_mean")
    time_ = _per_compressor(local, "processing_s_mean")
    if "bzip2" not in eff.index:
        raise _Missing("bzip2")
    return Finding(
        "§6.2, Fig. 4A/C",
        "bzip2 compresses best and performs worst; the other two are similar in time.",
        f"efficiency (mean over JSON, XML SAX, compact YAML): {_order(eff)}; local processing "
        f"time: {_order_ms(time_)}.",
        _verdict(eff.idxmax() == "bzip2", time_.idxmax() == "bzip2"),
    )


def _lzo_fastest(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    comp = _per_compressor(local, "compress_s_mean")
    eff = _per_compressor(local, "efficiency_mean")
    if "lzo" not in comp.index:
        reason = available().get("lzo") or "not among the compressors measured"
        fastest = comp.idxmin()
        return Finding(
            "§6.2, Fig. 4B",
            "LZO compresses fastest but least.",
            f"LZO not measured ({reason}). Fastest compressor measured: {fastest} "
            f"({_ms(comp[fastest])}, efficiency {_f(eff[fastest])}, the lowest being "
            f"{eff.idxmin()}'s).",
            "not measured",
        )
    return Finding(
        "§6.2, Fig. 4B", "LZO compresses fastest but least.",
        f"compression time: {_order_ms(comp)}; efficiency: {_order(eff)}.",
        _verdict(comp.idxmin() == "lzo", eff.idxmin() == "lzo"),
    )  # fmt: skip


def _mean_latency(rows: pd.DataFrame, formats: Sequence[str]) -> pd.Series:
    """Mean latency per compressor over `formats`; infinite when no message got through (a
    message never delivered has no finite latency, and loses every comparison)."""
    here = rows[rows["format"].isin(formats)].copy()
    here["latency_s_mean"] = here["latency_s_mean"].fillna(math.inf)
    return here.groupby("compressor")["latency_s_mean"].mean()


def _zlib_best_tradeoff(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    qos = _qos_for_latency(_need(delivery, "network runs"))
    latency = _mean_latency(_scenario(delivery, "none", qos), TREE)
    paper = latency[[c for c in PAPER_COMPRESSORS if c in latency.index]]
    if "zlib" not in paper.index:
        raise _Missing("zlib")
    return Finding(
        "§6.2",
        "zlib is the best trade-off between efficiency and performance.",
        f"no loss, {qos}, mean latency (serialize to deserialize, delivery included) of the "
        f"tree-based formats: {_order_ms(latency)}; best of the paper's compressors: "
        f"{paper.idxmin()}.",
        _verdict(paper.idxmin() == "zlib"),
    )


def _zlib_helps_under_loss(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    qos = _qos_for_latency(_need(delivery, "network runs"))
    parts, better, best = [], [], []
    for scenario in _lossy(delivery):
        latency = _mean_latency(_scenario(delivery, scenario, qos), TREE)
        if not {"zlib", "none"} <= set(latency.index):
            raise _Missing("zlib and no compression under loss")
        others = latency.drop(["none", "zlib"], errors="ignore")
        others = others[[c for c in others.index if c in PAPER_COMPRESSORS]]
        better.append(latency["zlib"] < latency["none"])
        best.append(bool((latency["zlib"] <= others).all()))
        parts.append(f"{scenario}: {_order_ms(latency)}")
    return Finding(
        "§6.2, Fig. 5A",
        "Under loss (Low and High), zlib lowers the latency of the tree-based formats, more "
        "than the other compressors.",
        f"{qos}, mean latency of the tree-based formats: {'; '.join(parts)}.",
        _verdict(*better, *best),
    )


def _cdr_still_faster(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    qos = _qos_for_latency(_need(delivery, "network runs"))
    parts, wins = [], []
    for scenario in dict.fromkeys(delivery["scenario"]):
        rows = _scenario(delivery, scenario, qos)
        cdr = rows[(rows["format"] == "cdr") & (rows["compressor"] == "none")]
        tree = rows[rows["format"].isin(TREE)].dropna(subset=["latency_s_mean"])
        if cdr.empty or tree.empty:
            raise _Missing("CDR and tree-based formats in every scenario")
        best = tree.loc[tree["latency_s_mean"].idxmin()]
        wins.append(float(cdr["latency_s_mean"].iloc[0]) < float(best["latency_s_mean"]))
        parts.append(
            f"{scenario}: CDR {_ms(float(cdr['latency_s_mean'].iloc[0]))}, best tree-based "
            f"{best['format']}+{best['compressor']} {_ms(float(best['latency_s_mean']))}"
        )
    return Finding(
        "§6.2, Fig. 5A; §7",
        "Even compressed, flexible (tree-based) formats stay slower than CDR.",
        f"{qos}, mean latency: {'; '.join(parts)}.",
        _verdict(*wins),
    )


def _lost(delivery: pd.DataFrame, scenario: str) -> pd.DataFrame:
    rows = _scenario(delivery, scenario, "best-effort")
    return rows


def _lost_by_compressor(rows: pd.DataFrame, *, compressed: bool) -> tuple[pd.DataFrame, Any]:
    """Lost and sent messages of the tree-based formats per compressor (only the compressed
    ones with ``compressed``), and the fraction lost."""
    tree = rows[rows["format"].isin(TREE)]
    if compressed:
        tree = tree[tree["compressor"] != "none"]
    by = tree.groupby("compressor")[["lost", "messages"]].sum()
    return by, by["lost"] / by["messages"]


def _compression_reduces_losses(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    parts, wins = [], []
    for scenario in _lossy(_need(delivery, "network runs")):
        by, fraction = _lost_by_compressor(_lost(delivery, scenario), compressed=False)
        if "none" not in fraction.index or len(fraction) < 2:
            raise _Missing("lost messages with and without compression")
        wins.append(bool((fraction.drop("none") < fraction["none"]).all()))
        shown = ", ".join(f"{c} {by.loc[c, 'lost']}/{by.loc[c, 'messages']}"
                          for c in fraction.sort_values().index)  # fmt: skip
        parts.append(f"{scenario}: {shown}")
    return Finding(
        "§6.2, Fig. 5B",
        "Compression makes the middleware more resilient: fewer lost messages.",
        f"best effort, lost / sent of the tree-based formats: {'; '.join(parts)}.",
        _verdict(*wins),
    )


def _bzip2_fewest_losses(local: pd.DataFrame, delivery: pd.DataFrame) -> Finding:
    parts, wins = [], []
    for scenario in _lossy(_need(delivery, "network runs")):
        rows = _lost(delivery, scenario)
        _, fraction = _lost_by_compressor(rows, compressed=True)
        if "bzip2" not in fraction.index:
            raise _Missing("bzip2 under loss")
        cdr = rows[(rows["format"] == "cdr") & (rows["compressor"] == "none")]
        cdr_text = (
            f", CDR {int(cdr['lost'].iloc[0])}/{int(cdr['messages'].iloc[0])}"
            if not cdr.empty else ""
        )  # fmt: skip
        wins.append(fraction["bzip2"] <= fraction.min())
        parts.append(
            f"{scenario}: " + ", ".join(f"{c} {_f(v * 100, 2)} %" for c, v in
                                        fraction.sort_values().items()) + cdr_text
        )  # fmt: skip
    return Finding(
        "§6.2, Fig. 5B",
        "bzip2, the most efficient compressor, loses the fewest messages, close to CDR.",
        f"best effort, lost messages of the compressed tree-based formats: {'; '.join(parts)}.",
        _verdict(*wins),
    )


CHECKS: list[Callable[[pd.DataFrame, pd.DataFrame], Finding]] = [
    _cdr_most_efficient,
    _tree_far_below_cdr,
    _json_yaml_compact_most_efficient,
    _efficiency_drives_delivery,
    _cdr_fastest,
    _serialization_ranking,
    _deserialization_ranking,
    _compressed_beats_cdr,
    _bzip2_best_and_slowest,
    _lzo_fastest,
    _zlib_best_tradeoff,
    _zlib_helps_under_loss,
    _cdr_still_faster,
    _compression_reduces_losses,
    _bzip2_fewest_losses,
]


def findings(local: pd.DataFrame, delivery: pd.DataFrame) -> list[Finding]:
    """Every check; one the run has no data for says what it lacked."""
    found = []
    for check in CHECKS:
        try:
            found.append(check(local, delivery))
        except (_Missing, KeyError) as exc:
            claim = check.__name__.strip("_").replace("_", " ")
            found.append(Finding("", claim, f"not measured: {exc}", "not measured"))
    return found


# -- the document ----------------------------------------------------------------------------


def _table(frame: pd.DataFrame, columns: dict[str, Callable[[Any], str] | None]) -> str:
    rows = [[(fmt or str)(row[c]) for c, fmt in columns.items()] for _, row in frame.iterrows()]
    return "\n".join(markdown.table(list(columns), rows)) + "\n"


def _scenario_row(name: str, sc: Any, runs: dict[str, str]) -> list[object]:
    p, r = sc.p_r
    return [name, sc.printed_plr, sc.printed_abl, _f(sc.plr), _f(sc.abl), _f(p), _f(r),
            runs.get(name, "not run")]  # fmt: skip


def render(
    *,
    settings: Any,
    local: pd.DataFrame,
    delivery: pd.DataFrame,
    runs: dict[str, str],
    figures: Sequence[Path],
    scenarios: dict[str, Any],
) -> str:
    """The report as markdown; every number comes from the frames given."""
    found = findings(local, delivery)
    counts = {
        v: sum(f.verdict == v for f in found) for v in dict.fromkeys(f.verdict for f in found)
    }
    lines = [
        "# The publish/subscribe flexibility study",
        "",
        "A rerun of Esposito, Cotroneo and Russo, *An Investigation on Flexible Communications "
        "in Publish/Subscribe Services* (SEUS 2010) on nestbed: the paper's conclusions, point "
        "by point, beside what this run measured. Verdicts: "
        + ", ".join(f"{n} {v}" for v, n in counts.items())
        + ".",
        "",
        "## Settings",
        "",
        f"formats {', '.join(settings.formats)}; compressors {', '.join(settings.compressors)};"
        f" QoS {settings.qos}; {settings.local_repetitions} records per format × compressor "
        f"locally and {settings.repetitions} over the network in each scenario; link "
        f"{settings.bandwidth}, {settings.delay} one way; echo timeout {settings.timeout_s} s; "
        f"seed {settings.seed}.",
        "",
        *markdown.table(
            ["scenario", "PLR printed", "ABL printed", "PLR used", "ABL used", "p", "r", "run"],
            [_scenario_row(name, sc, runs) for name, sc in scenarios.items()],
        ),
    ]
    lines += ["", "## The paper's conclusions and ours", ""]
    for i, f in enumerate(found, 1):
        where = f" ({f.section})" if f.section else ""
        lines += [f"{i}. **{f.verdict}**{where}. Paper: {f.claim}", f"   Here: {f.ours}", ""]
    none = local[local["compressor"] == "none"]
    lines += [
        "## Formats, locally (no compression)",
        "",
        _table(
            none,
            {
                "format": None,
                "n": None,
                "stream_bytes_mean": lambda v: f"{v:.0f}",
                "efficiency_mean": _f,
                "serialize_s_mean": _ms,
                "deserialize_s_mean": _ms,
            },
        ),
    ]
    if not delivery.empty:
        lines += [
            "## Delivery over DDS",
            "",
            "Latency: serialize + compress + delivery (round trip) + decompress + deserialize, "
            "of delivered messages.",
            "",
            _table(
                delivery,
                {
                    "scenario": None,
                    "qos": None,
                    "format": None,
                    "compressor": None,
                    "messages": None,
                    "lost": None,
                    "delivery_s_mean": _ms,
                    "latency_s_mean": _ms,
                },
            ),
        ]
    lines += ["## Figures", ""]
    lines += [f"![{p.stem}]({p.name})" for p in figures]
    lines += [
        "",
        "Tables: `local.csv` (every local measurement), `local_summary.csv`, `delivery.csv` "
        "(every message), `delivery_summary.csv`, and the sweep's `sweep/table.csv`.",
        "",
    ]
    return "\n".join(lines)


def write(
    folder: Path,
    *,
    settings: Any,
    local: pd.DataFrame,
    delivery: pd.DataFrame,
    runs: dict[str, str],
    figures: Sequence[Path],
) -> Path:
    from nestbed.studies.pubsub.study import SCENARIOS

    chosen = {n: SCENARIOS[n] for n in settings.scenarios}
    text = render(settings=settings, local=local, delivery=delivery, runs=runs, figures=figures,
                  scenarios=chosen)  # fmt: skip
    path = folder / "report.md"
    path.write_text(text)
    return path
