"""The paper's Figure 1 ping-pong over real DDS (Eclipse Cyclone DDS): a publisher and an echo,
one per node, timing serialize, compress, delivery, decompress and deserialize per message.

Run inside nodes as `python -m nestbed.studies.pubsub.delivery echo|publish ...`.
"""

# No `from __future__ import annotations`: Cyclone DDS resolves field types at run time.
import argparse
import contextlib
import csv
import gc
import json
import math
import os
import socket
import sys
import time
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cyclonedds.core import DDSException, ReadCondition, SampleState, WaitSet
from cyclonedds.domain import Domain, DomainParticipant
from cyclonedds.idl import IdlStruct
from cyclonedds.idl.types import int64, sequence, uint8
from cyclonedds.pub import DataWriter
from cyclonedds.qos import Policy, Qos
from cyclonedds.sub import DataReader
from cyclonedds.topic import Topic
from cyclonedds.util import duration

from nestbed.errors import UserError
from nestbed.studies.pubsub.compression import Compressor, get_compressor
from nestbed.studies.pubsub.formats import Format, get_format
from nestbed.studies.pubsub.records import Shape, content_bytes, generate

QOS_NAMES = ("best-effort", "reliable")
DATA, WARMUP, STOP = 0, 1, 2  # Sample.kind
ROWS_FILE = "delivery.csv"
# Cyclone's own limits, set explicitly: a UDP datagram of at most MaxMessageSize bytes, so with
# the default 1500-byte MTU no datagram is split by IP and a lost frame loses one DDS fragment
# (which reliable QoS repairs alone), not a whole 14 KB datagram.
MAX_MESSAGE_BYTES = 1472
FRAGMENT_BYTES = 1344
# The largest stream we hand to DDS. Cyclone reassembles a sample in memory and a reliable writer
# keeps it until acknowledged; beyond this the ping-pong measures memory pressure, not delivery.
MAX_SAMPLE_BYTES = 8 * 1024 * 1024

COLUMNS = [
    "qos", "format", "compressor", "level", "repetition", "message_id", "content_bytes",
    "stream_bytes", "efficiency", "serialize_s", "compress_s", "delivery_s", "decompress_s",
    "deserialize_s", "lost", "error",
    "t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8",
]  # fmt: skip


@dataclass
class Sample(IdlStruct, typename="nestbed::pubsub::Sample"):
    """The opaque sample: a message id and the (compressed) stream as sequence<octet>."""

    id: int64
    kind: uint8
    payload: sequence[uint8]  # written from bytes, read back as a list of ints


def too_large(size: int, limit: int = MAX_SAMPLE_BYTES) -> str | None:
    """Why a stream of `size` bytes cannot be sent, or None when it can."""
    if size <= limit:
        return None
    return (
        f"the stream is {size} bytes, more than the {limit}-byte sample limit configured for "
        f"DDS (Cyclone would cut it into {math.ceil(size / FRAGMENT_BYTES)} fragments of "
        f"{FRAGMENT_BYTES} bytes); use a smaller record shape or raise --max-sample-bytes"
    )


def cyclone_config(local: str, peers: Sequence[str]) -> str:
    """A CycloneDDS configuration for one interface and unicast discovery of known peers: a
    node has one interface and the emulated link carries no multicast."""
    peer_xml = "".join(f'<Peer address="{p}"/>' for p in peers)
    return (
        '<CycloneDDS><Domain Id="any"><General>'
        f'<Interfaces><NetworkInterface address="{local}" multicast="false"/></Interfaces>'
        "<AllowMulticast>false</AllowMulticast>"
        f"<MaxMessageSize>{MAX_MESSAGE_BYTES}B</MaxMessageSize>"
        f"<FragmentSize>{FRAGMENT_BYTES}B</FragmentSize>"
        "</General><Discovery><ParticipantIndex>auto</ParticipantIndex>"
        f"<Peers>{peer_xml}</Peers></Discovery></Domain></CycloneDDS>"
    )


def local_address(peer: str) -> str:
    """The address of the interface that reaches `peer` (no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect((peer, 9))
        return str(s.getsockname()[0])


def domain_for(run_dir: Path) -> int:
    """A DDS domain id from the run's folder name, the same on both nodes of a run and (almost
    always) different between runs, so a straggler of an earlier run on a reused network
    cannot answer. Ids 1-200 keep Cyclone's ports (7400 + 250·id) below 57 400."""
    return 1 + zlib.crc32(run_dir.name.encode()) % 200


