// SPDX-License-Identifier: Apache-2.0
// The grouped output projection wo_a of V4 and V4.1 (and V4's DSpark drafter) as one grouped fast launch:
// o in bf16 [S, G·gin] viewed as [S·G, gin] rows (row s of group g is view row s·G + g, in and out) over
// wo_a's G row slices, into u [S, G·OL]. Every form of the fast GEMM computes an element with the same
// instructions and additions, so these are the bits of one launch per group
// (tests/ops/gemm_fast_cuda_test.cpp, GroupedWoAEqualsDenseLaunchPerGroup).
#pragma once

#include <cstdint>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

// From this many rows wo_a runs as one dense launch per group: each then has >= 128 output tiles (16 row
// tiles x 8 weight-row tiles at 1024 outputs, V4's and V4.1's shape), about one wave of the warp-specialized
// kernel; below it, the grouped launch keeps the GPU busier.
inline constexpr int64_t kWoADenseRows = 2048;

struct GroupedWoAParams {
    const uint16_t* ob = nullptr;            // [S, G·gin] bf16: o's bf16 form
    DeviceLinear wo_a;                       // [G·OL, gin] (its first slice gives the shape)
    const DeviceLinear* groups = nullptr;    // [G] wo_a's row slices (device array)
    int64_t groups_n = 0, rows = 0, out_rank = 0;  // G, S, OL
    float* u = nullptr;                      // [S, G·OL]
    bool round_bf16 = false;
};
// Allocates its row tables in `ws` (left there for the caller's mark to release), and at decode sizes the split
// form's partials (fast_grouped_split_floats: at most fast_linear_split_floats_bound(G·S) floats, released before it
// returns; the callers' workspace counts them among the split-K partials of one GEMM at a time).
void grouped_wo_a(const GroupedWoAParams& p, DeviceArena& ws, Stream s);

}  // namespace deepinfer::cuda
