//! Virtual time: the pipe never reads a clock, the caller passes `now`.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A point in time, in whole nanoseconds since an epoch the caller chooses.
///
/// The pipe core never reads a clock: every call that needs the time takes
/// an `Instant`. Tests use virtual time starting at [`Instant::ZERO`]; the
/// daemon passes `CLOCK_MONOTONIC` nanoseconds. A `u64` of nanoseconds lasts
/// 584 years, so overflow is not a practical concern, and arithmetic
/// saturates rather than wraps.
///
/// Durations are plain `u64` nanoseconds, always named with an `_ns` suffix.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Instant(u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);

    /// The instant `ns` nanoseconds after the epoch.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }

    /// The instant `us` microseconds after the epoch (saturating).
    pub const fn from_micros(us: u64) -> Self {
        Instant(us.saturating_mul(1_000))
    }

    /// The instant `ms` milliseconds after the epoch (saturating).
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms.saturating_mul(1_000_000))
    }

    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }

    /// This instant plus `ns` nanoseconds, saturating at the end of time.
    #[must_use]
    pub const fn add_nanos(self, ns: u64) -> Self {
        Instant(self.0.saturating_add(ns))
    }

    /// Nanoseconds from `earlier` to `self`, or 0 if `earlier` is later.
    pub const fn nanos_since(self, earlier: Instant) -> u64 {
        self.0.saturating_sub(earlier.0)
    }
}

impl fmt::Display for Instant {
    /// Seconds with nanosecond precision, e.g. `1.000817600s`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates_and_displays_seconds() {
        let t = Instant::from_micros(817_600);
        assert_eq!(t.as_nanos(), 817_600_000);
        assert_eq!(t.add_nanos(400_000).as_nanos(), 818_000_000);
        assert_eq!(
            Instant::from_nanos(u64::MAX).add_nanos(1).as_nanos(),
            u64::MAX
        );
        assert_eq!(Instant::ZERO.nanos_since(t), 0);
        assert_eq!(t.nanos_since(Instant::ZERO), 817_600_000);
        assert_eq!(Instant::from_millis(1_500).to_string(), "1.500000000s");
    }
}
