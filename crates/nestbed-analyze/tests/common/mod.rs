//! Test helpers: TCP segments built with etherparse, wrapped in a link layer, written into
//! pcap or pcapng files byte by byte (independently of the reader under test), and a simple
//! window-limited transfer captured at its sender.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};

use etherparse::{PacketBuilder, TcpHeader, TcpOptionElement};

/// One TCP segment of the connection between endpoint A and endpoint B.
#[derive(Clone, Debug, Default)]
pub struct Tcp {
    pub from_a: bool,
    pub seq: u32,
    pub ack: Option<u32>,
    pub syn: bool,
    pub fin: bool,
    pub window: u16,
    pub wscale: Option<u8>,
    pub len: usize,
    /// A's port instead of [`PORT_A`] when not 0 (several connections in one capture).
    pub port_a: u16,
}

pub const A4: [u8; 4] = [10, 0, 0, 1];
pub const B4: [u8; 4] = [10, 0, 0, 2];
pub const A6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];
pub const B6: [u8; 16] = [0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2];
pub const PORT_A: u16 = 40000;
pub const PORT_B: u16 = 5001;

/// The IP packet (v4 or v6) of a segment.
pub fn ip_packet(v6: bool, t: &Tcp) -> Vec<u8> {
    let port_a = if t.port_a == 0 { PORT_A } else { t.port_a };
    let (sp, dp) = if t.from_a {
        (port_a, PORT_B)
    } else {
        (PORT_B, port_a)
    };
    let mut h = TcpHeader::new(sp, dp, t.seq, t.window);
    h.syn = t.syn;
    h.fin = t.fin;
    if let Some(a) = t.ack {
        h.ack = true;
        h.acknowledgment_number = a;
    }
    if let Some(s) = t.wscale {
        h.set_options(&[TcpOptionElement::WindowScale(s), TcpOptionElement::Noop])
            .unwrap();
    }
    let payload = vec![0x55u8; t.len];
    let mut out = Vec::new();
    if v6 {
        let (s, d) = if t.from_a { (A6, B6) } else { (B6, A6) };
        PacketBuilder::ipv6(s, d, 64)
            .tcp_header(h)
            .write(&mut out, &payload)
            .unwrap();
    } else {
        let (s, d) = if t.from_a { (A4, B4) } else { (B4, A4) };
        PacketBuilder::ipv4(s, d, 64)
            .tcp_header(h)
            .write(&mut out, &payload)
            .unwrap();
    }
    out
}

/// Link layers the tests write.
#[derive(Clone, Copy, Debug)]
pub enum Link {
    Ethernet,
    Sll,
    Sll2,
    Raw,
}

impl Link {
    pub fn linktype(self) -> u32 {
        match self {
            Link::Ethernet => 1,
            Link::Sll => 113,
            Link::Sll2 => 276,
            Link::Raw => 101,
        }
    }

    /// The IP packet behind this link layer's header.
    pub fn frame(self, ip: &[u8]) -> Vec<u8> {
        let ethertype: [u8; 2] = if ip[0] >> 4 == 6 {
            [0x86, 0xdd]
        } else {
            [0x08, 0x00]
        };
        let mut f = match self {
            Link::Ethernet => {
                let mut h = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
                h.extend_from_slice(&ethertype);
                h
            }
            Link::Sll => {
                // packet type 4 (outgoing), ARPHRD_ETHER, address length 6, address, protocol.
                let mut h = vec![0, 4, 0, 1, 0, 6, 2, 0, 0, 0, 0, 1, 0, 0];
                h.extend_from_slice(&ethertype);
                h
            }
            Link::Sll2 => {
                // protocol, reserved, ifindex, ARPHRD_ETHER, packet type, address length, address.
                let mut h = ethertype.to_vec();
                h.extend_from_slice(&[0, 0, 0, 0, 0, 3, 0, 1, 4, 6, 2, 0, 0, 0, 0, 1, 0, 0]);
                h
            }
            Link::Raw => Vec::new(),
        };
        f.extend_from_slice(ip);
        f
    }
}

/// A record: time in ns since the epoch, wire bytes.
pub type Record = (i64, Vec<u8>);

