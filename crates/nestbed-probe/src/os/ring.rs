//! Packet rings (`PACKET_MMAP`, `TPACKET_V2`) on one interface, for `send --ring` and
//! `recv --ring`: a sender that writes whole frames into a transmit ring's slots and hands a
//! batch to the kernel with one `send`, and a receiver that reads frames (their first bytes
//! and the kernel's receive time) from a receive ring with no system call per frame. Neither
//! goes through the UDP stack, whose per-datagram cost made the probe, not the link, the
//! bottleneck at 150 000 datagrams/s on two cores.
//!
//! The transmit socket has `PACKET_VNET_HDR` on and gives each frame a virtio-net header
//! whose `hdr_len` is the whole frame, so the kernel copies the frame into its buffer instead
//! of attaching the ring's page, which it would give back (as nestbed-linkd's rings note)
//! while the bytes may still sit in a socket queue further on, to be overwritten by a later
//! frame. The transmit socket's protocol is 0: it receives nothing.
//!
//! The receive ring's slots are small (256 bytes): it keeps each frame's headers and the
//! probe header, and the kernel says the frame's whole length, which is all a receiver
//! counts. Its socket takes IPv4 frames only.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr;

use nestbed_ring::{
    cvt, set_option, Request, Ring, PACKET_LOSS, PACKET_OUTGOING, PACKET_RX_RING,
    PACKET_STATISTICS, PACKET_TX_RING, PACKET_VERSION, PACKET_VNET_HDR, TPACKET_V2,
    TP_STATUS_KERNEL, TP_STATUS_SENDING, TP_STATUS_SEND_REQUEST, TP_STATUS_USER,
    TP_STATUS_WRONG_FORMAT, V2_HEADER,
};

use crate::frame::{Mac, ETH_P_IP};

/// `struct virtio_net_hdr`.
const VNET_LEN: usize = 10;

/// Transmit slots of 2 KB (a 1 514-byte frame and its headers): 512 KB.
const TX_FRAMES: usize = 256;
const TX_FRAME_SIZE: usize = 2048;
/// Receive slots of 256 bytes (headers, then the frame's first 190 bytes): 8 MB, some
/// 200 ms of 64-byte frames at 150 000 a second while the receiver waits for a core.
const RX_FRAMES: usize = 32768;
const RX_FRAME_SIZE: usize = 256;
const BLOCK: usize = 64 * 1024;

/// The index of interface `name` in this network namespace, as sockaddr_ll holds it.
fn index(name: &str) -> io::Result<libc::c_int> {
    Ok(nestbed_ring::if_index(name)? as libc::c_int)
}

/// A packet socket of `protocol` (network order) with a `ring` of the given shape mapped,
/// then bound to interface `ifname` (binding last: no frame arrives before the ring exists).
struct Mapped {
    fd: OwnedFd,
    ring: Ring,
    len: usize,
}

