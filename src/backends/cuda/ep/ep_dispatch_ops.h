// SPDX-License-Identifier: Apache-2.0
// The device side of the routed expert-parallel dispatch (dispatch_plan.h): the plan of a rank's own
// rows, the receiving rank's compact output index, and the packing of rows per destination rank.
// Host references: ep_route_plan_host / ep_local_slots_host (tests/model/cuda_ep_test.cpp compares).
#pragma once

#include <cstdint>

#include "backends/cuda/ep/dispatch_plan.h"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

// One block: counts and send lists of a rank's rows (EpRoutePlan's fields, on the device).
struct EpRoutePlanParams {
    const int32_t* ids = nullptr;  // [rows, top_k] i32 global expert ids
    int64_t rows = 0, top_k = 0;   // top_k <= 32
    int32_t experts_per_rank = 0;
    int32_t ranks = 0;             // <= kMaxEpRanks
    int32_t* send_rows = nullptr;  // [ranks, rows] i32 (entries past each rank's count untouched)
    int32_t* pair_slot = nullptr;  // [rows · top_k] i32
    int32_t* counts = nullptr;     // [2 · ranks] i32
};
void ep_route_plan(const EpRoutePlanParams& p, Stream s);

// One block: compact[j] = position of slot j among the local slots (row-major), or -1.
struct EpLocalSlotsParams {
    const int32_t* ids = nullptr;  // [n] i32 global expert ids of the received rows' slots
    int64_t n = 0;
    int32_t first_expert = 0, experts_per_rank = 0;
    int32_t* compact = nullptr;    // [n] i32
};
void ep_local_slots(const EpLocalSlotsParams& p, Stream s);

// out[i] = map[index[i]], i < n (the grouped GEMM's destination row of each permuted pair).
struct EpComposeParams {
    const int32_t* index = nullptr;  // [n]
    const int32_t* map = nullptr;    // [*]
    int32_t* out = nullptr;          // [n]
    int64_t n = 0;
};
void ep_compose(const EpComposeParams& p, Stream s);

// dst[i] = f32(src[index[i]]) for bf16 rows (the routed returns of bf16-rounded expert outputs).
struct EpGatherBf16Params {
    const uint16_t* src = nullptr;   // [*, width] bf16
    const int32_t* index = nullptr;  // [n]
    float* dst = nullptr;            // [n, width] f32
    int64_t n = 0, width = 0;
};
void ep_gather_bf16_rows(const EpGatherBf16Params& p, Stream s);

// Copies each destination's rows of up to four row-major planes (FP8 rows, scales, ids, weights):
// plane[k].dst[r] row j ← plane[k].src row send_rows[r · rows + j], j < count[r].
struct EpPackPlane {
    const void* src = nullptr;
    int64_t width = 0;  // bytes per row, a multiple of 4
    void* dst[kMaxEpRanks] = {};
};
struct EpPackParams {
    EpPackPlane planes[4];
    int32_t num_planes = 0;
    const int32_t* send_rows = nullptr;  // [ranks, rows]
    int64_t rows = 0;
    int32_t ranks = 0;
    int64_t count[kMaxEpRanks] = {};     // rows to each destination (host copy of the plan's counts)
};
void ep_pack(const EpPackParams& p, Stream s);

}  // namespace deepinfer::cuda
