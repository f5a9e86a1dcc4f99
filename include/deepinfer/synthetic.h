// SPDX-License-Identifier: Apache-2.0
// Random-weight checkpoints of any DeepseekV4 config, written in DeepSeek's published layout
// (FP8 e4m3 linears with ue8m0 128x128 block scales, packed FP4 experts with per-32 ue8m0 scales,
// bf16 norms/embeddings/router/compressor projections, f32 HC parameters, sinks, ape and biases,
// i64 tid2eid). For benchmarks at full width and for loader tests; the values are random but follow
// testing-notes.md's scales (std ~ 1/sqrt(fan_in), norms 1 +- 0.1).
#pragma once

#include <cstdint>
#include <string>

namespace deepinfer {

struct SyntheticCheckpointOptions {
    uint64_t seed = 1;
    bool fp8_linears = true;  // false: bf16 linears
    bool fp4_experts = true;  // false: experts like the other linears
    // Multiplies the residual branches' output projections (wo_b, expert and shared w2), which keeps
    // official-numerics runs of random models stable (testing-notes.md §3).
    double residual_damping = 1.0;
};

// Writes `dir`/config.json (the given text) and `dir`/model.safetensors.
void write_synthetic_checkpoint(const std::string& dir, const std::string& config_json,
                                const SyntheticCheckpointOptions& options = {});

}  // namespace deepinfer
