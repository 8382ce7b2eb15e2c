"""Batched rtnetlink requests for swap-in: many requests per system call, each acknowledged.

pyroute2's request layer costs about half a millisecond of Python per request, and a
1000-node swap-in sends tens of thousands; even its message classes took a third of a 100-node
swap-in to encode them. Requests are packed here with struct (the same bytes, checked against
pyroute2's encoding in tests/backend/test_netlink.py) and sent together over a plain netlink
socket; the kernel carries them out in order and acknowledges each, and a refusal names the
request it refused.
"""

from __future__ import annotations

import errno
import ipaddress
import os
import socket
import struct

NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 0x1, 0x4, 0x300
NLM_F_EXCL, NLM_F_CREATE = 0x200, 0x400
RTM_NEWLINK, RTM_GETLINK, RTM_NEWADDR, RTM_NEWROUTE = 16, 18, 20, 24
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

    def add(self, body: bytes, msg_type: int, what: str, flags: int = 0) -> None:
        """Queues a request (its body after the header); ``what`` describes it for an error
        ("adding route ... on node a")."""
        self.sequence += 1
        header = _HEADER.pack(_HEADER.size + len(body), msg_type,
                              NLM_F_REQUEST | NLM_F_ACK | flags, self.sequence, 0)  # fmt: skip
        self.queue.append(header + body)
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
        self.sock.sendall(_request(RTM_GETLINK, NLM_F_REQUEST | NLM_F_DUMP, _link(0)))
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
    sock.sendall(_request(RTM_GETLINK, NLM_F_REQUEST, _link(index)))
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


def _request(msg_type: int, flags: int, body: bytes) -> bytes:
    return _HEADER.pack(_HEADER.size + len(body), msg_type, flags, 0, 0) + body


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


_IFINFO = struct.Struct("BxHiII")  # ifinfomsg: family, type, index, flags, change
_IFADDR = struct.Struct("BBBBI")  # ifaddrmsg: family, prefixlen, flags, scope, index
_RTMSG = struct.Struct("BBBBBBBBI")  # rtmsg: family, dst_len, src_len, tos, table, proto,
#                                        scope, type, flags
IFLA_IFNAME, IFLA_MASTER, IFLA_LINKINFO, IFLA_NET_NS_FD = 3, 10, 18, 28
IFLA_INFO_KIND, IFLA_INFO_DATA, VETH_INFO_PEER, IFLA_BR_STP_STATE = 1, 2, 1, 5
IFA_ADDRESS, IFA_LOCAL, IFA_BROADCAST = 1, 2, 4
RTA_DST, RTA_OIF, RTA_GATEWAY = 1, 4, 5
NLA_F_NESTED = 0x8000  # the kernel's newer nested attributes (the property list) say so


def _attr(kind: int, value: bytes) -> bytes:
    """One netlink attribute, padded to four bytes (nested ones are attributes as value)."""
    length = 4 + len(value)
    return struct.pack("HH", length, kind) + value + b"\0" * (-length % 4)


def _name(text: str) -> bytes:
    return text.encode() + b"\0"


def _u32(value: int) -> bytes:
    return struct.pack("I", value)


def _ipv4(address: str) -> bytes:
    return socket.inet_aton(address)


def _link(index: int, attrs: bytes = b"", up: bool = False) -> bytes:
    flags = IFF_UP if up else 0
    return _IFINFO.pack(socket.AF_UNSPEC, 0, index, flags, flags) + attrs


def add_veth(
    batch: Batch, index: int, ifname: str, peer_index: int, peer_ifname: str, peer_fd: int,
    what: str,
) -> None:  # fmt: skip
    """A veth pair, the peer moved into the namespace open at ``peer_fd``; both ends down
    (veth refuses to come up before its pair exists, so not in the same request).

    Both indexes are chosen by the caller (the kernel honours the peer's when the first is
    given), so no lookup is needed afterwards.
    """
    peer = _link(peer_index, _attr(IFLA_IFNAME, _name(peer_ifname))
                 + _attr(IFLA_NET_NS_FD, _u32(peer_fd)))  # fmt: skip
    info = _attr(IFLA_INFO_KIND, _name("veth")) + _attr(IFLA_INFO_DATA, _attr(VETH_INFO_PEER, peer))
    msg = _link(index, _attr(IFLA_IFNAME, _name(ifname)) + _attr(IFLA_LINKINFO, info))
    batch.add(msg, RTM_NEWLINK, what, NLM_F_CREATE | NLM_F_EXCL)


def add_bridge(batch: Batch, index: int, ifname: str, what: str) -> None:
    """A bridge without spanning tree, up."""
    info = _attr(IFLA_INFO_KIND, _name("bridge")) + _attr(
        IFLA_INFO_DATA, _attr(IFLA_BR_STP_STATE, _u32(0))
    )
    attrs = _attr(IFLA_IFNAME, _name(ifname)) + _attr(IFLA_LINKINFO, info)
    batch.add(_link(index, attrs, up=True), RTM_NEWLINK, what, NLM_F_CREATE | NLM_F_EXCL)


def set_up(batch: Batch, index: int, what: str) -> None:
    batch.add(_link(index, up=True), RTM_NEWLINK, what)


def set_master(batch: Batch, index: int, master: int, what: str) -> None:
    batch.add(_link(index, _attr(IFLA_MASTER, _u32(master))), RTM_NEWLINK, what)


def add_altname(batch: Batch, index: int, altname: str, what: str) -> None:
    attrs = _attr(IFLA_PROP_LIST | NLA_F_NESTED, _attr(IFLA_ALT_IFNAME, _name(altname)))
    batch.add(_link(index, attrs), RTM_NEWLINKPROP, what, NLM_F_CREATE | NLM_F_EXCL)


def add_address(batch: Batch, index: int, cidr: str, what: str) -> None:
    interface = ipaddress.IPv4Interface(cidr)
    prefix = interface.network.prefixlen
    address = _ipv4(str(interface.ip))
    attrs = _attr(IFA_LOCAL, address) + _attr(IFA_ADDRESS, address)
    if prefix < 31:
        attrs += _attr(IFA_BROADCAST, _ipv4(str(interface.network.broadcast_address)))
    msg = _IFADDR.pack(socket.AF_INET, prefix, 0, 0, index) + attrs
    batch.add(msg, RTM_NEWADDR, what, NLM_F_CREATE | NLM_F_EXCL)


def add_route(
    batch: Batch, destination: str, gateway: str, what: str, oif: int | None = None
) -> None:
    """A unicast route in the main table (proto boot, as `ip route add`); ``destination`` is
    a prefix or "default". With ``oif`` and no ``gateway``, a route on that interface's link
    (scope link); otherwise through ``gateway`` (scope universe)."""
    network = ipaddress.IPv4Network("0.0.0.0/0" if destination == "default" else destination)
    attrs = _attr(RTA_GATEWAY, _ipv4(gateway)) if gateway else b""
    if oif is not None:
        attrs += _attr(RTA_OIF, _u32(oif))
    if network.prefixlen:
        attrs = _attr(RTA_DST, _ipv4(str(network.network_address))) + attrs
    scope = 0 if gateway else 253  # RT_SCOPE_UNIVERSE, RT_SCOPE_LINK
    msg = _RTMSG.pack(socket.AF_INET, network.prefixlen, 0, 0, 254, 3, scope, 1, 0) + attrs
    batch.add(msg, RTM_NEWROUTE, what, NLM_F_CREATE | NLM_F_EXCL)
