//! Memory-mapped frame rings of a packet socket (`PACKET_MMAP`,
//! `TPACKET_V2`): the kernel writes every received frame into a slot of the
//! receive ring, and sends the slots of the transmit ring that linkd marks,
//! so a batch of frames costs one `send` and no `recv` at all instead of a
//! `recvmmsg`/`sendmmsg` pass over one message per frame.
//!
//! Why V2 and not V3: a V3 receive ring hands frames over a block at a
//! time, when the block is full or its timer (1 ms at least) expires, so
//! at a low rate every frame would wait up to that long before linkd sees
//! it; a V2 slot is handed over, and the socket woken, per frame.
//!
//! The socket has `PACKET_VNET_HDR` on while it has rings: a transmitted
//! frame is then copied whole into its socket buffer when its header's
//! `hdr_len` says so. Without it the kernel would attach the ring's page to
//! the buffer instead of copying, and give the slot back (its destructor
//! runs when the receiving namespace's IP layer orphans the buffer) while
//! the frame's bytes still sit in a receiver's socket queue: linkd would
//! overwrite them with a later frame. The rings hold wire-sized frames
//! only (their slots fit the interface's MTU), so the worker uses them
//! while the interface has offloads off; with offloads on (super-frames of
//! up to 64 KB) the socket goes back to `recvmmsg`/`sendmmsg`.
//!
//! Ring memory is allocated and pinned at once (4.5 MB a port), where the
//! copy path's socket buffers only grow with what is queued: all of linkd's
//! rings share a budget (`NESTBED_LINKD_RING_MB`, 256 MB by default), and a
//! port set up once it is spent keeps to the copy path. So a small
//! experiment gets the fast path on every port and a 1 000-node one does
//! not pin gigabytes.

use std::io;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use nestbed_ring::{
    set_option, Request, Ring, PACKET_LOSS, PACKET_OUTGOING, PACKET_RX_RING, PACKET_TX_RING,
    PACKET_VERSION, PACKET_VNET_HDR, TPACKET_V2, TP_STATUS_KERNEL, TP_STATUS_SENDING,
    TP_STATUS_SEND_REQUEST, TP_STATUS_USER, TP_STATUS_WRONG_FORMAT, V2_HEADER,
};

use super::Received;
use crate::offload::{header, meta_from_header, HEADER_LEN};

/// Where a transmitted frame starts in its slot (`tp_hdrlen` −
/// `sizeof(sockaddr_ll)` = the aligned header).
const TX_DATA: usize = V2_HEADER;
/// Room in a receive slot before the frame: the header, the
/// `sockaddr_ll`, the virtio-net header and alignment (the kernel puts the
/// frame at 76 bytes for Ethernet).
const RX_HEADROOM: usize = 128;
/// Bytes beyond the MTU a frame may have: Ethernet header and a VLAN tag.
const LINK_HEADERS: usize = 18;

/// Receive slots: 2 048 of 2 KB for a 1 500-byte MTU, 4 MB a port, the
/// bytes the copy path's socket buffer may grow to (allocated at once here).
/// 4 096 overflow less while linkd waits for a CPU (docs/benchmarks.md) at
/// twice the memory of every port.
const RX_FRAMES: usize = 2048;
/// Transmit slots; a longer batch is sent in parts.
const TX_FRAMES: usize = 256;
/// Ring memory is allocated in blocks of this many bytes (at least one slot).
const BLOCK: usize = 16 * 1024;

/// Ring memory held by all of linkd's sockets, in bytes.
static RING_BYTES: AtomicUsize = AtomicUsize::new(0);
const DEFAULT_BUDGET_MB: usize = 256;
const BUDGET_SPENT: &str = "the ring memory budget (NESTBED_LINKD_RING_MB) is spent";

/// The bytes all rings may hold: `NESTBED_LINKD_RING_MB`, or 256 MB.
fn budget() -> usize {
    static BUDGET: OnceLock<usize> = OnceLock::new();
    *BUDGET.get_or_init(|| {
        std::env::var("NESTBED_LINKD_RING_MB")
            .ok()
            .and_then(|v| v.trim().parse::<usize>().ok())
            .unwrap_or(DEFAULT_BUDGET_MB)
            << 20
    })
}

