"""The verdict on one transfer — normal, network-limited, host anomaly or inconclusive — and
the evidence that decided it (rules and thresholds justified in docs/analyze.md)."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

NORMAL = "normal"
NETWORK = "network-limited"
HOST = "host anomaly"
INCONCLUSIVE = "inconclusive"


@dataclass(frozen=True, kw_only=True, slots=True)
class Thresholds:
    """The numbers the rules compare against (docs/analyze.md says where each comes from)."""

    far_below: float = 0.5  # throughput/ideal under this is "far below" (the paper's Table 3)
    explains: float = 2.0  # a model explains a throughput it predicts within this factor
    idle_share: float = 0.5  # sender idle time must make up this share of the time lost
    near_sender: float = 0.25  # capture→sender→capture time, as a share of the RTT
    min_segments: int = 20  # fewer data segments: too short to judge
    min_rtt_samples: int = 5
    cpu_low: float = 0.9  # CPU availability below this corroborates a host anomaly
    min_rto_s: float = 0.2  # Linux's minimum retransmission timeout (PFTK's T0)


@dataclass(frozen=True, kw_only=True, slots=True)
class Verdict:
    """A verdict, the one sentence that says why, and the figures behind it."""

    verdict: str
    reason: str
    evidence: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def ideal_throughput(window: float, payload: float, packet: float, rtt_s: float) -> float:
    """Equation (1) of the anomaly paper: W·p/(P·R), payload bytes per second."""
    return window * payload / (packet * rtt_s)


def pftk_throughput(mss: float, rtt_s: float, loss: float, rto_s: float, b: int = 1) -> float:
    """Loss-limited TCP throughput (Padhye, Firoiu, Towsley, Kurose 1998, eq. 30 without the
    window term): MSS / (R·√(2bp/3) + T0·min(1, 3√(3bp/8))·p·(1+32p²)); infinite at p = 0."""
    if loss <= 0:
        return math.inf
    fast = rtt_s * math.sqrt(2 * b * loss / 3)
    timeouts = rto_s * min(1.0, 3 * math.sqrt(3 * b * loss / 8)) * loss * (1 + 32 * loss**2)
    return mss / (fast + timeouts)


def _get(t: dict[str, Any], *path: str) -> Any:
    for key in path:
        t = t.get(key) if isinstance(t, dict) else None  # type: ignore[assignment]
    return t


def capture_position(t: dict[str, Any], th: Thresholds) -> tuple[str, float | None]:
    """Where the capture was taken: "sender", "elsewhere" or "unknown", and the round trip
    between the capture point and the sender as a share of the RTT.

    With the handshake: the sender's share of SYN→SYN-ACK→ACK. Without: the shortest
    reception→send gap against the shortest RTT sample (both tiny at the receiver)."""
    hs = t.get("handshake") or {}
    syn, synack, ack = hs.get("syn_unix_s"), hs.get("synack_unix_s"), hs.get("ack_unix_s")
    if syn is not None and synack is not None and ack is not None and ack > syn:
        near = (ack - synack) if hs.get("sender_is_client") else (synack - syn)
        share = max(near, 0.0) / (ack - syn)
        return ("sender" if share <= th.near_sender else "elsewhere"), share
    rtt_min, gap_min = _get(t, "rtt", "min_s"), _get(t, "spacing", "min_s")
    if rtt_min is None or gap_min is None or rtt_min < 1e-3:
        return "unknown", None
    share = gap_min / rtt_min
    return ("sender" if share <= th.near_sender else "unknown"), share


def _evidence(t: dict[str, Any], th: Thresholds) -> dict[str, Any]:
    """Every figure the rules use, in one flat dict (None where the capture lacks it)."""
    rtt_min, rtt_p50 = _get(t, "rtt", "min_s"), _get(t, "rtt", "p50_s")
    window = t["window"]
    w = window.get("max_bytes") or 0
    if not window.get("scale_known"):
        # Unscaled windows understate W; what was in flight is a floor that is sure.
        w = max(w, window.get("inflight_max_bytes") or 0)
    p, big_p = t.get("mss_bytes") or 0, t.get("packet_bytes") or 0
    e: dict[str, Any] = {
        "throughput_bytes_per_s": t.get("throughput_bytes_per_s"),
        "window_bytes": w,
        "window_scale_known": bool(window.get("scale_known")),
        "payload_bytes": p,
        "packet_bytes": big_p,
        "rtt_min_s": rtt_min,
        "rtt_p50_s": rtt_p50,
        "rtt_p90_s": _get(t, "rtt", "p90_s"),
        "rtt_samples": _get(t, "rtt", "count") or 0,
        "rtt_inflation": rtt_p50 / rtt_min if rtt_min and rtt_p50 else None,
        "loss_rate": t.get("loss_rate", 0.0),
        "retransmitted_segments": t.get("retransmitted_segments", 0),
        "spacing_mean_s": _get(t, "spacing", "mean_s"),
        "spacing_p99_s": _get(t, "spacing", "p99_s"),
        "spacing_max_s": _get(t, "spacing", "max_s"),
        "spacing_samples": _get(t, "spacing", "count") or 0,
        "idle_s": _get(t, "idle", "total_s") or 0.0,
        "duration_s": t.get("duration_s"),
    }
    if not (w and p and big_p and rtt_min and rtt_p50):
        return e
    ideal = ideal_throughput(w, p, big_p, rtt_min)
    pftk = pftk_throughput(p, rtt_p50, e["loss_rate"], th.min_rto_s + rtt_p50)
    e |= {
        "ideal_bytes_per_s": ideal,
        "ideal_at_p50_rtt_bytes_per_s": ideal_throughput(w, p, big_p, rtt_p50),
        "loss_model_bytes_per_s": None if math.isinf(pftk) else pftk,
        "transmission_period_s": p / ideal,
    }
    e["network_predicted_bytes_per_s"] = min(e["ideal_at_p50_rtt_bytes_per_s"], pftk)
    got = e["throughput_bytes_per_s"]
    if got:
        e["ratio"] = got / ideal
        delivered = got * (e["duration_s"] or 0.0)
        e["lost_s"] = max((e["duration_s"] or 0.0) - delivered / ideal, 0.0)
        e["idle_share"] = e["idle_s"] / e["lost_s"] if e["lost_s"] > 0 else None
    return e


def _pct(x: float) -> str:
    return f"{100 * x:.0f} %"


def _network(e: dict[str, Any]) -> str:
    """Which network condition the prediction came from, in words."""
    if e["loss_model_bytes_per_s"] is not None and (
        e["loss_model_bytes_per_s"] <= e["ideal_at_p50_rtt_bytes_per_s"]
    ):
        return f"a loss rate of {100 * e['loss_rate']:.2g} % predicts it (PFTK model)"
    return (
        f"the median RTT ({1e3 * e['rtt_p50_s']:.1f} ms) is {e['rtt_inflation']:.1f}× "
        f"the minimum ({1e3 * e['rtt_min_s']:.1f} ms), which predicts it"
    )


def judge(
    t: dict[str, Any], cpu: dict[str, Any] | None = None, th: Thresholds | None = None
) -> Verdict:
    """The verdict on transfer ``t`` (one entry of the analyzer's report), with CPU
    availability of its sender's node during it (cpu.cpu_evidence) when known."""
    th = th or Thresholds()
    e = _evidence(t, th)
    position, share = capture_position(t, th)
    e |= {"capture_position": position, "sender_share_of_rtt": share, "cpu": cpu}
    low = cpu.get("available_min") if cpu else None
    e["cpu_corroborates"] = None if low is None else bool(low < th.cpu_low)
    if t.get("data_segments", 0) < th.min_segments:
        return Verdict(
            verdict=INCONCLUSIVE,
            evidence=e,
            reason=(
                f"too short to judge: {t.get('data_segments', 0)} data segments "
                f"(at least {th.min_segments} needed)"
            ),
        )
    if e["rtt_samples"] < th.min_rtt_samples or "ideal_bytes_per_s" not in e:
        return Verdict(
            verdict=INCONCLUSIVE,
            evidence=e,
            reason=(
                f"{e['rtt_samples']} RTT samples (at least {th.min_rtt_samples} needed; are the "
                "receiver's ACKs in the capture?): the ideal throughput cannot be computed"
            ),
        )
    if "ratio" not in e:
        return Verdict(verdict=INCONCLUSIVE, evidence=e, reason="no throughput: no time elapsed")
    got, ratio = e["throughput_bytes_per_s"], e["ratio"]
    if ratio >= th.far_below:
        return Verdict(
            verdict=NORMAL,
            evidence=e,
            reason=(
                f"throughput is {_pct(ratio)} of the ideal W·p/(P·R) (at least "
                f"{_pct(th.far_below)} is normal)"
            ),
        )
    if e["network_predicted_bytes_per_s"] <= th.explains * got:
        return Verdict(
            verdict=NETWORK,
            evidence=e,
            reason=(
                f"throughput is {_pct(ratio)} of the ideal and the network explains it: "
                f"{_network(e)} within a factor {th.explains:g}"
            ),
        )
    stable = (
        f"throughput is {_pct(ratio)} of the ideal while loss ({100 * e['loss_rate']:.2g} %) "
        f"and RTT (median {e['rtt_inflation']:.2f}× minimum) predict "
        f"{e['network_predicted_bytes_per_s'] / got:.1f}× more"
    )
    if position != "sender":
        return Verdict(
            verdict=INCONCLUSIVE,
            evidence=e,
            reason=(
                f"{stable}, but the capture was not taken at the sender ({position}), so its "
                "packet spacing cannot be measured"
            ),
        )
    period, rtt_min = e["transmission_period_s"], e["rtt_min_s"]
    mean, most = e["spacing_mean_s"] or 0.0, e["spacing_max_s"] or 0.0
    oversize = mean > period or most > rtt_min
    idle_share = e.get("idle_share") or 0.0
    if oversize and idle_share >= th.idle_share:
        return Verdict(
            verdict=HOST,
            evidence=e,
            reason=(
                f"{stable}; the sender sat idle on open windows for {e['idle_s']:.3g} s "
                f"({_pct(min(idle_share, 1.0))} of the time lost), mean spacing "
                f"{1e3 * mean:.3g} ms vs transmission period {1e3 * period:.3g} ms, longest "
                f"{1e3 * most:.3g} ms vs RTT {1e3 * rtt_min:.3g} ms{_cpu_clause(cpu, th)}"
            ),
        )
    return Verdict(
        verdict=INCONCLUSIVE,
        evidence=e,
        reason=(
            f"{stable}, yet the sender kept pace (idle {_pct(min(idle_share, 1.0))} of the time "
            "lost): its congestion window, its application or a lossless bottleneck limited it"
        ),
    )


def _cpu_clause(cpu: dict[str, Any] | None, th: Thresholds) -> str:
    if not cpu or cpu.get("available_min") is None:
        return " (no CPU availability for the sender's node)"
    low = cpu["available_min"] < th.cpu_low
    node, a = cpu.get("node", "?"), cpu["available_min"]
    if low:
        return f"; CPU availability on {node} fell to {a:.2f}, which corroborates it"
    return (
        f"; CPU availability on {node} stayed at or above {a:.2f}, so the application may "
        "have paused rather than the host"
    )
