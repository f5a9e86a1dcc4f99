// SPDX-License-Identifier: Apache-2.0
// Per-sequence decode state of DeepSeek-V4 (spec §3): the sliding-window K=V ring of every layer,
// and for compressed layers the compressor state (rows of the open window, the previous window's
// first halves for the overlapping CSA compressor) plus the emitted compressed entries (main KV and,
// for CSA, indexer keys). With this state a sequence can be prefilled in chunks of any size and
// decoded token by token with results identical to one full forward.
// The growing part (compressed entries, indexer keys) is paged (PagedRows, shared between prefix
// snapshots and the sequences started from them); the fixed-size part is per sequence.
#pragma once

#include <cstdint>
#include <vector>

#include "deepinfer/model_config.h"
#include "model/paged_rows.h"

namespace deepinfer {

struct CompressorState {
    int64_t ratio = 0;
    int64_t head_dim = 0;  // d
    int64_t width = 0;     // d or 2d
    bool overlap = false;
    std::vector<float> open_kv;    // [rows in the open window, width]  c_t
    std::vector<float> open_gate;  // [rows in the open window, width]  z_t + ape
    std::vector<float> prev_kv;    // [ratio, d] first halves of the last complete window (overlap only)
    std::vector<float> prev_gate;  // [ratio, d]
    bool has_prev = false;
    PagedRows entries;  // [num_entries, d] finalized compressed entries, paged
    int64_t num_entries() const { return entries.size(); }
    int64_t open_rows() const { return width ? static_cast<int64_t>(open_kv.size()) / width : 0; }
};

struct LayerState {
    std::vector<float> window;  // [sliding_window, head_dim] ring; position p in slot p % sliding_window
    CompressorState compressor;  // CSA / HCA main compressor
    CompressorState indexer;     // CSA indexer compressor (keys)
};

struct SequenceState {
    int64_t num_tokens = 0;  // tokens consumed; the next token's position
    std::vector<LayerState> layers;
    std::vector<LayerState> mtp_layers;
    size_t bytes() const;           // memory referenced (shared pages counted in full)
    size_t unshared_bytes() const;  // memory held by this state alone
};

// `pool` may be null (pages from the heap).
SequenceState make_sequence_state(const ModelConfig& config, int64_t num_mtp_layers,
                                  std::shared_ptr<StatePool> pool = nullptr);

}  // namespace deepinfer

namespace deepinfer {
// Bytes of the state of a sequence of `num_tokens` tokens (for admission before it exists).
// Pages are rounded up to `page_bytes`.
uint64_t estimate_state_bytes(const ModelConfig& config, int64_t num_tokens, uint64_t page_bytes = 16 << 10);
}  // namespace deepinfer