impl Mapped {
    fn open(
        ifname: &str,
        protocol: u16,
        ring: libc::c_int,
        frames: usize,
        frame_size: usize,
        vnet: bool,
    ) -> io::Result<Mapped> {
        let ifindex = index(ifname)?;
        // SAFETY: plain socket creation; the result is checked and owned at once.
        let fd =
            unsafe { OwnedFd::from_raw_fd(cvt(libc::socket(libc::AF_PACKET, libc::SOCK_RAW, 0))?) };
        let raw = fd.as_raw_fd();
        let on: libc::c_int = 1;
        if vnet {
            set_option(raw, PACKET_VNET_HDR, &on)?;
        }
        set_option(raw, PACKET_VERSION, &TPACKET_V2)?;
        if ring == PACKET_TX_RING {
            // A frame the kernel refuses is dropped and its slot freed, not the ring stopped.
            set_option(raw, PACKET_LOSS, &on)?;
        }
        let req = Request::new(frames, frame_size, BLOCK);
        set_option(raw, ring, &req)?;
        let len = req.bytes();
        // SAFETY: maps the socket's one ring as the kernel laid it out; checked below.
        let base = unsafe {
            libc::mmap(
                ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                raw,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let mapped = Mapped {
            fd,
            ring: Ring::at(base.cast(), &req),
            len,
        };
        // SAFETY: all-zero is a valid sockaddr_ll; the fields that matter are set.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = protocol;
        addr.sll_ifindex = ifindex;
        // SAFETY: addr is a valid sockaddr_ll of the length given.
        cvt(unsafe {
            libc::bind(
                raw,
                (&addr as *const libc::sockaddr_ll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(mapped)
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: base and len are this value's own mapping; the socket closes after.
        unsafe { libc::munmap(self.ring.base.cast(), self.len) };
    }
}

/// The MAC address of interface `name` (`SIOCGIFHWADDR`).
pub fn interface_mac(name: &str) -> io::Result<Mac> {
    index(name)?;
    // SAFETY: an ordinary datagram socket for the ioctl, owned at once.
    let fd =
        unsafe { OwnedFd::from_raw_fd(cvt(libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0))?) };
    // SAFETY: all-zero is a valid ifreq.
    let mut req: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(name.as_bytes()) {
        *dst = src as libc::c_char;
    }
    // SAFETY: req is a valid ifreq whose name (checked to exist above, so shorter than
    // IFNAMSIZ) is NUL-terminated by the zeroing.
    cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::SIOCGIFHWADDR, &mut req) })?;
    // SAFETY: SIOCGIFHWADDR filled the hardware-address member of the union.
    let data = unsafe { req.ifr_ifru.ifru_hwaddr.sa_data };
    let mut mac = [0u8; 6];
    for (m, d) in mac.iter_mut().zip(data) {
        *m = d as u8;
    }
    Ok(mac)
}

/// A transmit ring on one interface.
pub struct TxRing {
    mapped: Mapped,
    /// Slots marked since the last [`TxRing::flush`], in ring order.
    queued: Vec<usize>,
}

impl TxRing {
    /// Opens a transmit ring on interface `ifname` of this namespace.
    pub fn open(ifname: &str) -> io::Result<TxRing> {
        Ok(TxRing {
            mapped: Mapped::open(ifname, 0, PACKET_TX_RING, TX_FRAMES, TX_FRAME_SIZE, true)?,
            queued: Vec::with_capacity(TX_FRAMES),
        })
    }

    /// The largest frame a slot holds.
    pub fn max_frame(&self) -> usize {
        self.mapped.ring.frame_size - V2_HEADER - VNET_LEN
    }

    /// Whether the next slot is free for [`TxRing::push`].
    pub fn has_room(&self) -> bool {
        let s = self.mapped.ring.status(self.mapped.ring.head);
        s & (TP_STATUS_SEND_REQUEST | TP_STATUS_SENDING | TP_STATUS_WRONG_FORMAT) == 0
    }

    /// Writes a frame of `len` bytes (`template` then what `fill` writes over it) into the
    /// next slot and marks it for sending. The caller checked [`TxRing::has_room`] and that
    /// `template` fits ([`TxRing::max_frame`]).
    pub fn push(&mut self, template: &[u8], fill: impl FnOnce(&mut [u8])) {
        assert!(template.len() <= self.max_frame() && self.has_room());
        let i = self.mapped.ring.head;
        let mut vnet = [0u8; VNET_LEN];
        // hdr_len = the whole frame: the kernel copies it all (module docs).
        vnet[2..4].copy_from_slice(&(template.len() as u16).to_le_bytes());
        // SAFETY: the slot is free (user space's); the header and the frame fit in it.
        let frame = unsafe {
            let data = self.mapped.ring.slot(i).add(V2_HEADER);
            ptr::copy_nonoverlapping(vnet.as_ptr(), data, VNET_LEN);
            ptr::copy_nonoverlapping(template.as_ptr(), data.add(VNET_LEN), template.len());
            std::slice::from_raw_parts_mut(data.add(VNET_LEN), template.len())
        };
        self.mapped
            .ring
            .set_len(i, (VNET_LEN + template.len()) as u32);
        fill(frame);
        self.mapped.ring.set_status(i, TP_STATUS_SEND_REQUEST);
        self.queued.push(i);
        self.mapped.ring.advance();
    }

    /// Hands the marked slots to the kernel (one `send`, which returns once it has sent them);
    /// returns how many it did not take. Those (a suffix: it takes slots in order) are
    /// taken back and the head moved back to the first, where the kernel will look next.
    pub fn flush(&mut self) -> usize {
        if self.queued.is_empty() {
            return 0;
        }
        // Twice at most: a pending socket error fails the first send and is cleared by it.
        for _ in 0..2 {
            // SAFETY: a send without data: the kernel sends the ring's marked slots.
            if unsafe { libc::send(self.mapped.fd.as_raw_fd(), ptr::null(), 0, 0) } >= 0 {
                break;
            }
        }
        let left = self
            .queued
            .iter()
            .position(|&i| self.mapped.ring.status(i) & TP_STATUS_SEND_REQUEST != 0);
        let failed = match left {
            Some(first) => {
                for &i in &self.queued[first..] {
                    self.mapped.ring.set_status(i, TP_STATUS_KERNEL);
                }
                self.mapped.ring.head = self.queued[first];
                self.queued.len() - first
            }
            None => 0,
        };
        self.queued.clear();
        failed
    }
}

// SAFETY: the mapping belongs to the value alone and is touched only through it.
unsafe impl Send for TxRing {}

/// A receive ring on one interface, for IPv4 frames.
pub struct RxRing {
    mapped: Mapped,
    drops: u64,
}

// SAFETY: as for `TxRing`.
unsafe impl Send for RxRing {}

/// One frame read from a receive ring.
pub struct Frame<'a> {
    /// The frame's first bytes (as many as the slot holds).
    pub head: &'a [u8],
    /// The frame's whole length, bytes without FCS.
    pub len: usize,
    /// When it reached this host, `CLOCK_REALTIME` ns.
    pub realtime_ns: u64,
}

impl RxRing {
    /// Opens a receive ring on interface `ifname` of this namespace.
    pub fn open(ifname: &str) -> io::Result<RxRing> {
        Ok(RxRing {
            mapped: Mapped::open(
                ifname,
                ETH_P_IP.to_be(),
                PACKET_RX_RING,
                RX_FRAMES,
                RX_FRAME_SIZE,
                false,
            )?,
            drops: 0,
        })
    }

