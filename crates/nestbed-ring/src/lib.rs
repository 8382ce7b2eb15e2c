//! The pieces of a packet socket's memory-mapped rings (`PACKET_MMAP`, `TPACKET_V2`) that
//! nestbed-linkd's ports (`nestbed-linkd/src/os/ring.rs`: a receive and a transmit ring per
//! port) and nestbed-probe's `--ring` (`nestbed-probe/src/os/ring.rs`: one ring on one
//! interface) share: the socket options, the ring request, and a ring's slots with the status
//! word that passes each slot between the kernel and user space.
//!
//! A slot opens with `struct tpacket2_hdr` (status, len, snaplen, mac, net, sec, nsec, VLAN
//! TCI and TPID, padding: 32 bytes); a received frame starts `mac` bytes into its slot, a
//! transmitted one right after the header ([`V2_HEADER`]).
//!
//! [`clock`] reads the clocks, and moves the kernel's receive stamps (on the realtime clock)
//! onto the monotonic one that both programs keep time on.
//!
//! The whole crate is platform code: every function touches the kernel or memory it maps,
//! but for the arithmetic of [`clock::ClockOffset`].
#![allow(unsafe_code)]
#![warn(missing_docs)]

pub mod clock;

use std::io;
use std::os::fd::RawFd;
use std::ptr;
use std::sync::atomic::{fence, Ordering};

/// `SOL_PACKET` option: set up the receive ring.
pub const PACKET_RX_RING: libc::c_int = 5;
/// `SOL_PACKET` option: frames received and dropped for want of room (`struct tpacket_stats`).
pub const PACKET_STATISTICS: libc::c_int = 6;
/// `SOL_PACKET` option: the ring's header version.
pub const PACKET_VERSION: libc::c_int = 10;
/// `SOL_PACKET` option: set up the transmit ring.
pub const PACKET_TX_RING: libc::c_int = 13;
/// `SOL_PACKET` option: a frame the kernel cannot send is dropped and its slot freed,
/// instead of stopping the ring.
pub const PACKET_LOSS: libc::c_int = 14;
/// `SOL_PACKET` option: frames carry a `struct virtio_net_hdr` before them.
pub const PACKET_VNET_HDR: libc::c_int = 15;
/// `PACKET_VERSION` value of `TPACKET_V2`.
pub const TPACKET_V2: libc::c_int = 1;
/// `sll_pkttype` of a frame this host sent.
pub const PACKET_OUTGOING: u8 = 4;

/// A slot the kernel owns (receive: free for a frame; transmit: free for user space).
pub const TP_STATUS_KERNEL: u32 = 0;
/// Receive: a frame waits in the slot for user space.
pub const TP_STATUS_USER: u32 = 1;
/// Transmit: user space asks the kernel to send the slot's frame.
pub const TP_STATUS_SEND_REQUEST: u32 = 1;
/// Transmit: the kernel is sending the slot's frame.
pub const TP_STATUS_SENDING: u32 = 2;
/// Transmit: the kernel refused the slot's frame.
pub const TP_STATUS_WRONG_FORMAT: u32 = 4;

/// `struct tpacket2_hdr`: 32 bytes, so `TPACKET_ALIGN`ed already.
pub const V2_HEADER: usize = 32;

/// Turns a C return value into an error when negative.
pub fn cvt(rc: libc::c_int) -> io::Result<libc::c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// The index of interface `ifname` in this network namespace.
pub fn if_index(ifname: &str) -> io::Result<u32> {
    let name = std::ffi::CString::new(ifname)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "an interface name with a NUL"))?;
    // SAFETY: name is a valid NUL-terminated string.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        index => Ok(index),
    }
}

/// Sets `SOL_PACKET` option `name` of socket `fd` to `value` (an int or a struct).
pub fn set_option<T>(fd: RawFd, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: value is a live T of the size given.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_PACKET,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// `struct tpacket_req`: a ring of `block_nr` blocks of `block_size` bytes holding
/// `frame_nr` slots of `frame_size` bytes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Request {
    /// Bytes per block, a multiple of the page size.
    pub block_size: u32,
    /// Blocks.
    pub block_nr: u32,
    /// Bytes per slot, a multiple of 16.
    pub frame_size: u32,
    /// Slots: `block_size / frame_size * block_nr`.
    pub frame_nr: u32,
}

impl Request {
    /// At least `frames` slots of `frame_size` bytes in blocks of `block_size` (which a slot
    /// must fit), every block full.
    pub fn new(frames: usize, frame_size: usize, block_size: usize) -> Request {
        let per_block = block_size / frame_size;
        let blocks = frames.div_ceil(per_block);
        Request {
            block_size: block_size as u32,
            block_nr: blocks as u32,
            frame_size: frame_size as u32,
            frame_nr: (blocks * per_block) as u32,
        }
    }

