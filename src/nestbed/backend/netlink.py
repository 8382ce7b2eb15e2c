"""Batched rtnetlink requests for swap-in: many requests per system call, each acknowledged.

pyroute2's request layer costs about half a millisecond of Python per request, and a
1000-node swap-in sends tens of thousands. Its message classes encode a request in tens of
microseconds, so requests are built with them here and sent together over a plain netlink
socket; the kernel carries them out in order and acknowledges each, and a refusal names the
request it refused.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct
from typing import Any

from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP, NLM_F_EXCL, NLM_F_REQUEST
from pyroute2.netlink.rtnl import RTM_GETLINK, RTM_NEWADDR, RTM_NEWLINK, RTM_NEWROUTE
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

RTM_NEWLINKPROP = 108
NETLINK_CAP_ACK = 10  # acknowledgements without a copy of the request
NETLINK_EXT_ACK = 11  # errors with the kernel's explanation
SOL_NETLINK = 270
NLMSG_ERROR = 2
NLMSG_DONE = 3
NLM_F_ACK_TLVS = 0x200
NLMSGERR_ATTR_MSG = 1
IFF_UP = 1
IFLA_PROP_LIST = 52
IFLA_ALT_IFNAME = 53
LOOPBACK_INDEX = 1  # fixed by the kernel in every namespace
_HEADER = struct.Struct("IHHII")  # nlmsghdr: length, type, flags, sequence, port
# Requests per system call: each acknowledgement occupies about 1 KiB of the receive buffer
# (its skb), which must hold all of a chunk's.
_CHUNK = 128
_RECEIVE_BUFFER = 1 << 20
SO_RCVBUFFORCE = 33


class Refused(OSError):
    """The kernel refused a request (netlink, or a sysctl write); ``str`` names the request
    and the reason, to follow "failed while"."""

    def __str__(self) -> str:
        return str(self.strerror)


def open_socket() -> socket.socket:
    """A route netlink socket in the calling thread's network namespace."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE)
    sock.setsockopt(SOL_NETLINK, NETLINK_CAP_ACK, 1)
    sock.setsockopt(SOL_NETLINK, NETLINK_EXT_ACK, 1)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, _RECEIVE_BUFFER)  # beyond rmem_max
    except PermissionError:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, _RECEIVE_BUFFER)
    sock.bind((0, 0))
    return sock


class Batch:
    """Requests to one namespace's netlink socket, queued and sent by ``flush``."""

    def __init__(self, sock: socket.socket):
        self.sock = sock
        self.queue: list[bytes] = []
        self.what: dict[int, str] = {}
        self.sequence = 0

    def add(self, msg: Any, msg_type: int, what: str, flags: int = 0) -> None:
        """Queues ``msg``; ``what`` describes it for an error ("adding route ... on node a")."""
        self.sequence += 1
        msg["header"]["type"] = msg_type
        msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK | flags
        msg["header"]["sequence_number"] = self.sequence
        msg.encode()
        self.queue.append(bytes(msg.data))
        self.what[self.sequence] = what

    def flush(self) -> None:
        """Sends every queued request and waits for each acknowledgement; raises ``Refused``
        for the first request the kernel refused (it still carries out the later ones)."""
        refusals: list[Refused] = []
        while self.queue:
            chunk, self.queue = self.queue[:_CHUNK], self.queue[_CHUNK:]
            self.sock.sendall(b"".join(chunk))
            pending = {_HEADER.unpack_from(m)[3] for m in chunk}
            while pending:
                refusals += self._acknowledged(self.sock.recv(1 << 20), pending)
        self.what.clear()
        if refusals:
            raise refusals[0]

    def _acknowledged(self, data: bytes, pending: set[int]) -> list[Refused]:
        refusals = []
        offset = 0
        while offset + _HEADER.size <= len(data):
            length, kind, flags, sequence, _ = _HEADER.unpack_from(data, offset)
            if kind == NLMSG_ERROR and sequence in pending:
                pending.discard(sequence)
                (code,) = struct.unpack_from("i", data, offset + _HEADER.size)
                if code:
                    body = data[offset + _HEADER.size * 2 + 4 : offset + length]
                    reason = os.strerror(-code)
                    detail = _ext_ack_message(body) if flags & NLM_F_ACK_TLVS else ""
                    if detail:
                        reason += f" ({detail})"
                    refusals.append(Refused(-code, f"{self.what[sequence]}: {reason}"))
            offset += (length + 3) & ~3
        return refusals

    def max_index(self) -> int:
        """The highest interface index in the namespace now (a new one has lo and perhaps
        the fallback devices of tunnel modules)."""
        msg = ifinfmsg()
        msg["header"]["type"] = RTM_GETLINK
        msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_DUMP
        msg.encode()
        self.sock.sendall(bytes(msg.data))
        highest = LOOPBACK_INDEX
        while True:
            data = self.sock.recv(1 << 20)
            offset = 0
            while offset + _HEADER.size <= len(data):
                length, kind, *_ = _HEADER.unpack_from(data, offset)
                if kind == NLMSG_DONE:
                    return highest
                if kind == NLMSG_ERROR:
                    (code,) = struct.unpack_from("i", data, offset + _HEADER.size)
                    raise OSError(-code or errno.EIO, "listing the interfaces failed")
                if kind == RTM_NEWLINK:
                    (index,) = struct.unpack_from("i", data, offset + _HEADER.size + 4)
                    highest = max(highest, index)
                offset += (length + 3) & ~3