/// Writes a little-endian pcap (microsecond or nanosecond timestamps), cutting records at
/// `snaplen`.
pub fn write_pcap(path: &Path, linktype: u32, snaplen: u32, recs: &[Record], nanos: bool) {
    let mut b = Vec::new();
    let magic: u32 = if nanos { 0xa1b2_3c4d } else { 0xa1b2_c3d4 };
    b.extend_from_slice(&magic.to_le_bytes());
    b.extend_from_slice(&2u16.to_le_bytes());
    b.extend_from_slice(&4u16.to_le_bytes());
    b.extend_from_slice(&[0; 8]);
    b.extend_from_slice(&snaplen.to_le_bytes());
    b.extend_from_slice(&linktype.to_le_bytes());
    for (t, data) in recs {
        let cut = data.len().min(snaplen as usize);
        let frac = if nanos {
            t % 1_000_000_000
        } else {
            (t % 1_000_000_000) / 1000
        };
        b.extend_from_slice(&((t / 1_000_000_000) as u32).to_le_bytes());
        b.extend_from_slice(&(frac as u32).to_le_bytes());
        b.extend_from_slice(&(cut as u32).to_le_bytes());
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(&data[..cut]);
    }
    fs::write(path, b).unwrap();
}

fn block(out: &mut Vec<u8>, kind: u32, body: &[u8]) {
    let len = (12 + body.len()) as u32;
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(body);
    out.extend_from_slice(&len.to_le_bytes());
}

fn pad4(v: &mut Vec<u8>) {
    while v.len() % 4 != 0 {
        v.push(0);
    }
}

/// Writes a little-endian pcapng with one interface whose timestamps are 10^-`tsresol` s.
pub fn write_pcapng(path: &Path, linktype: u32, snaplen: u32, recs: &[Record], tsresol: u8) {
    let mut b = Vec::new();
    let mut shb = Vec::new();
    shb.extend_from_slice(&0x1a2b_3c4du32.to_le_bytes());
    shb.extend_from_slice(&1u16.to_le_bytes());
    shb.extend_from_slice(&0u16.to_le_bytes());
    shb.extend_from_slice(&(-1i64).to_le_bytes());
    block(&mut b, 0x0a0d_0d0a, &shb);
    let mut idb = Vec::new();
    idb.extend_from_slice(&(linktype as u16).to_le_bytes());
    idb.extend_from_slice(&0u16.to_le_bytes());
    idb.extend_from_slice(&snaplen.to_le_bytes());
    if tsresol != 6 {
        idb.extend_from_slice(&9u16.to_le_bytes()); // if_tsresol
        idb.extend_from_slice(&1u16.to_le_bytes());
        idb.extend_from_slice(&[tsresol, 0, 0, 0]);
    }
    idb.extend_from_slice(&[0, 0, 0, 0]); // opt_endofopt
    block(&mut b, 1, &idb);
    let per_s = 10u64.pow(u32::from(tsresol));
    for (t, data) in recs {
        let ts = (*t as u64 / 1_000_000_000) * per_s
            + (*t as u64 % 1_000_000_000) * per_s / 1_000_000_000;
        let cut = data.len().min(snaplen as usize);
        let mut epb = Vec::new();
        epb.extend_from_slice(&0u32.to_le_bytes());
        epb.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
        epb.extend_from_slice(&(ts as u32).to_le_bytes());
        epb.extend_from_slice(&(cut as u32).to_le_bytes());
        epb.extend_from_slice(&(data.len() as u32).to_le_bytes());
        epb.extend_from_slice(&data[..cut]);
        pad4(&mut epb);
        block(&mut b, 6, &epb);
    }
    fs::write(path, b).unwrap();
}

pub const START_NS: i64 = 1_700_000_000_000_000_000;
pub const MS: i64 = 1_000_000;
pub const US: i64 = 1_000;

/// Shape of a window-limited transfer captured at its sender A.
pub struct Shape {
    pub segments: usize,
    pub mss: usize,
    pub window_segments: usize,
    pub rtt_ns: i64,
    /// The sender answers an ACK after this long.
    pub react_ns: i64,
    /// Extra delay before sending segment i: (i, ns).
    pub stalls: Vec<(usize, i64)>,
}

pub const ISN_A: u32 = 4_294_900_000; // wraps 67 kB into a transfer
pub const ISN_B: u32 = 77;