    /// Reads every frame waiting that came from the wire (not one this host sent) and calls
    /// `each` for it; returns how many slots it read.
    pub fn drain(&mut self, mut each: impl FnMut(Frame<'_>)) -> usize {
        let r = &mut self.mapped.ring;
        let mut got = 0;
        loop {
            let i = r.head;
            if r.status(i) & TP_STATUS_USER == 0 {
                break;
            }
            let len = r.u32_at(i, 4) as usize;
            let snaplen = r.u32_at(i, 8) as usize;
            let (mac, pkttype) = (usize::from(r.u16_at(i, 12)), r.pkttype(i));
            let (sec, nsec) = (r.u32_at(i, 16), r.u32_at(i, 20));
            if pkttype != PACKET_OUTGOING && mac + snaplen <= r.frame_size {
                // SAFETY: the slot is user space's until its status is given back below; the
                // kernel said the frame's captured bytes lie inside it.
                let head = unsafe { r.bytes(i, mac, snaplen) };
                each(Frame {
                    head,
                    len,
                    realtime_ns: u64::from(sec) * 1_000_000_000 + u64::from(nsec),
                });
            }
            r.set_status(i, TP_STATUS_KERNEL);
            r.advance();
            got += 1;
        }
        got
    }

    /// Waits up to `timeout_ms` for a frame.
    pub fn wait(&self, timeout_ms: i32) {
        let mut p = libc::pollfd {
            fd: self.mapped.fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, timeout_ms) };
    }

    /// Frames the kernel dropped because the ring was full, so far (`PACKET_STATISTICS`,
    /// which counts from its last reading).
    pub fn drops(&mut self) -> u64 {
        let mut stats = [0u32; 2]; // tp_packets, tp_drops
        let mut len = std::mem::size_of_val(&stats) as libc::socklen_t;
        // SAFETY: a buffer of the length given.
        let rc = unsafe {
            libc::getsockopt(
                self.mapped.fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_STATISTICS,
                stats.as_mut_ptr().cast(),
                &mut len,
            )
        };
        if rc == 0 {
            self.drops += u64::from(stats[1]);
        }
        self.drops
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_interface_that_does_not_exist_is_said_so() {
        let e = TxRing::open("nestbed-none0").err().unwrap();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
        assert_eq!(
            interface_mac("nestbed-none0").unwrap_err().raw_os_error(),
            Some(libc::ENODEV)
        );
    }

    #[test]
    fn loopback_has_the_zero_mac() {
        assert_eq!(interface_mac("lo").unwrap(), [0u8; 6]);
    }
}