def altnames(sock: socket.socket, index: int) -> list[str]:
    """The alternative names of interface ``index`` in the socket's namespace."""
    msg = ifinfmsg()
    msg["index"] = index
    msg["header"]["type"] = RTM_GETLINK
    msg["header"]["flags"] = NLM_F_REQUEST
    msg.encode()
    sock.sendall(bytes(msg.data))
    data = sock.recv(1 << 20)
    _, kind, *_ = _HEADER.unpack_from(data)
    if kind == NLMSG_ERROR:
        (code,) = struct.unpack_from("i", data, _HEADER.size)
        raise OSError(-code, f"no interface {index}")
    # The attributes follow the header and the 16-byte ifinfomsg; walked by hand because
    # decoding the whole message costs a millisecond.
    props = _attributes(data[_HEADER.size + 16 :]).get(IFLA_PROP_LIST, b"")
    return [
        value.split(b"\0")[0].decode()
        for kind, value in _attribute_list(props)
        if kind == IFLA_ALT_IFNAME
    ]


def _attribute_list(data: bytes) -> list[tuple[int, bytes]]:
    """Netlink attributes (type without its flag bits, value) in order."""
    found = []
    offset = 0
    while offset + 4 <= len(data):
        length, kind = struct.unpack_from("HH", data, offset)
        if length < 4:
            break
        found.append((kind & 0x3FFF, data[offset + 4 : offset + length]))
        offset += (length + 3) & ~3
    return found


def _attributes(data: bytes) -> dict[int, bytes]:
    return dict(_attribute_list(data))


def _ext_ack_message(attrs: bytes) -> str:
    message = _attributes(attrs).get(NLMSGERR_ATTR_MSG, b"")
    return message.split(b"\0")[0].decode(errors="replace")


def _link(index: int, attrs: list[Any], up: bool = False) -> ifinfmsg:
    msg = ifinfmsg()
    msg["index"] = index
    if up:
        msg["flags"] = msg["change"] = IFF_UP
    msg["attrs"] = attrs
    return msg


def add_veth(
    batch: Batch, index: int, ifname: str, peer_index: int, peer_ifname: str, peer_fd: int,
    what: str,
) -> None:  # fmt: skip
    """A veth pair, the peer moved into the namespace open at ``peer_fd``; both ends down
    (veth refuses to come up before its pair exists, so not in the same request).

    Both indexes are chosen by the caller (the kernel honours the peer's when the first is
    given), so no lookup is needed afterwards.
    """
    peer = {
        "index": peer_index,
        "attrs": [("IFLA_IFNAME", peer_ifname), ("IFLA_NET_NS_FD", peer_fd)],
    }
    info = [("IFLA_INFO_KIND", "veth"), ("IFLA_INFO_DATA", {"attrs": [("VETH_INFO_PEER", peer)]})]
    msg = _link(index, [("IFLA_IFNAME", ifname), ("IFLA_LINKINFO", {"attrs": info})])
    batch.add(msg, RTM_NEWLINK, what, NLM_F_CREATE | NLM_F_EXCL)


def add_bridge(batch: Batch, index: int, ifname: str, what: str) -> None:
    """A bridge without spanning tree, up."""
    info = [("IFLA_INFO_KIND", "bridge"), ("IFLA_INFO_DATA", {"attrs": [("IFLA_BR_STP_STATE", 0)]})]
    msg = _link(index, [("IFLA_IFNAME", ifname), ("IFLA_LINKINFO", {"attrs": info})], up=True)
    batch.add(msg, RTM_NEWLINK, what, NLM_F_CREATE | NLM_F_EXCL)


def set_up(batch: Batch, index: int, what: str) -> None:
    batch.add(_link(index, [], up=True), RTM_NEWLINK, what)


def set_master(batch: Batch, index: int, master: int, what: str) -> None:
    batch.add(_link(index, [("IFLA_MASTER", master)]), RTM_NEWLINK, what)


def add_altname(batch: Batch, index: int, altname: str, what: str) -> None:
    attrs = [("IFLA_PROP_LIST", {"attrs": [("IFLA_ALT_IFNAME", altname)]})]
    batch.add(_link(index, attrs), RTM_NEWLINKPROP, what, NLM_F_CREATE | NLM_F_EXCL)


def add_address(batch: Batch, index: int, cidr: str, what: str) -> None:
    interface = ipaddress.IPv4Interface(cidr)
    msg = ifaddrmsg()
    msg["family"] = socket.AF_INET
    msg["prefixlen"] = interface.network.prefixlen
    msg["index"] = index
    address = str(interface.ip)
    attrs = [("IFA_LOCAL", address), ("IFA_ADDRESS", address)]
    if interface.network.prefixlen < 31:
        attrs.append(("IFA_BROADCAST", str(interface.network.broadcast_address)))
    msg["attrs"] = attrs
    batch.add(msg, RTM_NEWADDR, what, NLM_F_CREATE | NLM_F_EXCL)


def add_route(batch: Batch, destination: str, gateway: str, what: str) -> None:
    """A unicast route in the main table; ``destination`` is a prefix or "default"."""
    network = ipaddress.IPv4Network("0.0.0.0/0" if destination == "default" else destination)
    msg = rtmsg()
    msg["family"] = socket.AF_INET
    msg["dst_len"] = network.prefixlen
    msg["table"] = 254  # main
    msg["proto"] = 3  # boot, as `ip route add`
    msg["scope"] = 0  # universe
    msg["type"] = 1  # unicast
    attrs: list[Any] = [("RTA_GATEWAY", gateway)]
    if network.prefixlen:
        attrs.insert(0, ("RTA_DST", str(network.network_address)))
    msg["attrs"] = attrs
    batch.add(msg, RTM_NEWROUTE, what, NLM_F_CREATE | NLM_F_EXCL)
