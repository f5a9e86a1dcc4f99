// SPDX-License-Identifier: Apache-2.0
// Rewrites a random checkpoint (bf16, or the published FP8 linears and FP4 experts) with a DSpark drafter so that the drafter agrees with the target
// (benchmarks and tests of speculative decoding; every layer still runs at full cost). Shared by the
// V4.1 (include/deepinfer/synthetic_v41.h) and V4-Flash-0731 (include/deepinfer/synthetic.h) builders,
// which name the tensors:
//   * every residual branch's output projection is zero (attention wo_b, routed and shared w2, Engram
//     wkv where present) in the target's layers and the drafter's stages, so every stream stays a
//     positive multiple of the token's embedding and the target is a bigram model L(x) = head · n(x),
//     n(x) = norm ⊙ rmsnorm(embed[x]) (up to bf16 rounding);
//   * the noise token's embedding is zero, so the drafter's block rows 1.. collapse to 0 and give U = 0;
//     row 0 (the anchor) gives U_0 = L(anchor) through the last stage's norm (set to the target's norm);
//   * Markov head: W1[x] = n(x) (+ `noise` x N(0, 1) x rms(n(x))), W2 = the target's head, so the bias
//     is L(x) and draft k is argmax L(draft k-1) (draft 1: argmax 2·L(anchor)), the target's greedy
//     continuation; the confidence head is zero (raw confidence 1/2, calibrated online).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace deepinfer {

struct DSparkAgreeLayout {
    std::vector<std::pair<std::string, int64_t>> blocks;  // (prefix, routed experts) of layers and stages
    std::string last_norm;     // the last stage's norm.weight
    std::string markov_embed;  // W1 [vocab, rank]
    std::string markov_head;   // W2 [vocab, rank]
    std::string confidence;    // [1, hidden + rank]
    int64_t hidden = 0, vocab = 0, rank = 0, noise_token = 0;
    double rms_norm_eps = 1e-6;
};

// The sizes a layout needs from either family's config.
struct DSparkAgreeShape {
    int64_t hidden = 0, vocab = 0, rank = 0, noise_token = 0;
    int64_t layers = 0, experts = 0, stage_experts = 0;  // target layers, their and the stages' routed experts
    double rms_norm_eps = 1e-6;
};

// The layout of the single model.safetensors at `path`: the target layers ("layers.N.") and the stored
// drafter stages ("mtp.N.", counted by their attn_norm), the last stage's norm and confidence head, and
// its Markov tables named `markov_embed` / `markov_head` under that stage. Throws when no stage is stored.
DSparkAgreeLayout dspark_agree_layout(const std::string& path, const DSparkAgreeShape& shape,
                                      const std::string& markov_embed, const std::string& markov_head);

// `path`: a single model.safetensors whose tensors above are bf16 (rank must equal hidden).
void make_dspark_agree(const std::string& path, const DSparkAgreeLayout& layout, double noise, uint64_t seed);

}  // namespace deepinfer
