//! Everything that talks to the kernel: the only module allowed `unsafe`.
//!
//! - [`PacketSocket`]: an AF_PACKET `SOCK_RAW` socket bound to one interface
//!   for all protocols, non-blocking, ignoring the frames it sends itself,
//!   read and written through memory-mapped rings ([`ring`], [`Io::Rings`])
//!   while the interface has offloads off, and otherwise in batches with
//!   `recvmmsg`/`sendmmsg`, each frame with its virtio-net header while the
//!   interface has offloads on (`PACKET_VNET_HDR`, see [`crate::offload`]).
//!   Opened in two steps: [`Unstarted::open`] (cheap, in request order) and
//!   [`Unstarted::start`] (the rings, which wait for the kernel, then bind).
//! - [`Epoll`], [`TimerFd`], [`EventFd`]: the pieces of a worker's loop.
//! - [`set_link_up`] / [`link_is_up`]: `SIOCSIFFLAGS`/`SIOCGIFFLAGS` on an
//!   interface (admin down).
//! - [`LinkEvents`]: rtnetlink's messages of the namespace's interfaces.
//! - [`monotonic_ns`], [`set_min_timer_slack`], [`umask`], signal flags.
//!
//! Every function returns `io::Result` with the OS error; callers add the
//! interface or object name.
#![allow(unsafe_code)]

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

pub use nestbed_ring::clock::monotonic_ns;
pub use nestbed_ring::if_index;
use nestbed_ring::{cvt, PACKET_OUTGOING, PACKET_VNET_HDR};

use crate::offload::{header, meta_from_header, HEADER_LEN};

pub mod ring;

/// How packet sockets read and write frames.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Io {
    /// Memory-mapped rings while the interface has offloads off (wire-sized
    /// frames); `recvmmsg`/`sendmmsg` while it has them on.
    Rings,
    /// `recvmmsg`/`sendmmsg` always (the path before rings, kept to compare).
    Copy,
}

/// `SOL_PACKET` option: do not deliver frames this host sends (Linux ≥ 4.20).
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
/// `SOL_PACKET` option: sent frames skip the device's qdisc.
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const ETH_P_ALL: u16 = 0x0003;

/// Largest frame read: a 64 KB super-frame (GSO, offloads on) with its
/// Ethernet and VLAN headers; a larger frame is read truncated and counted.
pub const FRAME_BUF: usize = 66 * 1024;

/// Sets this thread's timer slack to 1 ns so timer wake-ups are not
/// coalesced (the default slack is 50 µs).
pub fn set_min_timer_slack() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong, 0, 0, 0) };
    cvt(rc).map(|_| ())
}

/// Puts the calling thread in the real-time FIFO class at the lowest
/// priority (`on`), or back in the normal class (its nice value is kept).
/// Needs CAP_SYS_NICE to go in.
pub fn set_realtime(on: bool) -> io::Result<()> {
    let (policy, priority) = if on {
        (libc::SCHED_FIFO, 1)
    } else {
        (libc::SCHED_OTHER, 0)
    };
    let param = libc::sched_param {
        sched_priority: priority,
    };
    // SAFETY: param is a valid sched_param; pid 0 is the calling thread.
    let rc = unsafe { libc::sched_setscheduler(0, policy, &param) };
    cvt(rc).map(|_| ())
}

/// Offers the CPU to other runnable threads (`sched_yield`). A busy-waiting
/// worker calls it on every round so that a thread woken on its CPU (the
/// receiver of a frame just sent, say) runs at once instead of at the next
/// scheduler tick.
pub fn yield_cpu() {
    // SAFETY: plain call without arguments.
    unsafe { libc::sched_yield() };
}

/// Sets the process umask, returning the old one.
pub fn umask(mask: u32) -> u32 {
    // SAFETY: umask cannot fail.
    unsafe { libc::umask(mask as libc::mode_t) as u32 }
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    let fd = cvt(fd)?;
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ifreq_for(ifname: &str) -> io::Result<libc::ifreq> {
    let bytes = ifname.as_bytes();
    if bytes.is_empty() || bytes.len() >= libc::IFNAMSIZ || bytes.contains(&0) {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    }
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut req: libc::ifreq = unsafe { mem::zeroed() };
    for (dst, &src) in req.ifr_name.iter_mut().zip(bytes) {
        *dst = src as libc::c_char;
    }
    Ok(req)
}

fn if_flags(sock: &OwnedFd, req: &mut libc::ifreq) -> io::Result<libc::c_short> {
    // SAFETY: req is a valid ifreq with a NUL-terminated name.
    cvt(unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFFLAGS,
            req as *mut libc::ifreq,
        )
    })?;
    // SAFETY: SIOCGIFFLAGS filled the flags member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_flags })
}

fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket call.
    owned(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })
}

/// Sets interface `ifname` administratively up or down (`IFF_UP`). Setting
/// the host end of a veth down makes its peer lose carrier.
pub fn set_link_up(ifname: &str, up: bool) -> io::Result<()> {
    let sock = control_socket()?;
    let mut req = ifreq_for(ifname)?;
    let flags = if_flags(&sock, &mut req)?;
    let up_flag = libc::IFF_UP as libc::c_short;
    let new = if up {
        flags | up_flag
    } else {
        flags & !up_flag
    };
    if new == flags {
        return Ok(());
    }
    req.ifr_ifru.ifru_flags = new;
    // SAFETY: req is a valid ifreq with name and flags set.
    cvt(unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCSIFFLAGS,
            &mut req as *mut libc::ifreq,
        )
    })?;
    Ok(())
}

/// The MTU of interface `ifname` (`SIOCGIFMTU`).
pub fn if_mtu(ifname: &str) -> io::Result<usize> {
    let sock = control_socket()?;
    let mut req = ifreq_for(ifname)?;
    // SAFETY: req is a valid ifreq with a NUL-terminated name.
    cvt(unsafe {
        libc::ioctl(
            sock.as_raw_fd(),
            libc::SIOCGIFMTU,
            &mut req as *mut libc::ifreq,
        )
    })?;
    // SAFETY: SIOCGIFMTU filled the mtu member of the union.
    Ok(unsafe { req.ifr_ifru.ifru_mtu }.max(0) as usize)
}

/// Whether interface `ifname` is administratively up.
pub fn link_is_up(ifname: &str) -> io::Result<bool> {
    let sock = control_socket()?;
    let mut req = ifreq_for(ifname)?;
    Ok(if_flags(&sock, &mut req)? & libc::IFF_UP as libc::c_short != 0)
}

/// `SIOCETHTOOL` commands reading one offload each: TCP segmentation,
/// generic segmentation, generic receive offload. (Not the transmit
/// checksum: its legacy command also reports the SCTP checksum, which a veth
/// keeps on when nestbed turns the others off.)
const ETHTOOL_OFFLOAD_GETS: [u32; 3] = [0x1e, 0x23, 0x2b];

/// Whether interface `ifname` has a segmentation or receive offload on, so
/// that frames crossing it may be super-frames (with unfinished checksums).
pub fn offloads_on(ifname: &str) -> io::Result<bool> {
    let sock = control_socket()?;
    for cmd in ETHTOOL_OFFLOAD_GETS {
        // struct ethtool_value { u32 cmd; u32 data; }
        let mut value: [u32; 2] = [cmd, 0];
        let mut req = ifreq_for(ifname)?;
        req.ifr_ifru.ifru_data = value.as_mut_ptr() as *mut libc::c_char;
        // SAFETY: req names the interface and points at a valid ethtool_value.
        cvt(unsafe {
            libc::ioctl(
                sock.as_raw_fd(),
                libc::SIOCETHTOOL,
                &mut req as *mut libc::ifreq,
            )
        })?;
        if value[1] != 0 {
            return Ok(true);
        }
    }
    Ok(false)
}

/// A netlink socket in rtnetlink's link group: the kernel tells it of every
/// change of an interface of this namespace, its removal and a change of
/// its offloads included (`NETDEV_FEAT_CHANGE` sends `RTM_NEWLINK`).
pub struct LinkEvents {
    fd: OwnedFd,
    buf: Vec<u8>,
}

/// What one wait on [`LinkEvents`] heard.
#[derive(Debug, PartialEq, Eq)]
pub enum Heard {
    /// The interfaces the messages named (none when the wait ran out).
    Names(Vec<String>),
    /// The socket's buffer overran and messages were lost: any interface
    /// may have changed.
    Lost,
}

