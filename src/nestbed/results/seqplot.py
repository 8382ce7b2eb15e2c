"""Sequence number over time of one TCP flow (the plot of the Netbed paper's Figure 8), and
how it recovered from each drop, from (time, seq) arrays of any source: ``tcp/FLOW.csv`` of a
simulated or an emulated run, or arrays of the caller's."""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from numpy.typing import ArrayLike, NDArray

from nestbed.errors import UserError

DUPACK_THRESHOLD = 3
# A retransmission later than this after the last ACK came after a silence: a timer's. Neither
# Linux nor ns-2 (minrto_) times out sooner.
MIN_RTO_S = 0.2


def _array(values: ArrayLike) -> NDArray[np.float64]:
    return np.asarray(values, dtype=float).reshape(-1)


@dataclass(frozen=True)
class SeqTrace:
    """One flow's segments as its sender saw them: times (s) and sequence numbers of data
    segments sent, of segments dropped in the network and of ACKs received (optional).

    ``unit`` names the sequence numbers: ns-2 counts segments; a real stack counts bytes
    (subtract the initial sequence number, or divide by the MSS to compare with ns-2).
    """

    label: str
    sent_t_s: NDArray[np.float64]
    sent_seq: NDArray[np.float64]
    dropped_t_s: NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    dropped_seq: NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    acked_t_s: NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    acked_seq: NDArray[np.float64] = field(default_factory=lambda: np.empty(0))
    unit: str = "segment"

    @classmethod
    def of(
        cls,
        label: str,
        sent: tuple[ArrayLike, ArrayLike],
        *,
        dropped: tuple[ArrayLike, ArrayLike] | None = None,
        acked: tuple[ArrayLike, ArrayLike] | None = None,
        unit: str = "segment",
    ) -> SeqTrace:
        """A trace from (time, seq) pairs of arrays, checked to have matching lengths."""
        pairs = {"sent": sent, "dropped": dropped or ((), ()), "acked": acked or ((), ())}
        arrays: dict[str, NDArray[np.float64]] = {}
        for name, (t, seq) in pairs.items():
            arrays[f"{name}_t_s"], arrays[f"{name}_seq"] = _array(t), _array(seq)
            if arrays[f"{name}_t_s"].shape != arrays[f"{name}_seq"].shape:
                raise ValueError(f"{label}: {name} times and sequence numbers differ in length")
        return cls(label, unit=unit, **arrays)

    def recoveries(self) -> list[dict[str, Any]]:
        """How the sender recovered each segment the network dropped.

        ``fast retransmit`` when at least three duplicate ACKs (ACKs repeating the one before
        them, short of the segment) came back after the drop and the segment was resent less
        than ``MIN_RTO_S`` after an ACK (in answer to ACKs, not after a silence); ``timer``
        when it was resent otherwise (a retransmission timeout, or Linux's tail loss probe);
        ``not resent`` when the trace ends first.
        """
        out = []
        previous = np.concatenate([[np.nan], self.acked_seq[:-1]])
        for t, seq in zip(self.dropped_t_s, self.dropped_seq, strict=True):
            again = np.flatnonzero((self.sent_seq == seq) & (self.sent_t_s > t))
            resent = float(self.sent_t_s[again[0]]) if again.size else None
            until = resent if resent is not None else np.inf
            window = (self.acked_t_s > t) & (self.acked_t_s <= until)
            # ns-2's ACKs name the last segment received, a real stack's the next byte
            # expected. With SACK, duplicates stuck at an earlier hole tell of later ones too.
            short = self.acked_seq < seq if self.unit == "segment" else self.acked_seq <= seq
            dup_times = self.acked_t_s[window & short & (self.acked_seq == previous)]
            last_ack = self.acked_t_s[self.acked_t_s <= until].max(initial=-np.inf)
            if resent is None:
                how = "not resent"
            elif dup_times.size >= DUPACK_THRESHOLD and resent - last_ack < MIN_RTO_S:
                how = "fast retransmit"
            else:
                how = "timer"
            out.append({
                "seq": float(seq),
                "dropped_s": float(t),
                "resent_s": resent,
                "duplicate_acks": int(dup_times.size),
                "recovery": how,
            })  # fmt: skip
        return out

    @property
    def retransmitted(self) -> NDArray[np.bool_]:
        """Which sent segments repeat a sequence number already sent."""
        if self.sent_seq.size == 0:
            return np.zeros(0, dtype=bool)
        before = np.concatenate([[-np.inf], np.maximum.accumulate(self.sent_seq)[:-1]])
        return self.sent_seq <= before


