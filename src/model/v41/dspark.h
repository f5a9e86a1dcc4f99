// SPDX-License-Identifier: Apache-2.0
// The DSpark drafter of DeepSeek-V4.1-Flash (speculative-decoding.md §1-§2; DeepSeek's reference
// inference/model.py of V4.1: DSparkBlock, DSparkAttention, DSparkMarkovHead, DSparkConfidenceHead,
// Transformer.forward / forward_spec), exact or official numerics like the target (model/v41/numerics.h).
//
// Taps: the target forward of an attached sequence keeps, for each of its last rows, the mean over the
// hc streams of the residual stream ENTERING each target layer (after its Engram, before its attention
// site), concatenated over dspark_target_layer_ids. From them `write_context` computes, per position p,
// main_x = main_norm(main_proj(taps)) and per stage the context K=V row kv_norm(wkv(main_x)) with RoPE
// at p (main set) and the FP8 cache QAT, written to the stage's ring slot p % rows (DSparkRings, model/dspark_common.h).
//
// Drafting at anchor position P (DSparkDrafter::draft, batched over sequences): the block ids
// [anchor, noise x (γ-1)] at positions P .. P+γ-1 are embedded into every stream and run through the
// stages: V4.1 blocks with the single-pass mHC schedule (first pre-mix = stream 0), DSparkAttention
// (queries of the block against the stage's context rows of positions max(0, P-W) .. P-1 plus all γ
// block rows, non-causal inside the block, sink softmax) and the stage's own routed MoE. Then the last
// stage's FFN pre-mix collapses the streams (y), U = head(norm(y)) with the target's head, and the
// Markov head drafts left to right: ℓ_k = U_{k-1} + W1[x_{k-1}]·W2ᵀ, d_k = argmax or a draw from
// softmax(ℓ_k / T); confidence c_k = sigmoid(w · [y_{k-1}; W1[x_{k-1}]]) (the reference returns the
// logit; the engine's scheduler calibrates it online). The rings, the attention core and the Markov
// drafting are shared with the V4-Flash-0731 drafter (model/dspark_common.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cpu/primitives.h"
#include "deepinfer/drafter.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"
#include "model/dspark_common.h"
#include "model/v41/state.h"
#include "model/v41/weights.h"

namespace deepinfer::v41 {

using ::deepinfer::DSparkBlockOutput;

// What the drafter uses of the target model (owned by V41Model's implementation).
struct DSparkModel {
    const V41TextConfig* config = nullptr;  // the target's
    V41TextConfig stage_config;             // the same with the drafter's expert counts (its MoE)
    const Weights* weights = nullptr;       // weights->dspark is set
    const cpu::RopeTable* rope_main = nullptr;
    Numerics numerics = Numerics::kExact;

    int64_t num_taps() const { return int64_t(config->dspark_target_layer_ids.size()); }
    int64_t block_size() const { return config->dspark_block_size; }
    // Index of `layer` in dspark_target_layer_ids, -1 if it is not tapped.
    int64_t tap_index(int64_t layer) const;
};

DSparkModel make_dspark_model(const V41TextConfig& config, const Weights& weights, const cpu::RopeTable& rope_main,
                              Numerics numerics);

// The taps of one sequence's rows in a target pass: positions first_position .. + num_rows - 1.
struct TapRows {
    SequenceState* state = nullptr;
    int64_t first_position = 0;
    int64_t num_rows = 0;
    std::vector<float> taps;  // [num_rows, num_taps * D]
};

// The tap of one row at one target layer: the mean of its hc streams (x: [hc, D]) into out [D]
// (official numerics: rounded to bf16, as the reference's bf16 `h.mean(dim=2)`).
void tap_mean(const DSparkModel& m, const float* x, float* out);

// Writes every stage's context row of every position in `rows` (see above). Batched over sequences.
void write_context(const DSparkModel& m, std::span<const TapRows> rows);

class DSparkDrafter final : public Drafter {
public:
    explicit DSparkDrafter(DSparkModel model) : m_(std::move(model)) {}
    std::string_view method() const override { return "dspark"; }
    int64_t max_drafts() const override { return m_.block_size(); }
    void attach(Sequence& sequence) const override;
    uint64_t state_bytes(uint64_t page_bytes) const override;  // the context rings
    std::vector<Draft> draft(std::span<const DraftRequest> requests) const override;
    const DSparkModel& model() const { return m_; }

private:
    DSparkModel m_;
};

// The drafter's outputs for one block, before drafting decisions (tests and debugging): the collapsed
// last-stage rows y (pre-norm) and the base logits U of each request (model/dspark_common.h). Runs the stages and the head over the blocks of `states` (committed through position P-1 each) with
// anchors `anchors` at positions P.
DSparkBlockOutput dspark_block_forward(const DSparkModel& m, std::span<SequenceState* const> states,
                                       std::span<const int32_t> anchors);

}  // namespace deepinfer::v41