def qos_for(name: str) -> Qos:
    if name == "reliable":
        reliability = Policy.Reliability.Reliable(max_blocking_time=duration(seconds=5))
    elif name == "best-effort":
        reliability = Policy.Reliability.BestEffort
    else:
        raise UserError(f"unknown QoS {name!r}; known: {', '.join(QOS_NAMES)}")
    # Keep last: a timed-out message is replaced by the next, never retransmitted behind it.
    return Qos(reliability, Policy.History.KeepLast(4), Policy.Durability.Volatile)


class Channel:
    """A ping topic and a pong topic for one QoS; the publisher writes ping and reads pong, the
    echo the other way round."""

    def __init__(self, participant: DomainParticipant, qos_name: str, role: str):
        qos = qos_for(qos_name)
        suffix = qos_name.replace("-", "_")
        ping = Topic(participant, f"nestbed_ping_{suffix}", Sample)
        pong = Topic(participant, f"nestbed_pong_{suffix}", Sample)
        out, into = (ping, pong) if role == "publish" else (pong, ping)
        self.qos = qos_name
        self.writer = DataWriter(participant, out, qos=qos)
        self.reader = DataReader(participant, into, qos=qos)
        self.waitset = WaitSet(participant)
        self.waitset.attach(ReadCondition(self.reader, SampleState.NotRead))

    def take(self, timeout_s: float) -> list[Sample]:
        """The samples that arrive within `timeout_s` (empty when none do)."""
        if timeout_s > 0:
            self.waitset.wait(duration(seconds=timeout_s))
        return [s for s in self.reader.take(N=16) if isinstance(s, Sample)]

    def wait_for(self, wanted: int, kind: int, deadline: float) -> tuple[float, Sample] | None:
        """When the echo of message `wanted` arrived (perf_counter) and the echo, or None at
        the deadline. Late echoes of earlier messages are dropped."""
        while True:
            left = deadline - time.perf_counter()
            for sample in self.take(max(left, 0.0)):
                if sample.id == wanted and sample.kind == kind:
                    return time.perf_counter(), sample
            if time.perf_counter() >= deadline:
                return None


def open_domain(peer: str, domain: int) -> tuple[Domain, DomainParticipant]:
    try:
        address = socket.gethostbyname(peer)
    except OSError:
        raise UserError(f"peer {peer!r} has no address here; give a node name or address") from None
    local = "127.0.0.1" if address.startswith("127.") else local_address(address)
    dom = Domain(domain, config=cyclone_config(local, [address]))
    return dom, DomainParticipant(domain)


# -- the echo side ---------------------------------------------------------------------------


def echo(
    peer: str,
    domain: int,
    qos_names: Sequence[str],
    *,
    skip: set[int] = frozenset(),  # type: ignore[assignment]
    idle_s: float = 60.0,
) -> dict[str, int]:
    """Sends every DATA and WARMUP sample straight back (a copy of its bytes) until a STOP or
    `idle_s` without any sample. Message ids in `skip` are not echoed (to test loss)."""
    _dom, participant = open_domain(peer, domain)
    channels = [Channel(participant, q, "echo") for q in qos_names]
    waitset = WaitSet(participant)
    for channel in channels:
        waitset.attach(ReadCondition(channel.reader, SampleState.NotRead))
    counts = {"echoed": 0, "skipped": 0}
    last = time.monotonic()
    while time.monotonic() - last < idle_s:
        waitset.wait(duration(seconds=0.5))
        for channel in channels:
            for sample in channel.take(0):
                last = time.monotonic()
                if sample.kind == STOP:
                    return counts
                if sample.kind == DATA and sample.id in skip:
                    counts["skipped"] += 1
                    continue
                # A new sample with the received octets: the paper's "copy of the stream".
                channel.writer.write(Sample(id=sample.id, kind=sample.kind,
                                            payload=sample.payload))  # fmt: skip
                counts["echoed"] += 1
    return counts


# -- the publisher side ----------------------------------------------------------------------