def describe_recoveries(recoveries: list[dict[str, Any]]) -> str:
    """One sentence: how many drops, and how each kind of recovery went."""
    if not recoveries:
        return "no segment was dropped in the network"
    kinds: dict[str, list[dict[str, Any]]] = {}
    for r in recoveries:
        kinds.setdefault(r["recovery"], []).append(r)
    parts = []
    for how, items in kinds.items():
        took = [r["resent_s"] - r["dropped_s"] for r in items if r["resent_s"] is not None]
        after = f", resent {np.median(took):.3f} s after the drop (median)" if took else ""
        parts.append(f"{len(items)} {how}{after}")
    n = len(recoveries)
    return f"{n} segment{'s' if n > 1 else ''} dropped in the network: " + "; ".join(parts)


def read_tcp_table(path: Path, label: str | None = None) -> SeqTrace:
    """The sequence trace of a run's ``tcp/FLOW.csv`` (t_s, event, seq): a simulated run's in
    segments, an emulated run's (which has a ``bytes`` column) in bytes."""
    unit = "segment"
    columns: dict[str, tuple[list[float], list[float]]] = {
        e: ([], []) for e in ("send", "drop", "ack")
    }
    try:
        with path.open(newline="", encoding="utf-8") as f:
            reader = csv.DictReader(f)
            if "bytes" in (reader.fieldnames or ()):
                unit = "byte"
            for row in reader:
                if row.get("event") in columns:
                    t, seq = columns[row["event"]]
                    t.append(float(row["t_s"]))
                    seq.append(float(row["seq"]))
    except (OSError, KeyError, ValueError) as exc:
        raise UserError(f"{path}: not a readable TCP sequence table ({exc})") from None
    return SeqTrace.of(
        label or path.stem,
        columns["send"],
        dropped=columns["drop"],
        acked=columns["ack"],
        unit=unit,
    )


def plot_sequence(
    traces: Sequence[SeqTrace],
    output: Path,
    *,
    title: str | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
) -> Path:
    """Draws one panel per trace (one above the other, same time axis): segments sent as dots,
    retransmissions circled, drops as crosses, ACKs as a step line; writes OUTPUT (PNG)."""
    if not traces:
        raise ValueError("no sequence traces to plot")
    fig = Figure(figsize=(9, 3.2 * len(traces) + 0.6), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(len(traces), 1, sharex=True, squeeze=False)[:, 0]
    for ax, tr in zip(axes, traces, strict=True):
        again = tr.retransmitted
        ax.plot(tr.sent_t_s[~again], tr.sent_seq[~again], ".", ms=3, label="sent")
        if again.any():
            ax.plot(tr.sent_t_s[again], tr.sent_seq[again], "o", mfc="none", ms=7,
                    color="tab:red", label="retransmitted")  # fmt: skip
        if tr.dropped_t_s.size:
            ax.plot(tr.dropped_t_s, tr.dropped_seq, "x", ms=8, color="black", label="dropped")
        if tr.acked_t_s.size:
            ax.step(tr.acked_t_s, tr.acked_seq, where="post", lw=0.8, color="tab:green",
                    label="ACKed")  # fmt: skip
        ax.set(ylabel=f"sequence number ({tr.unit}s)", title=tr.label)
        ax.legend(loc="upper left", fontsize="small")
        ax.set_xlim(start_s, end_s)
    axes[-1].set_xlabel("time since start (s)")
    if title:
        fig.suptitle(title)
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output, dpi=100)
    return output
