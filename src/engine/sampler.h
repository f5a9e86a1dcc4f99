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

// The pieces of sample(), shared with speculative verification (engine/speculative/verify.h), which
// must apply exactly the same rules to every verify row.
// Mask -> logit_bias -> penalties: the logits every later rule reads ([vocab]).
std::vector<float> processed_logits(const SampleInput& in);
// The sampling distribution of processed logits: temperature, top-k, top-p, min-p; candidates in
// draw order. Greedy (temperature 0) keeps only the argmax (ties to the lowest id).
struct Distribution {
    bool greedy = false;
    int32_t argmax = 0;           // greedy only
    std::vector<int32_t> ids;     // draw order; empty: token i is candidate i (id order)
    std::vector<double> weight;   // [candidates] unnormalized probabilities
    double total = 0;             // sum of weight (untruncated: of parts, in order)
    // Untruncated (every id a candidate, in id order): the sums of weight's blocks of kDraftSumBlock
    // ids (model/draft_sampling.h), which draw() walks first; empty otherwise.
    std::vector<double> parts;
    int32_t id(size_t i) const { return ids.empty() ? static_cast<int32_t>(i) : ids[i]; }
    double prob(int32_t token) const;  // normalized probability of `token` (0 outside the candidates)
};
Distribution sampling_distribution(std::span<const float> processed, const SamplingParams& params);
// Inverse-CDF draw in candidate order with a uniform in [0, 1) (greedy: the argmax; untruncated: the
// blocked walk of model/draft_sampling.h, never a zero weight).
int32_t draw(const Distribution& distribution, double uniform);
// The logprob of `token` and the `top` most likely alternatives, from processed logits.
TokenLogprob token_logprob(std::span<const float> processed, int64_t top, int32_t token);

}  // namespace deepinfer
