//! Why a packet could not be used, and a counter per reason. Every record of a capture is
//! either used (a TCP segment with a complete header) or counted under exactly one reason.

use std::collections::BTreeMap;

/// Why a record of a capture was not used.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    /// The capture's link type is none that nestbed-analyze decodes.
    UnsupportedLinkType,
    /// The record ends inside its link-layer header.
    TruncatedLinkHeader,
    /// The link layer carries something other than IPv4 or IPv6 (ARP, LLDP, ...).
    NotIp,
    /// The record ends inside the IP header (or IPv6 extension headers).
    TruncatedIpHeader,
    /// An IP header that cannot be right: wrong version, header longer than the packet.
    BadIpHeader,
    /// An IP fragment: its TCP header or length is not complete in one packet.
    IpFragment,
    /// IP that is not TCP (UDP, ICMP, ...).
    NotTcp,
    /// The snapshot length cut the TCP header.
    TruncatedTcpHeader,
    /// A TCP data offset below 5 words or beyond the IP packet.
    BadTcpHeader,
    /// The file ends inside a record (a capture cut short); reading stops there.
    TruncatedRecord,
    /// A record header that cannot be right (a corrupt file); reading stops there.
    BadRecord,
    /// A pcapng Simple Packet Block: it has no timestamp.
    NoTimestamp,
}

impl Reason {
    /// Every reason, in the order they are reported.
    pub const ALL: [Reason; 12] = [
        Reason::UnsupportedLinkType,
        Reason::TruncatedLinkHeader,
        Reason::NotIp,
        Reason::TruncatedIpHeader,
        Reason::BadIpHeader,
        Reason::IpFragment,
        Reason::NotTcp,
        Reason::TruncatedTcpHeader,
        Reason::BadTcpHeader,
        Reason::TruncatedRecord,
        Reason::BadRecord,
        Reason::NoTimestamp,
    ];

    /// The reason's name in JSON and CSV output.
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::UnsupportedLinkType => "unsupported_link_type",
            Reason::TruncatedLinkHeader => "truncated_link_header",
            Reason::NotIp => "not_ip",
            Reason::TruncatedIpHeader => "truncated_ip_header",
            Reason::BadIpHeader => "bad_ip_header",
            Reason::IpFragment => "ip_fragment",
            Reason::NotTcp => "not_tcp",
            Reason::TruncatedTcpHeader => "truncated_tcp_header",
            Reason::BadTcpHeader => "bad_tcp_header",
            Reason::TruncatedRecord => "truncated_record",
            Reason::BadRecord => "bad_record",
            Reason::NoTimestamp => "no_timestamp",
        }
    }
}

/// Packets counted per reason.
#[derive(Clone, Debug, Default)]
pub struct Unusable {
    counts: [u64; Reason::ALL.len()],
}

impl Unusable {
    /// Counts one packet under `reason`.
    pub fn add(&mut self, reason: Reason) {
        self.counts[reason as usize] += 1;
    }

    /// Packets counted under `reason`.
    pub fn get(&self, reason: Reason) -> u64 {
        self.counts[reason as usize]
    }

    /// Adds every count of `other`.
    pub fn merge(&mut self, other: &Unusable) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts) {
            *mine += theirs;
        }
    }

    /// All unusable packets.
    pub fn total(&self) -> u64 {
        self.counts.iter().sum()
    }

    /// The reasons with at least one packet, by name.
    pub fn to_map(&self) -> BTreeMap<&'static str, u64> {
        Reason::ALL
            .iter()
            .filter(|r| self.get(**r) > 0)
            .map(|r| (r.as_str(), self.get(*r)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_by_reason_and_lists_only_nonzero_ones() {
        let mut u = Unusable::default();
        u.add(Reason::NotTcp);
        u.add(Reason::NotTcp);
        u.add(Reason::TruncatedTcpHeader);
        assert_eq!(u.total(), 3);
        let m = u.to_map();
        assert_eq!(m.len(), 2);
        assert_eq!(m["not_tcp"], 2);
        assert_eq!(m["truncated_tcp_header"], 1);
    }

    #[test]
    fn every_reason_has_its_own_slot_and_name() {
        for (i, r) in Reason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
        }
        let names: std::collections::BTreeSet<_> = Reason::ALL.iter().map(|r| r.as_str()).collect();
        assert_eq!(names.len(), Reason::ALL.len());
    }
}
