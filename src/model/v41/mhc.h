// SPDX-License-Identifier: Apache-2.0
// Single-pass mHC of DeepSeek-V4.1 (spec §4) for one token: the mixes of a site (pre, post and the
// Sinkhorn-projected comb, from the normalized flattened streams), the collapse with a given `pre`
// (which in V4.1 is the previous site's) and the expansion. f32 throughout (exact mode).
#pragma once

#include <cstdint>

namespace deepinfer::v41 {

struct HcMixParams {
    const float* fn = nullptr;     // [(2+hc)*hc, hc*D]
    const float* base = nullptr;   // [(2+hc)*hc]
    const float* scale = nullptr;  // [3]
    int64_t hc = 0, hidden = 0, sinkhorn_iters = 0;
    float norm_eps = 1e-20f, hc_eps = 1e-6f;
};

// x: [hc, D] streams of one token; pre, post: [hc]; comb: [hc, hc] (comb[j*hc + k], j = input stream).
void hc_mixes(const HcMixParams& p, const float* x, float* pre, float* post, float* comb);

// out[d] = Σ_j pre[j] · x[j][d]. out: [D].
void hc_collapse(const float* x, const float* pre, int64_t hc, int64_t hidden, float* out);

// y[k][d] = post[k] · o[d] + Σ_j comb[j][k] · x[j][d]. y: [hc, D], must not alias x.
void hc_expand(const float* o, const float* x, const float* post, const float* comb, int64_t hc, int64_t hidden,
               float* y);

}  // namespace deepinfer::v41
