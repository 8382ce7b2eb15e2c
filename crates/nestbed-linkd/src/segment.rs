//! Cutting a super-frame into the wire frames it stands for, in software,
//! for a pipe that decides frame by frame (loss, ordinal drops, RED,
//! jitter, duplication, corruption, or a queue without room for all of it:
//! [`nestbed_pipe::Pipe::takes_whole`]).
//!
//! The frames are those the kernel's own segmentation makes
//! (`tcp_gso_segment`, `__udp_gso_segment`) and a node with offloads off
//! sends: the headers repeated before each `gso_size` bytes of payload,
//! with, in each frame, the IPv4 total length, identification (the first
//! frame's, plus one per frame) and header checksum, or the IPv6 payload
//! length; the TCP sequence number advanced by the payload before it, CWR
//! only on the first frame and FIN and PSH only on the last; or the UDP
//! length. Each frame's TCP or UDP checksum is computed in full, so it
//! leaves as a plain frame (metadata 0) that the receiver checks as it
//! checks a frame from a node with offloads off, and a corrupted bit in it
//! is caught as there.
//!
//! A super-frame that cannot be cut (not TCP or UDP over IPv4 or IPv6
//! behind Ethernet with at most one VLAN tag, or headers that do not fit)
//! is left whole: [`segment`] returns None. The TCP urgent pointer is
//! copied into every frame, where the kernel clears it after the urgent
//! data; no node sends urgent data over a super-frame in practice.

use crate::offload::{self, Gso};

const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86dd;
const ETHERTYPE_VLAN: [u16; 2] = [0x8100, 0x88a8];
const IPPROTO_TCP: u8 = 6;
const IPPROTO_UDP: u8 = 17;
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;

/// The wire frames of the super-frame `frame` with offload metadata
/// `meta`, each complete (checksums written) and to be sent with metadata
/// 0; None if it is not a super-frame this module can cut (then it is left
/// whole). A super-frame whose payload fits one frame gives that frame.
pub fn segment(frame: &[u8], meta: u64) -> Option<Vec<Vec<u8>>> {
    let gso = offload::gso(meta)?;
    let headers = Headers::of(frame, gso)?;
    let payload = &frame[headers.len..];
    let count = payload.len().div_ceil(gso.size);
    let mut out = Vec::with_capacity(count);
    for (i, chunk) in payload.chunks(gso.size).enumerate() {
        let mut wire = Vec::with_capacity(headers.len + chunk.len());
        wire.extend_from_slice(&frame[..headers.len]);
        wire.extend_from_slice(chunk);
        headers.fix(&mut wire, i, count, gso.size);
        out.push(wire);
    }
    Some(out)
}

/// Where a super-frame's headers are.
#[derive(Clone, Copy, Debug)]
struct Headers {
    /// Start of the IP header.
    l3: usize,
    ipv4: bool,
    /// Start of the TCP or UDP header.
    l4: usize,
    tcp: bool,
    /// Length of all headers (Ethernet to TCP or UDP, inclusive).
    len: usize,
}

impl Headers {
    fn of(frame: &[u8], gso: Gso) -> Option<Headers> {
        let mut l3 = 14;
        let mut ethertype = be16(frame, 12)?;
        if ETHERTYPE_VLAN.contains(&ethertype) {
            l3 = 18;
            ethertype = be16(frame, 16)?;
        }
        let version = frame.get(l3)? >> 4;
        let ipv4 = match (ethertype, version) {
            (ETHERTYPE_IPV4, 4) => true,
            (ETHERTYPE_IPV6, 6) => false,
            _ => return None,
        };
        let ip_len = if ipv4 {
            usize::from(frame[l3] & 0x0f) * 4
        } else {
            40
        };
        let l4 = gso.l4;
        if ip_len < 20 || l4 < l3 + ip_len {
            return None;
        }
        let len = if gso.tcp {
            l4 + usize::from(frame.get(l4 + 12)? >> 4) * 4
        } else {
            l4 + 8
        };
        let min_l4 = if gso.tcp { 20 } else { 8 };
        (len >= l4 + min_l4 && len < frame.len()).then_some(Headers {
            l3,
            ipv4,
            l4,
            tcp: gso.tcp,
            len,
        })
    }