impl LinkEvents {
    /// Opens the socket; [`LinkEvents::heard`] waits at most `wait`.
    pub fn open(wait: std::time::Duration) -> io::Result<LinkEvents> {
        let fd = owned(
            // SAFETY: plain socket call.
            unsafe {
                libc::socket(
                    libc::AF_NETLINK,
                    libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                    libc::NETLINK_ROUTE,
                )
            },
        )?;
        // SAFETY: sockaddr_nl is plain data; all zeros is a valid value.
        let mut addr: libc::sockaddr_nl = unsafe { mem::zeroed() };
        addr.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        addr.nl_groups = libc::RTMGRP_LINK as u32;
        // SAFETY: addr is a valid sockaddr_nl of the size given.
        cvt(unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_nl as *const libc::sockaddr,
                mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        })?;
        let timeout = libc::timeval {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_usec: wait.subsec_micros() as libc::suseconds_t,
        };
        // SAFETY: the option buffer is a valid timeval of the size given.
        cvt(unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &timeout as *const libc::timeval as *const libc::c_void,
                mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        })?;
        // Room for the messages of a burst of changes (a swap of many links);
        // the default may be refused by a limit, which only means more lost.
        let _ = set_int_option(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            BUFFER_BYTES,
        );
        Ok(LinkEvents {
            fd,
            buf: vec![0; 64 << 10],
        })
    }

    /// Waits for the kernel's messages (at most the time given at opening),
    /// then reads all that are queued.
    pub fn heard(&mut self) -> io::Result<Heard> {
        let mut names = Vec::new();
        let mut flags = libc::MSG_TRUNC; // n is then the message's length, read or not
        loop {
            // SAFETY: buf is valid for writes of its length.
            let n = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    self.buf.as_mut_ptr() as *mut libc::c_void,
                    self.buf.len(),
                    flags,
                )
            };
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => return Ok(Heard::Names(names)),
                    Some(libc::EINTR) => continue,
                    Some(libc::ENOBUFS) => return Ok(Heard::Lost),
                    _ => return Err(e),
                }
            }
            if n as usize > self.buf.len() {
                return Ok(Heard::Lost); // the rest of it, and so some name, was cut off
            }
            link_names(&self.buf[..n as usize], &mut names);
            flags = libc::MSG_TRUNC | libc::MSG_DONTWAIT;
        }
    }
}

/// Appends the interface named by each `RTM_NEWLINK` or `RTM_DELLINK`
/// message of `datagram` (netlink messages, as read from the socket) to
/// `names`; anything malformed ends the reading.
pub fn link_names(datagram: &[u8], names: &mut Vec<String>) {
    const NLMSG_HDRLEN: usize = 16;
    const IFINFOMSG_LEN: usize = 16;
    const NLA_TYPE_MASK: u16 = 0x3fff; // without NLA_F_NESTED and NLA_F_NET_BYTEORDER
    let align = |n: usize| (n + 3) & !3;
    let u16_at = |b: &[u8], at: usize| u16::from_ne_bytes([b[at], b[at + 1]]);
    let mut at = 0;
    while at + NLMSG_HDRLEN <= datagram.len() {
        let len = u32::from_ne_bytes(datagram[at..at + 4].try_into().unwrap()) as usize;
        if len < NLMSG_HDRLEN || at + len > datagram.len() {
            return;
        }
        let message = &datagram[at..at + len];
        let kind = u16_at(message, 4);
        if kind == libc::RTM_NEWLINK || kind == libc::RTM_DELLINK {
            let mut a = NLMSG_HDRLEN + IFINFOMSG_LEN;
            while a + 4 <= message.len() {
                let attr_len = u16_at(message, a) as usize;
                if attr_len < 4 || a + attr_len > message.len() {
                    break;
                }
                if u16_at(message, a + 2) & NLA_TYPE_MASK == libc::IFLA_IFNAME {
                    let name = &message[a + 4..a + attr_len];
                    let name = name.split(|&c| c == 0).next().unwrap_or_default();
                    names.push(String::from_utf8_lossy(name).into_owned());
                    break;
                }
                a += align(attr_len);
            }
        }
        at += align(len);
    }
}

/// Whether this process runs as root (may take the real-time class, make
/// namespaces).
#[cfg(test)]
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Moves the calling thread (and what it starts from now on) into a network
/// namespace of its own, which goes once they all end: for tests that make
/// interfaces without touching the machine's.
#[cfg(test)]
pub fn enter_new_net_namespace() -> io::Result<()> {
    // SAFETY: unshare affects only the calling thread's namespaces.
    cvt(unsafe { libc::unshare(libc::CLONE_NEWNET) }).map(drop)
}

/// A raw packet socket bound to one interface.
pub struct PacketSocket {
    /// Declared before `fd`: the rings are unmapped and freed while the
    /// socket is still open.
    rings: Option<ring::Rings>,
    fd: OwnedFd,
    ifindex: u32,
    ifname: String,
    io: Io,
    /// The kernel drops the frames this host sends before they reach the
    /// socket, so their source address need not be read.
    ignores_outgoing: bool,
    /// Frames are read and sent with their offload metadata (the interface
    /// has offloads on).
    vnet: bool,
}

/// Room for the control messages of one received frame (a receive
/// timestamp, with margin).
const CMSG_BUF: usize = 64;

/// Bytes of each frame's slot in a batch's contiguous area: the virtio-net
/// header and any frame up to a jumbo one. A longer frame (a super-frame)
/// continues in the slot's own overflow buffer, which small frames never
/// touch, so a batch of small frames stays in a few cache lines and pages.
const SLOT: usize = 2048;

