"""Turning interface offloads off with one SIOCETHTOOL ioctl (ETHTOOL_SFEATURES) per interface.

pyroute2's Ethtool re-reads the kernel's feature names and opens a generic-netlink socket for
every interface (about 5 ms each, half of a 100-node swap-in); the names are the same for every
device, so they are read once here and each interface then costs one system call.
"""

from __future__ import annotations

import ctypes
import fcntl
import functools
import socket
import struct
from collections.abc import Iterable

SIOCETHTOOL = 0x8946
ETHTOOL_GSSET_INFO = 0x37
ETHTOOL_GSTRINGS = 0x1B
ETHTOOL_SFEATURES = 0x3B
ETH_SS_FEATURES = 4
ETH_GSTRING_LEN = 32
IFREQ_SIZE = 40  # struct ifreq on 64-bit Linux: 16-byte name, then the data pointer


def _ethtool(sock: socket.socket, ifname: str, data: ctypes.Array[ctypes.c_char]) -> None:
    """One SIOCETHTOOL request; the kernel reads and writes ``data`` in place."""
    ifreq = struct.pack("16sP", ifname.encode(), ctypes.addressof(data))
    fcntl.ioctl(sock.fileno(), SIOCETHTOOL, ifreq.ljust(IFREQ_SIZE, b"\0"))


@functools.cache
def feature_bits() -> dict[str, int]:
    """The kernel's netdev feature names and their bit numbers (same for every device)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        info = ctypes.create_string_buffer(struct.pack("IIQI", ETHTOOL_GSSET_INFO, 0,
                                                       1 << ETH_SS_FEATURES, 0))  # fmt: skip
        _ethtool(sock, "lo", info)
        count = struct.unpack_from("I", info, 16)[0]
        strings = ctypes.create_string_buffer(12 + count * ETH_GSTRING_LEN)
        struct.pack_into("III", strings, 0, ETHTOOL_GSTRINGS, ETH_SS_FEATURES, count)
        _ethtool(sock, "lo", strings)
    raw = strings.raw[12:]
    return {
        raw[i * ETH_GSTRING_LEN : (i + 1) * ETH_GSTRING_LEN].split(b"\0")[0].decode(): i
        for i in range(count)
    }


def turn_off(ifnames: Iterable[str], features: Iterable[str]) -> None:
    """Turns ``features`` off on each interface of the calling thread's network namespace.

    Features the kernel does not know are skipped; ones a device cannot change stay as they
    are (veth can change all that nestbed turns off).
    """
    bits = feature_bits()
    blocks = (max(bits.values()) + 32) // 32
    words = [0] * blocks
    for name in features:
        if name in bits:
            words[bits[name] // 32] |= 1 << (bits[name] % 32)
    # Each block is (valid, requested): valid marks the features to change, requested 0 = off.
    request = struct.pack("II", ETHTOOL_SFEATURES, blocks)
    request += b"".join(struct.pack("II", w, 0) for w in words)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        for ifname in ifnames:
            _ethtool(sock, ifname, ctypes.create_string_buffer(request, len(request)))
