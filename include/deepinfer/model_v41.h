// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4.1 text backbone on the CPU (issue 6), exact numerics: f32 everywhere with the
// model's QAT cache formats (FP8 window KV, FP4 compressed KV, MXFP4 index keys/queries) applied as
// fake quantization, i.e. transformers' DeepseekV41ForCausalLM in fp32. A V41Sequence carries the
// decode state, so a sequence may be fed in chunks of any size (chunked prefill, token-by-token
// decode) with the same results as one forward. `official` numerics add the reference's bf16 and
// FP8-activation rounding points (src/model/v41/numerics.h).
//
// V41Model is a `Model` (model.h): Model::load returns one for a V4.1 checkpoint, and the engine
// runs it through forward_batch (several sequences in one pass, linears and MoE over all rows, each
// chunk's logits bit-identical to running it alone) with its state paged in the engine's StatePool.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"

namespace deepinfer {

namespace v41 {
struct SequenceState;
}

// The decode state of one sequence (window KV of every layer, compressed caches, compressor pending
// rows, Engram history). Not thread-safe; use one per sequence.
class V41Sequence {
public:
    V41Sequence();
    ~V41Sequence();
    V41Sequence(V41Sequence&&) noexcept;
    V41Sequence& operator=(V41Sequence&&) noexcept;
    int64_t num_tokens() const;  // positions processed so far

private:
    friend class V41Model;
    std::unique_ptr<v41::SequenceState> state_;
};

// Intermediate values of one forward, for tests and debugging (each vector row-major).
struct V41ForwardTrace {
    std::map<int64_t, std::vector<int32_t>> indexer_topk;  // index source -> [S, index_topk] ascending, -1 padded
    std::map<int64_t, std::vector<float>> layer_out;       // layer -> [S, hc, D] streams after the layer
    std::map<int64_t, std::vector<float>> attn_out;        // layer -> [S, D] attention output
    std::map<int64_t, std::vector<float>> compressed_kv;   // KV source -> [entries, head_dim]
    std::map<int64_t, std::vector<float>> index_keys;      // KV source -> [entries, index_head_dim]
    std::map<int64_t, double> layer_seconds;               // layer -> wall time of the layer (benchmarks)
};

class V41Model final : public Model {
public:
    // `dir`: a checkpoint directory (config.json + safetensors, transformers' or the published
    // names). `tokenizer_json`: the tokenizer the Engram token map is derived from (verified against
    // engram_compressed_vocab_size, and against the published SHA-256 for the DeepSeek tokenizer).
    static std::unique_ptr<V41Model> load(const std::string& dir, const std::string& tokenizer_json);
    // Same with every loading switch (options.tokenizer_json must be set). Numerics: `official` by
    // default for FP8/FP4 checkpoints, `exact` otherwise (model/v41/numerics.h).
    static std::unique_ptr<V41Model> load(const std::string& dir, const ModelOptions& options);
    ~V41Model() override;

    const V41ModelConfig& config() const;
    // The stored bytes of every Engram table (and of its FP8 row scales), which the forward reads in
    // place: they lie in the checkpoint's read-only file mapping, so every process on a host that loads
    // the checkpoint shares one copy, the page cache's (never a private copy; tests/v41).
    std::vector<std::span<const uint8_t>> engram_table_bytes() const;

    // ---- Model ----
    const ModelInfo& info() const override;
    Numerics numerics() const override;
    uint64_t estimate_state_bytes(int64_t num_tokens, uint64_t page_bytes) const override;
    Sequence new_sequence() const override;
    Sequence new_sequence(std::shared_ptr<StatePool> pool) const override;
    std::vector<float> forward(Sequence& sequence, std::span<const int32_t> tokens, bool all_logits) const override;
    // Chunks may carry an image span (the vision seam, see forward() below). With
    // ModelOptions::v41_bounded_replay, a chunk of more than sliding_window tokens that wants its last
    // logits only is prefilled approximately (model.h).
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override;
    // The DSpark drafter when the checkpoint stores one (`mtp.N.*`; model/v41/dspark.h), else null.
    const Drafter* drafter() const override;

    // Logits of every position of a fresh sequence, [ids.size(), vocab_size] f32 row-major.
    std::vector<float> forward(std::span<const int32_t> ids, V41ForwardTrace* trace = nullptr) const;
    // Appends `ids` to `sequence` (positions sequence.num_tokens() ..) and returns their logits.
    // `image_span` (empty, or one flag per id): 1 marks a position inside an image span (the seam for the
    // vision tower, spec §5/§6.2): its Engram history entry is DEAD (n-grams never span it), its Engram
    // gate is 0 and its router selects with bias_vl. (Its embedding is still the token's: the aligner
    // rows and image delimiters are the vision tower's job.)
    std::vector<float> forward(std::span<const int32_t> ids, V41Sequence& sequence, V41ForwardTrace* trace = nullptr,
                               std::span<const uint8_t> image_span = {}) const;

private:
    V41Model();
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