/// Reusable buffers and headers for one `recvmmsg` batch (nothing is
/// allocated per call).
pub struct Batch {
    slots: Vec<u8>,
    overflow: Vec<Vec<u8>>,
    addrs: Vec<libc::sockaddr_ll>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
    cmsgs: Vec<[u64; CMSG_BUF / 8]>,
}

// SAFETY: the raw pointers in `iovs` and `msgs` only ever point into the
// batch's own buffers; they are rewritten before every call and never
// dereferenced outside `recv_batch`, so moving the batch to another thread
// is sound.
unsafe impl Send for Batch {}

impl Batch {
    /// Buffers for up to `n` frames per call.
    pub fn new(n: usize) -> Batch {
        Batch {
            slots: vec![0u8; n * SLOT],
            overflow: (0..n)
                .map(|_| vec![0u8; FRAME_BUF + HEADER_LEN - SLOT])
                .collect(),
            // SAFETY: sockaddr_ll is plain old data.
            addrs: vec![unsafe { mem::zeroed() }; n],
            iovs: Vec::with_capacity(2 * n),
            msgs: Vec::with_capacity(n),
            cmsgs: vec![[0u64; CMSG_BUF / 8]; n],
        }
    }
}

/// Reusable headers for `sendmmsg` (nothing is allocated per call once
/// they have grown to the batch size).
#[derive(Default)]
pub struct SendBatch {
    headers: Vec<[u8; HEADER_LEN]>,
    iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: as for `Batch`: the pointers are scratch, rewritten before every
// call and only used inside `send_batch`.
unsafe impl Send for SendBatch {}

/// One frame read by [`PacketSocket::recv_batch`].
pub struct Received<'a> {
    /// The bytes read (truncated to [`FRAME_BUF`] if `truncated`): the
    /// first ones, and the rest of a long frame.
    pub data: (&'a [u8], &'a [u8]),
    /// The frame was longer than the buffer.
    pub truncated: bool,
    /// Its virtio-net header, packed ([`crate::offload::meta_from_header`]).
    pub meta: u64,
    /// When the kernel received the frame (`CLOCK_REALTIME` ns), if it
    /// said so (`SO_TIMESTAMPNS`).
    pub kernel_realtime_ns: Option<u64>,
}

/// The `SCM_TIMESTAMPNS` timestamp in a received message's control data.
fn rx_timestamp(hdr: &libc::msghdr) -> Option<u64> {
    // SAFETY: hdr's control buffer is valid for msg_controllen bytes (set by
    // the kernel after recvmmsg); the CMSG_* helpers stay inside it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                if ts.tv_sec <= 0 {
                    return None;
                }
                return Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    None
}

/// An iovec of `len` bytes at `base` (from a mutable borrow for a receive
/// call, which writes through it; a send call only reads).
fn iovec(base: *mut u8, len: usize) -> libc::iovec {
    libc::iovec {
        iov_base: base as *mut libc::c_void,
        iov_len: len,
    }
}

/// Receive and send buffer each packet socket asks for.
const BUFFER_BYTES: libc::c_int = 4 << 20;

/// Sets an integer socket option; whether the kernel took it (failure leaves the default).
fn set_int_option(fd: RawFd, level: libc::c_int, opt: libc::c_int, value: libc::c_int) -> bool {
    // SAFETY: the option buffer is a valid c_int of the size given; a bad fd only fails.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &value as *const libc::c_int as *const libc::c_void,
            mem::size_of::<libc::c_int>() as libc::socklen_t,
        ) == 0
    }
}

/// A packet socket for one interface that is not bound yet (it receives
/// nothing), with its frame I/O path chosen: the cheap part of opening,
/// done in request order, so which ports get rings from the budget is
/// decided in that order. [`Unstarted::start`] does the slow part (the
/// rings) and binds the socket; many sockets can start at once, on threads
/// of their own, and then share the kernel's waits.
pub struct Unstarted {
    sock: PacketSocket,
    reserved: Option<ring::Reserved>,
}

