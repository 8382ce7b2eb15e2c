//! The 12-byte probe header at the start of every probe datagram's UDP payload.
//!
//! ```text
//!  0               4       6                       12
//! +---------------+-------+-----------------------+-------------------
//! | seq (u32)     | burst | send_ns (u48)         | zero fill ...
//! +---------------+-------+-----------------------+-------------------
//! ```
//!
//! All fields are big-endian. `send_ns` is the sender's `CLOCK_MONOTONIC` in nanoseconds
//! modulo 2^48 (about 78 hours). Every network namespace on one host shares that clock, so a
//! receiver on the same host computes one-way delay as `(recv_ns − send_ns) mod 2^48`
//! ([`delay_ns`]), or 0 where the receive time is before the send time (a clock error, not a
//! delay of 39 hours or more). The rest of the payload is zero-filled; the payload size is a
//! parameter of the sender and at least [`HEADER_LEN`] bytes.

use std::fmt;

/// Size of the header in bytes, and so the smallest probe payload.
pub const HEADER_LEN: usize = 12;

/// Timestamps in the header are nanoseconds modulo this value.
pub const TIMESTAMP_MODULUS: u64 = 1 << 48;

/// Mask that reduces a nanosecond count to the header's 48 bits.
pub const TIMESTAMP_MASK: u64 = TIMESTAMP_MODULUS - 1;

/// The parsed header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Sequence number: 0 for the first packet of a run, +1 for every packet the sender
    /// tried to send (also those the kernel refused), so gaps are losses; wraps after 2^32.
    pub seq: u32,
    /// Burst id: 0 without bursts, otherwise the index of the burst (wrapping at 2^16).
    pub burst: u16,
    /// Send time in ns of `CLOCK_MONOTONIC`, already reduced modulo 2^48.
    pub send_ns: u64,
}

/// Why a datagram could not be read as a probe header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// The datagram (or buffer) is shorter than the 12-byte header.
    TooShort {
        /// Length that was available.
        len: usize,
    },
}

impl HeaderError {
    /// Short machine-readable name of the reason, used as a key in JSON summaries.
    pub fn reason(&self) -> &'static str {
        match self {
            HeaderError::TooShort { .. } => "too_short",
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HeaderError::TooShort { len } => write!(
                f,
                "datagram of {len} bytes is shorter than the {HEADER_LEN}-byte probe header"
            ),
        }
    }
}

impl std::error::Error for HeaderError {}

impl Header {
    /// A header whose timestamp is `mono_ns` reduced modulo 2^48.
    pub fn new(seq: u32, burst: u16, mono_ns: u64) -> Header {
        Header {
            seq,
            burst,
            send_ns: mono_ns & TIMESTAMP_MASK,
        }
    }

    /// Writes the header into the first 12 bytes of `buf`, leaving the rest untouched.
    /// The timestamp is reduced modulo 2^48 on the way.
    pub fn encode(&self, buf: &mut [u8]) -> Result<(), HeaderError> {
        if buf.len() < HEADER_LEN {
            return Err(HeaderError::TooShort { len: buf.len() });
        }
        buf[0..4].copy_from_slice(&self.seq.to_be_bytes());
        buf[4..6].copy_from_slice(&self.burst.to_be_bytes());
        let ts = (self.send_ns & TIMESTAMP_MASK).to_be_bytes();
        buf[6..12].copy_from_slice(&ts[2..8]);
        Ok(())
    }

    /// Reads the header from the start of a datagram.
    pub fn decode(buf: &[u8]) -> Result<Header, HeaderError> {
        if buf.len() < HEADER_LEN {
            return Err(HeaderError::TooShort { len: buf.len() });
        }
        let seq = u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]);
        let burst = u16::from_be_bytes([buf[4], buf[5]]);
        let mut ts = [0u8; 8];
        ts[2..8].copy_from_slice(&buf[6..12]);
        Ok(Header {
            seq,
            burst,
            send_ns: u64::from_be_bytes(ts),
        })
    }
}

/// One-way delay in ns from a header timestamp to a receive time on the same clock:
/// `(recv_ns − send_ns) mod 2^48`, or 0 if the receive time is before the send time
/// ([`received_before_sent`]). Both arguments may be full 64-bit clock readings or already
/// reduced; the result is always in `[0, 2^47)`.
pub fn delay_ns(send_ns: u64, recv_ns: u64) -> u64 {
    if received_before_sent(send_ns, recv_ns) {
        return 0;
    }
    recv_ns.wrapping_sub(send_ns) & TIMESTAMP_MASK
}

