//! Sizes on the wire: how many bytes one probe datagram occupies on an Ethernet link.
//!
//! `--rate` paces on this size, the same one a link emulator's bandwidth stage serializes:
//! UDP payload + 8 (UDP) + 20 (IPv4; 40 for IPv6) + 14 (Ethernet header), padded to Ethernet's
//! 60-byte minimum, + 24 (4 FCS + 7 preamble + 1 start-of-frame delimiter + 12 inter-frame gap).
//! A 12-byte payload is therefore 84 bytes on the wire (a minimum 64-byte frame) and a 1472-byte
//! payload is 1538 (a full 1518-byte frame). Payloads larger than the path MTU are fragmented by
//! IP; this count assumes one frame per datagram.

/// UDP header.
pub const UDP_HEADER: u64 = 8;
/// IPv4 header without options.
pub const IPV4_HEADER: u64 = 20;
/// IPv6 fixed header.
pub const IPV6_HEADER: u64 = 40;
/// Ethernet header (destination, source, EtherType), no VLAN tag.
pub const ETHERNET_HEADER: u64 = 14;
/// Smallest Ethernet frame without its FCS; shorter frames are padded to this.
pub const ETHERNET_MIN_FRAME: u64 = 60;
/// FCS (4) + preamble (7) + start-of-frame delimiter (1) + inter-frame gap (12).
pub const ETHERNET_PHY_OVERHEAD: u64 = 24;

/// Largest UDP payload of one datagram.
pub fn max_payload(ipv6: bool) -> usize {
    if ipv6 {
        65_527
    } else {
        65_507
    }
}

/// Bytes one datagram with `payload` bytes of UDP payload occupies on an Ethernet wire.
pub fn wire_bytes(payload: usize, ipv6: bool) -> u64 {
    let ip = if ipv6 { IPV6_HEADER } else { IPV4_HEADER };
    let frame = (payload as u64 + UDP_HEADER + ip + ETHERNET_HEADER).max(ETHERNET_MIN_FRAME);
    frame + ETHERNET_PHY_OVERHEAD
}

/// One line for humans saying how `wire_bytes` was computed.
pub fn describe(payload: usize, ipv6: bool) -> String {
    let ip = if ipv6 { IPV6_HEADER } else { IPV4_HEADER };
    let unpadded = payload as u64 + UDP_HEADER + ip + ETHERNET_HEADER;
    let pad = ETHERNET_MIN_FRAME.saturating_sub(unpadded);
    let pad_text = if pad > 0 {
        format!(" + {pad} padding")
    } else {
        String::new()
    };
    format!(
        "{payload} B payload + 8 UDP + {ip} IP + 14 Ethernet{pad_text} + 24 FCS/preamble/gap = {} B on the wire",
        wire_bytes(payload, ipv6)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimum_and_full_frames() {
        assert_eq!(wire_bytes(12, false), 84);
        assert_eq!(wire_bytes(18, false), 84);
        assert_eq!(wire_bytes(19, false), 85);
        assert_eq!(wire_bytes(1472, false), 1538);
        assert_eq!(wire_bytes(1452, true), 1538);
    }

    #[test]
    fn description_names_padding() {
        assert_eq!(
            describe(12, false),
            "12 B payload + 8 UDP + 20 IP + 14 Ethernet + 6 padding + 24 FCS/preamble/gap = 84 B on the wire"
        );
        assert!(!describe(1000, false).contains("padding"));
    }
}
