// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/bf16_key_plan.h"

#include <algorithm>

namespace deepinfer::cuda {

Bf16KeyPlan plan_bf16_keys(std::span<const Bf16KeySegment> segments, int64_t chunk_rows, int64_t window, int64_t topk,
                           int64_t budget_rows) {
    Bf16KeyPlan plan;
    plan.keys.assign(segments.size(), SinkBf16Keys{});
    if (budget_rows <= 0) return plan;
    int64_t used = 0;
    for (size_t i = 0; i < segments.size(); ++i) {
        const Bf16KeySegment& s = segments[i];
        if (s.num_rows < kBf16KeysMinRows) continue;
        // The window positions below the segment's first row that its rows read (the lowest row's window).
        const int64_t lo = std::max({int64_t(0), s.first_position - window + 1, s.window_begin});
        const int64_t ring_n = std::max<int64_t>(0, s.first_position - lo);
        const int64_t decoded = ring_n + s.entries;
        const int64_t in_place = s.num_rows * (std::min(window, s.first_position + s.num_rows) + (s.entries > 0 ? topk : 0));
        if (2 * decoded > in_place || used + decoded > budget_rows) continue;
        SinkBf16Keys& k = plan.keys[i];
        k.ring_row = chunk_rows + used;
        k.ring_lo = lo;
        k.ring_n = ring_n;
        k.entry_row = k.ring_row + ring_n;
        k.entries = s.entries;
        used += decoded;
        plan.max_rows = std::max(plan.max_rows, decoded);
    }
    // A taken segment with nothing to decode (no ring rows, no entries) still reads its chunk rows in bf16.
    const bool taken = std::any_of(plan.keys.begin(), plan.keys.end(), [](const SinkBf16Keys& k) { return k.ring_row >= 0; });
    plan.key_rows = taken ? chunk_rows + used : 0;
    return plan;
}

}  // namespace deepinfer::cuda
