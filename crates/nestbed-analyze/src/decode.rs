//! One record → one TCP segment, or the [`Reason`] it cannot be used.
//!
//! Link layers: Ethernet (with 802.1Q/802.1ad tags), Linux cooked v1 (SLL) and v2 (SLL2), raw
//! IP (LINKTYPE_RAW, IPV4, IPV6 and the DLT_RAW numbers 12 and 14), BSD loopback (NULL, LOOP).
//! IPv4 and IPv6 headers (with extension headers) and the TCP header are read with
//! `etherparse`. Lengths come from the IP header, not from the captured bytes, so a record
//! cut by the snapshot length still counts its full payload as long as its TCP header is whole.

use std::net::IpAddr;

use etherparse::err::{ipv4, ipv6, ipv6_exts, tcp};
use etherparse::{
    ip_number, Ipv4HeaderSlice, Ipv6ExtensionsSlice, Ipv6HeaderSlice, TcpHeaderSlice,
    TcpOptionElement,
};

use crate::reason::Reason;

/// TCP flag bits as in the header's 13th byte.
pub mod flags {
    /// FIN.
    pub const FIN: u8 = 0x01;
    /// SYN.
    pub const SYN: u8 = 0x02;
    /// RST.
    pub const RST: u8 = 0x04;
    /// ACK.
    pub const ACK: u8 = 0x10;
}

/// The fields of a TCP segment the analysis uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
    /// Sequence number.
    pub seq: u32,
    /// Acknowledgment number (meaningful when [`flags::ACK`] is set).
    pub ack: u32,
    /// FIN, SYN, RST, ACK bits ([`flags`]).
    pub flags: u8,
    /// The window field, unscaled.
    pub window: u16,
    /// The window-scale option (SYN segments only).
    pub wscale: Option<u8>,
    /// TCP payload bytes according to the IP header.
    pub payload_len: u32,
    /// IP packet bytes (headers included) according to the IP header.
    pub ip_len: u32,
    /// The snapshot length cut the payload (the segment is still usable).
    pub payload_truncated: bool,
}

impl Segment {
    /// Whether flag bit(s) `f` are set.
    pub fn has(&self, f: u8) -> bool {
        self.flags & f == f
    }
}

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const VLAN_TAGS: [u16; 3] = [0x8100, 0x88a8, 0x9100];

/// Decodes a record of link type `linktype`; `orig_len` is its length on the wire.
pub fn decode(linktype: u32, data: &[u8], orig_len: u32) -> Result<Segment, Reason> {
    let (ethertype, offset) = link(linktype, data)?;
    let ip = &data[offset..];
    let wire_ip_len = (orig_len as usize).saturating_sub(offset);
    match ethertype {
        ETHERTYPE_IPV4 => ipv4(ip, wire_ip_len),
        ETHERTYPE_IPV6 => ipv6(ip, wire_ip_len),
        _ => Err(Reason::NotIp),
    }
}

fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