    /// Rewrites the headers of `wire`, frame `i` of `count`, each carrying
    /// `size` bytes of payload but the last.
    fn fix(&self, wire: &mut [u8], i: usize, count: usize, size: usize) {
        let (l3, l4) = (self.l3, self.l4);
        let len = wire.len();
        if self.ipv4 {
            put16(wire, l3 + 2, len - l3);
            let id = be16(wire, l3 + 4).unwrap_or(0);
            put16(wire, l3 + 4, usize::from(id.wrapping_add(i as u16)));
            put16(wire, l3 + 10, 0);
            let ihl = usize::from(wire[l3] & 0x0f) * 4;
            let sum = fold(sum(&wire[l3..l3 + ihl], 0));
            put16(wire, l3 + 10, usize::from(sum));
        } else {
            put16(wire, l3 + 4, len - l3 - 40);
        }
        let l4_len = len - l4;
        let checksum_at = if self.tcp {
            let seq = u32::from_be_bytes([wire[l4 + 4], wire[l4 + 5], wire[l4 + 6], wire[l4 + 7]]);
            let seq = seq.wrapping_add((i * size) as u32);
            wire[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
            if i > 0 {
                wire[l4 + 13] &= !TCP_CWR;
            }
            if i + 1 < count {
                wire[l4 + 13] &= !(TCP_FIN | TCP_PSH);
            }
            l4 + 16
        } else {
            put16(wire, l4 + 4, l4_len);
            l4 + 6
        };
        put16(wire, checksum_at, 0);
        let protocol = if self.tcp { IPPROTO_TCP } else { IPPROTO_UDP };
        let pseudo = if self.ipv4 {
            sum(&wire[l3 + 12..l3 + 20], 0)
        } else {
            sum(&wire[l3 + 8..l3 + 40], 0)
        } + u64::from(protocol)
            + l4_len as u64;
        let mut checksum = fold(sum(&wire[l4..], pseudo));
        if checksum == 0 && !self.tcp {
            checksum = 0xffff; // UDP: 0 would mean "no checksum"
        }
        put16(wire, checksum_at, usize::from(checksum));
    }
}

fn be16(frame: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
}

/// Writes the low 16 bits of `value` big-endian at `at`.
fn put16(wire: &mut [u8], at: usize, value: usize) {
    wire[at..at + 2].copy_from_slice(&(value as u16).to_be_bytes());
}

/// `acc` plus the Internet checksum's one's-complement sum of `data`,
/// unfolded. Adding 32-bit words gives the same folded sum as adding 16-bit
/// ones (2^16 is 1 modulo 2^16 − 1), with half the additions.
fn sum(data: &[u8], mut acc: u64) -> u64 {
    let mut words = data.chunks_exact(4);
    for w in &mut words {
        acc += u64::from(u32::from_be_bytes([w[0], w[1], w[2], w[3]]));
    }
    for pair in words.remainder().chunks(2) {
        acc += u64::from(u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]));
    }
    acc
}

