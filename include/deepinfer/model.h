// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4 model on the CPU backend: load a checkpoint directory, open sequences, run chunks
// of tokens (prefill of any chunk size, then decode token by token) and read logits. A Model is
// immutable after load and may serve many sequences; a Sequence is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/model_config.h"

namespace deepinfer {

enum class Numerics : uint8_t {
    kExact,     // fp32 everywhere, no quantization simulation (matches transformers)
    kOfficial,  // the rounding points of DeepSeek's official inference code (spec §5)
};
Numerics parse_numerics(std::string_view name);  // "exact" | "official"
std::string_view numerics_name(Numerics numerics);

struct ModelOptions {
    // nullopt-like default: official for FP8/FP4 checkpoints, exact otherwise.
    bool numerics_from_checkpoint = true;
    Numerics numerics = Numerics::kExact;
};

struct SequenceState;
class StatePool;

// The decode state of one sequence (opaque).
class Sequence {
public:
    explicit Sequence(std::unique_ptr<SequenceState> state);
    ~Sequence();
    Sequence(Sequence&&) noexcept;
    Sequence& operator=(Sequence&&) noexcept;
    int64_t num_tokens() const;  // tokens consumed so far (the next position)
    size_t state_bytes() const;
    SequenceState& state() { return *state_; }

private:
    std::unique_ptr<SequenceState> state_;
};

// One sequence's part of a batched forward: `tokens` continue `sequence` at its next position.
struct SequenceChunk {
    Sequence* sequence = nullptr;
    std::span<const int32_t> tokens;
    bool all_logits = false;  // logits for every token, else for the last one only
};

class Model {
public:
    static std::unique_ptr<Model> load(const std::string& checkpoint_dir, const ModelOptions& options = {});
    virtual ~Model() = default;

    virtual const ModelConfig& config() const = 0;
    virtual Numerics numerics() const = 0;
    virtual Sequence new_sequence() const = 0;
    // A sequence whose growing state is paged in `pool` (shared with copies of it).
    virtual Sequence new_sequence(std::shared_ptr<StatePool> pool) const = 0;
    // Runs `tokens` at positions sequence.num_tokens().. and advances the sequence. Returns logits
    // [tokens.size(), vocab_size] row-major when `all_logits`, else the last row only [1, vocab_size].
    virtual std::vector<float> forward(Sequence& sequence, std::span<const int32_t> tokens,
                                       bool all_logits) const = 0;
    // Several sequences in one pass (linears and MoE run over all rows together). Each chunk's logits
    // are bit-identical to running it alone: every kernel's reduction order is independent of the
    // batch. Returns one logits block per chunk ([rows, vocab_size], rows = tokens or 1). The sequences
    // must be distinct.
    virtual std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const = 0;
};

}  // namespace deepinfer
