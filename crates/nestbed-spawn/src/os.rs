//! The only place that talks to the kernel through `libc` and so the only module allowed
//! `unsafe`: starting a process (`fork` and `execvpe`), pipes, pidfds, `waitpid`, `ppoll`, the
//! monotonic clock, priority and timer slack, SIGPIPE and inherited descriptors.
//!
//! Linux only, like the rest of nestbed's platform code.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr;

/// `CLOCK_MONOTONIC` in nanoseconds: Python's `time.monotonic()` in the controller.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A descriptor this process was started with (its standard input and output), as a file.
pub fn inherited(fd: RawFd) -> File {
    // SAFETY: called once per descriptor, at start, for 0 and 1, which the controller gave.
    unsafe { File::from_raw_fd(fd) }
}

/// SIGPIPE ignored here, so a controller gone makes a write fail instead of killing this
/// process before it has said so. (Its programs get the default back: [`spawn`].)
pub fn ignore_sigpipe() {
    // SAFETY: setting a signal's disposition to SIG_IGN has no other effect.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
}

/// A pipe, both ends close-on-exec: (read end, write end).
pub fn pipe() -> io::Result<(File, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours alone.
    unsafe { Ok((File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// A pidfd of `pid` (close-on-exec): readable once the process has ended.
pub fn pidfd_open(pid: i32) -> io::Result<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the descriptor is new and ours alone.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Starts `argv` (its first word looked up on the PATH of `env`) with environment `env`, in
/// a new session at nice `nice` and the default timer slack, standard input from /dev/null,
/// standard output and error onto `stdout` and `stderr`, SIGPIPE and SIGXFSZ at their
/// defaults and no signal blocked, at `CLOCK_MONOTONIC` `at_ns` (0: at once); its pid, as
/// soon as it is forked.
///
/// The child waits for its time itself (its parent's priority and timer slack kept until
/// then, and killed should its parent die meanwhile), so programs due together all begin
/// then, none waiting for another's fork. Just before its `exec` it writes the time into
/// `exec_failed`, the write end of a close-on-exec pipe: the moment the program began. The
/// pipe then closes when the `exec` succeeds, or gets the error number when it fails (the
/// child exits 127). So the next program is forked without waiting for this one's `exec`.
///
/// A plain `fork`, because this process has one thread: the child may call anything
/// before its `exec` (glibc's PATH search) without finding a lock another thread held.
pub fn spawn(
    argv: &[CString],
    env: &[CString],
    outputs: (RawFd, RawFd),
    exec_failed: RawFd,
    nice: i32,
    at_ns: u64,
) -> io::Result<i32> {
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_p.push(ptr::null());
    let mut env_p: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    env_p.push(ptr::null());
    let devnull: &CStr = c"/dev/null";
    // SAFETY: fork in a process of one thread; the child touches only what was prepared
    // before it (the argv and env arrays, which end with a null pointer) and leaves by exec
    // or _exit.
    unsafe {
        let parent = libc::getpid();
        let pid = libc::fork();
        if pid < 0 {
            return Err(io::Error::last_os_error());
        }
        if pid > 0 {
            return Ok(pid);
        }
        libc::setsid();
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
        libc::signal(libc::SIGXFSZ, libc::SIG_DFL);
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, ptr::null_mut());
        // (close-on-exec: only its copy as standard input outlives the exec)
        let null = libc::open(devnull.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        let ready = null >= 0
            && libc::dup2(null, 0) == 0
            && libc::dup2(outputs.0, 1) == 1
            && libc::dup2(outputs.1, 2) == 2;
        let unready = if ready { 0 } else { *libc::__errno_location() };
        if ready && at_ns > 0 {
            // Woken at its time ahead of everything else (where it may: as root), so that
            // programs due together all begin then, not one per CPU and the rest a scheduler
            // tick later; the real-time policy is left again before anything else is done.
            let first = libc::sched_param { sched_priority: 1 };
            libc::sched_setscheduler(0, libc::SCHED_FIFO, &first);
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
            if libc::getppid() != parent {
                libc::_exit(127); // the parent died before the line above
            }
            let at = libc::timespec {
                tv_sec: (at_ns / 1_000_000_000) as libc::time_t,
                tv_nsec: (at_ns % 1_000_000_000) as libc::c_long,
            };
            let sleep = || {
                libc::clock_nanosleep(
                    libc::CLOCK_MONOTONIC,
                    libc::TIMER_ABSTIME,
                    &at,
                    ptr::null_mut(),
                )
            };
            while sleep() == libc::EINTR {}
            libc::prctl(libc::PR_SET_PDEATHSIG, 0 as libc::c_ulong);
        }
        let began = monotonic_ns();
        let other = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(0, libc::SCHED_OTHER, &other);
        libc::write(exec_failed, (&began as *const u64).cast(), size_of::<u64>());
        libc::setpriority(libc::PRIO_PROCESS, 0, nice);
        libc::prctl(libc::PR_SET_TIMERSLACK, 0 as libc::c_ulong); // (0: the default again)
        if ready {
            libc::execvpe(argv_p[0], argv_p.as_ptr(), env_p.as_ptr());
        }
        let errno = if ready {
            *libc::__errno_location()
        } else {
            unready
        };
        libc::write(
            exec_failed,
            (&errno as *const libc::c_int).cast(),
            size_of::<libc::c_int>(),
        );
        libc::_exit(127)
    }
}

/// Waits for child `pid`, which is ending (its `exec` failed), and reaps it.
pub fn reap_ending(pid: i32) {
    let mut status = 0;
    // SAFETY: `pid` is our child, not yet reaped; `status` is a valid, writable int.
    unsafe {
        while libc::waitpid(pid, &mut status, 0) < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
}

/// The status of child `pid` if it has ended (reaping it), as Python's `returncode` says
/// it: the exit code, or minus the signal that ended it; None while it runs.
pub fn reap(pid: i32) -> io::Result<Option<i32>> {
    let mut status = 0;
    loop {
        // SAFETY: `status` is a valid, writable int.
        let rc = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if rc == 0 {
            return Ok(None);
        }
        if rc < 0 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(err);
        }
        return Ok(Some(if libc::WIFSIGNALED(status) {
            -libc::WTERMSIG(status)
        } else {
            libc::WEXITSTATUS(status)
        }));
    }
}

/// Waits until one of `fds` is ready or `CLOCK_MONOTONIC` reaches `until_ns` (None: no
/// limit; past: only looks); `fds` gets the kernel's answer.
pub fn poll(fds: &mut [libc::pollfd], until_ns: Option<u64>) -> io::Result<()> {
    loop {
        let left = until_ns.map(|until| until.saturating_sub(monotonic_ns()));
        let timeout = left.map(|ns| libc::timespec {
            tv_sec: (ns / 1_000_000_000) as libc::time_t,
            tv_nsec: (ns % 1_000_000_000) as libc::c_long,
        });
        let timeout_p = timeout
            .as_ref()
            .map_or(ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `fds` is a valid array of `fds.len()` pollfd structures; the timeout is a
        // valid timespec or null; a null signal mask keeps this thread's.
        let rc = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                timeout_p,
                ptr::null(),
            )
        };
        if rc >= 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

/// This process's nice value.
pub fn nice() -> i32 {
    // SAFETY: getpriority reads; errno is cleared first, as -1 is also a nice value.
    unsafe {
        *libc::__errno_location() = 0;
        let nice = libc::getpriority(libc::PRIO_PROCESS, 0);
        if nice == -1 && *libc::__errno_location() != 0 {
            0
        } else {
            nice
        }
    }
}

/// Puts this process `steps` nice steps ahead of `base`, where it may (root), and makes its
/// timer wake-ups exact to the microsecond: a start handed over ahead of its time begins
/// then, on a machine whose other work would otherwise go first. Its programs get `base`
/// and the default timer slack back ([`spawn`]).
pub fn go_ahead(base: i32, steps: i32) {
    // SAFETY: setpriority and prctl(PR_SET_TIMERSLACK) change only this process's scheduling.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, 0, base - steps);
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
}

/// A `pollfd` asking whether `fd` is readable.
pub fn readable(fd: &impl AsRawFd) -> libc::pollfd {
    libc::pollfd {
        fd: fd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }
}

/// Ends child `pid` at once (SIGKILL) and reaps it: a process started but not watchable.
pub fn kill_and_reap(pid: i32) {
    let mut status = 0;
    // SAFETY: `pid` is our child, not yet reaped; `status` is a valid, writable int.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        while libc::waitpid(pid, &mut status, 0) < 0
            && io::Error::last_os_error().kind() == io::ErrorKind::Interrupted
        {}
    }
}

/// Marks every descriptor above standard error close-on-exec, so no program inherits one
/// this process was started with (whatever its starter left open).
pub fn cloexec_above_stderr() -> io::Result<()> {
    let fds: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse().ok())
        .filter(|&fd| fd > 2)
        .collect();
    for fd in fds {
        // SAFETY: fcntl on a descriptor number only reads and sets its flags; one that
        // closed meanwhile (the directory's own) fails with EBADF, which is fine.
        unsafe {
            let flags = libc::fcntl(fd, libc::F_GETFD);
            if flags >= 0 {
                libc::fcntl(fd, libc::F_SETFD, flags | libc::FD_CLOEXEC);
            }
        }
    }
    Ok(())
}
