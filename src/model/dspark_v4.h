// SPDX-License-Identifier: Apache-2.0
// The DSpark drafter of DeepSeek-V4-Flash-0731 on the V4 backbone (CpuModel; speculative-decoding.md
// §1-§2, §7), exact or official numerics like the target. Shares the rings, the DSparkAttention core
// and the Markov/confidence drafting with the V4.1 drafter (model/dspark_common.h); what is 0731's:
//
// Taps: the target forward of an attached sequence keeps, for each of its last ring-many rows, the mean
// over the hc streams of the residual stream LEAVING each layer of dspark_target_layer_ids (capture-
// after semantics, §1.3: [40, 41, 42] of 43 in the release; default the last three layers). From them
// `write_context` computes, per position p, main_x = main_norm(main_proj(taps)) and per stage the
// context K=V row kv_norm(wkv(main_x)) with RoPE at p (main set) and, in official numerics, the FP8
// simulation of the nope dims (the target's cache rows, spec V4 §2.7), into the stage's ring.
//
// Drafting at anchor position P: the block ids [anchor, noise x (γ-1)] at positions P .. P+γ-1 are
// embedded into every stream and run through the stages: V4 blocks with per-sub-block mHC from each
// stage's own hc_attn_* / hc_ffn_* (model/v4_block.h), DSparkAttention (the target's attention
// prologue and epilogue: per-head RMS of q, RoPE, sink softmax in the target kernel's form, inverse
// RoPE, grouped wo_a, wo_b; candidates = the stage's context rows of P-W .. P-1 plus all γ block rows,
// non-causal) and the stage's own score-routed MoE (dspark_n_routed_experts / top-k). The last stage's
// hc_head collapses the streams (y), U = head(norm(y)) with the target's head, then the Markov head
// (markov_w1 / markov_w2) drafts and the confidence head scores (dspark_markov_draft).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cpu/primitives.h"
#include "deepinfer/drafter.h"
#include "deepinfer/model.h"
#include "model/attention_block.h"
#include "model/block_context.h"
#include "model/dspark_common.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer {

// What the drafter uses of the target model (owned by CpuModel).
struct V4DSparkModel {
    const ModelConfig* config = nullptr;  // the target's
    ModelConfig stage_config;             // the same with the drafter's expert counts (its MoE)
    const ModelWeights* weights = nullptr;  // weights->dspark is set
    const cpu::RopeTable* rope_main = nullptr;
    const cpu::RopeTable* rope_compress = nullptr;
    Numerics numerics = Numerics::kExact;

    BlockContext context() const { return {*config, numerics, *rope_main, *rope_compress}; }
    BlockContext stage_context() const { return {stage_config, numerics, *rope_main, *rope_compress}; }
    const DSparkV4Weights& dspark() const { return *weights->dspark; }
    int64_t num_taps() const { return int64_t(config->dspark_target_layer_ids.size()); }
    int64_t block_size() const { return config->dspark_block_size; }
    // Index of `layer` in dspark_target_layer_ids, -1 if it is not tapped.
    int64_t tap_index(int64_t layer) const;
};

V4DSparkModel make_v4_dspark_model(const ModelConfig& config, const ModelWeights& weights,
                                   const cpu::RopeTable& rope_main, const cpu::RopeTable& rope_compress,
                                   Numerics numerics);

// The taps of one target pass, collected layer by layer for the attached sequences, then turned into
// context rows. `segments` are the pass's rows per sequence (row_begin, num_rows, first_position),
// `states` the sequences in the same order. A null model collects nothing.
class V4DSparkTaps {
public:
    V4DSparkTaps(const V4DSparkModel* model, std::span<V4SequenceState* const> states,
                 std::span<const Segment> segments);
    // After target layer `layer` ran: streams [rows of the pass, hc, D].
    void after_layer(int64_t layer, const float* streams);
    // Writes every stage's context rows of the collected positions (write_context).
    void write_context() const;

private:
    struct Rows {
        V4SequenceState* state = nullptr;
        int64_t row_begin = 0;       // first kept row in the pass
        int64_t first_position = 0;  // its position
        int64_t num_rows = 0;
        std::vector<float> taps;  // [num_rows, num_taps * D]
    };
    const V4DSparkModel* m_ = nullptr;
    std::vector<Rows> rows_;
};

// The tap of one row at one layer: the mean of its hc streams (x: [hc, D]) into out [D] (official
// numerics: rounded to bf16, as the reference's bf16 mean).
void v4_tap_mean(const V4DSparkModel& m, const float* x, float* out);

// Context rows of `num_rows` positions from their taps [num_rows, num_taps * D] into `state`'s rings.
void v4_write_context(const V4DSparkModel& m, V4SequenceState& state, int64_t first_position, int64_t num_rows,
                      const float* taps);

// Runs the stages and the head over the blocks of `states` (committed through position P-1 each,
// P = state length) with anchors `anchors` at positions P.
DSparkBlockOutput v4_dspark_block_forward(const V4DSparkModel& m, std::span<V4SequenceState* const> states,
                                          std::span<const int32_t> anchors);

class V4DSparkDrafter final : public Drafter {
public:
    explicit V4DSparkDrafter(V4DSparkModel model) : m_(std::move(model)) {}
    std::string_view method() const override { return "dspark"; }
    int64_t max_drafts() const override { return m_.block_size(); }
    void attach(Sequence& sequence) const override;
    uint64_t state_bytes(uint64_t page_bytes) const override;  // the context rings
    std::vector<Draft> draft(std::span<const DraftRequest> requests) const override;
    const V4DSparkModel& model() const { return m_; }

private:
    V4DSparkModel m_;
};

}  // namespace deepinfer
