//! The unit that travels through a pipe: frame bytes plus wire length.

/// One Ethernet frame travelling through a pipe.
///
/// The core never looks inside `data`; it uses only [`Packet::wire_len`]
/// and [`Packet::segments`] (for queue limits and serialization time) and,
/// when corruption is configured, flips one bit of `data`.
///
/// A packet may stand for several frames on the wire: a segmentation
/// offload super-frame (GSO) is cut into `segments` wire frames by the
/// kernel after the pipe. The bandwidth stage then charges the Ethernet
/// overhead once per segment and a queue limit in packets counts segments,
/// so shaping is the same as for the frames one by one; loss, ordinal
/// drops, RED, corruption and duplication act on the packet as a whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Packet {
    data: Vec<u8>,
    wire_len: u32,
    segments: u32,
    meta: u64,
}

impl Packet {
    /// A packet whose wire length is the length of `data`.
    ///
    /// # Panics
    /// Never for real frames; a `data` longer than `u32::MAX` bytes has its
    /// wire length capped at `u32::MAX`.
    pub fn new(data: Vec<u8>) -> Self {
        let wire_len = u32::try_from(data.len()).unwrap_or(u32::MAX);
        Packet::with_wire_len(data, wire_len)
    }

    /// A packet whose wire length differs from the bytes held, e.g. a frame
    /// captured truncated, or a test packet that needs no real payload.
    ///
    /// The wire length is the Ethernet frame from destination MAC to the end
    /// of the payload, without preamble, FCS and inter-frame gap: those are
    /// added by the bandwidth stage
    /// ([`BandwidthParams::overhead_bytes`](crate::BandwidthParams::overhead_bytes)).
    pub fn with_wire_len(data: Vec<u8>, wire_len: u32) -> Self {
        Packet {
            data,
            wire_len,
            segments: 1,
            meta: 0,
        }
    }

    /// A packet that is `segments` frames on the wire (at least 1), of
    /// `wire_len` bytes in all, carrying the caller's `meta` through the
    /// pipe untouched (nestbed-linkd keeps a frame's offload metadata there).
    pub fn with_segments(data: Vec<u8>, wire_len: u32, segments: u32, meta: u64) -> Self {
        Packet {
            data,
            wire_len,
            segments: segments.max(1),
            meta,
        }
    }

    /// The frame bytes.
    pub fn data(&self) -> &[u8] {
        &self.data
    }

    /// The frame bytes, mutably.
    pub fn data_mut(&mut self) -> &mut Vec<u8> {
        &mut self.data
    }

    /// Gives back the frame bytes (to reuse the buffer).
    pub fn into_data(self) -> Vec<u8> {
        self.data
    }

    /// The frame length on the wire in bytes, Ethernet overhead excluded
    /// (of all its segments).
    pub fn wire_len(&self) -> u32 {
        self.wire_len
    }

    /// How many frames it is on the wire (1 unless a super-frame).
    pub fn segments(&self) -> u32 {
        self.segments
    }

    /// The caller's metadata (0 unless set by [`Packet::with_segments`]).
    pub fn meta(&self) -> u64 {
        self.meta
    }

    /// Flips bit `bit` (counted from the first byte's least significant
    /// bit); returns false and changes nothing if `bit` is past the data.
    pub(crate) fn flip_bit(&mut self, bit: usize) -> bool {
        match self.data.get_mut(bit / 8) {
            Some(byte) => {
                *byte ^= 1 << (bit % 8);
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flip_bit_changes_exactly_one_bit() {
        let mut p = Packet::new(vec![0u8; 4]);
        assert!(p.flip_bit(9));
        assert_eq!(p.data(), &[0, 2, 0, 0]);
        assert!(!p.flip_bit(32));
        assert_eq!(p.wire_len(), 4);
        let q = Packet::with_wire_len(Vec::new(), 1514);
        assert_eq!(q.wire_len(), 1514);
        assert!(q.data().is_empty());
        assert_eq!((q.segments(), q.meta()), (1, 0));
        let s = Packet::with_segments(vec![1], 3000, 0, 7);
        assert_eq!((s.wire_len(), s.segments(), s.meta()), (3000, 1, 7));
    }
}
