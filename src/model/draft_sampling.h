// SPDX-License-Identifier: Apache-2.0
// How a drafter turns one row of draft logits into a draft token (deepinfer/drafter.h): argmax (first
// maximum: the lowest id) without a uniform, else softmax(logits / temperature) in double, stored as
// f32 in `probs` (the distribution verification sees) and drawn by inverse CDF over exactly the stored
// probabilities. Shared by the MTP and DSpark drafters.
//
// Every sum over the vocabulary runs in one fixed blocked order (draft_blocked_sum): ids in blocks of
// kDraftSumBlock, each block summed in id order, then the blocks' sums in block order. The inverse CDF
// walks the same blocks: first over the blocks' sums, then inside the block it lands in. The device
// kernels (kernels/mtp.cuh, draft_sample_*_kernel) sum each block on its own warp across the GPU and the
// blocks on one thread, so they give these bits with about a thousand dependent additions per row
// instead of one per id (the vocabulary's 129,280 of V4).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

// The block search of the inverse CDF also runs in the device kernel.
#if defined(__CUDACC__)
#define DI_DRAFT_HD __host__ __device__
#else
#define DI_DRAFT_HD
#endif

namespace deepinfer {

inline constexpr int64_t kDraftSumBlock = 512;

DI_DRAFT_HD inline int64_t draft_sum_blocks(int64_t V) { return (V + kDraftSumBlock - 1) / kDraftSumBlock; }

// sum_v term(v) over [0, V) in the blocked order; `parts` (when given) receives each block's sum.
template <class Term>
double draft_blocked_sum(int64_t V, Term term, std::vector<double>* parts = nullptr) {
    double total = 0;
    for (int64_t b0 = 0; b0 < V; b0 += kDraftSumBlock) {
        double s = 0;
        for (int64_t v = b0; v < std::min(V, b0 + kDraftSumBlock); ++v) s += term(v);
        if (parts) parts->push_back(s);
        total += s;
    }
    return total;
}

// The draw of the inverse CDF at `u` (already scaled by the total) over probs [V] with the blocks' sums
// `parts`, in two stages (the device kernel runs the second over a copy of the block in shared memory):
// the first block whose sum exceeds what is left of u (else the last; u becomes what is left of it) ...
DI_DRAFT_HD inline int64_t draft_cdf_block(const double* parts, int64_t nb, double& u) {
    int64_t b = 0;
    for (; b + 1 < nb; ++b) {
        if (u < parts[b]) break;
        u -= parts[b];
    }
    return b;
}
// ... then the first id in block b whose probability exceeds what is left of u (else the block's last
// id); a zero-probability pick steps back to the nearest nonzero id. `prob(v)`: the stored probability of v.
template <class Prob>
DI_DRAFT_HD inline int64_t draft_cdf_in_block(const Prob& prob, int64_t V, int64_t b, double u) {
    int64_t v = b * kDraftSumBlock;
    const int64_t end = V < v + kDraftSumBlock ? V : v + kDraftSumBlock;
    for (; v + 1 < end; ++v) {
        if (u < double(prob(v))) break;
        u -= double(prob(v));
    }
    while (v > 0 && prob(v) == 0) --v;
    return v;
}
DI_DRAFT_HD inline int64_t draft_inverse_cdf(const float* probs, int64_t V, const double* parts, double u) {
    const int64_t b = draft_cdf_block(parts, draft_sum_blocks(V), u);
    return draft_cdf_in_block([probs](int64_t v) { return probs[v]; }, V, b, u);
}

// logits: [V]. `probs`: appended [V] when sampled, untouched for argmax drafts. Returns the draft.
inline int32_t draw_draft(const float* logits, int64_t V, double temperature, const double* uniform,
                          std::vector<float>& probs) {
    const float* mx_it = std::max_element(logits, logits + V);
    int32_t pick = static_cast<int32_t>(mx_it - logits);
    if (uniform == nullptr || temperature <= 0) return pick;
    const float mx = *mx_it;
    std::vector<double> q(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) q[size_t(v)] = std::exp((double(logits[v]) - mx) / temperature);
    const double den = draft_blocked_sum(V, [&](int64_t v) { return q[size_t(v)]; });
    const size_t base = probs.size();
    probs.resize(base + size_t(V));
    float* p = probs.data() + base;
    for (int64_t v = 0; v < V; ++v) p[v] = static_cast<float>(q[size_t(v)] / den);
    std::vector<double> parts;
    const double total = draft_blocked_sum(V, [&](int64_t v) { return double(p[v]); }, &parts);
    return static_cast<int32_t>(draft_inverse_cdf(p, V, parts.data(), *uniform * total));
}

// The MTP drafter's confidence proxy: softmax(logits) at temperature 1 of `pick`, its normalizer in the
// blocked order.
inline float draft_confidence_proxy(const float* logits, int64_t V, int32_t pick) {
    const float mx = *std::max_element(logits, logits + V);
    const double den = draft_blocked_sum(V, [&](int64_t v) { return std::exp(double(logits[v]) - mx); });
    return static_cast<float>(std::exp(double(logits[pick]) - mx) / den);
}

}  // namespace deepinfer
