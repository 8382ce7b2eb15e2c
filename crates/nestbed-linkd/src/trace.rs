//! Per-pipe packet event log in ns-2 trace style.
//!
//! One line per event, the fields of ns-2's wired trace format:
//!
//! ```text
//! <event> <time> <from> <to> <type> <size> <flags> <fid> <src> <dst> <seq> <id>
//! +       0.012345 a    b    icmp   98     ------- 0     a     b     7     12
//! ```
//!
//! - event: `+` enqueued into a pipe, `-` start of transmission (left the
//!   queue for the bandwidth stage), `r` delivered (left the pipe), `d`
//!   dropped (loss model, ordinal list, queue full, RED, or link
//!   blackholed).
//! - time: seconds since `trace_start`, microsecond precision. `-` and `r`
//!   carry the pipe's model times (start of serialization, due time), not
//!   the wall-clock send time; the timing error is in the lateness
//!   histogram. Lines are written when an event becomes known, so `-` and
//!   `r` lines may come after later `+` lines: sort by time (stable) to
//!   compare with a simulation.
//! - from/to: port names. Egress pipe of port `a`: `a` → the peer port
//!   (2-port link) or the link's name (LAN, the switch). Ingress pipe of
//!   port `b`: the frame's origin port → `b`.
//! - type: `tcp`, `udp`, `icmp` (IPv4/IPv6 protocol), `arp`, else `eth`.
//! - size: frame length in bytes as read (without Ethernet overhead).
//! - flags `-------`, fid `0`; src/dst: origin port and the pipe's `to`.
//! - seq: the packet's ordinal in this pipe (1-based); id: a packet id
//!   unique within the link, the same on the egress and ingress lines of
//!   one frame: `(egress ordinal − 1) · ports + origin port index`.
//!
//! Writes go to a 256 KiB buffer, flushed when full and at `trace_stop`.

use std::fmt;
use std::io::{self, BufWriter, Write};

use nestbed_pipe::Instant;

/// A trace event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    /// `+`: entered the pipe.
    Enqueue,
    /// `-`: started transmission.
    Dequeue,
    /// `r`: left the pipe.
    Deliver,
    /// `d`: dropped.
    Drop,
}

impl Event {
    fn symbol(self) -> char {
        match self {
            Event::Enqueue => '+',
            Event::Dequeue => '-',
            Event::Deliver => 'r',
            Event::Drop => 'd',
        }
    }
}

/// The ns-2 packet type name of an Ethernet frame.
pub fn packet_type(frame: &[u8]) -> &'static str {
    let ethertype = |at: usize| {
        frame
            .get(at..at + 2)
            .map(|b| u16::from_be_bytes([b[0], b[1]]))
    };
    let mut at = 12;
    let mut et = ethertype(at);
    // One VLAN tag.
    if et == Some(0x8100) {
        at += 4;
        et = ethertype(at);
    }
    let proto = match et {
        Some(0x0800) => frame.get(at + 2 + 9).copied(),
        Some(0x86dd) => frame.get(at + 2 + 6).copied(),
        Some(0x0806) => return "arp",
        _ => return "eth",
    };
    match proto {
        Some(6) => "tcp",
        Some(17) => "udp",
        Some(1) | Some(58) => "icmp",
        _ => "ip",
    }
}

/// One line's fields besides event and time.
#[derive(Clone, Copy, Debug)]
pub struct Line<'a> {
    /// Sending side of the pipe.
    pub from: &'a str,
    /// Receiving side of the pipe.
    pub to: &'a str,
    /// Origin port of the frame.
    pub src: &'a str,
    /// ns-2 type name.
    pub kind: &'static str,
    /// Frame size in bytes.
    pub size: u32,
    /// Ordinal in the pipe.
    pub seq: u64,
    /// Packet id within the link.
    pub id: u64,
}

struct Seconds(u64);

impl fmt::Display for Seconds {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let us = self.0.saturating_add(500) / 1_000;
        write!(f, "{}.{:06}", us / 1_000_000, us % 1_000_000)
    }
}

/// An open trace of one link.
pub struct Trace {
    out: BufWriter<Box<dyn Write + Send>>,
    t0: Instant,
    path: String,
    error: Option<String>,
    lines: u64,
}

impl fmt::Debug for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Trace")
            .field("path", &self.path)
            .field("t0", &self.t0)
            .field("lines", &self.lines)
            .finish()
    }
}

impl Trace {
    /// A trace writing to `out`, with time 0 at `t0`; `path` is for reports.
    pub fn new(out: Box<dyn Write + Send>, t0: Instant, path: String) -> Trace {
        Trace {
            out: BufWriter::with_capacity(256 * 1024, out),
            t0,
            path,
            error: None,
            lines: 0,
        }
    }

    /// Where the trace goes.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// Lines written so far.
    pub fn lines(&self) -> u64 {
        self.lines
    }

    /// The first write error, if any (the trace stops writing after it).
    pub fn error(&self) -> Option<&str> {
        self.error.as_deref()
    }

    /// Writes one event.
    pub fn write(&mut self, event: Event, at: Instant, l: &Line<'_>) {
        if self.error.is_some() {
            return;
        }
        let r = writeln!(
            self.out,
            "{} {} {} {} {} {} ------- 0 {} {} {} {}",
            event.symbol(),
            Seconds(at.nanos_since(self.t0)),
            l.from,
            l.to,
            l.kind,
            l.size,
            l.src,
            l.to,
            l.seq,
            l.id
        );
        match r {
            Ok(()) => self.lines += 1,
            Err(e) => self.error = Some(e.to_string()),
        }
    }

    /// Flushes the buffer; returns the first error seen.
    pub fn finish(mut self) -> io::Result<u64> {
        if let Some(e) = self.error.take() {
            return Err(io::Error::other(e));
        }
        self.out.flush()?;
        Ok(self.lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    #[derive(Clone, Default)]
    pub(crate) struct Shared(pub Arc<Mutex<Vec<u8>>>);
    impl Write for Shared {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0.lock().unwrap().extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn formats_ns2_lines() {
        let buf = Shared::default();
        let mut t = Trace::new(
            Box::new(buf.clone()),
            Instant::from_millis(1000),
            "x".into(),
        );
        let l = Line {
            from: "a",
            to: "b",
            src: "a",
            kind: "icmp",
            size: 98,
            seq: 7,
            id: 12,
        };
        t.write(Event::Enqueue, Instant::from_nanos(1_012_345_400), &l);
        t.write(Event::Drop, Instant::from_millis(999), &l);
        assert_eq!(t.finish().unwrap(), 2);
        let text = String::from_utf8(buf.0.lock().unwrap().clone()).unwrap();
        assert_eq!(
            text,
            "+ 0.012345 a b icmp 98 ------- 0 a b 7 12\nd 0.000000 a b icmp 98 ------- 0 a b 7 12\n"
        );
    }

    #[test]
    fn packet_types() {
        let mut f = vec![0u8; 64];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[23] = 6;
        assert_eq!(packet_type(&f), "tcp");
        f[23] = 17;
        assert_eq!(packet_type(&f), "udp");
        f[23] = 1;
        assert_eq!(packet_type(&f), "icmp");
        f[12..14].copy_from_slice(&[0x08, 0x06]);
        assert_eq!(packet_type(&f), "arp");
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        f[20] = 58;
        assert_eq!(packet_type(&f), "icmp");
        assert_eq!(packet_type(&[0u8; 5]), "eth");
    }
}
