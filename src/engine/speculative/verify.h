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
// Token-wise verification consumes each position's acceptance and draw uniforms at most once: the
// position is committed by the row that uses them. So results are a pure function of the seed, the
// prompt and the sequence of verify lengths; with a fixed draft length (scheduler off) that sequence
// depends only on the request itself, never on the batch.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "engine/sampler.h"

namespace deepinfer {

inline constexpr uint64_t kAcceptStream = uint64_t{1} << 40;
inline constexpr uint64_t kDraftStream = uint64_t{2} << 40;
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

}  // namespace deepinfer
