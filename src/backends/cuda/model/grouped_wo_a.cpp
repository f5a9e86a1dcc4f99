// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/grouped_wo_a.h"

#include "backends/cuda/gemm_fast.h"

namespace deepinfer::cuda {

void grouped_wo_a(const GroupedWoAParams& p, DeviceArena& ws, Stream s) {
    const int64_t G = p.groups_n, S = p.rows, OL = p.out_rank;
    int32_t* offsets = ws.alloc_n<int32_t>(G + 1);
    int32_t* rows_of = ws.alloc_n<int32_t>(G * S);
    int32_t* tiles = ws.alloc_n<int32_t>(G + 1);
    group_row_tables({.groups = G, .rows = S, .offsets = offsets, .rows_of = rows_of}, s);
    const DeviceLinear shape = p.wo_a.rows(0, OL);
    // Decode-sized launches: the K chunks on separate blocks (the split form; the same bits), their partials released
    // after the launch (stream-ordered).
    const size_t mark = ws.mark();
    const int64_t n = fast_grouped_split_floats(shape, G * S, G);
    fast_linear({.a = p.ob, .a_row_src = rows_of, .weight = shape, .experts = p.groups, .expert_offsets = offsets,
                 .num_experts = G, .tile_scratch = tiles, .y_row = rows_of, .y = p.u, .y_ld = OL, .rows = G * S,
                 .round_output_bf16 = p.round_bf16, .split_scratch = n > 0 ? ws.alloc_n<float>(n) : nullptr},
                s);
    ws.reset(mark);
}

}  // namespace deepinfer::cuda