/// The ethertype of the network layer and where it starts.
fn link(linktype: u32, data: &[u8]) -> Result<(u16, usize), Reason> {
    let need = |n: usize| {
        if data.len() < n {
            Err(Reason::TruncatedLinkHeader)
        } else {
            Ok(())
        }
    };
    match linktype {
        // Ethernet, possibly VLAN-tagged.
        1 => {
            need(14)?;
            let (mut ethertype, mut offset) = (be16(data, 12), 14);
            while VLAN_TAGS.contains(&ethertype) {
                need(offset + 4)?;
                ethertype = be16(data, offset + 2);
                offset += 4;
            }
            Ok((ethertype, offset))
        }
        // Linux cooked capture v1: 16 bytes, protocol last.
        113 => {
            need(16)?;
            Ok((be16(data, 14), 16))
        }
        // Linux cooked capture v2: 20 bytes, protocol first.
        276 => {
            need(20)?;
            Ok((be16(data, 0), 20))
        }
        // Raw IP: the version nibble says which.
        101 | 12 | 14 => {
            need(1)?;
            match data[0] >> 4 {
                4 => Ok((ETHERTYPE_IPV4, 0)),
                6 => Ok((ETHERTYPE_IPV6, 0)),
                _ => Err(Reason::NotIp),
            }
        }
        228 => Ok((ETHERTYPE_IPV4, 0)),
        229 => Ok((ETHERTYPE_IPV6, 0)),
        // BSD loopback: a 4-byte address family, host order (NULL) or network order (LOOP).
        0 | 108 => {
            need(4)?;
            let family = if linktype == 0 {
                let le = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
                let be = u32::from_be_bytes([data[0], data[1], data[2], data[3]]);
                le.min(be)
            } else {
                u32::from_be_bytes([data[0], data[1], data[2], data[3]])
            };
            match family {
                2 => Ok((ETHERTYPE_IPV4, 4)),
                24 | 28 | 30 => Ok((ETHERTYPE_IPV6, 4)),
                _ => Err(Reason::NotIp),
            }
        }
        _ => Err(Reason::UnsupportedLinkType),
    }
}

fn ipv4(ip: &[u8], wire_ip_len: usize) -> Result<Segment, Reason> {
    let h = Ipv4HeaderSlice::from_slice(ip).map_err(|e| match e {
        ipv4::HeaderSliceError::Len(_) => Reason::TruncatedIpHeader,
        ipv4::HeaderSliceError::Content(_) => Reason::BadIpHeader,
    })?;
    let header_len = usize::from(h.ihl()) * 4;
    // A total length of 0 is what segmentation offload leaves in captures of large sends.
    let total = match usize::from(h.total_len()) {
        0 => wire_ip_len,
        n => n,
    };
    if total < header_len {
        return Err(Reason::BadIpHeader);
    }
    if h.more_fragments() || h.fragments_offset().value() != 0 {
        return Err(Reason::IpFragment);
    }
    if h.protocol() != ip_number::TCP {
        return Err(Reason::NotTcp);
    }
    let end = total.min(ip.len());
    let l4 = ip.get(header_len..end).unwrap_or(&[]);
    let (src, dst) = (
        IpAddr::V4(h.source_addr()),
        IpAddr::V4(h.destination_addr()),
    );
    tcp(src, dst, l4, total - header_len, total)
}

fn ipv6(ip: &[u8], wire_ip_len: usize) -> Result<Segment, Reason> {
    let h = Ipv6HeaderSlice::from_slice(ip).map_err(|e| match e {
        ipv6::HeaderSliceError::Len(_) => Reason::TruncatedIpHeader,
        ipv6::HeaderSliceError::Content(_) => Reason::BadIpHeader,
    })?;
    // A payload length of 0 is a jumbogram or an offloaded send: take the wire length.
    let payload = match usize::from(h.payload_length()) {
        0 => wire_ip_len.saturating_sub(40),
        n => n,
    };
    let total = 40 + payload;
    let after = ip.get(40..total.min(ip.len())).unwrap_or(&[]);
    let (exts, next, l4) =
        Ipv6ExtensionsSlice::from_slice(h.next_header(), after).map_err(|e| match e {
            ipv6_exts::HeaderSliceError::Len(_) => Reason::TruncatedIpHeader,
            ipv6_exts::HeaderSliceError::Content(_) => Reason::BadIpHeader,
        })?;
    if exts.is_fragmenting_payload() {
        return Err(Reason::IpFragment);
    }
    if next != ip_number::TCP {
        return Err(Reason::NotTcp);
    }
    let ext_len = exts.slice().len();
    let (src, dst) = (
        IpAddr::V6(h.source_addr()),
        IpAddr::V6(h.destination_addr()),
    );
    tcp(src, dst, l4, payload.saturating_sub(ext_len), total)
}