/// The checksum to write: the sum folded to 16 bits and complemented.
fn fold(mut acc: u64) -> u16 {
    while acc > 0xffff {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::offload::meta_from_header;
    use etherparse::{NetHeaders, PacketBuilder, PacketHeaders, TransportHeader};

    const NEEDS_CSUM: u8 = 1;
    pub(crate) const GSO_TCPV4: u8 = 1;
    const GSO_TCPV6: u8 = 4;
    const GSO_UDP_L4: u8 = 5;

    /// A super-frame's metadata: `gso_type`, `gso_size`, L4 at `l4`.
    pub(crate) fn meta(gso_type: u8, size: u16, l4: u16, checksum_offset: u16) -> u64 {
        let mut h = [0u8; 10];
        h[0] = NEEDS_CSUM;
        h[1] = gso_type;
        h[4..6].copy_from_slice(&size.to_le_bytes());
        h[6..8].copy_from_slice(&l4.to_le_bytes());
        h[8..10].copy_from_slice(&checksum_offset.to_le_bytes());
        meta_from_header(&h)
    }

    fn payload(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 7 + i / 251) as u8).collect()
    }

    /// A TCP super-frame with timestamps (32-byte header) over IPv4 or
    /// IPv6, flags CWR, PSH, FIN and ACK, its checksum left as the kernel
    /// leaves it (here: garbage; it is recomputed).
    pub(crate) fn tcp_superframe(v6: bool, len: usize, seq: u32) -> Vec<u8> {
        let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let ip = if v6 {
            eth.ipv6([0xfd; 16], [0xfe; 16], 64)
        } else {
            eth.ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
        };
        let b = ip
            .tcp(40000, 5201, seq, 512)
            .ack(77)
            .psh()
            .fin()
            .cwr()
            .options(&[etherparse::TcpOptionElement::Timestamp(1, 2)])
            .unwrap();
        let mut out = Vec::new();
        b.write(&mut out, &payload(len)).unwrap();
        if !v6 {
            out[14 + 4..14 + 6].copy_from_slice(&0xfffeu16.to_be_bytes()); // IP id
        }
        let checksum_at = out.len() - len - 32 + 16;
        out[checksum_at] ^= 0x5a; // TCP checksum: not final
        out
    }

    /// Checks every frame independently (etherparse's checksums and
    /// lengths) and returns (seq, flags byte, payload) of each.
    fn check_tcp(frames: &[Vec<u8>], v6: bool) -> Vec<(u32, u8, Vec<u8>)> {
        frames
            .iter()
            .enumerate()
            .map(|(i, f)| {
                let h = PacketHeaders::from_ethernet_slice(f).unwrap();
                let data = h.payload.slice().to_vec();
                let Some(TransportHeader::Tcp(tcp)) = h.transport else {
                    panic!("frame {i}: no TCP")
                };
                let expected = match h.net.unwrap() {
                    NetHeaders::Ipv4(ip, _) => {
                        assert!(!v6);
                        assert_eq!(usize::from(ip.total_len), f.len() - 14, "frame {i}");
                        assert_eq!(ip.identification, 0xfffeu16.wrapping_add(i as u16));
                        assert_eq!(ip.header_checksum, ip.calc_header_checksum());
                        tcp.calc_checksum_ipv4(&ip, &data).unwrap()
                    }
                    NetHeaders::Ipv6(ip, _) => {
                        assert!(v6);
                        assert_eq!(usize::from(ip.payload_length), f.len() - 54);
                        tcp.calc_checksum_ipv6(&ip, &data).unwrap()
                    }
                    NetHeaders::Arp(_) => panic!("arp"),
                };
                assert_eq!(tcp.checksum, expected, "frame {i}: TCP checksum");
                let flags = f[f.len() - data.len() - 32 + 13];
                (tcp.sequence_number, flags, data)
            })
            .collect()
    }

    #[test]
    fn tcp_over_ipv4_and_ipv6_is_cut_as_the_kernel_cuts_it() {
        for v6 in [false, true] {
            let l4 = if v6 { 54 } else { 34 };
            let gso = if v6 { GSO_TCPV6 } else { GSO_TCPV4 };
            // 10 000 bytes at 1448 a frame: 6 full frames and one of 1312;
            // the sequence number wraps round within the super-frame.
            let seq = u32::MAX - 3000;
            let frame = tcp_superframe(v6, 10_000, seq);
            let m = meta(gso, 1448, l4, 16);
            let frames = segment(&frame, m).unwrap();
            assert_eq!(frames.len(), 7);
            // What the pipes charged for the super-frame is what they carry.
            let wire: usize = frames.iter().map(Vec::len).sum();
            assert_eq!(offload::wire(&frame, m), (wire as u32, 7));
            let parsed = check_tcp(&frames, v6);
            let mut joined = Vec::new();
            for (i, (s, flags, data)) in parsed.iter().enumerate() {
                assert_eq!(*s, seq.wrapping_add((i * 1448) as u32), "frame {i}");
                assert_eq!(data.len(), if i < 6 { 1448 } else { 1312 });
                let (cwr, psh, fin) = (flags & TCP_CWR != 0, flags & TCP_PSH != 0, flags & 1 != 0);
                assert_eq!(cwr, i == 0, "frame {i}: CWR only on the first");
                assert_eq!(
                    (psh, fin),
                    (i == 6, i == 6),
                    "frame {i}: PSH, FIN on the last"
                );
                assert_eq!(flags & 0x10, 0x10, "ACK on every frame");
                joined.extend_from_slice(data);
            }
            assert_eq!(joined, payload(10_000));
        }
    }

    #[test]
    fn a_vlan_tag_is_kept_and_the_headers_found_behind_it() {
        let plain = tcp_superframe(false, 3000, 1);
        let mut tagged = plain[..12].to_vec();
        tagged.extend_from_slice(&[0x81, 0x00, 0x00, 0x07]);
        tagged.extend_from_slice(&plain[12..]);
        let frames = segment(&tagged, meta(GSO_TCPV4, 1448, 38, 16)).unwrap();
        let untagged = segment(&plain, meta(GSO_TCPV4, 1448, 34, 16)).unwrap();
        assert_eq!(frames.len(), 3);
        for (t, u) in frames.iter().zip(&untagged) {
            assert_eq!(t[12..16], [0x81, 0x00, 0x00, 0x07]);
            assert_eq!(t[16..], u[12..], "same frame behind the tag");
        }
    }

    #[test]
    fn udp_super_frames_become_datagrams_with_their_own_length_and_checksum() {
        let b = PacketBuilder::ethernet2([2; 6], [4; 6])
            .ipv4([10, 0, 0, 1], [10, 0, 0, 2], 64)
            .udp(9, 9);
        let mut frame = Vec::new();
        b.write(&mut frame, &payload(3000)).unwrap();
        let frames = segment(&frame, meta(GSO_UDP_L4, 1400, 34, 6)).unwrap();
        assert_eq!(frames.len(), 3);
        for (i, f) in frames.iter().enumerate() {
            let h = PacketHeaders::from_ethernet_slice(f).unwrap();
            let data = h.payload.slice();
            assert_eq!(data, &payload(3000)[i * 1400..(i * 1400 + 1400).min(3000)]);
            let Some(TransportHeader::Udp(udp)) = h.transport else {
                panic!()
            };
            let Some(NetHeaders::Ipv4(ip, _)) = h.net else {
                panic!()
            };
            assert_eq!(usize::from(udp.length), data.len() + 8);
            assert_eq!(udp.checksum, udp.calc_checksum_ipv4(&ip, data).unwrap());
            assert_eq!(ip.header_checksum, ip.calc_header_checksum());
        }
    }

    #[test]
    fn frames_that_are_not_super_frames_or_cannot_be_cut_are_left_whole() {
        let frame = tcp_superframe(false, 3000, 1);
        assert_eq!(segment(&frame, 0), None, "plain frame");
        let csum_only = meta(0, 0, 34, 16);
        assert_eq!(segment(&frame, csum_only), None, "checksum only");
        assert_eq!(segment(&frame, meta(3, 1448, 34, 6)), None, "UFO");
        // Transport header said to start inside the IP header.
        assert_eq!(segment(&frame, meta(GSO_TCPV4, 1448, 20, 16)), None);
        // IPv6 metadata on an IPv4 frame; an ARP frame.
        let mut arp = frame.clone();
        arp[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(segment(&arp, meta(GSO_TCPV4, 1448, 34, 16)), None);
        // Headers only: nothing to cut.
        assert_eq!(segment(&frame[..66], meta(GSO_TCPV4, 1448, 34, 16)), None);
        // A payload that fits one frame: that frame, checksum complete.
        let one = segment(&frame, meta(GSO_TCPV4, 4000, 34, 16)).unwrap();
        assert_eq!(one.len(), 1);
        check_tcp(&one, false);
    }

    #[test]
    fn the_checksum_is_the_internet_checksum() {
        // RFC 1071's example: 0001 f203 f4f5 f6f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold(sum(&data, 0)), !0xddf2);
        // Odd lengths pad with a zero byte; any split into words agrees.
        assert_eq!(fold(sum(&[0xab], 0)), !0xab00);
        assert_eq!(
            fold(sum(&data[..7], 0)),
            fold(sum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0], 0))
        );
    }
}
