"""What a link emulator's counters say a pipe dropped: frames taken while the link was down
count among the other drops of the direction they were sent into, whether linkd counted them
at its port (before its pipe) or nestbed-sim in its pipe."""

from __future__ import annotations

from typing import Any

from nestbed.backend.linkd import drops_by_kind, pipe_counters


def _pipe(ordinal: int = 0, **extra: int) -> dict[str, Any]:
    drops = {"loss": 1, "queue_full": 2, "red_early": 0, "red_forced": 0, "ordinal": ordinal}
    return {"counters": {"packets_out": 7, "drops": drops | extra}}


class Reply:
    def __init__(self, ports: dict[str, Any]) -> None:
        self.ports = ports

    def request(self, op: str, **_: Any) -> dict[str, Any]:
        assert op == "counters"
        return {"ok": True, "links": {"l0": {"ports": self.ports}}}


def test_frames_a_down_link_took_at_linkds_port_are_its_egress_pipes_other_drops() -> None:
    port = {"egress": _pipe(ordinal=1), "ingress": _pipe(), "admin_down": 3, "blackholed": 250}
    found = pipe_counters(Reply({"a": port}))  # type: ignore[arg-type]
    egress, ingress = found[("l0", "a", "egress")], found[("l0", "a", "ingress")]
    assert drops_by_kind(egress) == {"loss": 1, "queue": 2, "other": 1 + 3 + 250}
    assert drops_by_kind(ingress) == {"loss": 1, "queue": 2, "other": 0}
    assert "down" not in port["egress"]["counters"]["drops"]  # the reply is left as it was


def test_nestbed_sims_down_drops_in_its_pipes_are_other_drops_too() -> None:
    port = {"egress": _pipe(down=40), "ingress": _pipe(ordinal=2, down=5)}
    found = pipe_counters(Reply({"r1": port}))  # type: ignore[arg-type]
    assert drops_by_kind(found[("l0", "r1", "egress")])["other"] == 40
    assert drops_by_kind(found[("l0", "r1", "ingress")])["other"] == 7
