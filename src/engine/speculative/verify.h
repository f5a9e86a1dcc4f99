// SPDX-License-Identifier: Apache-2.0
// Verification of speculative drafts, one verify row at a time (speculative-decoding.md §3): greedy
// acceptance at temperature 0, token-wise rejection sampling at T > 0 (one-hot or probabilistic
// drafts), the bonus token when a request's drafts are exhausted. Every row sees exactly the rules of
// ordinary sampling (mask, logit_bias, penalties over the tokens accepted so far, temperature, top-k,
// top-p, min-p): the caller builds its SampleInput as for an ordinary sample.
//
// Random streams (counter_uniform(seed, stream, counter), c = completion index, t = index of the
// generated token the row decides, i.e. SampleInput::generated.size()):
//   * draw of token t (bonus, or residual after a rejection): stream c, counter t — the very uniform
//     ordinary sampling uses for token t, so a row without a draft IS an ordinary sample;
//   * acceptance test of the draft for token t: stream c + kAcceptStream, counter t;
//   * draft sample k (0-based) of the block anchored at generated token t: stream c + kDraftStream,
//     counter t * kMaxDraftTokens + k (draft_uniform below).
//   * block verification (verify_block): uniform η_i of draft i (1-based) of the block anchored at
//     generated token t: stream c + kBlockStream, counter t * kMaxDraftTokens + i - 1 (a fresh key per
//     step: t grows every step), then the final token's draw as above (stream c, its own index).
// Token-wise verification consumes each position's acceptance and draw uniforms at most once: the
// position is committed by the row that uses them. So results are a pure function of the seed, the
// prompt and the sequence of verify lengths; with a fixed draft length (scheduler off) that sequence
// depends only on the request itself, never on the batch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "engine/sampler.h"

namespace deepinfer {

inline constexpr uint64_t kAcceptStream = uint64_t{1} << 40;
inline constexpr uint64_t kDraftStream = uint64_t{2} << 40;
inline constexpr uint64_t kBlockStream = uint64_t{3} << 40;
inline constexpr int64_t kMaxDraftTokens = 16;  // drafts per block, at most

// Uniform of draft sample k of the block anchored at generated-token index t.
double draft_uniform(uint64_t seed, uint64_t completion, int64_t anchor_index, int64_t k);

struct VerifyRowInput {
    SampleInput sample = {};  // exactly as ordinary sampling would build it for this row
    std::optional<int32_t> draft = std::nullopt;  // the draft this row verifies; none: the bonus row
    // The distribution the draft was drawn from ([vocab], sums to 1); empty: a one-hot draft (chosen
    // by argmax, or any rule that does not sample).
    std::span<const float> draft_probs = {};
};

struct VerifyRowResult {
    bool accepted = false;  // the draft was accepted (the token is the draft)
    int32_t token = 0;      // the token this row commits (draft, residual sample or bonus)
    TokenLogprob logprob;   // when params.logprobs >= 0
};

VerifyRowResult verify_row(const VerifyRowInput& in);

// Block verification (Sun et al., arXiv 2403.10444, Alg. 2; speculative-decoding.md §3.4) of one
// request's ℓ drafts, for sampled rows (temperature > 0): with P_0 = 1, P_i = min(1, P_{i-1} p_i(d_i) /
// q_i(d_i)), R_i = Σ_x max(P_i p_{i+1}(x) - q_{i+1}(x), 0), h_i = R_i / (R_i + 1 - P_i) (0 if R_i = 0)
// for i < ℓ and h_ℓ = P_ℓ, it keeps d_1 .. d_τ with τ the last i whose η_i <= h_i (0 if none), then
// draws the next token from p_{ℓ+1} (τ = ℓ) or from normalize(max(P_τ p_{τ+1} - q_{τ+1}, 0)). The
// committed tokens follow the target's distribution exactly, and the expected number of accepted
// drafts is never below token-wise verification's.
struct BlockVerifyInput {
    // ℓ + 1 rows built as ordinary samples; row i's `generated` ends with d_1 .. d_i (the target's
    // distribution given the drafts before it). All rows share seed, stream and params.
    std::span<const SampleInput> rows;
    std::span<const int32_t> drafts;      // [ℓ]
    std::span<const float> draft_probs;   // [ℓ, vocab], or empty: one-hot drafts
};
struct BlockVerifyResult {
    int64_t accepted = 0;             // τ
    std::vector<int32_t> tokens;      // d_1 .. d_τ, then the drawn token
    std::vector<TokenLogprob> logprobs;  // one per token when params.logprobs >= 0
};
BlockVerifyResult verify_block(const BlockVerifyInput& in);

}  // namespace deepinfer
