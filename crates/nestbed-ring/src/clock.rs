//! The clocks, and the offset between them. The kernel stamps a received
//! frame on `CLOCK_REALTIME` (a ring slot's `sec`/`nsec`, `SO_TIMESTAMPNS`);
//! nestbed-linkd and nestbed-probe keep time on `CLOCK_MONOTONIC`, so a stamp
//! is moved onto it by the clocks' difference.
//!
//! That difference is read as the realtime clock between two monotonic
//! reads, and a thread preempted between them reads it off by half the
//! time it lost: a probe that read it once per batch of frames once put a
//! frame's arrival a little before its departure, and its one-way delay
//! (modulo 2^48 ns) wrapped to 78 hours. So it is read several times and the
//! narrowest reading kept, and kept for a while: slewing moves both clocks
//! alike, so only a step of the wall clock (a time daemon's, or one after
//! the machine was paused) changes it, and then the stamps of up to that
//! while are off by the step. Callers bound a stamp by the time they read
//! it.

/// `CLOCK_MONOTONIC` now, ns.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// `CLOCK_REALTIME` now, ns.
pub fn realtime_ns() -> u64 {
    clock_ns(libc::CLOCK_REALTIME)
}

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid out-pointer; both clocks always exist.
    unsafe { libc::clock_gettime(clock, &mut ts) };
    (ts.tv_sec as u64) * 1_000_000_000 + ts.tv_nsec as u64
}

/// Readings of the offset kept: the narrowest wins.
const TRIES: usize = 5;

/// How long a reading of the offset is used before it is read again, ns.
pub const MAX_AGE_NS: u64 = 100_000_000;

/// `CLOCK_REALTIME` − `CLOCK_MONOTONIC`, and when it was read.
#[derive(Clone, Copy, Debug)]
pub struct ClockOffset {
    offset: i128,
    measured_at: u64,
}

impl ClockOffset {
    /// Reads the offset now: the narrowest of a few readings.
    pub fn measure() -> ClockOffset {
        let mut best: Option<(u64, i128, u64)> = None;
        for _ in 0..TRIES {
            let a = monotonic_ns();
            let r = realtime_ns();
            let b = monotonic_ns();
            let width = b.saturating_sub(a);
            let offset = i128::from(r) - i128::from(a + width / 2);
            if best.is_none_or(|(w, _, _)| width < w) {
                best = Some((width, offset, b));
            }
        }
        let (_, offset, measured_at) = best.unwrap_or((0, 0, 0));
        ClockOffset {
            offset,
            measured_at,
        }
    }

    /// Reads it again if it is [`MAX_AGE_NS`] old at monotonic time `now`;
    /// whether it did.
    pub fn refresh(&mut self, now: u64) -> bool {
        let old = now.saturating_sub(self.measured_at) >= MAX_AGE_NS;
        if old {
            *self = ClockOffset::measure();
        }
        old
    }

    /// A `CLOCK_REALTIME` stamp, ns, on `CLOCK_MONOTONIC` (negative if it
    /// is before the monotonic clock's start).
    pub fn monotonic(&self, realtime_ns: i128) -> i128 {
        realtime_ns - self.offset
    }

    /// A frame's receive stamp (realtime) on `CLOCK_MONOTONIC`, never later
    /// than `read_ns`, when it was read: an offset a step of the wall clock
    /// has made wrong must not put an arrival after its read (nor, so,
    /// before its departure).
    pub fn received(&self, realtime_ns: i128, read_ns: u64) -> i128 {
        self.monotonic(realtime_ns).min(i128::from(read_ns))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_realtime_stamp_taken_now_lands_between_monotonic_reads_around_it() {
        let offset = ClockOffset::measure();
        let before = monotonic_ns();
        let stamp = realtime_ns();
        let after = monotonic_ns();
        let on_monotonic = offset.monotonic(i128::from(stamp));
        // Within the offset's own error of the interval: the narrowest reading's half width
        // (a few tens of ns) and the wall clock's slewing meanwhile (a few ppm); the bound is
        // wide only so that five preempted readings in a row do not fail it.
        assert!(
            on_monotonic >= i128::from(before) - 100_000,
            "{on_monotonic} < {before}"
        );
        assert!(
            on_monotonic <= i128::from(after) + 100_000,
            "{on_monotonic} > {after}"
        );
    }

    #[test]
    fn a_stamp_is_never_later_than_its_read() {
        let offset = ClockOffset::measure();
        let read = monotonic_ns();
        let early = offset.monotonic(i128::from(realtime_ns())) - 1_000_000;
        let stamp = |mono: i128| mono + offset.offset;
        assert_eq!(offset.received(stamp(early), read), early);
        // A stamp an offset error put after the read is the read.
        let late = i128::from(read) + 5_000_000;
        assert_eq!(offset.received(stamp(late), read), i128::from(read));
    }

    #[test]
    fn it_is_read_again_only_once_old() {
        let mut offset = ClockOffset::measure();
        let at = offset.measured_at;
        assert!(!offset.refresh(at + MAX_AGE_NS - 1));
        assert_eq!(offset.measured_at, at);
        let before = monotonic_ns();
        assert!(offset.refresh(at + MAX_AGE_NS));
        assert!(offset.measured_at >= before, "not read again");
    }
}
