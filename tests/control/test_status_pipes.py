"""A status for chosen links, or for the top pipes of many: only those rows come back,
ranked down first, then by drops, then by bytes out since the sampler's last sample."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from nestbed.control import requests
from nestbed.control.sampler import Sampler
from nestbed.errors import Refused
from nestbed.results.folder import RunFolder


class Scripted:
    """A link emulator channel whose counters the test sets."""

    def __init__(self) -> None:
        self.links: dict[str, dict[str, dict[str, int]]] = {}

    def set(self, link: str, bytes_out: int, drops: int = 0) -> None:
        counters = {"packets_in": 0, "bytes_in": 0, "packets_out": bytes_out // 100,
                    "bytes_out": bytes_out, "queue_packets": 0, "queue_bytes": 0,
                    "drops": {"loss": drops, "queue_full": 0, "red_early": 0, "red_forced": 0,
                              "ordinal": 0}}  # fmt: skip
        quiet = dict(
            counters, bytes_out=0, packets_out=0, drops=dict.fromkeys(counters["drops"], 0)
        )
        self.links[link] = {"a": counters, "b": quiet}

    def request(self, op: str, **_fields: Any) -> dict[str, Any]:
        assert op == "counters"
        links = {link: {"ports": {"p": {"egress": {"counters": c["a"]},
                                        "ingress": {"counters": c["b"]}}}}
                 for link, c in self.links.items()}  # fmt: skip
        return {"ok": True, "links": links}

    def close(self) -> None:
        pass


def sampler(tmp_path: Path, channel: Scripted, down: set[str]) -> Sampler:
    backend = SimpleNamespace(linkd=lambda _plan: channel)
    plan = SimpleNamespace(needs_linkd=True)
    return Sampler(backend, plan, RunFolder(tmp_path), {}, lambda: 0.0,  # type: ignore[arg-type]
                   lambda link: "down" if link in down else "up")  # fmt: skip


def test_the_top_pipes_are_down_then_dropping_then_busiest_in_the_last_second(
    tmp_path: Path,
) -> None:
    channel = Scripted()
    for i in range(50):
        channel.set(f"l{i:02}", bytes_out=1_000_000 * i)  # l49 has sent the most in all
    s = sampler(tmp_path, channel, down={"l03"})
    s.sample()
    channel.set("l07", bytes_out=7_000_000 + 90_000_000)  # the busiest since the sample
    channel.set("l11", bytes_out=11_000_000, drops=4)
    rows, total, _ = s.chosen(top=4)
    assert total == 100
    # In (link, port, direction) order; l49's old bytes count for nothing now.
    assert [(r["link"], r["direction"]) for r in rows] == [
        ("l03", "egress"), ("l03", "ingress"), ("l07", "egress"), ("l11", "egress")]  # fmt: skip
    assert rows[0]["state"] == "down" and rows[3]["drops"] == 4
    assert rows[2]["bytes_out"] == 97_000_000
    s.stop()


def test_a_status_for_chosen_links_has_their_pipes_only(tmp_path: Path) -> None:
    channel = Scripted()
    for link in ("bottleneck", "left", "right"):
        channel.set(link, bytes_out=500)
    s = sampler(tmp_path, channel, down=set())
    rows, total, _ = s.chosen(links=("right", "bottleneck", "nosuch"))
    assert total == 6
    assert [r["link"] for r in rows] == ["bottleneck", "bottleneck", "right", "right"]
    assert s.chosen(links=("right",), top=1)[0] == [rows[2]]
    assert len(s.live()) == 6
    s.stop()


def test_a_status_request_takes_links_and_a_top_of_at_least_one() -> None:
    asked = requests.parse('{"op": "status", "links": ["a", "b"], "top": 3}')
    assert asked == requests.Status(op="status", links=("a", "b"), top=3)
    assert requests.parse('{"op": "status"}') == requests.Status(op="status")
    with pytest.raises(Refused, match="top"):
        requests.parse('{"op": "status", "top": 0}')
