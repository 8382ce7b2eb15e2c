"""The verdict rules on made-up transfers, and equation (1) and the thresholds against the
anomaly paper's own figures."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from nestbed.analysis.verdict import (
    HOST,
    INCONCLUSIVE,
    NETWORK,
    NORMAL,
    Thresholds,
    capture_position,
    ideal_throughput,
    judge,
    pftk_throughput,
)

W, P_PAYLOAD, P_PACKET, RTT = 65536, 1448, 1500, 0.020
IDEAL = W * P_PAYLOAD / (P_PACKET * RTT)


def transfer(**over: Any) -> dict[str, Any]:
    """A 10 s transfer at `ratio` of the ideal, captured at its sender, otherwise clean."""
    ratio = over.pop("ratio", 0.95)
    t: dict[str, Any] = {
        "data_segments": 5000,
        "throughput_bytes_per_s": ratio * IDEAL,
        "duration_s": 10.0,
        "loss_rate": 0.0,
        "retransmitted_segments": 0,
        "mss_bytes": P_PAYLOAD,
        "packet_bytes": P_PACKET,
        "window": {"scale_known": True, "max_bytes": W, "inflight_max_bytes": W},
        "rtt": {"count": 4000, "min_s": RTT, "p50_s": RTT * 1.02, "p90_s": RTT * 1.05},
        "spacing": {"count": 4000, "min_s": 5e-6, "mean_s": 12e-6, "p99_s": 30e-6, "max_s": 50e-6},
        "idle": {"count": 2000, "total_s": 0.02},
        "handshake": {"syn_unix_s": 0.0, "synack_unix_s": RTT, "ack_unix_s": RTT + 1e-5,
                      "sender_is_client": True},
    }  # fmt: skip
    for key, value in over.items():
        if isinstance(value, dict):
            t[key] = {**t[key], **value}
        else:
            t[key] = value
    return t


def stalled(**over: Any) -> dict[str, Any]:
    """A sender idle 6 s of 10, with spacings far beyond the transmission period."""
    base = {"ratio": 0.3, "idle": {"count": 300, "total_s": 6.0},
            "spacing": {"mean_s": 0.012, "max_s": 0.3}}  # fmt: skip
    return transfer(**{**base, **over})


def test_equation_1_gives_the_papers_ideal_for_pair_kappa_lambda():
    # §5.1.1: W = 64 KB, R = 0.02 s, p = 1368 B, P = 1420 B → 3156.7 KBps.
    assert ideal_throughput(65536, 1368, 1420, 0.02) / 1e3 == pytest.approx(3156.7, abs=0.2)


def test_far_below_threshold_separates_the_papers_table_3():
    th = Thresholds()
    # (ideal, mean) KBps of Table 3: α-β and γ-δ were normal, κ-λ and μ-ν anomalous.
    normal = [(1475.1, 1073.7), (760.6, 730.6)]
    anomalous = [(3156.7, 288.6), (701.5, 241.9)]
    assert all(mean / ideal >= th.far_below for ideal, mean in normal)
    assert all(mean / ideal < th.far_below for ideal, mean in anomalous)


def test_pftk_is_infinite_without_loss_falls_with_loss_and_meets_mathis_at_low_loss():
    assert math.isinf(pftk_throughput(1448, 0.02, 0.0, 0.22))
    rates = [pftk_throughput(1448, 0.02, p, 0.22) for p in (1e-4, 1e-3, 1e-2, 1e-1)]
    assert rates == sorted(rates, reverse=True)
    mathis = 1448 / 0.02 * math.sqrt(1.5) / math.sqrt(1e-5)
    assert pftk_throughput(1448, 0.02, 1e-5, 0.22) == pytest.approx(mathis, rel=0.02)


def test_near_ideal_throughput_is_normal():
    v = judge(transfer(ratio=0.8))
    assert v.verdict == NORMAL
    assert v.evidence["ratio"] == pytest.approx(0.8)
    assert "80 %" in v.reason


def test_loss_that_predicts_the_drop_is_network_limited():
    v = judge(transfer(ratio=0.1, loss_rate=0.02, retransmitted_segments=100))
    assert v.verdict == NETWORK, v.reason
    assert "loss rate of 2 %" in v.reason
    assert v.evidence["loss_model_bytes_per_s"] <= 2 * v.evidence["throughput_bytes_per_s"]


def test_rtt_inflation_that_predicts_the_drop_is_network_limited():
    v = judge(transfer(ratio=0.25, rtt={"p50_s": RTT * 4, "p90_s": RTT * 5}))
    assert v.verdict == NETWORK, v.reason
    assert "median RTT" in v.reason and "4.0×" in v.reason


def test_idle_sender_on_a_stable_network_is_a_host_anomaly():
    v = judge(stalled())
    assert v.verdict == HOST, v.reason
    e = v.evidence
    assert e["spacing_mean_s"] > e["transmission_period_s"]
    assert e["idle_share"] == pytest.approx(6.0 / (10.0 - 3.0))
    assert "no CPU availability" in v.reason
    assert e["cpu_corroborates"] is None


def test_cpu_availability_corroborates_or_questions_a_host_anomaly():
    low = judge(stalled(), cpu={"node": "h1", "available_min": 0.4})
    assert low.verdict == HOST and low.evidence["cpu_corroborates"] is True
    assert "fell to 0.40" in low.reason
    high = judge(stalled(), cpu={"node": "h1", "available_min": 0.99})
    assert high.verdict == HOST and high.evidence["cpu_corroborates"] is False
    assert "application may have paused" in high.reason


def test_spacing_small_or_idle_too_short_to_explain_is_inconclusive():
    small = judge(stalled(spacing={"mean_s": 20e-6, "max_s": 80e-6}))
    assert small.verdict == INCONCLUSIVE and "kept pace" in small.reason
    brief = judge(stalled(idle={"total_s": 1.0}))
    assert brief.verdict == INCONCLUSIVE


def test_a_capture_away_from_the_sender_cannot_show_a_host_anomaly():
    away = stalled(handshake={"synack_unix_s": 0.001, "ack_unix_s": RTT})
    v = judge(away)
    assert v.evidence["capture_position"] == "elsewhere"
    assert v.verdict == INCONCLUSIVE and "not taken at the sender" in v.reason


def test_too_few_segments_or_rtt_samples_are_inconclusive():
    assert judge(transfer(data_segments=5)).verdict == INCONCLUSIVE
    v = judge(transfer(rtt={"count": 0, "min_s": None, "p50_s": None}))
    assert v.verdict == INCONCLUSIVE and "RTT samples" in v.reason


def test_capture_position_from_handshake_or_samples():
    th = Thresholds()
    assert capture_position(transfer(), th)[0] == "sender"
    server_sends = transfer(handshake={"sender_is_client": False})
    assert capture_position(server_sends, th)[0] == "elsewhere"
    no_handshake = transfer(handshake=None)
    assert capture_position(no_handshake, th) == ("sender", pytest.approx(5e-6 / RTT))
    lan = transfer(handshake=None, rtt={"min_s": 2e-4})
    assert capture_position(lan, th) == ("unknown", None)


def test_an_unknown_window_scale_falls_back_to_what_was_in_flight():
    t = transfer(window={"scale_known": False, "max_bytes": 16384, "inflight_max_bytes": W})
    e = judge(copy.deepcopy(t)).evidence
    assert e["window_bytes"] == W and e["window_scale_known"] is False
