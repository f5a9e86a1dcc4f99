// SPDX-License-Identifier: Apache-2.0
// How a drafter turns one row of draft logits into a draft token (deepinfer/drafter.h): argmax (first
// maximum: the lowest id) without a uniform, else softmax(logits / temperature) in double, stored as
// f32 in `probs` (the distribution verification sees) and drawn by inverse CDF in id order over exactly
// the stored probabilities. Shared by the MTP and DSpark drafters.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace deepinfer {

// logits: [V]. `probs`: appended [V] when sampled, untouched for argmax drafts. Returns the draft.
inline int32_t draw_draft(const float* logits, int64_t V, double temperature, const double* uniform,
                          std::vector<float>& probs) {
    const float* mx_it = std::max_element(logits, logits + V);
    int32_t pick = static_cast<int32_t>(mx_it - logits);
    if (uniform == nullptr || temperature <= 0) return pick;
    const float mx = *mx_it;
    std::vector<double> q(static_cast<size_t>(V));
    double den = 0;
    for (int64_t v = 0; v < V; ++v) den += (q[size_t(v)] = std::exp((double(logits[v]) - mx) / temperature));
    const size_t base = probs.size();
    probs.resize(base + size_t(V));
    double total = 0;
    for (int64_t v = 0; v < V; ++v) total += (probs[base + size_t(v)] = static_cast<float>(q[size_t(v)] / den));
    double u = *uniform * total;
    int64_t v = 0;
    for (; v + 1 < V; ++v) {
        if (u < double(probs[base + size_t(v)])) break;
        u -= double(probs[base + size_t(v)]);
    }
    while (v > 0 && probs[base + size_t(v)] == 0) --v;
    return static_cast<int32_t>(v);
}

}  // namespace deepinfer
