"""What a calibration measures: the built-in topologies as nestbed experiments, a user's own
experiment checked for the sender and receivers named, and the tuning profiles."""

from __future__ import annotations

from dataclasses import dataclass

from nestbed.api import Experiment as Builder
from nestbed.errors import UserError
from nestbed.model import Experiment

TOPOLOGIES = ("link", "lan", "loss")
PROFILES = ("untuned", "tuned")
BUFFER_BYTES = 12_582_912  # the paper's socket buffer space
TXQUEUELEN = 10_000
BACKLOG = 65_536
# The paper's sysctls are all the host's on this kernel: netdev_max_backlog exists only in the
# initial namespace, and a node's net.core.{r,w}mem_{max,default} are read-only copies of the
# host's. So the tuned profile is per node where Linux allows it (the interface's txqueuelen,
# and socket buffers the probe forces past rmem_max/wmem_max with SO_RCVBUFFORCE and
# SO_SNDBUFFORCE, as root may); the host's values change only when asked (--tune-host) and are
# restored afterwards.
HOST_TUNING = {
    "net.core.netdev_max_backlog": str(BACKLOG),
    "net.core.rmem_max": str(BUFFER_BYTES),
    "net.core.wmem_max": str(BUFFER_BYTES),
}
GROUP = "239.1.1.1"


@dataclass(frozen=True)
class Target:
    """One experiment to calibrate: who sends, who receives, over which link or LAN."""

    topology: str  # link, lan, loss, or the user's experiment name
    profile: str  # untuned or tuned
    experiment: Experiment
    sender: str
    receivers: tuple[str, ...]
    link: str  # the link or LAN the sender and receivers share
    multicast: bool
    configured_loss: float = 0.0

    @property
    def key(self) -> str:
        return f"{self.topology}-{self.profile}"

    def address(self, node: str) -> str:
        """NODE's address on the calibrated link or LAN."""
        (link,) = (x for x in self.experiment.all_links if x.name == self.link)
        return link.port(node).ip


def builtin(topology: str, *, receivers: int, loss: float) -> Experiment:
    """The paper's set-ups: one sender and one receiver over a plain link (no delay node), one
    sender and N receivers on a LAN, and a link with configured loss."""
    name = f"calibrate-{topology}"
    exp = Builder(name)
    sender = exp.node("s")
    if topology == "link":
        exp.link(sender, exp.node("r1"), name="link0")
    elif topology == "loss":
        exp.link(sender, exp.node("r1"), name="link0", loss=loss)
    elif topology == "lan":
        members = [sender] + [exp.node(f"r{i}") for i in range(1, receivers + 1)]
        exp.lan(members, name="lan0")
    else:
        raise UserError(f"topology {topology!r} is not one of {', '.join(TOPOLOGIES)}")
    return exp.build()


def with_profile(experiment: Experiment, profile: str) -> Experiment:
    """The experiment under its calibration's name for PROFILE (the profile itself is applied
    to the live nodes and the probe's sockets, see HOST_TUNING)."""
    if profile not in PROFILES:
        raise UserError(f"profile {profile!r} is not one of {', '.join(PROFILES)}")
    return experiment.model_copy(update={"name": f"{experiment.name}-{profile}"})


def target(
    experiment: Experiment,
    *,
    topology: str,
    profile: str,
    sender: str,
    receivers: tuple[str, ...],
    multicast: bool,
    configured_loss: float = 0.0,
) -> Target:
    """Checks that the nodes exist and share one link (or, for multicast, one LAN)."""
    names = [n.name for n in experiment.nodes]
    for node in (sender, *receivers):
        if node not in names:
            raise UserError(
                f"experiment {experiment.name} has no node '{node}'; its nodes are "
                f"{', '.join(names)}"
            )
    if not receivers:
        raise UserError("give at least one receiver node (--receiver-nodes)")
    if not multicast and len(receivers) > 1:
        raise UserError(
            f"unicast calibrates one receiver, and {len(receivers)} are named; name one with "
            "--receiver-nodes or add --multicast"
        )
    if sender in receivers:
        raise UserError(f"node {sender} cannot be both the sender and a receiver")
    everyone = {sender, *receivers}
    shared = [link for link in experiment.all_links if everyone <= {p.node for p in link.ports}]
    if multicast:
        lans = [link for link in shared if link.kind == "lan"]
        if not lans:
            raise UserError(
                f"multicast needs the sender and receivers on one LAN, and experiment "
                f"{experiment.name} has no LAN joining {', '.join(sorted(everyone))}; "
                "calibrate it without --multicast or add a LAN"
            )
        shared = lans
    if not shared:
        raise UserError(
            f"nodes {', '.join(sorted(everyone))} share no link or LAN in experiment "
            f"{experiment.name}; calibration measures one hop, so pick directly connected nodes"
        )
    tuned = with_profile(experiment, profile)
    return Target(
        topology=topology,
        profile=profile,
        experiment=tuned,
        sender=sender,
        receivers=receivers,
        link=shared[0].name,
        multicast=multicast,
        configured_loss=configured_loss,
    )
