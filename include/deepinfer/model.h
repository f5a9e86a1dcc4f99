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

class Model {
public:
    static std::unique_ptr<Model> load(const std::string& checkpoint_dir, const ModelOptions& options = {});
    virtual ~Model() = default;

    virtual const ModelConfig& config() const = 0;
    virtual Numerics numerics() const = 0;
    virtual Sequence new_sequence() const = 0;
    // Runs `tokens` at positions sequence.num_tokens().. and advances the sequence. Returns logits
    // [tokens.size(), vocab_size] row-major when `all_logits`, else the last row only [1, vocab_size].
    virtual std::vector<float> forward(Sequence& sequence, std::span<const int32_t> tokens,
                                       bool all_logits) const = 0;
};

}  // namespace deepinfer
