// SPDX-License-Identifier: Apache-2.0
// Which segments of a V4.1 sink attention launch get their keys pre-decoded to bf16 rows once (ops.h
// SinkBf16Keys, key_rows_bf16) instead of decoded by the attention kernels once per query row and pass, and
// where their key rows go. Host code only (unit-tested without a GPU: tests/model/cuda_v41_runtime_test.cpp).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

// One segment of the launch: its first position and rows, its window floor (bounded replay; 0: none) and the
// entries of its KV source that its rows may pick (0: no compressed keys).
struct Bf16KeySegment {
    int64_t first_position = 0, num_rows = 0, window_begin = 0, entries = 0;
};

struct Bf16KeyPlan {
    std::vector<SinkBf16Keys> keys;  // per segment (ring_row -1: decoded in place)
    int64_t key_rows = 0;            // the key buffer's rows: the launch's rows (their bf16 form) + the decoded ones
    int64_t max_rows = 0;            // the largest ring_n + entries of a pre-decoded segment (key_rows_bf16's grid)
    bool any() const { return key_rows > 0; }  // some segment is pre-decoded
};

// Segments are taken in order while they pay and fit: at least kBf16KeysMinRows rows, their ring rows and entries
// (decoded once) at most half of what their rows would decode (rows x (window + topk)), and the decoded rows within
// budget_rows in all. The key rows: the launch's chunk_rows first (row r at r), then each taken segment's ring rows
// and entries. budget_rows <= 0: none taken (key_rows 0).
constexpr int64_t kBf16KeysMinRows = 16;
Bf16KeyPlan plan_bf16_keys(std::span<const Bf16KeySegment> segments, int64_t chunk_rows, int64_t window, int64_t topk,
                           int64_t budget_rows);

}  // namespace deepinfer::cuda