@dataclass
class Plan:
    """What the publisher measures over each of its channels (one per QoS): every format ×
    compressor × repetition."""

    formats: list[Format]
    compressors: list[Compressor]
    repetitions: int = 3
    seed: int = 0
    shape: Shape = field(default_factory=Shape)
    timeout_s: float = 2.0  # per message: no echo by then and it is lost
    discovery_s: float = 30.0
    max_sample_bytes: int = MAX_SAMPLE_BYTES


def _now() -> float:
    return time.perf_counter()


def _warm_up(channel: Channel, payload: bytes, deadline: float) -> bool:
    """Pings until one comes back: discovery done in both directions (and the path warm)."""
    attempt = 0
    while _now() < deadline:
        attempt += 1
        try:
            channel.writer.write(Sample(id=-attempt, kind=WARMUP, payload=payload))
        except DDSException:
            time.sleep(0.2)
            continue
        if channel.wait_for(-attempt, WARMUP, min(deadline, _now() + 0.5)) is not None:
            return True
    return False


def publish(channels: Sequence[Channel], plan: Plan) -> Iterator[dict[str, Any]]:
    """One row per message; a message not echoed within `plan.timeout_s` is lost, a message the
    middleware refuses is recorded with the reason, neither stops the run."""
    message_id = 0
    for channel in channels:
        reached = _warm_up(channel, b"warm-up", _now() + plan.discovery_s)
        for repetition in range(plan.repetitions):
            record = generate(plan.seed + repetition, plan.shape)
            content = content_bytes(record)
            for fmt in plan.formats:
                for comp in plan.compressors:
                    message_id += 1
                    row = _one(channel, fmt, comp, record, message_id, plan, reached)
                    yield {"qos": channel.qos, "format": fmt.name, "compressor": comp.name,
                           "level": comp.level, "repetition": repetition,
                           "message_id": message_id, "content_bytes": content,
                           "efficiency": content / row["stream_bytes"]} | row  # fmt: skip
    for channel in channels:
        for _ in range(3):  # best effort may lose one
            with contextlib.suppress(DDSException):
                channel.writer.write(Sample(id=0, kind=STOP, payload=b""))


def _one(
    channel: Channel,
    fmt: Format,
    comp: Compressor,
    record: Any,
    message_id: int,
    plan: Plan,
    reached: bool,
) -> dict[str, Any]:
    t: dict[str, float | None] = dict.fromkeys(("t1", "t2", "t3", "t4", "t5", "t6", "t7", "t8"))
    row: dict[str, Any] = {"lost": 0, "error": ""}
    gc.collect()
    gc.disable()  # one format is not charged for another's garbage (as in metrics.py)
    try:
        t["t1"] = _now()
        stream = fmt.serialize(record)
        t["t2"] = t["t3"] = _now()
        packed = comp.compress(stream)
        t["t4"] = _now()
        row["stream_bytes"] = len(packed)
        why = too_large(len(packed), plan.max_sample_bytes)
        if why is not None or not reached:
            row["error"] = why or f"no echo within {plan.discovery_s} s of discovery"
            row["lost"] = 1
        else:
            t["t5"] = _now()
            echoed = None
            try:
                channel.writer.write(Sample(id=message_id, kind=DATA, payload=packed))
                echoed = channel.wait_for(message_id, DATA, t["t5"] + plan.timeout_s)
            except DDSException as exc:
                row["error"] = f"DDS refused the sample: {exc}"
            if echoed is None:
                row["lost"] = 1
            else:
                t["t6"], sample = echoed
                # The echo's octets are checked equal to these (below, untimed), so the
                # decompressor reads bytes, as a C++ subscriber's would, not Python's list.
                unpacked = comp.decompress(packed)
                t["t7"] = _now()
                decoded = fmt.deserialize(unpacked)
                t["t8"] = _now()
                if bytes(sample.payload) != packed or decoded != record:
                    row["error"] = "the echo did not carry the stream sent"
    finally:
        gc.enable()
    return row | t | _spans(t)


def _spans(t: dict[str, float | None]) -> dict[str, float | None]:
    def span(a: str, b: str) -> float | None:
        start, end = t[a], t[b]
        return None if start is None or end is None else end - start

    return {
        "serialize_s": span("t1", "t2"),
        "compress_s": span("t3", "t4"),
        "delivery_s": span("t5", "t6"),
        "decompress_s": span("t6", "t7"),
        "deserialize_s": span("t7", "t8"),
    }


