//! The only place that talks to the kernel through `libc` and so the only module allowed
//! `unsafe`: the monotonic clock and absolute sleeps, timer slack, socket options that
//! `socket2` does not offer (`SO_RXQ_OVFL`, `SO_TIMESTAMPNS`, `SO_RCVBUFFORCE`,
//! `SO_SNDBUFFORCE`), `recvmsg` with the kernel's drop counter and receive time, and a
//! SIGINT/SIGTERM flag; and, in [`ring`], the packet rings of `send --ring` and
//! `recv --ring`.
//!
//! Linux only, like the rest of nestbed's platform code.
#![allow(unsafe_code)]

pub mod ring;

use std::cell::Cell;
use std::io;
use std::mem::{size_of, zeroed, MaybeUninit};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

pub use nestbed_ring::clock::monotonic_ns;
pub use nestbed_ring::clock::ClockOffset;

use crate::pacing::Clock;

/// Sleeps until `CLOCK_MONOTONIC` reaches `deadline_ns` (`clock_nanosleep` with
/// `TIMER_ABSTIME`). Returns early when a signal arrives; callers re-check the time.
pub fn sleep_until_monotonic_ns(deadline_ns: u64) {
    let ts = libc::timespec {
        tv_sec: (deadline_ns / 1_000_000_000) as libc::time_t,
        tv_nsec: (deadline_ns % 1_000_000_000) as libc::c_long,
    };
    // SAFETY: `ts` is a valid timespec; the remainder pointer may be null with TIMER_ABSTIME.
    unsafe {
        libc::clock_nanosleep(
            libc::CLOCK_MONOTONIC,
            libc::TIMER_ABSTIME,
            &ts,
            std::ptr::null_mut(),
        );
    }
}

/// The real [`Clock`]: `CLOCK_MONOTONIC` with absolute sleeps.
#[derive(Debug, Default, Clone, Copy)]
pub struct MonotonicClock;

impl Clock for MonotonicClock {
    fn now_ns(&mut self) -> u64 {
        monotonic_ns()
    }
    fn sleep_until_ns(&mut self, deadline_ns: u64) {
        sleep_until_monotonic_ns(deadline_ns);
    }
}

/// Sets this thread's timer slack (how late the kernel may wake a sleep) to `ns`; the
/// default of 50 µs would eat the whole spin margin.
pub fn set_timer_slack_ns(ns: u64) -> io::Result<()> {
    // SAFETY: PR_SET_TIMERSLACK takes an unsigned long by value and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, ns as libc::c_ulong, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn setsockopt_int(fd: RawFd, level: libc::c_int, name: libc::c_int, value: i32) -> io::Result<()> {
    // SAFETY: the option value is a live c_int and its exact size is passed.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (&value as *const i32).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Asks the kernel to attach its count of datagrams dropped on this socket (receive buffer
/// full) to every received datagram (`SO_RXQ_OVFL`).
pub fn enable_rxq_ovfl(sock: &impl AsRawFd) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RXQ_OVFL, 1)
}

/// Asks the kernel to attach the time each datagram reached the socket's host
/// (`SO_TIMESTAMPNS`, on `CLOCK_REALTIME`): a receive time that does not count how long the
/// reading thread took to be scheduled.
pub fn enable_kernel_timestamps(sock: &impl AsRawFd) -> io::Result<()> {
    setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_TIMESTAMPNS, 1)
}

/// `SO_RCVBUFFORCE`: sets the receive buffer beyond `net.core.rmem_max` (needs
/// CAP_NET_ADMIN; fails with EPERM otherwise).
pub fn force_recv_buffer(sock: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let v = i32::try_from(bytes).unwrap_or(i32::MAX);
    setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, v)
}

/// `SO_SNDBUFFORCE`: sets the send buffer beyond `net.core.wmem_max` (needs CAP_NET_ADMIN).
pub fn force_send_buffer(sock: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let v = i32::try_from(bytes).unwrap_or(i32::MAX);
    setsockopt_int(sock.as_raw_fd(), libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, v)
}

