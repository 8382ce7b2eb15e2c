"""The netlink requests swap-in sends, packed by hand, are byte for byte what pyroute2's
message classes (which packed them before) encode."""

from __future__ import annotations

import socket
from typing import Any

from pyroute2.netlink import NLM_F_ACK, NLM_F_CREATE, NLM_F_EXCL, NLM_F_REQUEST
from pyroute2.netlink.rtnl import RTM_NEWADDR, RTM_NEWLINK, RTM_NEWROUTE
from pyroute2.netlink.rtnl.ifaddrmsg import ifaddrmsg
from pyroute2.netlink.rtnl.ifinfmsg import ifinfmsg
from pyroute2.netlink.rtnl.rtmsg import rtmsg

from nestbed.backend import netlink

CREATE = NLM_F_CREATE | NLM_F_EXCL


def _ours(add: Any, *args: Any) -> bytes:
    batch = netlink.Batch(None)  # type: ignore[arg-type]
    add(batch, *args, "a test request")
    [request] = batch.queue
    return request


def _theirs(msg: Any, kind: int, flags: int = 0) -> bytes:
    msg["header"]["type"] = kind
    msg["header"]["flags"] = NLM_F_REQUEST | NLM_F_ACK | flags
    msg["header"]["sequence_number"] = 1
    msg.encode()
    return bytes(msg.data)


def _link(index: int, attrs: list[Any], up: bool = False) -> ifinfmsg:
    msg = ifinfmsg()
    msg["index"] = index
    if up:
        msg["flags"] = msg["change"] = 1
    msg["attrs"] = attrs
    return msg


def test_link_requests_are_pyroute2s():
    peer = {"index": 7, "attrs": [("IFLA_IFNAME", "n1-l0"), ("IFLA_NET_NS_FD", 12)]}
    info = [("IFLA_INFO_KIND", "veth"), ("IFLA_INFO_DATA", {"attrs": [("VETH_INFO_PEER", peer)]})]
    veth = _link(5, [("IFLA_IFNAME", "f-n0-l0"), ("IFLA_LINKINFO", {"attrs": info})])
    assert _ours(netlink.add_veth, 5, "f-n0-l0", 7, "n1-l0", 12) == _theirs(
        veth, RTM_NEWLINK, CREATE
    )
    info = [("IFLA_INFO_KIND", "bridge"), ("IFLA_INFO_DATA", {"attrs": [("IFLA_BR_STP_STATE", 0)]})]
    bridge = _link(9, [("IFLA_IFNAME", "br-lan0"), ("IFLA_LINKINFO", {"attrs": info})], up=True)
    assert _ours(netlink.add_bridge, 9, "br-lan0") == _theirs(bridge, RTM_NEWLINK, CREATE)
    assert _ours(netlink.set_up, 3) == _theirs(_link(3, [], up=True), RTM_NEWLINK)
    master = _link(4, [("IFLA_MASTER", 9)])
    assert _ours(netlink.set_master, 4, 9) == _theirs(master, RTM_NEWLINK)
    alt = _link(1, [("IFLA_PROP_LIST", {"attrs": [("IFLA_ALT_IFNAME", "nestbed.exp.a.b")]})])
    ours = _ours(netlink.add_altname, 1, "nestbed.exp.a.b")
    assert ours == _theirs(alt, netlink.RTM_NEWLINKPROP, CREATE)


def test_address_and_route_requests_are_pyroute2s():
    for cidr, broadcast in (("10.1.2.3/24", "10.1.2.255"), ("10.9.0.1/31", None)):
        msg = ifaddrmsg()
        msg["family"], msg["index"] = socket.AF_INET, 6
        msg["prefixlen"] = int(cidr.split("/")[1])
        address = cidr.split("/")[0]
        msg["attrs"] = [("IFA_LOCAL", address), ("IFA_ADDRESS", address)] + (
            [("IFA_BROADCAST", broadcast)] if broadcast else []
        )
        assert _ours(netlink.add_address, 6, cidr) == _theirs(msg, RTM_NEWADDR, CREATE)
    for destination, length in (("default", 0), ("10.2.0.0/16", 16)):
        msg = rtmsg()
        msg["family"], msg["dst_len"], msg["table"] = socket.AF_INET, length, 254
        msg["proto"], msg["scope"], msg["type"] = 3, 0, 1
        attrs: list[Any] = [("RTA_GATEWAY", "10.1.1.2")]
        if length:
            attrs.insert(0, ("RTA_DST", destination.split("/")[0]))
        msg["attrs"] = attrs
        ours = _ours(netlink.add_route, destination, "10.1.1.2")
        assert ours == _theirs(msg, RTM_NEWROUTE, CREATE)
