//! `nestbed-analyze`: the command line. Analyzes the captures given, prints ONE JSON report
//! on stdout (and writes CSV tables with `--tables DIR`), human messages on stderr.
//! Exit codes: 0 done, 2 a usage error (one sentence on stderr), 1 a system failure.

use std::io::{BufWriter, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;

/// Throughput-anomaly trace analysis of pcap/pcapng captures: per TCP transfer, throughput
/// over time, RTT (Karn), retransmissions, sender packet spacing and advertised window, and a
/// count per reason of the packets that could not be used.
#[derive(Parser, Debug)]
#[command(name = "nestbed-analyze", version)]
struct Cli {
    /// Captures to analyze (pcap or pcapng; Ethernet, Linux cooked v1/v2, raw IP, loopback).
    #[arg(required = true, value_name = "CAPTURE")]
    files: Vec<PathBuf>,
    /// Write series.csv, rtt.csv, spacing.csv and window.csv into this folder.
    #[arg(long, value_name = "DIR")]
    tables: Option<PathBuf>,
    /// Width of the time-series bins, seconds.
    #[arg(long, value_name = "SECONDS", default_value_t = 1.0)]
    bin: f64,
    /// Accepted for uniformity with nestbed's commands: stdout is always one JSON object.
    #[arg(long)]
    json: bool,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let _ = cli.json;
    match nestbed_analyze::analyze(&cli.files, cli.bin, cli.tables.as_deref()) {
        Ok(report) => {
            let unusable: u64 = report.captures.iter().map(|c| c.unusable_total).sum();
            eprintln!(
                "nestbed-analyze: {} captures, {} transfers, {} packets unusable",
                report.captures.len(),
                report.transfers.len(),
                unusable
            );
            // Straight to stdout: a report of many transfers is not held twice as a string.
            let mut out = BufWriter::new(std::io::stdout().lock());
            let written = serde_json::to_writer(&mut out, &report)
                .map_err(std::io::Error::from)
                .and_then(|()| writeln!(out))
                .and_then(|()| out.flush());
            match written {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("nestbed-analyze: writing the report: {e}");
                    ExitCode::from(1)
                }
            }
        }
        Err(e) => {
            eprintln!("nestbed-analyze: {e}");
            ExitCode::from(e.exit_code() as u8)
        }
    }
}
