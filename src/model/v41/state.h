// SPDX-License-Identifier: Apache-2.0
// Per-sequence decode state of the V4.1 forward (spec §2.4, §3.9), exact numerics: every layer's
// sliding-window K=V (after FP8 QAT); each KV source's compressed entries and index keys (after RoPE
// and QAT) and, at ratio > 1, the projected rows of the open group; the Engram n-gram history. The
// candidate mask, top-k lists and mHC pre-mix are per forward and not kept. Groups are aligned to
// absolute positions (entry i = tokens i*r .. i*r + r - 1), so any chunking of a sequence gives the
// same state.
//
// Every per-position quantity lives in a position-keyed ring with headroom (the row of position p in
// slot p % rows, rows = what later queries need + kRingHeadroom), so a pass may write rows that are
// then rejected (speculative decoding) with no undo: truncate(n) only drops the compressed entries
// of groups that end at or after n (speculative-decoding.md §7.3). Rings and entries are paged in a
// StatePool and shared, copy-on-write, between copies (prefix-cache snapshots, forks).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"
#include "model/dspark_common.h"
#include "model/paged_rows.h"
#include "model/state.h"

namespace deepinfer::v41 {

struct LayerState {
    int64_t window_rows = 0;  // sliding_window + kRingHeadroom
    PagedRing window;         // [window_rows, head_dim] K=V of position p in slot p % window_rows
    // KV sources (Full layers) only.
    int64_t ratio = 0;      // compress ratio of a KV source, else 0
    PagedRows compressed;   // [num_entries, head_dim]
    PagedRows index_keys;   // [num_entries, index_head_dim]
    int64_t pending_rows = 0;        // ratio > 1: ratio + kRingHeadroom
    PagedRing pending_kv;            // [pending_rows, head_dim] fp32 compressor projections, by position
    PagedRing pending_gate;          // [pending_rows, head_dim]
    int64_t num_entries() const { return compressed.size(); }
};

struct SequenceState final : ::deepinfer::SequenceState {
    int64_t length = 0;              // positions already processed
    std::vector<LayerState> layers;  // [num_hidden_layers]
    // Engram history: compressed id (or kEngramDead) of position p in slot p % size
    // (size = engram_max_ngram_size - 1 + kRingHeadroom; empty without Engram).
    std::vector<int64_t> engram_history;
    DSparkRings dspark;  // drafter context (model/v41/dspark.h); empty unless attached
    std::shared_ptr<StatePool> pool;  // where the pages come from (null: the heap)

    int64_t num_tokens() const override { return length; }
    std::unique_ptr<::deepinfer::SequenceState> clone() const override { return std::make_unique<SequenceState>(*this); }
    void truncate(int64_t num_tokens) override;
    size_t bytes() const override;
    size_t unshared_bytes() const override;
};

// A fresh state for `config`; `pool` may be null (pages from the heap).
SequenceState make_sequence_state(const V41TextConfig& config, std::shared_ptr<StatePool> pool);

// Bytes of the state of a sequence of `num_tokens` tokens with pages of `page_bytes`.
uint64_t estimate_state_bytes(const V41TextConfig& config, int64_t num_tokens, uint64_t page_bytes);

}  // namespace deepinfer::v41
