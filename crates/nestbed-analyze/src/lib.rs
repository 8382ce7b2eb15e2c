//! nestbed-analyze: fast trace analysis of pcap and pcapng captures for the throughput-anomaly
//! study (Lee et al., "Traffic Anomaly Analysis and Characteristics on a Virtualized Network
//! Testbed", IEICE 2011), in nestbed's `analyze`.
//!
//! Per TCP transfer (one direction of a connection that carried payload): throughput over
//! time, RTT samples by Karn's rule, retransmissions and loss rate, the sender's packet
//! spacing, the advertised window, and the figures equation (1) needs (W, p, P, R). Every
//! record that gives no TCP segment is counted under the reason why. The verdict (normal,
//! network-limited, host anomaly) is drawn from these figures by nestbed's Python side.
//!
//! Modules, in the order a record flows through them:
//! - [`capture`]: pcap/pcapng containers → timestamped records.
//! - [`decode`]: link layer, IPv4/IPv6, TCP → [`decode::Segment`] or a [`reason::Reason`].
//! - [`flows`]: connections by 4-tuple, both directions matched.
//! - [`half`]: one direction's measurements (the definitions are in its doc).
//! - [`stats`], [`report`]: summaries, the JSON report and the CSV tables.
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod capture;
pub mod decode;
pub mod error;
pub mod flows;
pub mod half;
pub mod reason;
pub mod report;
pub mod stats;

use std::path::{Path, PathBuf};

pub use error::AnalyzeError;
use flows::Flows;
use report::{Output, Report, FORMAT_VERSION};

/// Analyzes each capture on its own (a transfer seen in two captures appears twice, with the
/// same 4-tuple and `first_seq`), binning time series by `bin_s` seconds; writes the CSV tables
/// into `tables` when given. Streams: memory grows with the connections open at once (and
/// their bins), not with the length of the captures.
pub fn analyze(
    files: &[PathBuf],
    bin_s: f64,
    tables: Option<&Path>,
) -> Result<Report, AnalyzeError> {
    if !(bin_s.is_finite() && bin_s > 0.0) {
        return Err(AnalyzeError::Usage(format!(
            "the bin width must be a positive number of seconds, not {bin_s}"
        )));
    }
    let bin_ns = ((bin_s * 1e9).round() as i64).max(1);
    let mut out = Output::new(tables)?;
    let mut report = Report {
        version: FORMAT_VERSION,
        bin_s,
        captures: Vec::new(),
        transfers: Vec::new(),
    };
    for (index, file) in files.iter().enumerate() {
        out.start_capture(index);
        let mut flows = Flows::new(bin_ns, tables.is_some());
        let info = capture::read_capture(file, |frame| flows.record(frame, &mut out))?;
        flows.finish(&mut out);
        report
            .captures
            .push(report::capture_summary(index, file, &info, &flows));
    }
    report.transfers = out.finish()?;
    Ok(report)
}