/// One received datagram.
#[derive(Debug, Clone, Copy)]
pub struct Received {
    /// Bytes of payload (the datagram is truncated to the buffer if longer).
    pub len: usize,
    /// Sender's address.
    pub from: Option<SocketAddr>,
    /// The kernel's running count of datagrams dropped on this socket, when `SO_RXQ_OVFL`
    /// is on and the kernel attached it.
    pub kernel_drops: Option<u32>,
    /// When the datagram reached this host's network stack, on `CLOCK_MONOTONIC` (ns), when
    /// `SO_TIMESTAMPNS` is on: the kernel's `CLOCK_REALTIME` stamp moved onto the monotonic
    /// clock by the two clocks' difference read right after `recvmsg` returned.
    pub kernel_ns: Option<u64>,
}

/// Space for the `SO_RXQ_OVFL` (a u32) and `SO_TIMESTAMPNS` (a timespec) control messages,
/// with room to spare.
const CONTROL_LEN: usize = 128;

fn sockaddr_to_std(storage: &libc::sockaddr_storage, len: libc::socklen_t) -> Option<SocketAddr> {
    match storage.ss_family as libc::c_int {
        libc::AF_INET if len as usize >= size_of::<libc::sockaddr_in>() => {
            // SAFETY: the family says the storage holds a sockaddr_in, which fits in it.
            let sin =
                unsafe { &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 if len as usize >= size_of::<libc::sockaddr_in6>() => {
            // SAFETY: the family says the storage holds a sockaddr_in6, which fits in it.
            let sin6 = unsafe {
                &*(storage as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()
            };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

/// User and system CPU seconds this process has used so far (`getrusage`): what a probe
/// costs, reported in its summary.
pub fn cpu_seconds() -> (f64, f64) {
    // SAFETY: all-zero is a valid rusage, filled by the call.
    let mut usage: libc::rusage = unsafe { zeroed() };
    // SAFETY: usage is a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let seconds = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (seconds(usage.ru_utime), seconds(usage.ru_stime))
}

/// Whether a receive error only says nothing came in time (the socket's read timeout) or a
/// signal came: the caller checks its stop conditions and reads again.
pub fn nothing_yet(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted
    )
}

/// Receives one datagram with `recvmsg`, returning its length, its sender and the kernel's
/// drop counter if attached. Blocks up to the socket's read timeout (then `WouldBlock`).
pub fn recv_with_drops(sock: &impl AsRawFd, buf: &mut [u8]) -> io::Result<Received> {
    // SAFETY: all-zero is a valid sockaddr_storage and msghdr.
    let mut storage: libc::sockaddr_storage = unsafe { zeroed() };
    let mut control = [MaybeUninit::<u64>::uninit(); CONTROL_LEN / 8];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: as above.
    let mut msg: libc::msghdr = unsafe { zeroed() };
    msg.msg_name = (&mut storage as *mut libc::sockaddr_storage).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = CONTROL_LEN as _;

    // SAFETY: every pointer in `msg` refers to a live buffer of the stated length.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, 0) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }

    let mut kernel_drops = None;
    let mut stamp = None;
    // SAFETY: the kernel filled `msg_controllen` bytes of `control`; the CMSG macros walk only
    // within it; SO_RXQ_OVFL's data is one u32 and SCM_TIMESTAMPNS's one timespec.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SO_RXQ_OVFL {
                kernel_drops = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).cast::<u32>(),
                ));
            }
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                stamp = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(cmsg).cast::<libc::timespec>(),
                ));
            }
            cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
        }
    }
    Ok(Received {
        len: n as usize,
        from: sockaddr_to_std(&storage, msg.msg_namelen),
        kernel_drops,
        kernel_ns: stamp.and_then(realtime_to_monotonic),
    })
}

