// SPDX-License-Identifier: Apache-2.0
// Sampling: logit bias, repetition/presence/frequency penalties, temperature, top-k, top-p, min-p,
// then one draw from a counter-based random stream: the uniform used for token t of completion c of a
// request depends only on (seed, c, t), so results never depend on batching or scheduling.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/engine.h"

namespace deepinfer {

// Uniform in [0, 1) from (seed, stream, counter); a pure function (splitmix64 over a mixed key).
double counter_uniform(uint64_t seed, uint64_t stream, uint64_t counter);
// Seed of a request without an explicit seed: a hash of the job seed and the request id.
uint64_t derive_seed(uint64_t job_seed, const std::string& request_id);

struct SampleResult {
    int32_t token = 0;
    TokenLogprob logprob;  // filled when params.logprobs >= 0
};

struct SampleInput {
    std::span<const float> logits = {};     // [vocab] raw model logits of this position
    const SamplingParams* params = nullptr;
    std::span<const int32_t> prompt = {};     // for the repetition penalty
    std::span<const int32_t> generated = {};  // tokens generated so far by this completion
    uint64_t seed = 0;
    uint64_t stream = 0;                    // completion index
    // Structured output: [ceil(vocab / 64)] u64 bitmask of the allowed tokens (bit t % 64 of word
    // t / 64); empty = all allowed. Disallowed tokens get -inf before everything else.
    std::span<const uint64_t> allowed = {};
};

SampleResult sample(const SampleInput& in);

}  // namespace deepinfer