/// The TCP header in `l4` (the captured part of a segment of `seg_len` bytes).
fn tcp(
    src: IpAddr,
    dst: IpAddr,
    l4: &[u8],
    seg_len: usize,
    ip_len: usize,
) -> Result<Segment, Reason> {
    let t = TcpHeaderSlice::from_slice(l4).map_err(|e| match e {
        tcp::HeaderSliceError::Len(_) if l4.len() < seg_len => Reason::TruncatedTcpHeader,
        tcp::HeaderSliceError::Len(_) | tcp::HeaderSliceError::Content(_) => Reason::BadTcpHeader,
    })?;
    let header_len = t.slice().len();
    if header_len > seg_len {
        return Err(Reason::BadTcpHeader);
    }
    let flags = t.slice()[13] & (flags::FIN | flags::SYN | flags::RST | flags::ACK);
    let wscale = if flags & flags::SYN != 0 {
        t.options_iterator().find_map(|o| match o {
            Ok(TcpOptionElement::WindowScale(s)) => Some(s),
            _ => None,
        })
    } else {
        None
    };
    let payload_len = seg_len - header_len;
    Ok(Segment {
        src,
        dst,
        sport: t.source_port(),
        dport: t.destination_port(),
        seq: t.sequence_number(),
        ack: t.acknowledgment_number(),
        flags,
        window: t.window_size(),
        wscale,
        payload_len: payload_len as u32,
        ip_len: ip_len as u32,
        payload_truncated: l4.len() < seg_len,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use etherparse::PacketBuilder;

    fn eth_tcp(payload: &[u8]) -> Vec<u8> {
        let b = PacketBuilder::ethernet2([1; 6], [2; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .tcp(1000, 80, 7, 65535)
            .ack(9);
        let mut out = Vec::new();
        b.write(&mut out, payload).unwrap();
        out
    }

    #[test]
    fn ethernet_ipv4_tcp_fields() {
        let pkt = eth_tcp(&[0u8; 100]);
        let s = decode(1, &pkt, pkt.len() as u32).unwrap();
        assert_eq!((s.sport, s.dport, s.seq, s.ack), (1000, 80, 7, 9));
        assert_eq!(s.payload_len, 100);
        assert_eq!(s.ip_len, 140);
        assert!(s.has(flags::ACK) && !s.has(flags::SYN));
        assert!(!s.payload_truncated);
    }

    #[test]
    fn snaplen_cut_keeps_the_payload_length_of_the_ip_header() {
        let pkt = eth_tcp(&[0u8; 1000]);
        let s = decode(1, &pkt[..54 + 10], pkt.len() as u32).unwrap();
        assert_eq!(s.payload_len, 1000);
        assert!(s.payload_truncated);
        assert_eq!(
            decode(1, &pkt[..14 + 20 + 10], pkt.len() as u32),
            Err(Reason::TruncatedTcpHeader)
        );
        assert_eq!(
            decode(1, &pkt[..14 + 10], pkt.len() as u32),
            Err(Reason::TruncatedIpHeader)
        );
        assert_eq!(
            decode(1, &pkt[..10], pkt.len() as u32),
            Err(Reason::TruncatedLinkHeader)
        );
    }

    #[test]
    fn vlan_tag_is_skipped() {
        let pkt = eth_tcp(b"x");
        let mut tagged = pkt[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
        tagged.extend_from_slice(&pkt[12..]);
        let s = decode(1, &tagged, tagged.len() as u32).unwrap();
        assert_eq!(s.payload_len, 1);
    }

    #[test]
    fn non_ip_and_unknown_link_types_are_named() {
        let mut arp = eth_tcp(b"");
        arp[12] = 0x08;
        arp[13] = 0x06;
        assert_eq!(decode(1, &arp, arp.len() as u32), Err(Reason::NotIp));
        assert_eq!(
            decode(105, &arp, arp.len() as u32),
            Err(Reason::UnsupportedLinkType)
        );
    }
}
