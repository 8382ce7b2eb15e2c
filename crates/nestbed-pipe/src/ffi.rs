//! RED for nestbed-sim (`csrc/nestbed-sim`), through a C interface: a simulated link's RED
//! is this crate's [`crate::red`], not a second copy of it in C++.
//!
//! nestbed-sim tells it, at each arrival that its loss model kept, what the queue holds
//! (the packet on the wire among it, each packet counted as its Ethernet frame, as
//! [`crate::queue`] counts) and how long it has been empty, as [`crate::pipe`] does.

use crate::red::{Arrival, Red, RedParams, Verdict};
use crate::rng::stage_rng;
use rand_pcg::Pcg64;

/// RED's parameters as nestbed-sim gives them (ns-2's names; `wait_` on, `bytes_` off, as
/// the IR and linkd have them).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct NbRedParams {
    /// `thresh_`, in packets.
    pub thresh: f64,
    /// `maxthresh_`, in packets.
    pub maxthresh: f64,
    /// `q_weight_`.
    pub q_weight: f64,
    /// `linterm_` (1/max_p).
    pub linterm: f64,
    /// `mean_pktsize_`, in bytes.
    pub mean_pktsize: u32,
    /// Gentle RED (`gentle_`).
    pub gentle: bool,
    /// The average in bytes (`queue-in-bytes_`).
    pub queue_in_bytes: bool,
}

impl From<&NbRedParams> for RedParams {
    fn from(p: &NbRedParams) -> Self {
        RedParams {
            thresh: p.thresh,
            maxthresh: p.maxthresh,
            q_weight: p.q_weight,
            linterm: p.linterm,
            gentle: p.gentle,
            queue_in_bytes: p.queue_in_bytes,
            bytes: false,
            mean_pktsize: p.mean_pktsize,
            wait: true,
        }
    }
}

/// One direction's RED: its state and its random numbers.
pub struct NbRed {
    red: Red,
    rng: Pcg64,
}

/// The stream of a simulated direction's RED draws (its seed is nestbed-sim's).
const STREAM_SIM_RED: u64 = 0x5eed_0052_4544;

/// The parameters as RED takes them, if linkd would take them.
fn checked(params: Option<&NbRedParams>) -> Option<RedParams> {
    let params = RedParams::from(params?);
    let mut problems = crate::error::Problems::default();
    params.check("red", &mut problems);
    problems.into_result().ok().map(|()| params)
}

/// Whether linkd would take these parameters (nestbed-sim asks before it changes anything).
///
/// # Safety
/// `params` is null or points to a valid `NbRedParams`.
#[no_mangle]
pub unsafe extern "C" fn nb_red_valid(params: *const NbRedParams) -> bool {
    checked(params.as_ref()).is_some()
}

/// A new RED, or null for parameters linkd refuses.
///
/// # Safety
/// `params` is null or points to a valid `NbRedParams`. Free the result with
/// [`nb_red_free`].
#[no_mangle]
pub unsafe extern "C" fn nb_red_new(params: *const NbRedParams, seed: u64) -> *mut NbRed {
    let Some(params) = checked(params.as_ref()) else {
        return std::ptr::null_mut();
    };
    Box::into_raw(Box::new(NbRed {
        red: Red::new(&params),
        rng: stage_rng(seed, STREAM_SIM_RED),
    }))
}

/// New parameters; the average and the count carry on (as linkd's). Parameters linkd
/// refuses change nothing, and give false.
///
/// # Safety
/// `red` comes from [`nb_red_new`]; `params` is null or points to a valid `NbRedParams`.
#[no_mangle]
pub unsafe extern "C" fn nb_red_set(red: *mut NbRed, params: *const NbRedParams) -> bool {
    match (red.as_mut(), checked(params.as_ref())) {
        (Some(red), Some(params)) => {
            red.red.set_params(&params);
            true
        }
        _ => false,
    }
}

/// RED's verdict on a packet of `size` bytes arriving at a queue of `queue_packets` packets
/// and `queue_bytes` bytes, empty for `idle_ns` (negative: not empty, or never busy), on a
/// link of `rate_bps` (0: unlimited): 0 accept, 1 an early drop, 2 a forced drop.
///
/// # Safety
/// `red` comes from [`nb_red_new`].
#[no_mangle]
pub unsafe extern "C" fn nb_red_arrival(
    red: *mut NbRed,
    queue_packets: u64,
    queue_bytes: u64,
    idle_ns: i64,
    size: u32,
    rate_bps: u64,
) -> u8 {
    let Some(red) = red.as_mut() else {
        return 0;
    };
    let arrival = Arrival {
        queue_packets,
        queue_bytes,
        idle_ns: u64::try_from(idle_ns).ok(),
        size,
        rate_bps,
    };
    match red.red.on_arrival(arrival, &mut red.rng) {
        Verdict::Accept => 0,
        Verdict::EarlyDrop => 1,
        Verdict::ForcedDrop => 2,
    }
}

/// Restarts the count after a drop decided elsewhere (the hard limit), as linkd does.
///
/// # Safety
/// `red` comes from [`nb_red_new`].
#[no_mangle]
pub unsafe extern "C" fn nb_red_reset_count(red: *mut NbRed) {
    if let Some(red) = red.as_mut() {
        red.red.reset_count();
    }
}

/// Frees a RED.
///
/// # Safety
/// `red` comes from [`nb_red_new`] and is not used again.
#[no_mangle]
pub unsafe extern "C" fn nb_red_free(red: *mut NbRed) {
    if !red.is_null() {
        drop(Box::from_raw(red));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(gentle: bool) -> NbRedParams {
        NbRedParams {
            thresh: 5.0,
            maxthresh: 15.0,
            q_weight: 1.0, // the average is the queue: each verdict follows from it alone
            linterm: 10.0,
            mean_pktsize: 500,
            gentle,
            queue_in_bytes: false,
        }
    }

    #[test]
    fn verdicts_through_the_c_interface_are_reds() {
        unsafe {
            let red = nb_red_new(&params(false), 7);
            assert!(!red.is_null());
            assert_eq!(nb_red_arrival(red, 2, 120, -1, 60, 1_000_000), 0);
            assert_eq!(nb_red_arrival(red, 20, 1200, -1, 60, 1_000_000), 2);
            assert!(nb_red_set(red, &params(true)));
            // gentle: forced only from twice maxthresh
            let verdict = nb_red_arrival(red, 20, 1200, -1, 60, 1_000_000);
            assert_ne!(verdict, 2);
            assert_eq!(nb_red_arrival(red, 31, 1860, -1, 60, 1_000_000), 2);
            nb_red_reset_count(red);
            nb_red_free(red);
        }
    }

    #[test]
    fn parameters_linkd_refuses_are_refused_and_change_nothing() {
        let mut bad = params(false);
        bad.maxthresh = 1.0; // below thresh
        unsafe {
            assert!(!nb_red_valid(&bad) && nb_red_valid(&params(false)));
            assert!(nb_red_new(&bad, 1).is_null());
            assert!(nb_red_new(std::ptr::null(), 1).is_null());
            let red = nb_red_new(&params(false), 1);
            assert!(!nb_red_set(red, &bad));
            // still non-gentle: forced at maxthresh
            assert_eq!(nb_red_arrival(red, 20, 1200, -1, 60, 1_000_000), 2);
            nb_red_free(red);
        }
    }
}
