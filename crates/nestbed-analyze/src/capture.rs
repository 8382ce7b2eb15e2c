//! Reading capture files: pcap (microsecond and nanosecond, either byte order) and pcapng
//! (any number of sections and interfaces), handing each record to a callback with its
//! timestamp in nanoseconds since the epoch, its link type and its captured bytes.
//!
//! `pcap-file` 2.0 parses the containers. Two of its behaviours are worked around here:
//! its validated pcap packet rejects every record cut by the snapshot length (it compares
//! the original length with the snaplen), so raw records are read instead; and it reads
//! pcapng timestamps as nanoseconds whatever the interface's `if_tsresol` says (the default
//! is microseconds), so the raw count is rescaled here.

use std::collections::BTreeSet;
use std::fs::File;
use std::io::{ErrorKind, Read};
use std::path::Path;

use pcap_file::pcap::PcapReader;
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::{Block, PcapNgReader};
use pcap_file::{PcapError, TsResolution};

use crate::error::AnalyzeError;
use crate::reason::{Reason, Unusable};

/// One record of a capture.
#[derive(Debug)]
pub struct Frame<'a> {
    /// Capture time, nanoseconds since the Unix epoch.
    pub ts_ns: i64,
    /// The link-layer header type (LINKTYPE_* numbers of tcpdump.org).
    pub linktype: u32,
    /// Length of the packet on the wire, bytes.
    pub orig_len: u32,
    /// The captured bytes, at most `orig_len` (fewer when the snapshot length cut them).
    pub data: &'a [u8],
}

/// What reading a capture found, besides its records.
#[derive(Debug, Default)]
pub struct CaptureInfo {
    /// "pcap" or "pcapng".
    pub format: &'static str,
    /// Link types of its records.
    pub linktypes: BTreeSet<u32>,
    /// Records handed to the callback.
    pub records: u64,
    /// Records (or the rest of the file) that could not be read, by reason.
    pub unreadable: Unusable,
}

/// A pcapng interface: what its packets need to be placed in time and decoded.
#[derive(Clone, Copy, Debug)]
struct Interface {
    linktype: u32,
    /// Timestamp units: 10^-n seconds (`pow2` false) or 2^-n seconds.
    resol: u8,
    pow2: bool,
    offset_s: i64,
}

impl Interface {
    fn ts_ns(&self, raw: u64) -> i64 {
        let units = raw as u128;
        let n = u32::from(self.resol);
        let ns = if self.pow2 {
            (units * 1_000_000_000) >> n.min(127)
        } else if n <= 9 {
            units * 10u128.pow(9 - n)
        } else {
            units / 10u128.pow((n - 9).min(38))
        };
        (ns as i64).saturating_add(self.offset_s.saturating_mul(1_000_000_000))
    }
}

/// Reads every record of the capture at `path`, calling `each` on it in file order.
///
/// A file that is neither pcap nor pcapng is a usage error. A file cut short or corrupt
/// part-way is not: the records before the damage are handed over, and the damage is counted
/// in [`CaptureInfo::unreadable`] as [`Reason::TruncatedRecord`] or [`Reason::BadRecord`].
pub fn read_capture(
    path: &Path,
    mut each: impl FnMut(&Frame<'_>),
) -> Result<CaptureInfo, AnalyzeError> {
    let shown = path.display();
    let mut file = File::open(path).map_err(|e| AnalyzeError::io(format!("opening {shown}"), e))?;
    let mut magic = [0u8; 4];
    let mut got = 0;
    while got < 4 {
        match file.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) => return Err(AnalyzeError::io(format!("reading {shown}"), e)),
        }
    }
    let file = File::open(path).map_err(|e| AnalyzeError::io(format!("opening {shown}"), e))?;
    match (got, magic) {
        (4, [0x0a, 0x0d, 0x0d, 0x0a]) => read_pcapng(path, file, &mut each),
        (4, [0xd4, 0xc3, 0xb2, 0xa1] | [0xa1, 0xb2, 0xc3, 0xd4])
        | (4, [0x4d, 0x3c, 0xb2, 0xa1] | [0xa1, 0xb2, 0x3c, 0x4d]) => {
            read_pcap(path, file, &mut each)
        }
        _ => Err(AnalyzeError::Usage(format!(
            "{shown} is not a pcap or pcapng capture (it starts with {}); \
             give a file written by tcpdump, dumpcap, Wireshark or nestbed capture",
            hex(&magic[..got])
        ))),
    }
}

fn hex(bytes: &[u8]) -> String {
    if bytes.is_empty() {
        return "nothing: it is empty".into();
    }
    let digits: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!("0x{digits}")
}

/// Maps a parse error in the middle of a file to the reason it stopped.
fn stop_reason(e: &PcapError) -> Reason {
    match e {
        PcapError::IncompleteBuffer => Reason::TruncatedRecord,
        PcapError::IoError(io) if io.kind() == ErrorKind::UnexpectedEof => Reason::TruncatedRecord,
        _ => Reason::BadRecord,
    }
}

