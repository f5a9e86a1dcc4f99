// SPDX-License-Identifier: Apache-2.0
// Per-sequence decode state of the V4.1 forward (spec §2.4, §3.9), exact numerics: every layer's
// sliding-window K=V (the last sliding_window tokens, oldest first, after FP8 QAT); each KV source's
// compressed entries and index keys (after RoPE and QAT) and, at ratio > 1, the projected rows of
// the incomplete group; the Engram n-gram history. The candidate mask, top-k lists and mHC pre-mix
// are per forward and not kept. Groups are aligned to absolute positions (entry i = tokens i*r ..
// i*r + r - 1), so any chunking of a sequence gives the same state.
#pragma once

#include <cstdint>
#include <vector>

namespace deepinfer::v41 {

struct LayerState {
    std::vector<float> window;  // [num_window, head_dim] positions num_tokens - num_window .. num_tokens - 1
    int64_t num_window = 0;
    // KV sources only.
    std::vector<float> compressed;  // [num_entries, head_dim]
    std::vector<float> index_keys;  // [num_entries, index_head_dim]
    int64_t num_entries = 0;
    std::vector<float> pending_kv;    // [num_pending, head_dim] fp32 compressor projections (ratio > 1)
    std::vector<float> pending_gate;  // [num_pending, head_dim]
    int64_t num_pending = 0;
};

struct SequenceState {
    int64_t num_tokens = 0;               // positions already processed
    std::vector<LayerState> layers;       // [num_hidden_layers]
    std::vector<int64_t> engram_history;  // compressed id (or kEngramDead) of every processed position
};

}  // namespace deepinfer::v41