/// Takes `bytes` of the budget, if that much is left.
fn reserve(bytes: usize) -> io::Result<()> {
    RING_BYTES
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |held| {
            (held + bytes <= budget()).then_some(held + bytes)
        })
        .map(|_| ())
        .map_err(|_| io::Error::new(io::ErrorKind::OutOfMemory, BUDGET_SPENT))
}

fn unreserve(bytes: usize) {
    RING_BYTES.fetch_sub(bytes, Ordering::AcqRel);
}

/// Whether `e` says the ring budget is spent (the port keeps to the copy
/// path, which is no fault).
pub fn budget_spent(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::OutOfMemory && e.to_string() == BUDGET_SPENT
}

fn option(fd: RawFd, opt: libc::c_int, value: libc::c_int) -> io::Result<()> {
    set_option(fd, opt, &value)
}

/// The receive and transmit rings of one socket, mapped into this process.
pub struct Rings {
    fd: RawFd,
    map: *mut u8,
    map_len: usize,
    rx: Ring,
    tx: Ring,
    /// Slots marked for sending since the last `send`, in ring order.
    queued: Vec<usize>,
}

// SAFETY: the mapping belongs to this value alone; it is only touched
// through `&mut self` (or `&self` for reads) by the thread that owns it.
unsafe impl Send for Rings {}

/// Ring memory taken from the budget for one socket, before its rings
/// exist: taken in request order (which ports get rings is decided there),
/// while the rings themselves can be set up later and elsewhere
/// ([`Reserved::build`]); given back when dropped unbuilt.
pub struct Reserved {
    rx: Request,
    tx: Request,
    map_len: usize,
}

impl Drop for Reserved {
    fn drop(&mut self) {
        unreserve(self.map_len);
    }
}

impl Reserved {
    /// Takes the budget for rings holding frames of up to `mtu` bytes of
    /// payload; fails with [`budget_spent`] if it is spent.
    pub fn take(mtu: usize) -> io::Result<Reserved> {
        let frame_size = (RX_HEADROOM + mtu + LINK_HEADERS)
            .next_power_of_two()
            .max(2048);
        let block_size = frame_size.max(BLOCK);
        let rx = Request::new(RX_FRAMES, frame_size, block_size);
        let tx = Request::new(TX_FRAMES, frame_size, block_size);
        let map_len = rx.bytes() + tx.bytes();
        reserve(map_len)?;
        Ok(Reserved { rx, tx, map_len })
    }

    /// Sets up the rings on packet socket `fd` (bound or not) and maps
    /// them. Turns `PACKET_VNET_HDR` on (see the module docs); the socket
    /// must have no rings yet. Slow whatever the size: each ring the kernel
    /// sets up waits for an RCU grace period (`synchronize_net`), some
    /// 10-15 ms each here, but concurrent set-ups share their waits.
    pub fn build(self, fd: RawFd) -> io::Result<Rings> {
        option(fd, PACKET_VNET_HDR, 1)?;
        option(fd, PACKET_VERSION, TPACKET_V2)?;
        option(fd, PACKET_LOSS, 1)?;
        set_option(fd, PACKET_RX_RING, &self.rx)?;
        if let Err(e) = set_option(fd, PACKET_TX_RING, &self.tx) {
            release(fd);
            return Err(e);
        }
        // No MAP_POPULATE: the kernel inserts every page of a packet
        // socket's rings when they are mapped.
        // SAFETY: maps the socket's rings (receive, then transmit) as the
        // kernel lays them out; the result is checked.
        let map = unsafe {
            libc::mmap(
                ptr::null_mut(),
                self.map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let e = io::Error::last_os_error();
            release(fd);
            return Err(e);
        }
        // From here the rings own the reservation (given back when they drop).
        let me = std::mem::ManuallyDrop::new(self);
        let map = map as *mut u8;
        Ok(Rings {
            fd,
            map,
            map_len: me.map_len,
            rx: Ring::at(map, &me.rx),
            // SAFETY: the transmit ring follows the receive ring in the mapping.
            tx: Ring::at(unsafe { map.add(me.rx.bytes()) }, &me.tx),
            queued: Vec::with_capacity(TX_FRAMES),
        })
    }
}

impl Rings {
    /// Sets up rings on packet socket `fd`, sized for frames of up to
    /// `mtu` bytes of payload: [`Reserved::take`] then [`Reserved::build`].
    pub fn new(fd: RawFd, mtu: usize) -> io::Result<Rings> {
        Reserved::take(mtu)?.build(fd)
    }

