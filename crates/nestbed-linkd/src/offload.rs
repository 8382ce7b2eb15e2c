//! Segmentation offload metadata: the virtio-net header that packet sockets
//! with `PACKET_VNET_HDR` put before every frame they read and expect before
//! every frame they send.
//!
//! With offloads on, a node's TCP hands its veth super-frames of up to
//! 64 KB that the kernel cuts into wire frames later (GSO); the header says
//! how (`gso_type`, `gso_size`) and where the checksum still has to be
//! written (`csum_start`, `csum_offset`). linkd carries the header through
//! the pipes in [`nestbed_pipe::Packet::meta`] and gives it back when it
//! sends the frame, so a super-frame crosses the emulator in one read and
//! one write instead of 45 of each. [`wire`] says how many wire frames a
//! super-frame is and how many bytes they make, so the pipes shape and
//! queue it as those frames.
//!
//! Layout (little-endian, `struct virtio_net_hdr`): flags, gso_type,
//! hdr_len, gso_size, csum_start, csum_offset.

/// Bytes of the header before every frame.
pub const HEADER_LEN: usize = 10;

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`: the checksum at csum_start + csum_offset
/// is still to be computed.
const NEEDS_CSUM: u8 = 1;
const GSO_NONE: u8 = 0;
const GSO_TCPV4: u8 = 1;
const GSO_UDP: u8 = 3;
const GSO_TCPV6: u8 = 4;
const GSO_UDP_L4: u8 = 5;
const GSO_ECN: u8 = 0x80;

/// The header packed into a `u64` (`hdr_len` is left out: it is recomputed
/// from the frame on sending). 0 is a plain frame.
pub fn meta_from_header(h: &[u8; HEADER_LEN]) -> u64 {
    let u16_at = |i: usize| u64::from(u16::from_le_bytes([h[i], h[i + 1]]));
    u64::from(h[0]) << 56 | u64::from(h[1]) << 48 | u16_at(4) << 32 | u16_at(6) << 16 | u16_at(8)
}

struct Fields {
    flags: u8,
    gso_type: u8,
    gso_size: u16,
    csum_start: u16,
    csum_offset: u16,
}

fn fields(meta: u64) -> Fields {
    Fields {
        flags: (meta >> 56) as u8,
        gso_type: (meta >> 48) as u8,
        gso_size: (meta >> 32) as u16,
        csum_start: (meta >> 16) as u16,
        csum_offset: meta as u16,
    }
}

/// Length of the headers every segment of a super-frame repeats (Ethernet,
/// IP, TCP or UDP), if the metadata and the frame say.
fn segment_header_len(frame: &[u8], f: &Fields) -> Option<usize> {
    if f.flags & NEEDS_CSUM == 0 {
        return None;
    }
    let l4 = usize::from(f.csum_start);
    match f.gso_type & !GSO_ECN {
        GSO_TCPV4 | GSO_TCPV6 => frame.get(l4 + 12).map(|b| l4 + usize::from(b >> 4) * 4),
        GSO_UDP | GSO_UDP_L4 => Some(l4 + 8),
        _ => None,
    }
}

/// How a super-frame is cut into wire frames, from its metadata.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Gso {
    /// TCP (over IPv4 or IPv6); otherwise UDP cut into datagrams (USO).
    pub tcp: bool,
    /// Payload bytes per wire frame (the last may carry fewer).
    pub size: usize,
    /// Where the TCP or UDP header starts in the frame.
    pub l4: usize,
}

/// How the frame with metadata `meta` is cut into wire frames, if it is a
/// TCP or UDP (USO) super-frame; None for a plain frame, a frame with only
/// an unfinished checksum, and IP fragmentation (UFO), which no kernel
/// since 4.14 hands out.
pub fn gso(meta: u64) -> Option<Gso> {
    let f = fields(meta);
    if f.flags & NEEDS_CSUM == 0 || f.gso_size == 0 {
        return None;
    }
    let tcp = match f.gso_type & !GSO_ECN {
        GSO_TCPV4 | GSO_TCPV6 => true,
        GSO_UDP_L4 => false,
        _ => return None,
    };
    Some(Gso {
        tcp,
        size: usize::from(f.gso_size),
        l4: usize::from(f.csum_start),
    })
}

/// The metadata to send a corrupted frame with. A frame whose checksum is
/// still to be written would reach the receiver as trusted (checksum
/// offload), so a flipped bit would go unnoticed; without the flag the
/// receiver checks the checksum field as it is and drops the frame, as it
/// drops a corrupted frame whose checksum was complete. A super-frame can
/// then not be cut into segments: the kernel refuses it, and its segments
/// are lost (counted as `send_failed`).
pub fn corrupted(meta: u64) -> u64 {
    if meta == 0 {
        return 0;
    }
    let f = fields(meta);
    let flags = f.flags & !NEEDS_CSUM;
    u64::from(flags) << 56 | u64::from(f.csum_start) << 16 | u64::from(f.csum_offset)
}

/// The header to send before `frame` with metadata `meta`.
pub fn header(frame: &[u8], meta: u64) -> [u8; HEADER_LEN] {
    if meta == 0 {
        return [0; HEADER_LEN];
    }
    let f = fields(meta);
    let hdr_len = if f.gso_type == GSO_NONE {
        0
    } else {
        segment_header_len(frame, &f).unwrap_or(0) as u16
    };
    let mut h = [0u8; HEADER_LEN];
    h[0] = f.flags;
    h[1] = f.gso_type;
    h[2..4].copy_from_slice(&hdr_len.to_le_bytes());
    h[4..6].copy_from_slice(&f.gso_size.to_le_bytes());
    h[6..8].copy_from_slice(&f.csum_start.to_le_bytes());
    h[8..10].copy_from_slice(&f.csum_offset.to_le_bytes());
    h
}

/// What `frame` (with metadata `meta`) is on the wire: its length in bytes
/// over all segments and the number of segments. A super-frame of `n`
/// segments repeats its headers `n` times; anything else is one frame.
pub fn wire(frame: &[u8], meta: u64) -> (u32, u32) {
    let len = u32::try_from(frame.len()).unwrap_or(u32::MAX);
    if meta == 0 {
        return (len, 1);
    }
    let f = fields(meta);
    if f.gso_type == GSO_NONE || f.gso_size == 0 {
        return (len, 1);
    }
    let Some(hdr) = segment_header_len(frame, &f).filter(|&h| h < frame.len()) else {
        return (len, 1);
    };
    let segments = (frame.len() - hdr).div_ceil(usize::from(f.gso_size)).max(1);
    let wire = frame.len() + (segments - 1) * hdr;
    (
        u32::try_from(wire).unwrap_or(u32::MAX),
        u32::try_from(segments).unwrap_or(u32::MAX),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A TCP/IPv4 super-frame: 14 + 20 + 32 header bytes, then `payload`.
    fn tcp_superframe(payload: usize) -> Vec<u8> {
        let mut f = vec![0u8; 66 + payload];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[34 + 12] = 8 << 4; // data offset: 8 words
        f
    }

    #[test]
    fn a_tcp_superframe_is_its_segments_on_the_wire() {
        // gso_size 1448 (MSS with timestamps), 10 000 bytes → 7 segments.
        let h = [NEEDS_CSUM, GSO_TCPV4, 66, 0, 0xa8, 0x05, 34, 0, 16, 0];
        let meta = meta_from_header(&h);
        let frame = tcp_superframe(10_000);
        assert_eq!(wire(&frame, meta), (10_066 + 6 * 66, 7));
        // The header goes back as it came.
        assert_eq!(header(&frame, meta), h);
        // Exactly one full segment is one frame.
        assert_eq!(wire(&tcp_superframe(1448), meta), (1514, 1));
    }

    #[test]
    fn plain_and_checksum_only_frames_are_one_frame() {
        let frame = tcp_superframe(100);
        assert_eq!(wire(&frame, 0), (166, 1));
        assert_eq!(header(&frame, 0), [0; HEADER_LEN]);
        let h = [NEEDS_CSUM, GSO_NONE, 0, 0, 0, 0, 34, 0, 16, 0];
        let meta = meta_from_header(&h);
        assert_eq!(wire(&frame, meta), (166, 1));
        assert_eq!(header(&frame, meta), h);
        // Corrupted, it loses the checksum flag; a super-frame, its segmentation.
        assert_eq!(header(&frame, corrupted(meta))[..2], [0, GSO_NONE]);
        let gso = meta_from_header(&[NEEDS_CSUM, GSO_TCPV4, 66, 0, 0xa8, 0x05, 34, 0, 16, 0]);
        assert_eq!(wire(&frame, corrupted(gso)), (166, 1));
        assert_eq!(corrupted(0), 0);
        assert_eq!(super::gso(meta), None);
        assert_eq!(
            super::gso(gso),
            Some(Gso {
                tcp: true,
                size: 1448,
                l4: 34
            })
        );
        // A super-frame whose headers cannot be found counts as one frame.
        let bad = meta_from_header(&[0, GSO_TCPV4, 0, 0, 0xa8, 0x05, 0, 0, 0, 0]);
        assert_eq!(wire(&frame, bad), (166, 1));
    }
}
