//! Whole Ethernet frames around a probe datagram, for the packet-ring sender and receiver
//! (`send --ring`, `recv --ring`), which bypass the UDP stack: built and parsed here, with
//! no I/O, so both are tested on bytes.
//!
//! A frame is Ethernet (no VLAN tag) + IPv4 (20 bytes, no options, DF set, ID 0) + UDP
//! (checksum 0: none, which IPv4 allows) + the probe payload, padded to Ethernet's 60-byte
//! minimum: the bytes a UDP socket would have put on the wire for the same payload
//! ([`crate::wire::wire_bytes`] counts exactly these plus the 24 bytes of FCS, preamble and
//! gap), so a link's bandwidth stage charges a ring-sent datagram as it charges a socket's.

use std::net::{Ipv4Addr, SocketAddrV4};

use crate::wire;

/// A 48-bit MAC address.
pub type Mac = [u8; 6];

/// EtherType of IPv4.
pub const ETH_P_IP: u16 = 0x0800;
/// Where the UDP payload (the probe header first) starts in a frame built here.
pub const PAYLOAD_AT: usize = 14 + 20 + 8;
const UDP: u8 = 17;

/// Parses `aa:bb:cc:dd:ee:ff` (or with `-`).
pub fn parse_mac(s: &str) -> Result<Mac, String> {
    let parts: Vec<&str> = s.split([':', '-']).collect();
    let mut mac = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!(
            "{s:?} is not a MAC address (six hex bytes, e.g. 02:00:00:00:00:01)"
        ));
    }
    for (byte, part) in mac.iter_mut().zip(&parts) {
        *byte = u8::from_str_radix(part, 16)
            .ok()
            .filter(|_| part.len() == 2)
            .ok_or_else(|| {
                format!("{s:?} is not a MAC address (six hex bytes, e.g. 02:00:00:00:00:01)")
            })?;
    }
    Ok(mac)
}

/// The frame of every datagram of one flow, payload zero-filled: the sender copies it into a
/// slot and writes the probe header at [`PAYLOAD_AT`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    bytes: Vec<u8>,
}

impl Template {
    /// The frame from `src` (MAC, address) to `dst` carrying `payload` bytes of UDP payload
    /// with IP TTL `ttl`. `payload` must fit one IPv4 datagram (checked by the sender).
    pub fn new(
        src_mac: Mac,
        dst_mac: Mac,
        src: SocketAddrV4,
        dst: SocketAddrV4,
        payload: usize,
        ttl: u8,
    ) -> Template {
        let ip_len = 20 + 8 + payload;
        let len = (14 + ip_len).max(wire::ETHERNET_MIN_FRAME as usize);
        let mut b = vec![0u8; len];
        b[0..6].copy_from_slice(&dst_mac);
        b[6..12].copy_from_slice(&src_mac);
        b[12..14].copy_from_slice(&ETH_P_IP.to_be_bytes());
        let ip = &mut b[14..34];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        ip[6] = 0x40; // don't fragment
        ip[8] = ttl;
        ip[9] = UDP;
        ip[12..16].copy_from_slice(&src.ip().octets());
        ip[16..20].copy_from_slice(&dst.ip().octets());
        let sum = checksum(ip);
        ip[10..12].copy_from_slice(&sum.to_be_bytes());
        let udp = &mut b[34..42];
        udp[0..2].copy_from_slice(&src.port().to_be_bytes());
        udp[2..4].copy_from_slice(&dst.port().to_be_bytes());
        udp[4..6].copy_from_slice(&((8 + payload) as u16).to_be_bytes());
        Template { bytes: b }
    }

    /// The frame's bytes (without FCS).
    pub fn bytes(&self) -> &[u8] {
        &self.bytes
    }
}

/// The Internet checksum of an IPv4 header.
fn checksum(header: &[u8]) -> u16 {
    let mut sum: u32 = header
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

/// A UDP datagram found in a (possibly truncated) IPv4 frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Udp<'a> {
    /// Source address and port.
    pub src: SocketAddrV4,
    /// Destination address and port.
    pub dst: SocketAddrV4,
    /// UDP payload bytes, as the UDP header says.
    pub payload_len: usize,
    /// As much of the payload as the frame holds (a ring slot may cut it short).
    pub payload: &'a [u8],
}

