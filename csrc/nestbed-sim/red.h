// RED and gentle RED from nestbed-linkd's own pipe crate (crates/nestbed-pipe/src/ffi.rs),
// linked in as a static library: a simulated link's RED is linkd's, not a copy of it.

#pragma once

#include <cstdint>

extern "C"
{
    // ns-2's RED parameters, laid out as the crate's #[repr(C)] NbRedParams.
    struct NbRedParams
    {
        double thresh;
        double maxthresh;
        double q_weight;
        double linterm;
        uint32_t mean_pktsize;
        bool gentle;
        bool queue_in_bytes;
    };

    struct NbRed;

    // Whether linkd would take these parameters.
    bool nb_red_valid(const NbRedParams* params);
    // Null for parameters linkd would refuse.
    NbRed* nb_red_new(const NbRedParams* params, uint64_t seed);
    // False, and nothing changed, for parameters linkd would refuse.
    bool nb_red_set(NbRed* red, const NbRedParams* params);
    // 0 accept, 1 an early drop, 2 a forced drop; idle_ns < 0: the queue is not empty.
    uint8_t nb_red_arrival(NbRed* red,
                           uint64_t queue_packets,
                           uint64_t queue_bytes,
                           int64_t idle_ns,
                           uint32_t size,
                           uint64_t rate_bps);
    void nb_red_reset_count(NbRed* red);
    void nb_red_free(NbRed* red);
}
