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

#include "deepinfer/model.h"
#include "deepinfer/model_config.h"
#include "model/dspark_common.h"
#include "model/paged_rows.h"

namespace deepinfer {

// Rows a single forward pass may write beyond what later queries still need: the headroom that lets a
// speculative verify pass write rows that are then rejected, with no undo (speculative-decoding.md
// §7.3: a ring of R >= n + W - 1 slots never serves a stale row to a pass of n rows).
inline constexpr int64_t kRingHeadroom = 16;

struct CompressorState {
    int64_t ratio = 0;
    int64_t head_dim = 0;  // d
    int64_t width = 0;     // d or 2d
    bool overlap = false;
    // Position-keyed rings: the projected row of position p lives in slot p % ring_rows. Pooling a
    // window reads its rows (and, for CSA, the previous window's first halves) by position.
    int64_t ring_rows = 0;  // (overlap ? 2 : 1) * ratio + kRingHeadroom
    PagedRing ring_kv;      // [ring_rows, width]  c_p
    PagedRing ring_gate;    // [ring_rows, width]  z_p + ape[p % ratio]
    PagedRows entries;  // [num_entries, d] finalized compressed entries, paged
    int64_t num_entries() const { return entries.size(); }

};

// What MTP drafting keeps of the target's passes: the final HC streams (before the HC head) of the
// last pass's last rows, so the row of the last committed position can pair with the next token.
struct MtpTaps {
    bool attached = false;
    int64_t first = 0;           // position of the first kept row
    int64_t rows = 0;
    std::vector<float> streams;  // [rows, hc, D]
};

struct LayerState {
    int64_t window_rows = 0;    // sliding_window + kRingHeadroom
    PagedRing window;           // [window_rows, head_dim] ring; position p in slot p % window_rows
    CompressorState compressor;  // CSA / HCA main compressor
    CompressorState indexer;     // CSA indexer compressor (keys)
};

struct V4SequenceState final : SequenceState {
    int64_t length = 0;  // tokens consumed; the next token's position
    std::vector<LayerState> layers;
    std::vector<LayerState> mtp_layers;
    MtpTaps mtp_taps;  // MTP drafting (model/mtp_drafter.h); unused unless attached
    DSparkRings dspark;  // DSpark drafting (model/dspark_v4.h): context rings, empty unless attached
    std::shared_ptr<StatePool> pool;  // where the pages come from (null: the heap)

    int64_t num_tokens() const override { return length; }
    std::unique_ptr<SequenceState> clone() const override { return std::make_unique<V4SequenceState>(*this); }
    // O(layers): drops compressed entries whose group ends at or after `num_tokens`; rings need no undo.
    void truncate(int64_t num_tokens) override;
    size_t bytes() const override;
    size_t unshared_bytes() const override;
};

// `pool` may be null (pages from the heap).
V4SequenceState make_sequence_state(const ModelConfig& config, int64_t num_mtp_layers,
                                  std::shared_ptr<StatePool> pool = nullptr);

}  // namespace deepinfer

namespace deepinfer {
// Bytes of the state of a sequence of `num_tokens` tokens (for admission before it exists).
// Pages are rounded up to `page_bytes`.
// `num_mtp_layers`: the MTP block's sliding rings (every sequence of an MTP checkpoint has them).
uint64_t estimate_state_bytes(const ModelConfig& config, int64_t num_tokens, uint64_t page_bytes = 16 << 10,
                              int64_t num_mtp_layers = 0);
}  // namespace deepinfer
