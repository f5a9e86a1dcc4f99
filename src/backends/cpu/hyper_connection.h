// SPDX-License-Identifier: Apache-2.0
// Manifold-constrained hyper-connections (spec §2.4) on the CPU, per token: HC pre (mix, Sinkhorn,
// collapse), HC post (expand + mix, comb consumed transposed) and the HC head.
#pragma once

#include <cstdint>

namespace deepinfer::cpu {

struct HcPreParams {
    const float* x = nullptr;      // [num_tokens, hc, D] streams
    const float* fn = nullptr;     // [(2+hc)*hc, hc*D]
    const float* base = nullptr;   // [(2+hc)*hc]
    const float* scale = nullptr;  // [3]
    int64_t num_tokens = 0, hc = 0, hidden = 0, sinkhorn_iters = 0;
    float norm_eps = 1e-6f, hc_eps = 1e-6f;
    float* post = nullptr;       // [num_tokens, hc]
    float* comb = nullptr;       // [num_tokens, hc, hc]
    float* collapsed = nullptr;  // [num_tokens, D]
    bool round_bf16 = false;     // official: collapsed rounded to bf16
};
void hc_pre(const HcPreParams& p);

struct HcPostParams {
    const float* out = nullptr;   // [num_tokens, D] sub-block output
    const float* x = nullptr;     // [num_tokens, hc, D] input streams
    const float* post = nullptr;  // [num_tokens, hc]
    const float* comb = nullptr;  // [num_tokens, hc, hc]
    int64_t num_tokens = 0, hc = 0, hidden = 0;
    float* y = nullptr;           // [num_tokens, hc, D] new streams (may not alias x)
    bool round_bf16 = false;
};
void hc_post(const HcPostParams& p);

struct HcHeadParams {
    const float* x = nullptr;      // [num_tokens, hc, D]
    const float* fn = nullptr;     // [hc, hc*D]
    const float* base = nullptr;   // [hc]
    const float* scale = nullptr;  // [1]
    int64_t num_tokens = 0, hc = 0, hidden = 0;
    float norm_eps = 1e-6f, hc_eps = 1e-6f;
    float* y = nullptr;  // [num_tokens, D]
    bool round_bf16 = false;
};
void hc_head(const HcHeadParams& p);

}  // namespace deepinfer::cpu