    /// No ring: frees the socket's ring of that kind.
    pub const NONE: Request = Request {
        block_size: 0,
        block_nr: 0,
        frame_size: 0,
        frame_nr: 0,
    };

    /// Bytes of the ring in the socket's mapping.
    pub fn bytes(&self) -> usize {
        self.block_size as usize * self.block_nr as usize
    }
}

/// One ring in a mapping: `frames` slots of `frame_size` bytes from `base`, and the next slot
/// user space looks at.
#[derive(Debug)]
pub struct Ring {
    /// Where the ring starts in this process.
    pub base: *mut u8,
    /// Bytes per slot.
    pub frame_size: usize,
    /// Slots.
    pub frames: usize,
    /// The next slot user space looks at.
    pub head: usize,
}

impl Ring {
    /// The ring of `req` mapped at `base`.
    pub fn at(base: *mut u8, req: &Request) -> Ring {
        Ring {
            base,
            frame_size: req.frame_size as usize,
            frames: req.frame_nr as usize,
            head: 0,
        }
    }

    /// Slot `i` (< `frames`).
    pub fn slot(&self, i: usize) -> *mut u8 {
        assert!(i < self.frames);
        // SAFETY: i < frames, so the slot lies inside the mapping.
        unsafe { self.base.add(i * self.frame_size) }
    }

    /// Slot `i`'s status word.
    pub fn status(&self, i: usize) -> u32 {
        // SAFETY: the status word opens every slot; the kernel writes it concurrently, hence
        // the volatile read.
        let s = unsafe { ptr::read_volatile(self.slot(i) as *const u32) };
        // The rest of the slot is read only after its status.
        fence(Ordering::Acquire);
        s
    }

    /// Sets slot `i`'s status word, after all that was written to the slot.
    pub fn set_status(&self, i: usize, status: u32) {
        fence(Ordering::Release);
        // SAFETY: as in `status`.
        unsafe { ptr::write_volatile(self.slot(i) as *mut u32, status) };
    }

    /// The u16 at `offset` in slot `i`'s header.
    pub fn u16_at(&self, i: usize, offset: usize) -> u16 {
        assert!(offset + 2 <= V2_HEADER + 20);
        // SAFETY: inside the slot's header (and the sockaddr_ll after it).
        unsafe { ptr::read_unaligned(self.slot(i).add(offset) as *const u16) }
    }

    /// The u32 at `offset` in slot `i`'s header.
    pub fn u32_at(&self, i: usize, offset: usize) -> u32 {
        assert!(offset + 4 <= V2_HEADER);
        // SAFETY: inside the slot's header.
        unsafe { ptr::read_unaligned(self.slot(i).add(offset) as *const u32) }
    }

    /// Sets the frame length (`tp_len`) of transmit slot `i`.
    pub fn set_len(&self, i: usize, len: u32) {
        // SAFETY: tp_len is the u32 at offset 4 of the slot's header.
        unsafe { ptr::write_unaligned(self.slot(i).add(4) as *mut u32, len) };
    }

    /// The `sll_pkttype` of received slot `i` (byte 10 of the `sockaddr_ll` after the header).
    pub fn pkttype(&self, i: usize) -> u8 {
        // SAFETY: inside the slot's headroom.
        unsafe { *self.slot(i).add(V2_HEADER + 10) }
    }

    /// The `len` bytes at `offset` of slot `i`, which the caller owns (its status says so)
    /// and which lie inside it.
    ///
    /// # Safety
    /// The slot must be user space's for as long as the slice lives, and
    /// `offset + len <= frame_size`.
    pub unsafe fn bytes(&self, i: usize, offset: usize, len: usize) -> &[u8] {
        debug_assert!(offset + len <= self.frame_size);
        std::slice::from_raw_parts(self.slot(i).add(offset), len)
    }

    /// Moves the head to the next slot.
    pub fn advance(&mut self) {
        self.head = (self.head + 1) % self.frames;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_fills_whole_blocks() {
        let r = Request::new(256, 2048, 64 * 1024);
        assert_eq!((r.block_nr, r.frame_nr, r.bytes()), (8, 256, 512 * 1024));
        let odd = Request::new(100, 2048, 16 * 1024);
        assert_eq!((odd.block_nr, odd.frame_nr), (13, 104));
    }

    #[test]
    fn slots_statuses_and_headers_in_plain_memory() {
        let mut memory = vec![0u64; 4 * 256 / 8];
        let req = Request::new(4, 256, 1024);
        let mut ring = Ring::at(memory.as_mut_ptr().cast(), &req);
        assert_eq!(ring.status(3), TP_STATUS_KERNEL);
        ring.set_status(3, TP_STATUS_USER);
        ring.set_len(3, 60);
        assert_eq!((ring.status(3), ring.u32_at(3, 4)), (TP_STATUS_USER, 60));
        for _ in 0..5 {
            ring.advance();
        }
        assert_eq!(ring.head, 1, "round the ring");
    }
}