    /// Reads up to `n` received frames and calls `each` for every one from
    /// the wire (not one this host sent, if `skip_outgoing`); returns how
    /// many slots it read.
    pub fn recv(
        &mut self,
        n: usize,
        skip_outgoing: bool,
        mut each: impl FnMut(Received<'_>),
    ) -> usize {
        let rx = &mut self.rx;
        let mut got = 0;
        while got < n {
            let i = rx.head;
            if rx.status(i) & TP_STATUS_USER == 0 {
                break;
            }
            let len = rx.u32_at(i, 4) as usize;
            let snaplen = rx.u32_at(i, 8) as usize;
            let mac = usize::from(rx.u16_at(i, 12));
            let (sec, nsec) = (rx.u32_at(i, 16), rx.u32_at(i, 20));
            let pkttype = rx.pkttype(i);
            let fits = mac >= HEADER_LEN && mac + snaplen <= rx.frame_size;
            if fits && !(skip_outgoing && pkttype == PACKET_OUTGOING) {
                // SAFETY: the slot is user space's until its status is
                // given back below; the kernel said the frame (and its
                // virtio-net header just before it) lie inside it.
                let (vnet, frame) = unsafe {
                    (
                        &*(rx.slot(i).add(mac - HEADER_LEN) as *const [u8; HEADER_LEN]),
                        std::slice::from_raw_parts(rx.slot(i).add(mac), snaplen),
                    )
                };
                each(Received {
                    data: (frame, &[]),
                    truncated: snaplen < len,
                    meta: meta_from_header(vnet),
                    kernel_realtime_ns: (sec > 0)
                        .then(|| u64::from(sec) * 1_000_000_000 + u64::from(nsec)),
                });
            }
            rx.set_status(i, TP_STATUS_KERNEL);
            rx.advance();
            got += 1;
        }
        if got == 0 {
            // Woken with nothing to read: the socket holds an error (the
            // interface went down). recvmmsg would return and clear it; here
            // it would keep epoll waking the worker, and fail the next send.
            take_error(self.fd);
        }
        got
    }

    /// Sends `frames` (with their offload metadata); returns how many the
    /// kernel took. A frame that does not fit a slot, or finds no free slot
    /// or is refused (interface down, socket buffer full), is not counted.
    pub fn send<'a>(&mut self, frames: impl IntoIterator<Item = (&'a [u8], u64)>) -> usize {
        let mut failed = 0;
        let mut total = 0;
        let room = self.tx.frame_size - TX_DATA - HEADER_LEN;
        for (f, meta) in frames {
            total += 1;
            // Shorter than an Ethernet header: the kernel would refuse it.
            if f.len() > room || f.len() < 14 {
                failed += 1;
                continue;
            }
            if !self.tx_free(self.tx.head) {
                failed += self.flush();
                if !self.tx_free(self.tx.head) {
                    failed += 1;
                    continue;
                }
            }
            let i = self.tx.head;
            let mut h = header(f, meta);
            // hdr_len = the whole frame: the kernel copies it all (module docs).
            h[2..4].copy_from_slice(&(f.len() as u16).to_le_bytes());
            let tp_len = (HEADER_LEN + f.len()) as u32;
            // SAFETY: the slot is free (user space's); header and frame fit
            // in it (checked against `room`).
            unsafe {
                let data = self.tx.slot(i).add(TX_DATA);
                ptr::copy_nonoverlapping(h.as_ptr(), data, HEADER_LEN);
                ptr::copy_nonoverlapping(f.as_ptr(), data.add(HEADER_LEN), f.len());
            }
            self.tx.set_len(i, tp_len);
            self.tx.set_status(i, TP_STATUS_SEND_REQUEST);
            self.queued.push(i);
            self.tx.advance();
        }
        failed += self.flush();
        total - failed
    }