/// The UDP datagram in `frame` (Ethernet, IPv4), or `None` for any other frame or a
/// fragment.
pub fn parse_udp4(frame: &[u8]) -> Option<Udp<'_>> {
    if frame.len() < 14 + 20 || frame[12..14] != ETH_P_IP.to_be_bytes() {
        return None;
    }
    let ip = &frame[14..];
    let ihl = usize::from(ip[0] & 0x0f) * 4;
    let fragment = u16::from_be_bytes([ip[6], ip[7]]) & 0x3fff != 0;
    if ip[0] >> 4 != 4 || ihl < 20 || ip[9] != UDP || fragment || ip.len() < ihl + 8 {
        return None;
    }
    let addr = |at: usize| Ipv4Addr::new(ip[at], ip[at + 1], ip[at + 2], ip[at + 3]);
    let udp = &ip[ihl..];
    let port = |at: usize| u16::from_be_bytes([udp[at], udp[at + 1]]);
    let payload_len = usize::from(port(4)).checked_sub(8)?;
    let payload = &udp[8..(8 + payload_len).min(udp.len())];
    Some(Udp {
        src: SocketAddrV4::new(addr(12), port(0)),
        dst: SocketAddrV4::new(addr(16), port(2)),
        payload_len,
        payload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Mac = [0x02, 0, 0, 0, 0, 0xaa];
    const B: Mac = [0x02, 0, 0, 0, 0, 0xbb];

    fn addr(s: &str) -> SocketAddrV4 {
        s.parse().unwrap()
    }

    #[test]
    fn a_small_datagram_is_a_padded_minimum_frame_that_parses_back() {
        let t = Template::new(A, B, addr("10.0.0.1:4000"), addr("10.0.0.2:5001"), 18, 64);
        // 18 + 8 + 20 + 14 = 60: a minimum frame, 84 bytes on the wire as --rate counts it.
        assert_eq!(t.bytes().len(), 60);
        assert_eq!(
            t.bytes().len() as u64 + wire::ETHERNET_PHY_OVERHEAD,
            wire::wire_bytes(18, false)
        );
        let b = t.bytes();
        assert_eq!(&b[0..6], &B);
        assert_eq!(&b[6..12], &A);
        // The header checksum of a valid header sums to zero.
        assert_eq!(checksum(&b[14..34]), 0);
        let u = parse_udp4(b).unwrap();
        assert_eq!(
            (u.src, u.dst),
            (addr("10.0.0.1:4000"), addr("10.0.0.2:5001"))
        );
        assert_eq!((u.payload_len, u.payload.len()), (18, 18));
        let short = Template::new(A, B, addr("10.0.0.1:4000"), addr("10.0.0.2:5001"), 12, 64);
        assert_eq!(short.bytes().len(), 60, "padded");
        assert_eq!(
            parse_udp4(short.bytes()).unwrap().payload.len(),
            12,
            "padding is not payload"
        );
    }

    #[test]
    fn a_full_frame_and_a_truncated_capture() {
        let t = Template::new(A, B, addr("10.0.0.1:1"), addr("10.0.0.2:2"), 1472, 1);
        assert_eq!(t.bytes().len(), 1514);
        assert_eq!(t.bytes().len() as u64 + 24, wire::wire_bytes(1472, false));
        let u = parse_udp4(&t.bytes()[..100]).unwrap();
        assert_eq!((u.payload_len, u.payload.len()), (1472, 100 - PAYLOAD_AT));
    }

    #[test]
    fn other_frames_are_not_udp() {
        let t = Template::new(A, B, addr("10.0.0.1:1"), addr("10.0.0.2:2"), 18, 1);
        let mut arp = t.bytes().to_vec();
        arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
        assert!(parse_udp4(&arp).is_none());
        let mut tcp = t.bytes().to_vec();
        tcp[14 + 9] = 6;
        assert!(parse_udp4(&tcp).is_none());
        let mut fragment = t.bytes().to_vec();
        fragment[14 + 6] = 0x20; // more fragments
        assert!(parse_udp4(&fragment).is_none());
        assert!(parse_udp4(&t.bytes()[..30]).is_none());
    }

    #[test]
    fn macs_parse_with_either_separator_and_bad_ones_say_so() {
        assert_eq!(parse_mac("02:00:00:00:00:aa").unwrap(), A);
        assert_eq!(parse_mac("02-00-00-00-00-AA").unwrap(), A);
        for bad in ["02:00:00:00:00", "02:00:00:00:00:0g", "2:0:0:0:0:aa", ""] {
            assert!(
                parse_mac(bad).unwrap_err().contains("not a MAC address"),
                "{bad}"
            );
        }
    }
}
