"""The experiment's link emulators on every host as one ``Channel``, as the controller and
the life cycle speak to the one linkd of a single host.

Each host with shaped links runs its own nestbed-linkd over its share. A request naming a
link and a port goes to the host of that port (the member's node); one naming a link only
(up, down) to every host holding a part of it; ``counters`` to every host at once, the
replies merged into one, as one linkd would give them; a change of a cut link's sending
pipe keeps its delay compensated for the underlay's time (``share``). The tunnel ports that
stand for the members elsewhere are left out of the counters: they shape nothing (the
members' own pipes do), and a one-host run has none. Every request to several hosts is one
Dask task per host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from nestbed.backend.cluster.share import TUNNEL_PORT, HostShare, less_delay
from nestbed.backend.linkd import Request
from nestbed.errors import EnvironmentProblem, reason

# Runs ``linkd_request(host, op, fields)`` on each host given, at once: each host's reply or
# the exception it raised.
OnHosts = Callable[[list[str], str, dict[str, Any]], dict[str, Any]]
# Runs each host's requests when this machine's time.monotonic() reads ``due``, at once on
# every host given: when each host applied them (on this machine's clock), or the exception.
AtHosts = Callable[[dict[str, list[Request]], float], dict[str, Any]]


class ClusterChannel:
    """linkd's protocol over the link emulators of every host of one experiment."""

    def __init__(self, parts: Mapping[str, HostShare], on_hosts: OnHosts, at_hosts: AtHosts):
        self.on_hosts, self.at_hosts = on_hosts, at_hosts
        self.hosts = sorted(h for h, part in parts.items() if part.plan.needs_linkd)
        self.port_host: dict[tuple[str, str], str] = {}
        self.link_hosts: dict[str, list[str]] = {}
        # A cut link's sending pipe gives up the underlay's time, at swap-in and at every
        # change of its shaping.
        self.compensated = {(link, port): by_s for h in self.hosts
                            for link, port, by_s in parts[h].compensated}  # fmt: skip
        for h in self.hosts:
            for link in parts[h].plan.emulated:
                self.link_hosts.setdefault(link.link, []).append(h)
                for port in link.ports:
                    if port.port != TUNNEL_PORT:
                        self.port_host[(link.link, port.port)] = h

    def targets(self, op: str, fields: Mapping[str, Any]) -> list[str]:
        """The hosts a request goes to."""
        link, port = fields.get("link"), fields.get("port")
        if link is not None and port is not None:
            if (link, port) not in self.port_host:
                raise EnvironmentProblem(f"link {link} has no port {port} on any host")
            return [self.port_host[(link, port)]]
        if link is not None:
            if link not in self.link_hosts:
                raise EnvironmentProblem(f"link {link} is emulated on no host")
            return self.link_hosts[link]
        return self.hosts

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        hosts, fields = self._routed(op, fields)
        replies = _answered(self.on_hosts(hosts, op, fields), hosts, op)
        if op == "counters":
            return merge_counters([replies[h] for h in hosts])
        return replies[hosts[0]]

    def request_at(self, due: float, requests: list[Request]) -> float:
        """Each host's part of ``requests`` (in their order), applied there at ``due``."""
        asked: dict[str, list[Request]] = {}
        for op, fields in requests:
            hosts, fields = self._routed(op, fields)
            for h in hosts:
                asked.setdefault(h, []).append((op, fields))
        if not asked:
            return due
        answers = self.at_hosts(asked, due)
        failed = {h: answers[h] for h in sorted(asked) if isinstance(answers[h], BaseException)}
        if failed:  # the row names every host that did not apply its part, and why
            raise EnvironmentProblem("; ".join(
                f"host {h} did not apply the change: {reason(exc)}" for h, exc in failed.items()
            )) from next(iter(failed.values()))  # fmt: skip
        return max(answers[h] for h in asked)

    def _routed(self, op: str, fields: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
        """The hosts a request goes to, and its fields as they go (a cut link's sending
        pipe keeps the underlay's time off its delay)."""
        hosts = self.targets(op, fields)
        if not hosts:
            raise EnvironmentProblem("no host of this experiment runs a link emulator")
        by_s = self.compensated.get((fields.get("link"), fields.get("port")))  # type: ignore[arg-type]
        if op == "set" and fields.get("direction") == "egress" and by_s:
            fields = {**fields, "params": less_delay(fields["params"], by_s)}
        return hosts, fields

    def close(self) -> None:
        """Nothing stays open: each request is its own task."""


def _answered(replies: dict[str, Any], hosts: list[str], op: str) -> dict[str, Any]:
    """The hosts' replies, once none of them is an exception (the first is raised; for
    ``counters``, which a status or a sample may do without, as an EnvironmentProblem
    naming its host, whatever it was: Dask's own too)."""
    for h in hosts:
        exc = replies[h]
        if isinstance(exc, BaseException):
            if op == "counters":
                raise EnvironmentProblem(f"host {h}: {reason(exc)}") from exc
            raise exc
    return replies


def merge_counters(replies: list[dict[str, Any]]) -> dict[str, Any]:
    """Several linkds' ``counters`` replies as one: every link's ports from every host,
    without the tunnel ports, and every host's threads (their lateness: validate's columns
    of linkd's own timing error, over every frame a link emulator sent)."""
    links: dict[str, Any] = {}
    threads: list[Any] = []
    for reply in replies:
        threads += reply.get("threads", [])
        for link, data in reply.get("links", {}).items():
            merged = links.setdefault(link, {**data, "ports": {}})
            for port, pipes in data.get("ports", {}).items():
                if port != TUNNEL_PORT:
                    merged["ports"][port] = pipes
    return {"ok": True, "links": links, "threads": threads}
