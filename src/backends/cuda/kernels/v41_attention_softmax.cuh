// SPDX-License-Identifier: Apache-2.0
// Pass 2 of V4.1's tensor-core sink attention kernels (v41_attention_tc.cuh, v41_attention_tc_heads.cuh,
// v41_attention_tc_split.cuh): one head's softmax by one warp. All three run this one definition, so a head's
// probabilities are the same bits whichever kernel the row count picks (batch invariance).
// A head's scores are read once, all of a lane's in flight (nc <= kV41KeyTable: at most kPerLane per lane),
// and kept in registers through the maximum, the exponentials and their sum (each lane's in ascending j, then
// the shuffle tree). A lane's valid slots are its first `mine` (k < mine <=> lane + 32k < nc); the rest hold
// -inf, which leaves the maximum as it is and adds exact zeros after the lane's last term (x + 0 = x): the
// same bits as skipping them, without a 64-bit compare and a predicate per slot (ncu, session 35).
#pragma once

#include <cmath>

namespace deepinfer::cuda::kernels {

// s: the head's score of key `lane` (its key lane + 32k at s[32k]; written by other CTAs or launches: read
// through L2). On return e[k] = e^(s_k - m) for k < mine, and the result is den = Σ e[k] (lane order, then the
// shuffle tree) + e^(sink - m), m = max(sink, max_k s_k); the probability of slot k is bf16(e[k] / den).
template <int kPerLane>
__device__ __forceinline__ float v41_head_softmax(const float* s, float sink, int mine, float (&e)[kPerLane]) {
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) e[k] = k < mine ? __ldcg(s + 32 * k) : -INFINITY;
    float mx = sink;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) mx = fmaxf(mx, e[k]);
    for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xFFFFFFFFu, mx, o));
    float den = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
        e[k] = __expf(e[k] - mx);
        den += e[k];
    }
    for (int o = 16; o > 0; o /= 2) den += __shfl_xor_sync(0xFFFFFFFFu, den, o);
    den += __expf(sink - mx);
    return den;
}

}  // namespace deepinfer::cuda::kernels