def totals(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """metrics.json: messages, lost and mean delivery time per QoS × format × compressor (the
    sweep turns each key into a column)."""
    found: dict[str, Any] = {"messages": len(rows), "lost": sum(r["lost"] for r in rows)}
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault(f"{r['qos']}.{r['format']}.{r['compressor']}", []).append(r)
    for key, group in groups.items():
        times = [r["delivery_s"] for r in group if r["delivery_s"] is not None]
        found[f"lost.{key}"] = sum(r["lost"] for r in group)
        found[f"delivery_s.{key}"] = sum(times) / len(times) if times else None
    return found


# -- the program -----------------------------------------------------------------------------


def _names(text: str) -> list[str]:
    return [n for n in text.split(",") if n]


def _arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m nestbed.studies.pubsub.delivery")
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("echo", "publish"):
        p = sub.add_parser(role)
        p.add_argument("--peer", required=True, help="the other node (name or address)")
        p.add_argument("--domain", default="auto", help="DDS domain id, or auto (from the run)")
        p.add_argument("--qos", default="best-effort", help="best-effort, reliable or both")
    e = sub.choices["echo"]
    e.add_argument("--skip", default="", help="message ids not to echo (comma-separated)")
    e.add_argument("--idle", type=float, default=60.0, help="seconds without a sample to stop")
    p = sub.choices["publish"]
    p.add_argument("--formats", default="cdr,json")
    p.add_argument("--compressors", default="none")
    p.add_argument("--repetitions", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--shape", default="", help="alternates,waypoints,points,sectors,remarks")
    p.add_argument("--timeout", type=float, default=2.0, help="seconds to wait for each echo")
    p.add_argument("--discovery", type=float, default=30.0, help="seconds to find the echo")
    p.add_argument("--max-sample-bytes", type=int, default=MAX_SAMPLE_BYTES)
    return parser.parse_args(argv)


def parse_shape(text: str) -> Shape:
    """`default` (or nothing) for the ≈100 KB record, else five counts."""
    if text in ("", "default"):
        return Shape()
    parts = text.split(",")
    names = ("alternates", "waypoints", "trajectory_points", "sectors", "remarks_chars")
    if len(parts) != len(names) or not all(p.isdigit() for p in parts):
        raise UserError(f"shape {text!r} is not five counts: {','.join(names)}")
    return Shape(**dict(zip(names, map(int, parts), strict=True)))


def parse_qos(text: str) -> list[str]:
    names = list(QOS_NAMES) if text == "both" else _names(text)
    for name in names:
        qos_for(name)  # an unknown name lists the known ones
    return names


def main(argv: Sequence[str] | None = None) -> int:
    args = _arguments(argv)
    out = Path(os.environ.get("NESTBED_PROGRAM_DIR", "."))
    domain = domain_for(out.resolve().parent.parent) if args.domain == "auto" else int(args.domain)
    qos = parse_qos(args.qos)
    if args.role == "echo":
        skip = {int(x) for x in _names(args.skip)}
        counts = echo(args.peer, domain, qos, skip=skip, idle_s=args.idle)
        print(json.dumps(counts | {"domain": domain}))
        return 0
    plan = Plan(
        formats=[get_format(n) for n in _names(args.formats)],
        compressors=[get_compressor(n) for n in _names(args.compressors)],
        repetitions=args.repetitions, seed=args.seed, shape=parse_shape(args.shape),
        timeout_s=args.timeout, discovery_s=args.discovery,
        max_sample_bytes=args.max_sample_bytes,
    )  # fmt: skip
    for f in plan.formats:  # untimed: Cyclone builds its CDR (de)serializers on first use
        f.deserialize(f.serialize(generate(plan.seed, plan.shape)))
    _dom, participant = open_domain(args.peer, domain)
    channels = [Channel(participant, q, "publish") for q in qos]
    rows = []
    out.mkdir(parents=True, exist_ok=True)
    with (out / ROWS_FILE).open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for row in publish(channels, plan):
            writer.writerow(row)
            f.flush()
            rows.append(row)
    (out / "metrics.json").write_text(json.dumps(totals(rows) | {"domain": domain}) + "\n")
    print(f"{len(rows)} messages, {sum(r['lost'] for r in rows)} lost, domain {domain}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        sys.exit(2)