fn timespec_ns(ts: &libc::timespec) -> Option<i128> {
    // A zero stamp means the kernel took none (timestamping was turned on after the
    // datagram arrived).
    (ts.tv_sec > 0).then(|| i128::from(ts.tv_sec) * 1_000_000_000 + i128::from(ts.tv_nsec))
}

thread_local! {
    /// This thread's reading of the clocks' offset.
    static OFFSET: Cell<ClockOffset> = Cell::new(ClockOffset::measure());
}

/// A `CLOCK_REALTIME` stamp of the recent past on `CLOCK_MONOTONIC`, by the clocks'
/// offset ([`ClockOffset`], read again when old).
fn realtime_to_monotonic(stamp: libc::timespec) -> Option<u64> {
    let stamp = timespec_ns(&stamp)?;
    let now = monotonic_ns();
    let mut offset = OFFSET.get();
    if offset.refresh(now) {
        OFFSET.set(offset);
    }
    u64::try_from(offset.received(stamp, now)).ok()
}

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_stop_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

/// Installs SIGINT and SIGTERM handlers that set a flag instead of killing the process, so a
/// run stopped by hand still prints its summary. Blocking calls return `EINTR` (no
/// `SA_RESTART`). Returns the flag.
pub fn stop_on_signals() -> &'static AtomicBool {
    for sig in [libc::SIGINT, libc::SIGTERM] {
        // SAFETY: the handler only stores to an atomic, which is async-signal-safe; the
        // sigaction struct is fully initialised.
        unsafe {
            let mut sa: libc::sigaction = zeroed();
            sa.sa_sigaction = on_stop_signal as *const () as libc::sighandler_t;
            sa.sa_flags = 0;
            libc::sigemptyset(&mut sa.sa_mask);
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    &STOP
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn monotonic_clock_advances_and_sleeps_absolutely() {
        let a = monotonic_ns();
        sleep_until_monotonic_ns(a + 2_000_000);
        let b = monotonic_ns();
        assert!(b >= a + 2_000_000, "slept {} ns", b - a);
    }

    #[test]
    fn recvmsg_reports_sender_and_drop_counter() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_rxq_ovfl(&rx).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.send_to(b"hello probe!", rx.local_addr().unwrap())
            .unwrap();
        let mut buf = [0u8; 64];
        let r = recv_with_drops(&rx, &mut buf).unwrap();
        assert_eq!(r.len, 12);
        assert_eq!(r.from, Some(tx.local_addr().unwrap()));
        assert_eq!(&buf[..12], b"hello probe!");
        // The counter is attached only once the socket has dropped something.
        assert!(r.kernel_drops.unwrap_or(0) == 0);
        // No receive time was asked for.
        assert_eq!(r.kernel_ns, None);
    }

    #[test]
    fn the_kernels_receive_time_is_on_the_monotonic_clock_before_the_read() {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        enable_kernel_timestamps(&rx).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut buf = [0u8; 64];
        // The kernel turns arrival stamps on a moment after the first socket asks (deferred
        // work): a datagram that came before then is stamped when read. Each try waits
        // 20 ms in the socket; once stamps are on, its stamp says when it came.
        for _ in 0..50 {
            let sent = monotonic_ns();
            tx.send_to(b"stamp", rx.local_addr().unwrap()).unwrap();
            sleep_until_monotonic_ns(sent + 20_000_000);
            let r = recv_with_drops(&rx, &mut buf).unwrap();
            let read = monotonic_ns();
            let stamp = r.kernel_ns.expect("a kernel receive time");
            // The two clocks are read a few hundred ns apart to move the stamp across.
            assert!(
                stamp + 10_000 >= sent,
                "stamped {} ns before it was sent",
                sent - stamp
            );
            if read - stamp >= 20_000_000 {
                return;
            }
        }
        panic!("50 datagrams that waited 20 ms each were all stamped when read");
    }
}