/// The segments of the transfer, in capture order, with their capture times.
pub fn transfer(shape: &Shape) -> Vec<(i64, Tcp)> {
    let wscale = 2u8;
    let rwnd = ((shape.window_segments * shape.mss) >> wscale) as u16;
    let mut out = vec![
        (
            0,
            Tcp {
                from_a: true,
                seq: ISN_A,
                syn: true,
                window: 65535,
                wscale: Some(wscale),
                ..Tcp::default()
            },
        ),
        (
            shape.rtt_ns,
            Tcp {
                from_a: false,
                seq: ISN_B,
                ack: Some(ISN_A.wrapping_add(1)),
                syn: true,
                window: 65535,
                wscale: Some(wscale),
                ..Tcp::default()
            },
        ),
        (
            shape.rtt_ns + 10 * US,
            Tcp {
                from_a: true,
                seq: ISN_A.wrapping_add(1),
                ack: Some(ISN_B + 1),
                window: 1000,
                ..Tcp::default()
            },
        ),
    ];
    let first = shape.rtt_ns + 20 * US;
    let mut sent = vec![0i64; shape.segments];
    let stall = |i: usize| {
        shape
            .stalls
            .iter()
            .filter(|s| s.0 == i)
            .map(|s| s.1)
            .sum::<i64>()
    };
    for i in 0..shape.segments {
        let t = if i < shape.window_segments {
            first + i as i64 * 12 * US
        } else {
            sent[i - shape.window_segments] + shape.rtt_ns + shape.react_ns
        };
        sent[i] = (t + stall(i)).max(if i > 0 { sent[i - 1] + US } else { 0 });
    }
    let seq = |i: usize| ISN_A.wrapping_add(1).wrapping_add((i * shape.mss) as u32);
    for (i, &t) in sent.iter().enumerate() {
        out.push((
            t,
            Tcp {
                from_a: true,
                seq: seq(i),
                ack: Some(ISN_B + 1),
                window: 1000,
                len: shape.mss,
                ..Tcp::default()
            },
        ));
        out.push((
            t + shape.rtt_ns,
            Tcp {
                from_a: false,
                seq: ISN_B + 1,
                ack: Some(seq(i + 1)),
                window: rwnd,
                ..Tcp::default()
            },
        ));
    }
    out.sort_by_key(|(t, seg)| (*t, !seg.from_a));
    out
}

/// Records of the segments behind `link`, times offset by [`START_NS`].
pub fn records(link: Link, v6: bool, segs: &[(i64, Tcp)]) -> Vec<Record> {
    segs.iter()
        .map(|(t, s)| (START_NS + t, link.frame(&ip_packet(v6, s))))
        .collect()
}

/// A fresh folder for one test's files.
pub fn folder(name: &str) -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("nestbed-analyze")
        .join(name);
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

/// The segments of `shape`'s transfer from A's port `port_a`, starting at `t0` ns, closed
/// by FINs both ways (A's, B's ACK and FIN, A's last ACK) `rtt_ns` after the last ACK.
pub fn closed_transfer(shape: &Shape, port_a: u16, t0: i64) -> Vec<(i64, Tcp)> {
    let mut segs = transfer(shape);
    let end = segs.last().unwrap().0;
    let a_fin = ISN_A
        .wrapping_add(1)
        .wrapping_add((shape.segments * shape.mss) as u32);
    let (rtt, us) = (shape.rtt_ns, US);
    segs.extend([
        (
            end + us,
            Tcp {
                from_a: true,
                seq: a_fin,
                ack: Some(ISN_B + 1),
                fin: true,
                window: 1000,
                ..Tcp::default()
            },
        ),
        (
            end + us + rtt,
            Tcp {
                from_a: false,
                seq: ISN_B + 1,
                ack: Some(a_fin.wrapping_add(1)),
                fin: true,
                window: 1000,
                ..Tcp::default()
            },
        ),
        (
            end + 2 * us + rtt,
            Tcp {
                from_a: true,
                seq: a_fin.wrapping_add(1),
                ack: Some(ISN_B + 2),
                window: 1000,
                ..Tcp::default()
            },
        ),
    ]);
    segs.into_iter()
        .map(|(t, s)| (t0 + t, Tcp { port_a, ..s }))
        .collect()
}