    fn tx_free(&self, i: usize) -> bool {
        self.tx.status(i) & (TP_STATUS_SEND_REQUEST | TP_STATUS_SENDING | TP_STATUS_WRONG_FORMAT)
            == 0
    }

    /// Asks the kernel to send the queued slots; returns how many it did
    /// not take. Those (a suffix: the kernel takes slots in order) are
    /// taken back and the ring's head moved back to the first of them, where
    /// the kernel will look next.
    fn flush(&mut self) -> usize {
        if self.queued.is_empty() {
            return 0;
        }
        // Twice at most: a pending socket error (the interface was down)
        // fails the first send and is cleared by it.
        for _ in 0..2 {
            // SAFETY: a send without data: the kernel sends the ring's marked slots.
            let rc = unsafe { libc::send(self.fd, ptr::null(), 0, libc::MSG_DONTWAIT) };
            if rc >= 0 {
                break;
            }
        }
        let left = self
            .queued
            .iter()
            .position(|&i| self.tx.status(i) & TP_STATUS_SEND_REQUEST != 0);
        let failed = match left {
            Some(first) => {
                for &i in &self.queued[first..] {
                    self.tx.set_status(i, TP_STATUS_KERNEL);
                }
                self.tx.head = self.queued[first];
                self.queued.len() - first
            }
            None => 0,
        };
        self.queued.clear();
        failed
    }
}

/// Reads and so clears the socket's pending error (`SO_ERROR`).
fn take_error(fd: RawFd) {
    let mut err: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: a valid c_int buffer of the length given.
    unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            &mut err as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
}

/// Frees the rings of socket `fd` (which must not be mapped any more).
fn release(fd: RawFd) {
    for opt in [PACKET_RX_RING, PACKET_TX_RING] {
        let _ = set_option(fd, opt, &Request::NONE);
    }
}

impl Drop for Rings {
    /// Unmaps and frees the rings; the socket goes back to plain reads and
    /// writes (with `PACKET_VNET_HDR` still on: the owner sets it).
    fn drop(&mut self) {
        // SAFETY: map and map_len are this value's own mapping.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
        release(self.fd);
        unreserve(self.map_len);
    }
}

#[cfg(test)]
mod budget_tests {
    use super::*;

    /// The budget is the process's: its tests take turns.
    static TURN: std::sync::Mutex<()> = std::sync::Mutex::new(());

    #[test]
    fn rings_beyond_the_budget_are_refused_as_such_and_their_bytes_come_back() {
        let _turn = TURN.lock().unwrap();
        let e = reserve(budget() + 1).unwrap_err();
        assert!(budget_spent(&e), "{e}");
        assert!(!budget_spent(&io::Error::from(io::ErrorKind::OutOfMemory)));
        reserve(4096).unwrap();
        unreserve(4096);
    }

    #[test]
    fn a_port_keeps_its_share_of_the_budget_from_its_request_until_its_rings_go() {
        let _turn = TURN.lock().unwrap();
        let held = RING_BYTES.load(Ordering::Acquire);
        let first = Reserved::take(1500).unwrap();
        // 2 048 receive and 256 transmit slots of 2 KB for a 1 500-byte MTU.
        assert_eq!(first.map_len, (2048 + 256) * 2048);
        assert_eq!(RING_BYTES.load(Ordering::Acquire), held + first.map_len);
        // What is left is all a later request can have.
        let left = budget() - held - first.map_len;
        let e = reserve(left + 1).unwrap_err();
        assert!(budget_spent(&e), "{e}");
        drop(first);
        assert_eq!(RING_BYTES.load(Ordering::Acquire), held);
        // Rings that cannot be built (no socket) give their share back too.
        let second = Reserved::take(9000).unwrap();
        assert_eq!(second.rx.frame_size, 16384, "a jumbo frame's slot");
        assert!(second.build(-1).is_err());
        assert_eq!(RING_BYTES.load(Ordering::Acquire), held);
    }
}
