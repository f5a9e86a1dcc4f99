// SPDX-License-Identifier: Apache-2.0
// CpuModel: the whole DeepseekV4ForCausalLM forward on the CPU backend (spec §2): embedding, HC
// expansion, the layers (attention and MoE sub-blocks between HC pre/post), HC head, final norm
// and LM head; plus the drafter the checkpoint carries (the preview's MTP block or 0731's DSpark).
#pragma once

#include <memory>

#include "backends/cpu/primitives.h"
#include "deepinfer/checkpoint.h"
#include "deepinfer/model.h"
#include "model/attention_block.h"
#include "model/block_context.h"
#include "model/dspark_v4.h"
#include "model/mtp_drafter.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer {

// Model::load for a DeepSeek-V4 checkpoint directory.
std::unique_ptr<Model> load_v4_model(const std::string& dir, const ModelOptions& options);

// A run of MTP rows of one sequence (forward_mtp_batch).
struct MtpRows {
    V4SequenceState* state = nullptr;
    int64_t rows = 0;
    int64_t first_position = 0;
};

class CpuModel final : public Model {
public:
    CpuModel(std::unique_ptr<Checkpoint> checkpoint, Numerics numerics);

    const ModelInfo& info() const override { return info_; }
    const ModelConfig& config() const { return config_; }
    Numerics numerics() const override { return numerics_; }
    uint64_t estimate_state_bytes(int64_t num_tokens, uint64_t page_bytes) const override;
    Sequence new_sequence() const override;
    Sequence new_sequence(std::shared_ptr<StatePool> pool) const override;
    std::vector<float> forward(Sequence& sequence, std::span<const int32_t> tokens, bool all_logits) const override;
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override;

    // Runs the layers and returns the final HC streams [num_tokens, hc, D] (before the HC head).
    std::vector<float> forward_streams(V4SequenceState& state, std::span<const int32_t> tokens) const;
    // Same over several sequences; rows in chunk order; advances every state.
    std::vector<float> forward_streams_batch(std::span<V4SequenceState* const> states,
                                             std::span<const std::span<const int32_t>> tokens) const;
    // Logits [rows, vocab] from final streams [rows, hc, D] through `hc` head, `norm` and the LM head.
    std::vector<float> logits_from_streams(const float* streams, int64_t rows, const HcWeights& hc,
                                           const Vec& norm) const;
    // MTP block `index`: hidden streams of positions p (from forward_streams) paired with the tokens at
    // p+1 (`next_tokens`); advances the MTP layer state. Returns logits [num_tokens, vocab] for p+2.
    std::vector<float> forward_mtp(V4SequenceState& state, int64_t index, const float* streams,
                                   std::span<const int32_t> next_tokens, int64_t first_position) const;
    // MTP block `index` over rows of several sequences: `segments` in row order (each a run of
    // consecutive positions of one sequence), `streams` [rows, hc, D] the hidden streams of positions p,
    // `next_tokens` [rows] the tokens at p+1; advances the MTP layer states. Returns logits [rows, vocab]
    // for p+2 when `want_logits` (else empty); `out_streams` (optional) gets the block's output streams
    // [rows, hc, D] (before its HC head: the input of a chained draft).
    std::vector<float> forward_mtp_batch(int64_t index, std::span<const MtpRows> segments, const float* streams,
                                         std::span<const int32_t> next_tokens, std::vector<float>* out_streams,
                                         bool want_logits) const;
    // The checkpoint's drafter: the preview's MTP block or 0731's DSpark (null when it has none).
    const Drafter* drafter() const override {
        return mtp_drafter_ ? static_cast<const Drafter*>(mtp_drafter_.get()) : dspark_drafter_.get();
    }
    const ModelWeights& weights() const { return weights_; }
    // This model's state of `sequence` (an error if another model opened it).
    static V4SequenceState& state_of(Sequence& sequence);
    BlockContext context() const { return {config_, numerics_, rope_main_, rope_compress_}; }

private:
    // One layer (attention + MoE with their HC) on streams x [S, hc, D], in place; `segments` say which
    // rows belong to which sequence (and that sequence's state of this layer).
    void run_layer(const LayerWeights& lw, std::span<const Segment> segments, std::vector<float>& x,
                   std::span<const int32_t> tokens) const;

    std::unique_ptr<Checkpoint> checkpoint_;
    ModelConfig config_;
    ModelInfo info_;
    Numerics numerics_;
    ModelWeights weights_;
    cpu::RopeTable rope_main_, rope_compress_;
    std::unique_ptr<MtpDrafter> mtp_drafter_;  // when the checkpoint has an MTP block
    std::unique_ptr<V4DSparkDrafter> dspark_drafter_;  // when it has a 0731-style DSpark drafter
};

}  // namespace deepinfer