impl Unstarted {
    /// Opens the socket, with its offload metadata (`vnet`: some port of
    /// its link has offloads on) or on the rings if `io` allows and the
    /// budget has room. Fails if `ifname` does not exist.
    pub fn open(ifname: &str, io: Io, vnet: bool) -> io::Result<Unstarted> {
        let ifindex = if_index(ifname)?;
        // Protocol 0: receive nothing until bound, so no frame of another
        // interface slips in between socket() and bind(), nor any before the
        // socket's rings exist.
        // SAFETY: plain socket call.
        let fd = owned(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        let raw = fd.as_raw_fd();
        // Best effort: older kernels lack it; recv_batch also checks sll_pkttype.
        let ignores_outgoing = set_int_option(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1);
        // Frames go straight to the veth (no qdisc: veths have none).
        set_int_option(raw, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1);
        // The FORCE options (root) go past net.core.rmem_max/wmem_max, 208 KiB on a stock
        // host, which would hold only a few hundred small frames while a worker is
        // descheduled; without the privilege the plain ones get what the limits allow.
        for (forced, plain) in [
            (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
            (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
        ] {
            if !set_int_option(raw, libc::SOL_SOCKET, forced, BUFFER_BYTES) {
                set_int_option(raw, libc::SOL_SOCKET, plain, BUFFER_BYTES);
            }
        }
        // Best effort: the kernel's receive time of each frame
        // (CLOCK_REALTIME), so a frame's arrival does not depend on when the
        // worker gets round to reading it.
        set_int_option(raw, libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1);
        let mut sock = PacketSocket {
            rings: None,
            fd,
            ifindex,
            ifname: ifname.to_string(),
            io,
            ignores_outgoing,
            vnet,
        };
        let mut reserved = None;
        if !vnet && io == Io::Rings {
            match if_mtu(ifname).and_then(ring::Reserved::take) {
                Ok(r) => reserved = Some(r),
                Err(e) if ring::budget_spent(&e) => sock.io = Io::Copy,
                Err(e) => return Err(e),
            }
        } else if vnet && !set_int_option(raw, libc::SOL_PACKET, PACKET_VNET_HDR, 1) {
            return Err(io::Error::last_os_error());
        }
        Ok(Unstarted { sock, reserved })
    }

    /// The interface's name.
    pub fn ifname(&self) -> &str {
        &self.sock.ifname
    }

    /// Sets up the rings reserved for the socket, if any (the slow part:
    /// see [`ring::Reserved::build`]), and binds it: from here it receives
    /// every frame that arrives on its interface. If the rings cannot be
    /// set up the error is returned (the socket is closed).
    pub fn start(self) -> io::Result<PacketSocket> {
        let Unstarted { mut sock, reserved } = self;
        let raw = sock.fd.as_raw_fd();
        if let Some(r) = reserved {
            sock.rings = Some(r.build(raw)?);
        }
        // SAFETY: sockaddr_ll is plain old data.
        let mut addr: libc::sockaddr_ll = unsafe { mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_ALL.to_be();
        addr.sll_ifindex = sock.ifindex as i32;
        // SAFETY: addr is a valid sockaddr_ll of the given size.
        cvt(unsafe {
            libc::bind(
                raw,
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(sock)
    }
}

impl PacketSocket {
    /// Opens a socket receiving every frame that arrives on `ifname` (but
    /// not the ones sent from this host) and sending frames out of it: an
    /// [`Unstarted`] socket, then [`Unstarted::start`].
    pub fn open(ifname: &str, io: Io) -> io::Result<PacketSocket> {
        Unstarted::open(ifname, io, offloads_on(ifname).unwrap_or(true))?.start()
    }
    /// Whether frames are read and sent with their offload metadata.
    pub fn vnet(&self) -> bool {
        self.vnet
    }

    /// Whether frames go through memory-mapped rings now.
    pub fn has_rings(&self) -> bool {
        self.rings.is_some()
    }

    /// Reads and sends frames with their virtio-net header (offloads on),
    /// or without. With offloads on, super-frames and unfinished checksums
    /// need it to be sent on; with them off it only costs time (a copy
    /// each way), so the worker turns it on only while the interface has
    /// offloads on. The kernel looks at the setting when a frame is read,
    /// so a change never splits a frame from its header.
    ///
    /// With [`Io::Rings`], turning it off sets up the rings (whose slots
    /// hold wire-sized frames) and turning it on frees them: frames still
    /// in the receive ring then are lost, so the caller reads them first.
    /// If the rings cannot be set up the socket stays on the copy path for
    /// good and the error is returned.
    pub fn set_vnet(&mut self, on: bool) -> io::Result<()> {
        let raw = self.fd.as_raw_fd();
        if on == self.vnet && (on || self.has_rings() == (self.io == Io::Rings)) {
            return Ok(());
        }
        // The kernel refuses PACKET_VNET_HDR changes while rings exist.
        self.rings = None;
        self.vnet = on;
        if !on && self.io == Io::Rings {
            match if_mtu(&self.ifname).and_then(|mtu| ring::Rings::new(raw, mtu)) {
                Ok(r) => {
                    self.rings = Some(r);
                    return Ok(());
                }
                Err(e) => {
                    // Said once (unless the budget is spent, which is no fault): this
                    // socket keeps to the copy path.
                    self.io = Io::Copy;
                    set_int_option(raw, libc::SOL_PACKET, PACKET_VNET_HDR, 0);
                    return if ring::budget_spent(&e) {
                        Ok(())
                    } else {
                        Err(e)
                    };
                }
            }
        }
        if !set_int_option(raw, libc::SOL_PACKET, PACKET_VNET_HDR, i32::from(on)) {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The interface index the socket is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Reads up to a batch of frames without blocking and calls `each` for
    /// every frame received from the wire. Returns how many were read (0:
    /// nothing pending).
    pub fn recv_batch(
        &mut self,
        batch: &mut Batch,
        mut each: impl FnMut(Received<'_>),
    ) -> io::Result<usize> {
        let n = batch.overflow.len();
        if let Some(rings) = &mut self.rings {
            return Ok(rings.recv(n, !self.ignores_outgoing, each));
        }
        let Batch {
            slots,
            overflow,
            addrs,
            iovs,
            msgs,
            cmsgs,
        } = batch;
        iovs.clear();
        msgs.clear();
        for (slot, big) in slots.chunks_exact_mut(SLOT).zip(overflow.iter_mut()) {
            iovs.push(iovec(slot.as_mut_ptr(), slot.len()));
            iovs.push(iovec(big.as_mut_ptr(), big.len()));
        }
        let header_len = if self.vnet() { HEADER_LEN } else { 0 };
        let name_len = if self.ignores_outgoing {
            0
        } else {
            mem::size_of::<libc::sockaddr_ll>()
        };
        for ((addr, iov), cmsg) in addrs
            .iter_mut()
            .zip(iovs.chunks_exact_mut(2))
            .zip(cmsgs.iter_mut())
        {
            // SAFETY: mmsghdr is plain old data.
            let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
            if name_len > 0 {
                addr.sll_pkttype = 0;
                m.msg_hdr.msg_name = addr as *mut libc::sockaddr_ll as *mut libc::c_void;
                m.msg_hdr.msg_namelen = name_len as libc::socklen_t;
            }
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = 2;
            m.msg_hdr.msg_control = cmsg.as_mut_ptr() as *mut libc::c_void;
            m.msg_hdr.msg_controllen = CMSG_BUF as _;
            msgs.push(m);
        }
        // SAFETY: msgs points at n initialised headers whose buffers live in
        // `batch` and `iovs` for the duration of the call.
        let got = unsafe {
            libc::recvmmsg(
                self.fd.as_raw_fd(),
                msgs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                std::ptr::null_mut(),
            )
        };
        if got < 0 {
            let err = io::Error::last_os_error();
            return match err.kind() {
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted => Ok(0),
                _ => Err(err),
            };
        }
        let got = got as usize;
        let frames = msgs
            .iter()
            .zip(addrs.iter())
            .zip(slots.chunks_exact(SLOT))
            .zip(overflow.iter());
        for (((msg, addr), slot), big) in frames.take(got) {
            if name_len > 0 && addr.sll_pkttype == PACKET_OUTGOING {
                continue;
            }
            let truncated = msg.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
            let len = (msg.msg_len as usize).min(SLOT + big.len());
            let meta = if header_len > 0 {
                meta_from_header(&slot[..HEADER_LEN].try_into().unwrap_or([0; HEADER_LEN]))
            } else {
                0
            };
            let head = &slot[header_len.min(len)..len.min(SLOT)];
            let tail = &big[..len.saturating_sub(SLOT)];
            each(Received {
                data: (head, tail),
                truncated,
                meta,
                kernel_realtime_ns: rx_timestamp(&msg.msg_hdr),
            });
        }
        Ok(got)
    }

    /// Sends frames (each with its offload metadata, 0 for a plain frame)
    /// out of the interface without blocking; returns how many the kernel
    /// took. A refused frame (full buffer, interface down, too big) is
    /// skipped and not counted; the others are still tried.
    pub fn send_batch<'a>(
        &mut self,
        scratch: &mut SendBatch,
        frames: impl IntoIterator<Item = (&'a [u8], u64)> + Clone,
    ) -> usize {
        if let Some(rings) = &mut self.rings {
            return rings.send(frames);
        }
        let SendBatch {
            headers,
            iovs,
            msgs,
        } = scratch;
        headers.clear();
        iovs.clear();
        msgs.clear();
        let per_frame = if self.vnet() {
            headers.extend(frames.clone().into_iter().map(|(f, meta)| header(f, meta)));
            2
        } else {
            1
        };
        for (i, (f, _)) in frames.into_iter().enumerate() {
            if let Some(h) = headers.get(i) {
                iovs.push(iovec(h.as_ptr().cast_mut(), HEADER_LEN));
            }
            iovs.push(iovec(f.as_ptr().cast_mut(), f.len()));
        }
        for iov in iovs.chunks_exact_mut(per_frame) {
            // SAFETY: mmsghdr is plain old data.
            let mut m: libc::mmsghdr = unsafe { mem::zeroed() };
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = per_frame;
            msgs.push(m);
        }
        let (mut next, mut ok) = (0usize, 0usize);
        while next < msgs.len() {
            // SAFETY: msgs[next..] and their iovecs point at live buffers for
            // the call; the socket is bound, so no destination is needed.
            let rc = unsafe {
                libc::sendmmsg(
                    self.fd.as_raw_fd(),
                    msgs[next..].as_mut_ptr(),
                    (msgs.len() - next) as libc::c_uint,
                    libc::MSG_DONTWAIT,
                )
            };
            if rc > 0 {
                next += rc as usize;
                ok += rc as usize;
            } else if rc < 0 && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            } else {
                next += 1;
            }
        }
        ok
    }
}

impl AsRawFd for PacketSocket {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An epoll instance (level-triggered).
#[derive(Debug)]
pub struct Epoll {
    fd: OwnedFd,
}

impl Epoll {
    /// A new epoll instance.
    pub fn new() -> io::Result<Epoll> {
        // SAFETY: plain call.
        Ok(Epoll {
            fd: owned(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?,
        })
    }

    /// Watches `fd` for input, reporting `token`.
    pub fn add(&self, fd: RawFd, token: u64) -> io::Result<()> {
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: token,
        };
        // SAFETY: ev is valid for the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })
            .map(|_| ())
    }

    /// Stops watching `fd`.
    pub fn delete(&self, fd: RawFd) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: 0, u64: 0 };
        // SAFETY: ev is valid for the call.
        cvt(unsafe { libc::epoll_ctl(self.fd.as_raw_fd(), libc::EPOLL_CTL_DEL, fd, &mut ev) })
            .map(|_| ())
    }

    /// Waits for events (`timeout_ms` −1: forever), appending their tokens.
    pub fn wait(&self, tokens: &mut Vec<u64>, timeout_ms: i32) -> io::Result<()> {
        let mut events = [libc::epoll_event { events: 0, u64: 0 }; 64];
        // SAFETY: events is a valid buffer of 64 entries.
        let n = unsafe {
            libc::epoll_wait(
                self.fd.as_raw_fd(),
                events.as_mut_ptr(),
                events.len() as i32,
                timeout_ms,
            )
        };
        if n < 0 {
            let err = io::Error::last_os_error();
            return if err.kind() == io::ErrorKind::Interrupted {
                Ok(())
            } else {
                Err(err)
            };
        }
        tokens.extend(events[..n as usize].iter().map(|e| e.u64));
        Ok(())
    }
}

/// A `CLOCK_MONOTONIC` timerfd, armed at absolute times.
#[derive(Debug)]
pub struct TimerFd {
    fd: OwnedFd,
}

impl TimerFd {
    /// A new, disarmed, non-blocking timer.
    pub fn new() -> io::Result<TimerFd> {
        // SAFETY: plain call.
        Ok(TimerFd {
            fd: owned(unsafe {
                libc::timerfd_create(
                    libc::CLOCK_MONOTONIC,
                    libc::TFD_NONBLOCK | libc::TFD_CLOEXEC,
                )
            })?,
        })
    }

    /// Arms the timer to fire at `at_ns` (monotonic), or disarms it (`None`).
    pub fn set(&self, at_ns: Option<u64>) -> io::Result<()> {
        let value = match at_ns {
            // A zero it_value disarms, so never pass 0 for "now".
            Some(t) => libc::timespec {
                tv_sec: (t.max(1) / 1_000_000_000) as libc::time_t,
                tv_nsec: (t.max(1) % 1_000_000_000) as libc::c_long,
            },
            None => libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
        };
        let spec = libc::itimerspec {
            it_interval: libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            },
            it_value: value,
        };
        // SAFETY: spec is valid for the call.
        cvt(unsafe {
            libc::timerfd_settime(
                self.fd.as_raw_fd(),
                libc::TFD_TIMER_ABSTIME,
                &spec,
                std::ptr::null_mut(),
            )
        })
        .map(|_| ())
    }

    /// Consumes expirations so the fd stops being readable.
    pub fn drain(&self) {
        drain_u64(self.fd.as_raw_fd());
    }
}

impl AsRawFd for TimerFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// An eventfd used to wake a worker when a command is queued.
#[derive(Debug)]
pub struct EventFd {
    fd: OwnedFd,
}

impl EventFd {
    /// A new non-blocking eventfd.
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain call.
        Ok(EventFd {
            fd: owned(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?,
        })
    }

    /// Makes the fd readable.
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a valid u64.
        unsafe {
            libc::write(
                self.fd.as_raw_fd(),
                &one as *const u64 as *const libc::c_void,
                8,
            )
        };
    }

    /// Clears the readable state.
    pub fn drain(&self) {
        drain_u64(self.fd.as_raw_fd());
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

fn drain_u64(fd: RawFd) {
    let mut v: u64 = 0;
    // SAFETY: reads at most 8 bytes into a valid u64; non-blocking fd.
    unsafe { libc::read(fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
}

static STOP_REQUESTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP_REQUESTED.store(true, Ordering::SeqCst);
}

/// Makes SIGTERM and SIGINT set a flag ([`stop_requested`]) instead of
/// killing the process, so the daemon can restore interfaces on the way out.
pub fn catch_stop_signals() -> io::Result<()> {
    for sig in [libc::SIGTERM, libc::SIGINT] {
        // SAFETY: sigaction is plain old data; the handler only stores an atomic.
        let mut sa: libc::sigaction = unsafe { mem::zeroed() };
        sa.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
        // SAFETY: valid sigaction structures.
        cvt(unsafe { libc::sigaction(sig, &sa, std::ptr::null_mut()) })?;
    }
    Ok(())
}

/// Whether SIGTERM or SIGINT arrived.
pub fn stop_requested() -> bool {
    STOP_REQUESTED.load(Ordering::SeqCst)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A netlink message of `kind` whose ifinfomsg is followed by `attrs`
    /// (type, value), each padded to 4 bytes.
    fn message(kind: u16, attrs: &[(u16, &[u8])]) -> Vec<u8> {
        let mut m = vec![0u8; 16 + 16];
        m[4..6].copy_from_slice(&kind.to_ne_bytes());
        for (ty, value) in attrs {
            m.extend(((4 + value.len()) as u16).to_ne_bytes());
            m.extend(ty.to_ne_bytes());
            m.extend(*value);
            m.resize(m.len().next_multiple_of(4), 0);
        }
        let len = m.len() as u32;
        m[..4].copy_from_slice(&len.to_ne_bytes());
        m
    }

    #[test]
    fn the_names_of_new_and_removed_links_are_read_and_nothing_else() {
        let mtu = 1500u32.to_ne_bytes();
        let datagram = [
            message(
                libc::RTM_NEWLINK,
                &[(libc::IFLA_MTU, &mtu), (libc::IFLA_IFNAME, b"veth-a\0")],
            ),
            message(libc::RTM_NEWADDR, &[(libc::IFLA_IFNAME, b"not-a-link\0")]),
            message(libc::RTM_DELLINK, &[(libc::IFLA_IFNAME, b"b\0")]),
            message(libc::RTM_NEWLINK, &[(libc::IFLA_MTU, &mtu)]),
        ]
        .concat();
        let mut names = Vec::new();
        link_names(&datagram, &mut names);
        assert_eq!(names, ["veth-a", "b"]);
        // A message longer than what was read ends the reading, without a panic.
        let mut cut = message(libc::RTM_NEWLINK, &[(libc::IFLA_IFNAME, b"c\0")]);
        cut[0] += 40;
        names.clear();
        link_names(&[datagram.as_slice(), &cut].concat(), &mut names);
        assert_eq!(names, ["veth-a", "b"]);
        // An attribute longer than its message is not read.
        let mut bad = message(libc::RTM_NEWLINK, &[(libc::IFLA_IFNAME, b"d\0")]);
        bad[32] = 200;
        names.clear();
        link_names(&bad, &mut names);
        assert!(names.is_empty());
    }

    fn socket_buffer(sock: &PacketSocket, opt: libc::c_int) -> libc::c_int {
        let mut value: libc::c_int = 0;
        let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: valid fd, and an option buffer of the length given.
        let r = unsafe {
            libc::getsockopt(
                sock.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                &mut value as *mut libc::c_int as *mut libc::c_void,
                &mut len,
            )
        };
        assert_eq!(r, 0, "{}", io::Error::last_os_error());
        value
    }

    #[test]
    fn packet_sockets_get_their_buffers_past_the_hosts_limits_when_privileged() {
        let sock = match PacketSocket::open("lo", Io::Copy) {
            Ok(s) => s,
            Err(e) if e.raw_os_error() == Some(libc::EPERM) => return, // not root: nothing to see
            Err(e) => panic!("{e}"),
        };
        // Without CAP_NET_ADMIN in the host's namespace the FORCE options are refused and
        // the plain ones get what the limits allow: nothing this test can check.
        let probe = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        if !set_int_option(
            probe.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            1 << 20,
        ) {
            return;
        }
        // The kernel reports twice what was set (its bookkeeping overhead).
        for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
            assert_eq!(socket_buffer(&sock, opt), 2 * BUFFER_BYTES, "option {opt}");
        }
    }
}
