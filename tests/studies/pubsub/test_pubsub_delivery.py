"""The ping-pong over real Cyclone DDS on loopback: an echo process, this process publishing;
real round trips, a message the echo skips counted lost, a stream over the limit explained."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from nestbed.studies.pubsub.compression import get_compressor
from nestbed.studies.pubsub.delivery import Channel, Plan, open_domain, publish
from nestbed.studies.pubsub.formats import FORMATS, get_format
from nestbed.studies.pubsub.records import Shape, generate

SMALL = Shape(alternates=1, waypoints=5, trajectory_points=20, sectors=3, remarks_chars=100)


# A round trip through a Python echo takes milliseconds here; one taking a second on a busy
# host counted as lost. Only the message the echo skips waits this long.
ROUND_TRIP_TIMEOUT_S = 5.0


def test_round_trips_over_dds_in_both_qos_and_a_too_large_stream_explained(tmp_path: Path):
    domain = 201 + os.getpid() % 30  # apart from runs' 1-200 and from a concurrent session
    echo = subprocess.Popen(
        [sys.executable, "-m", "nestbed.studies.pubsub.delivery", "echo", "--peer", "127.0.0.1",
         "--domain", str(domain), "--qos", "both", "--idle", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, NESTBED_PROGRAM_DIR=str(tmp_path / "echo")),
    )  # fmt: skip
    formats = [get_format("cdr"), get_format("json")]
    compressors = [get_compressor("none"), get_compressor("zlib")]
    record = generate(0, SMALL)
    cdr = len(FORMATS["cdr"].serialize(record))
    json_bytes = len(FORMATS["json"].serialize(record))
    assert cdr < json_bytes
    qos = ["best-effort", "reliable"]
    plan = Plan(formats=formats, compressors=compressors, repetitions=1, shape=SMALL,
                timeout_s=ROUND_TRIP_TIMEOUT_S, discovery_s=20,
                max_sample_bytes=json_bytes - 1)  # fmt: skip
    try:
        _dom, participant = open_domain("127.0.0.1", domain)
        channels = [Channel(participant, q, "publish") for q in qos]
        rows = list(publish(channels, plan))
        stdout, stderr = echo.communicate(timeout=30)
    finally:
        echo.kill()
    assert echo.returncode == 0, stderr
    echoed = json.loads(stdout)
    by_id = {r["message_id"]: r for r in rows}
    assert len(rows) == 8  # 2 QoS × 2 formats × 2 compressors

    too_big = [r for r in rows if r["format"] == "json" and r["compressor"] == "none"]
    assert [r["message_id"] for r in too_big] == [3, 7]  # one per QoS, never sent
    assert all(r["lost"] == 1 and "sample limit" in r["error"] for r in too_big)
    assert all(by_id[i]["stream_bytes"] == json_bytes for i in (3, 7))

    sent = [r for r in rows if not r["error"]]
    assert len(sent) == 6 and all(r["lost"] == 0 for r in sent)
    for r in sent:
        assert r["t5"] < r["t6"] < r["t7"] <= r["t8"]
        assert r["delivery_s"] == r["t6"] - r["t5"] > 0
        assert r["stream_bytes"] < json_bytes
    assert echoed["echoed"] >= len(sent)  # (plus each channel's warm-up)


def test_an_echo_that_skips_a_sent_message_makes_it_lost(tmp_path: Path):
    domain = 231 + os.getpid() % 2
    echo = subprocess.Popen(
        [sys.executable, "-m", "nestbed.studies.pubsub.delivery", "echo", "--peer", "127.0.0.1",
         "--domain", str(domain), "--skip", "2", "--idle", "20"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env=dict(os.environ, NESTBED_PROGRAM_DIR=str(tmp_path / "echo")),
    )  # fmt: skip
    plan = Plan(formats=[get_format("cdr")], compressors=[get_compressor("none")],
                repetitions=3, shape=SMALL, timeout_s=ROUND_TRIP_TIMEOUT_S, discovery_s=20)  # fmt: skip
    try:
        _dom, participant = open_domain("127.0.0.1", domain)
        rows = list(publish([Channel(participant, "best-effort", "publish")], plan))
        stdout, stderr = echo.communicate(timeout=30)
    finally:
        echo.kill()
    assert echo.returncode == 0, stderr
    assert [r["lost"] for r in rows] == [0, 1, 0]
    assert rows[1]["delivery_s"] is None and rows[1]["error"] == ""
    assert json.loads(stdout)["skipped"] == 1