/// Whether a receive time is before its send time, modulo 2^48: their difference is in the
/// upper half of it. No datagram takes 39 hours; a receive stamp moved onto the monotonic
/// clock by an offset a step of the wall clock has made wrong can be early, and its delay
/// would otherwise read as 39 to 78 hours.
pub fn received_before_sent(send_ns: u64, recv_ns: u64) -> bool {
    recv_ns.wrapping_sub(send_ns) & TIMESTAMP_MASK >= TIMESTAMP_MODULUS / 2
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYTES: [u8; 14] = [
        0x01, 0x02, 0x03, 0x04, // seq
        0xBE, 0xEF, // burst
        0x12, 0x34, 0x56, 0x78, 0x9A, 0xBC, // send_ns
        0x00, 0x00, // fill
    ];

    #[test]
    fn decodes_static_bytes() {
        let h = Header::decode(&BYTES).unwrap();
        assert_eq!(h.seq, 0x0102_0304);
        assert_eq!(h.burst, 0xBEEF);
        assert_eq!(h.send_ns, 0x1234_5678_9ABC);
    }

    #[test]
    fn encodes_to_static_bytes_and_round_trips() {
        let h = Header::new(0x0102_0304, 0xBEEF, 0x1234_5678_9ABC);
        let mut buf = [0u8; 14];
        h.encode(&mut buf).unwrap();
        assert_eq!(buf, BYTES);
        assert_eq!(Header::decode(&buf).unwrap(), h);
    }

    #[test]
    fn encode_leaves_the_fill_alone() {
        let mut buf = [0xAAu8; 16];
        Header::new(1, 2, 3).encode(&mut buf).unwrap();
        assert_eq!(&buf[12..], &[0xAA; 4]);
    }

    #[test]
    fn timestamp_is_reduced_modulo_2_pow_48() {
        let h = Header::new(0, 0, 0xFFFF_0000_0000_0005);
        assert_eq!(h.send_ns, 5);
        let mut buf = [0u8; 12];
        Header {
            seq: 0,
            burst: 0,
            send_ns: u64::MAX,
        }
        .encode(&mut buf)
        .unwrap();
        assert_eq!(Header::decode(&buf).unwrap().send_ns, TIMESTAMP_MASK);
    }

    #[test]
    fn extremes_round_trip() {
        for h in [
            Header::new(0, 0, 0),
            Header::new(u32::MAX, u16::MAX, TIMESTAMP_MASK),
        ] {
            let mut buf = [0u8; HEADER_LEN];
            h.encode(&mut buf).unwrap();
            assert_eq!(Header::decode(&buf).unwrap(), h);
        }
    }

    #[test]
    fn short_datagram_is_an_error_with_its_reason() {
        let err = Header::decode(&BYTES[..11]).unwrap_err();
        assert_eq!(err, HeaderError::TooShort { len: 11 });
        assert_eq!(err.reason(), "too_short");
        assert_eq!(
            err.to_string(),
            "datagram of 11 bytes is shorter than the 12-byte probe header"
        );
        assert_eq!(
            Header::decode(&[]).unwrap_err(),
            HeaderError::TooShort { len: 0 }
        );
        let mut small = [0u8; 5];
        assert_eq!(
            Header::new(1, 1, 1).encode(&mut small).unwrap_err(),
            HeaderError::TooShort { len: 5 }
        );
    }

    #[test]
    fn delay_wraps_at_2_pow_48() {
        assert_eq!(delay_ns(100, 250), 150);
        // Sent just before the wrap, received just after.
        assert_eq!(delay_ns(TIMESTAMP_MASK - 9, 5), 15);
        // Full 64-bit receive time against a reduced send time.
        let recv = (7u64 << 48) + 1_000;
        assert_eq!(delay_ns(recv.wrapping_sub(300) & TIMESTAMP_MASK, recv), 300);
    }

    #[test]
    fn a_receive_time_before_the_send_time_is_no_delay_of_78_hours() {
        assert!(received_before_sent(1_000, 900));
        assert_eq!(delay_ns(1_000, 900), 0);
        // Across the wrap the other way: sent just after it, received just before.
        assert!(received_before_sent(5, TIMESTAMP_MASK - 9));
        assert!(!received_before_sent(TIMESTAMP_MASK - 9, 5));
        // Half the modulus is the edge: below it a delay, from it an early receive.
        assert_eq!(
            delay_ns(0, TIMESTAMP_MODULUS / 2 - 1),
            TIMESTAMP_MODULUS / 2 - 1
        );
        assert!(received_before_sent(0, TIMESTAMP_MODULUS / 2));
    }
}
