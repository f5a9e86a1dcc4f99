// SPDX-License-Identifier: Apache-2.0
// CSA2 attention of one V4.1 layer over the rows of a batch (spec §3; exact numerics = transformers'
// fp32 DeepseekV41Attention, QAT fake quantization included). Rows are grouped in segments, each a
// run of consecutive positions of one sequence. Linears run over all rows together; compressor,
// indexer and attention work per segment, so a segment's results do not depend on its neighbours.
// Full layers publish their compressed KV and index keys, index sources their top-k, the candidate
// source its block mask; later layers of the same forward read them from the segment's `SharedState`.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cpu/primitives.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"
#include "model/v41/state.h"
#include "model/v41/weights.h"

namespace deepinfer::v41 {

struct Context {
    const V41TextConfig& config;
    const cpu::RopeTable& rope_main;      // ratio-0 layers
    const cpu::RopeTable& rope_compress;  // ratio > 0 layers and everything inside them
    Numerics numerics = Numerics::kExact;  // rounding points (model/v41/numerics.h)
    bool official() const { return numerics == Numerics::kOfficial; }
};

// A run of consecutive rows of the batch that belong to one sequence.
struct Segment {
    SequenceState* state = nullptr;
    int64_t row_begin = 0;       // first row in the batch
    int64_t num_rows = 0;
    int64_t first_position = 0;  // absolute position of the first row
    // Window keys of these rows start no earlier than this position (0: the full window). Bounded
    // replay truncates the decoder's window to the replayed rows.
    int64_t window_begin = 0;
};

// What source layers publish within one forward for one segment (transformers' per-forward `shared`
// dict): the latest KV source's caches, the latest index source's top-k and the candidate mask.
struct SharedState {
    const LayerState* kv_source = nullptr;  // compressed entries and index keys of the latest KV source
    std::vector<int32_t> topk;              // [num_rows, index_topk] ascending, -1 padded
    bool has_topk = false;
    std::vector<uint8_t> candidates;        // [num_rows, num_entries] candidate mask of the candidate source
    int64_t candidate_entries = 0;          // num_entries the mask was built for
    bool has_candidates = false;
};

struct AttentionParams {
    int64_t layer = 0;
    const AttentionWeights* weights = nullptr;
    const float* x = nullptr;             // [num_rows, D] attn_norm output of every row
    int64_t num_rows = 0;
    std::span<const Segment> segments;    // in row order, covering every row
    std::span<SharedState> shared;        // one per segment
    float* out = nullptr;                 // [num_rows, D]
};
void attention_forward(const Context& ctx, const AttentionParams& p);

// The compressor and index-key stage of a Full layer alone (appends every group the rows complete
// to the layer's caches and publishes them in `shared`): what bounded replay runs for the rows that
// skip the rest of the decoder. `p.out` is unused.
void compress_forward(const Context& ctx, const AttentionParams& p);

}  // namespace deepinfer::v41