fn header_error(path: &Path, what: &str, e: &PcapError) -> AnalyzeError {
    match e {
        PcapError::IoError(io) if io.kind() != ErrorKind::UnexpectedEof => {
            AnalyzeError::Usage(format!("{} could not be read: {io}", path.display()))
        }
        _ => AnalyzeError::Usage(format!(
            "{} has a damaged {what} header ({e}); it cannot be analyzed",
            path.display()
        )),
    }
}

fn read_pcap(
    path: &Path,
    file: File,
    each: &mut impl FnMut(&Frame<'_>),
) -> Result<CaptureInfo, AnalyzeError> {
    let mut reader = PcapReader::new(file).map_err(|e| header_error(path, "pcap", &e))?;
    let header = reader.header();
    let linktype = u32::from(header.datalink);
    let frac_ns: i64 = match header.ts_resolution {
        TsResolution::MicroSecond => 1_000,
        TsResolution::NanoSecond => 1,
    };
    let mut info = CaptureInfo {
        format: "pcap",
        ..CaptureInfo::default()
    };
    info.linktypes.insert(linktype);
    while let Some(next) = reader.next_raw_packet() {
        let raw = match next {
            Ok(raw) => raw,
            Err(e) => {
                info.unreadable.add(stop_reason(&e));
                break;
            }
        };
        if raw.incl_len as usize != raw.data.len() {
            info.unreadable.add(Reason::BadRecord);
            break;
        }
        let frame = Frame {
            ts_ns: i64::from(raw.ts_sec) * 1_000_000_000 + i64::from(raw.ts_frac) * frac_ns,
            linktype,
            orig_len: raw.orig_len.max(raw.incl_len),
            data: &raw.data,
        };
        info.records += 1;
        each(&frame);
    }
    Ok(info)
}

fn interface(linktype: u32, options: &[InterfaceDescriptionOption<'_>]) -> Interface {
    let mut ifc = Interface {
        linktype,
        resol: 6,
        pow2: false,
        offset_s: 0,
    };
    for option in options {
        match option {
            InterfaceDescriptionOption::IfTsResol(r) => {
                ifc.pow2 = r & 0x80 != 0;
                ifc.resol = r & 0x7f;
            }
            InterfaceDescriptionOption::IfTsOffset(s) => ifc.offset_s = *s as i64,
            _ => {}
        }
    }
    ifc
}

fn read_pcapng(
    path: &Path,
    file: File,
    each: &mut impl FnMut(&Frame<'_>),
) -> Result<CaptureInfo, AnalyzeError> {
    let mut reader = PcapNgReader::new(file).map_err(|e| header_error(path, "pcapng", &e))?;
    let mut info = CaptureInfo {
        format: "pcapng",
        ..CaptureInfo::default()
    };
    let mut interfaces: Vec<Interface> = Vec::new();
    while let Some(next) = reader.next_block() {
        let block = match next {
            Ok(block) => block,
            Err(e) => {
                info.unreadable.add(stop_reason(&e));
                break;
            }
        };
        // pcap-file hands over the raw 64-bit count as "nanoseconds"; see the module doc.
        let (ifc, raw_ts, orig_len, data) = match &block {
            Block::SectionHeader(_) => {
                interfaces.clear();
                continue;
            }
            Block::InterfaceDescription(idb) => {
                interfaces.push(interface(u32::from(idb.linktype), &idb.options));
                continue;
            }
            Block::EnhancedPacket(epb) => (
                interfaces.get(epb.interface_id as usize).copied(),
                epb.timestamp.as_nanos() as u64,
                epb.original_len,
                &epb.data,
            ),
            Block::Packet(pb) => (
                interfaces.get(usize::from(pb.interface_id)).copied(),
                pb.timestamp,
                pb.original_len,
                &pb.data,
            ),
            Block::SimplePacket(_) => {
                if let Some(ifc) = interfaces.first() {
                    info.linktypes.insert(ifc.linktype);
                }
                info.unreadable.add(Reason::NoTimestamp);
                continue;
            }
            _ => continue,
        };
        let Some(ifc) = ifc else {
            info.unreadable.add(Reason::BadRecord);
            continue;
        };
        info.linktypes.insert(ifc.linktype);
        let frame = Frame {
            ts_ns: ifc.ts_ns(raw_ts),
            linktype: ifc.linktype,
            orig_len: orig_len.max(data.len() as u32),
            data,
        };
        info.records += 1;
        each(&frame);
    }
    Ok(info)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ifc(resol: u8, pow2: bool) -> Interface {
        Interface {
            linktype: 1,
            resol,
            pow2,
            offset_s: 0,
        }
    }

    #[test]
    fn pcapng_timestamps_follow_if_tsresol() {
        assert_eq!(ifc(6, false).ts_ns(1_500_000), 1_500_000_000);
        assert_eq!(ifc(9, false).ts_ns(1_500_000), 1_500_000);
        assert_eq!(ifc(12, false).ts_ns(1_500_000), 1_500);
        assert_eq!(ifc(10, true).ts_ns(1024), 1_000_000_000);
        let shifted = Interface {
            offset_s: 2,
            ..ifc(6, false)
        };
        assert_eq!(shifted.ts_ns(1), 2_000_001_000);
    }
}
