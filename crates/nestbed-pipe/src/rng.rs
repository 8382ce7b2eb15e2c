//! Seeded random streams, one per stage.
//!
//! Each stage draws from its own generator derived from the pipe's seed,
//! so turning on jitter does not change which packets the loss model
//! drops, and a run is reproduced exactly from its seed.

use rand::SeedableRng;
use rand_pcg::Pcg64;

/// Stream of the loss stage.
pub(crate) const STREAM_LOSS: u64 = 1;
/// Stream of RED's early-drop decisions.
pub(crate) const STREAM_RED: u64 = 2;
/// Stream of jitter samples.
pub(crate) const STREAM_JITTER: u64 = 3;
/// Stream of duplication and corruption decisions.
pub(crate) const STREAM_MANGLE: u64 = 4;

/// SplitMix64 finaliser: a bijective mixer, so distinct inputs give
/// distinct, well-spread seeds.
fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The generator of stream `stream` for a pipe seeded with `seed`.
pub(crate) fn stage_rng(seed: u64, stream: u64) -> Pcg64 {
    Pcg64::seed_from_u64(splitmix64(seed ^ splitmix64(stream)))
}
