// SPDX-License-Identifier: Apache-2.0
// Speculative verification rules on explicit distributions: a row without a draft is an ordinary
// sample; greedy acceptance; rejection sampling (one-hot and probabilistic drafts) leaves every row's
// token distributed exactly as the target's sampling distribution (chi-square over many seeds),
// including truncation (top-k/top-p), penalties and masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <random>

#include "engine/sampler.h"
#include "engine/speculative/verify.h"

namespace deepinfer {
namespace {

// Chi-square statistic of `counts` against probabilities `p` (cells with p = 0 must be empty).
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n, int* df) {
    double x2 = 0;
    *df = -1;
    for (size_t i = 0; i < p.size(); ++i) {
        if (p[i] == 0) {
            EXPECT_EQ(counts[i], 0) << "token " << i << " has probability 0";
            continue;
        }
        const double e = p[i] * double(n);
        x2 += (double(counts[i]) - e) * (double(counts[i]) - e) / e;
        ++*df;
    }
    return x2;
}

// Upper 1e-6 tail of chi-square with df <= 15 degrees of freedom (the regularized upper incomplete gamma, inverted by bisection).
double chi_square_bound(int df) {
    static const double t[] = {0, 23.93, 27.63, 30.66, 33.38, 35.89, 38.26, 40.52, 42.70, 44.81,
                               46.86, 48.87, 50.83, 52.75, 54.64, 56.49};
    return t[df];
}

std::vector<double> target_probs(const std::vector<float>& logits, const SamplingParams& p,
                                 const std::vector<int32_t>& generated, std::span<const uint64_t> mask = {}) {
    const std::vector<float> l = processed_logits({.logits = logits, .params = &p, .generated = generated, .allowed = mask});
    const Distribution d = sampling_distribution(l, p);
    std::vector<double> out(logits.size());
    for (size_t v = 0; v < out.size(); ++v) out[v] = d.prob(static_cast<int32_t>(v));
    return out;
}

TEST(Verify, RowWithoutDraftIsTheOrdinarySample) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.f, 2.f);
    std::vector<float> logits(50);
    for (float& x : logits) x = nd(rng);
    std::vector<int32_t> gen = {4, 4, 9};
    for (int variant = 0; variant < 4; ++variant) {
        SamplingParams p;
        p.temperature = variant == 0 ? 0.0 : 0.8;
        p.top_k = variant == 2 ? 7 : 0;
        p.top_p = variant == 3 ? 0.6 : 1.0;
        p.frequency_penalty = 0.5;
        p.logprobs = 3;
        for (uint64_t seed = 0; seed < 50; ++seed) {
            SampleInput in{.logits = logits, .params = &p, .generated = gen, .seed = seed, .stream = 2};
            SampleResult s = sample(in);
            VerifyRowResult v = verify_row({.sample = in, .draft = std::nullopt});
            EXPECT_FALSE(v.accepted);
            EXPECT_EQ(v.token, s.token);
            EXPECT_EQ(v.logprob.logprob, s.logprob.logprob);
            EXPECT_EQ(v.logprob.top, s.logprob.top);
        }
    }
}

TEST(Verify, GreedyAcceptsExactlyTheArgmaxAfterPenalties) {
    std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, -1.0f};
    SamplingParams p;
    p.temperature = 0;
    std::vector<int32_t> gen;
    for (int32_t d = 0; d < 5; ++d) {
        VerifyRowResult r = verify_row({.sample = {.logits = logits, .params = &p, .generated = gen}, .draft = d});
        EXPECT_EQ(r.accepted, d == 1);
        EXPECT_EQ(r.token, 1);  // ties to the lowest id, as sample()
    }
    p.presence_penalty = 1.5;
    gen = {1, 3};
    VerifyRowResult r = verify_row({.sample = {.logits = logits, .params = &p, .generated = gen}, .draft = 1});
    EXPECT_FALSE(r.accepted);
    EXPECT_EQ(r.token, 2);
    // A masked draft is never accepted.
    std::vector<uint64_t> mask = {0b10101};
    p = {};
    p.temperature = 0;
    r = verify_row({.sample = {.logits = logits, .params = &p, .allowed = mask}, .draft = 1});
    EXPECT_FALSE(r.accepted);
    EXPECT_EQ(r.token, 2);
}

// One verify row with a draft for token t = generated.size(): draft ~ q (or a fixed one-hot draft),
// over many seeds; the committed token must follow the target distribution.
void check_row_distribution(const std::vector<float>& logits, const SamplingParams& p, const std::vector<float>& q,
                            bool one_hot, std::span<const uint64_t> mask = {}) {
    const std::vector<int32_t> gen = {2, 2, 5};
    const std::vector<double> pt = target_probs(logits, p, gen, mask);
    const int64_t V = static_cast<int64_t>(logits.size()), n = 40000;
    std::vector<int64_t> counts(size_t(V), 0);
    int64_t accepted = 0;
    for (int64_t s = 0; s < n; ++s) {
        const uint64_t seed = 1000 + static_cast<uint64_t>(s);
        int32_t draft = 0;
        if (one_hot) {
            draft = static_cast<int32_t>(std::max_element(q.begin(), q.end()) - q.begin());
        } else {
            double u = draft_uniform(seed, 0, static_cast<int64_t>(gen.size()), 0);
            while (draft + 1 < V && u >= q[size_t(draft)]) u -= q[size_t(draft++)];
        }
        VerifyRowResult r = verify_row({.sample = {.logits = logits, .params = &p, .generated = gen, .seed = seed,
                                                   .allowed = mask},
                                        .draft = draft,
                                        .draft_probs = one_hot ? std::span<const float>() : std::span<const float>(q)});
        ++counts[size_t(r.token)];
        accepted += r.accepted;
        if (r.accepted) {
            EXPECT_EQ(r.token, draft);
        }
    }
    int df = 0;
    const double x2 = chi_square(counts, pt, n, &df);
    EXPECT_LT(x2, chi_square_bound(df)) << "df " << df;
    // Acceptance rate: sum_x min(p, q) for probabilistic drafts, p(draft) for one-hot ones.
    double expect_acc = 0;
    if (one_hot) {
        expect_acc = pt[size_t(std::max_element(q.begin(), q.end()) - q.begin())];
    } else {
        for (int64_t v = 0; v < V; ++v) expect_acc += std::min(pt[size_t(v)], double(q[size_t(v)]));
    }
    EXPECT_NEAR(double(accepted) / double(n), expect_acc, 5 * std::sqrt(0.25 / double(n)));
}

TEST(Verify, RejectionSamplingPreservesTheTargetDistribution) {
    const std::vector<float> logits = {0.5f, 2.0f, -1.0f, 1.5f, 0.0f, 1.0f, -0.5f, 0.8f};
    const std::vector<float> q_close = {0.05f, 0.4f, 0.05f, 0.2f, 0.05f, 0.15f, 0.05f, 0.05f};
    const std::vector<float> q_far = {0.5f, 0.02f, 0.3f, 0.02f, 0.1f, 0.02f, 0.02f, 0.02f};
    SamplingParams plain;
    plain.temperature = 1.0;
    SamplingParams hot;
    hot.temperature = 1.7;
    hot.repetition_penalty = 1.3;
    hot.frequency_penalty = 0.2;
    SamplingParams trunc;
    trunc.temperature = 0.7;
    trunc.top_k = 5;
    trunc.top_p = 0.9;
    trunc.logit_bias = {{6, 2.0f}};
    for (const SamplingParams* p : {&plain, &hot, &trunc}) {
        for (const auto* q : {&q_close, &q_far}) {
            check_row_distribution(logits, *p, *q, false);
            check_row_distribution(logits, *p, *q, true);
        }
    }
    // With a structured-output mask: tokens 1 and 3 disallowed (the drafts often propose them).
    std::vector<uint64_t> mask = {0xFFull & ~0b1010ull};
    check_row_distribution(logits, plain, q_close, false, mask);
    check_row_distribution(logits, plain, q_close, true, mask);
}

TEST(Verify, AcceptanceAndResidualUseSeparateStreams) {
    // The acceptance uniform, the draw uniform and the draft uniforms of one position are distinct
    // variates, and the draft uniforms of different block rows and anchors are distinct.
    EXPECT_NE(counter_uniform(7, 0, 3), counter_uniform(7, kAcceptStream, 3));
    EXPECT_NE(draft_uniform(7, 0, 3, 0), draft_uniform(7, 0, 3, 1));
    EXPECT_NE(draft_uniform(7, 0, 3, 1), draft_uniform(7, 0, 4, 0));
    EXPECT_EQ(draft_uniform(7, 0, 3, 1), counter_uniform(7, kDraftStream, 3 * kMaxDraftTokens + 1));
}

// Block verification on a toy Markov target (4 tokens, transition rows as logits) with a drafter of
// different transitions: the joint distribution of the first two generated tokens is the target
// chain's (chi-square over 40k seeds), for sampled and one-hot drafts and with top-k truncation; the
// mean number of accepted drafts is at least token-wise verification's; q = p accepts every draft.
struct ToyChain {
    std::vector<std::vector<float>> target, draft;  // [V][V] logits of the next token given the current
};

// One request generating `n` tokens after token `start` with `k` drafts per step; `block` selects
// the verifier. Returns the tokens and adds the accepted drafts of the first step to *first_accepted.
std::vector<int32_t> toy_generate(const ToyChain& c, const SamplingParams& p, uint64_t seed, int64_t n, int64_t k,
                                  bool block, bool one_hot, int32_t start, int64_t* first_accepted) {
    const int64_t V = int64_t(c.target.size());
    std::vector<int32_t> gen;
    for (int64_t step = 0; int64_t(gen.size()) < n; ++step) {
        const int32_t anchor = gen.empty() ? start : gen.back();
        // Drafts from the drafter's chain (probabilistic: inverse CDF with the draft stream; one-hot: argmax).
        std::vector<int32_t> drafts;
        std::vector<float> q;
        int32_t prev = anchor;
        for (int64_t j = 0; j < k; ++j) {
            const std::vector<float>& l = c.draft[size_t(prev)];
            double mx = *std::max_element(l.begin(), l.end()), den = 0;
            for (float x : l) den += std::exp(double(x) - mx);
            int32_t pick = int32_t(std::max_element(l.begin(), l.end()) - l.begin());
            if (!one_hot) {
                double u = draft_uniform(seed, 0, int64_t(gen.size()), j) * 1.0, acc = 0;
                pick = int32_t(V - 1);
                for (int64_t v = 0; v < V; ++v) {
                    acc += std::exp(double(l[size_t(v)]) - mx) / den;
                    if (u < acc) { pick = int32_t(v); break; }
                }
                for (int64_t v = 0; v < V; ++v) q.push_back(float(std::exp(double(l[size_t(v)]) - mx) / den));
            }
            drafts.push_back(pick);
            prev = pick;
        }
        // Rows: the anchor, then each draft; row i's `generated` holds the drafts before it.
        std::vector<std::vector<int32_t>> gens;
        std::vector<SampleInput> rows;
        for (int64_t i = 0; i <= k; ++i) {
            gens.push_back(gen.empty() ? std::vector<int32_t>{} : gen);
            gens.back().insert(gens.back().end(), drafts.begin(), drafts.begin() + i);
        }
        for (int64_t i = 0; i <= k; ++i) {
            const int32_t cur = i == 0 ? anchor : drafts[size_t(i - 1)];
            rows.push_back({.logits = c.target[size_t(cur)], .params = &p, .generated = gens[size_t(i)], .seed = seed,
                            .stream = 0});
        }
        if (block) {
            const BlockVerifyResult r = verify_block({.rows = rows, .drafts = drafts, .draft_probs = q});
            if (step == 0) *first_accepted += r.accepted;
            gen.insert(gen.end(), r.tokens.begin(), r.tokens.end());
        } else {
            for (int64_t i = 0; i <= k; ++i) {
                const VerifyRowResult r = verify_row(
                    {.sample = rows[size_t(i)],
                     .draft = i < k ? std::optional<int32_t>(drafts[size_t(i)]) : std::nullopt,
                     .draft_probs = i < k && !one_hot ? std::span<const float>(q).subspan(size_t(i * V), size_t(V))
                                                       : std::span<const float>()});
                gen.push_back(r.token);
                if (!r.accepted) break;
                if (step == 0 && i < k) ++*first_accepted;
            }
        }
    }
    gen.resize(size_t(n));
    return gen;
}

TEST(Verify, BlockVerificationPreservesTheTargetDistribution) {
    const int64_t V = 4, k = 3, N = 40000;
    std::mt19937 rng(17);
    std::normal_distribution<float> nd(0.f, 1.2f);
    ToyChain c;
    c.target.assign(size_t(V), std::vector<float>(size_t(V)));
    c.draft = c.target;
    for (auto* m : {&c.target, &c.draft})
        for (auto& row : *m)
            for (float& x : row) x = nd(rng);
    for (int variant = 0; variant < 3; ++variant) {
        SamplingParams p;
        p.temperature = 1.0;
        if (variant == 2) {
            p.temperature = 0.8;
            p.top_k = 3;
        }
        const bool one_hot = variant == 1;
        const int32_t start = 2;
        // Target joint of (x1, x2) from the processed distributions.
        std::vector<double> joint(size_t(V * V));
        const std::vector<double> p1 = target_probs(c.target[size_t(start)], p, {});
        for (int64_t a = 0; a < V; ++a) {
            const std::vector<double> p2 = target_probs(c.target[size_t(a)], p, {int32_t(a)});
            for (int64_t b = 0; b < V; ++b) joint[size_t(a * V + b)] = p1[size_t(a)] * p2[size_t(b)];
        }
        std::vector<int64_t> counts(size_t(V * V), 0);
        int64_t block_acc = 0, token_acc = 0;
        for (int64_t s = 0; s < N; ++s) {
            const auto g = toy_generate(c, p, uint64_t(s) + 1, 2, k, true, one_hot, start, &block_acc);
            ++counts[size_t(g[0] * V + g[1])];
            toy_generate(c, p, uint64_t(s) + 1 + uint64_t(N), 2, k, false, one_hot, start, &token_acc);
        }
        int df = 0;
        const double x2 = chi_square(counts, joint, N, &df);
        EXPECT_LT(x2, chi_square_bound(df)) << "variant " << variant << " df " << df;
        // Never worse in expectation: allow 4 standard errors of the difference of two means (<= k each).
        EXPECT_GT(double(block_acc - token_acc) / double(N), -4.0 * double(k) / std::sqrt(double(N))) << variant;
        EXPECT_GT(block_acc, 0);
    }
    // q = p: every draft accepted.
    ToyChain same{c.target, c.target};
    SamplingParams p;
    p.temperature = 1.0;
    for (uint64_t s = 1; s < 200; ++s) {
        int64_t acc = 0;
        toy_generate(same, p, s, 4, k, true, false, 1, &acc);
        EXPECT_EQ(acc, k) << s;
    }
}

}  // namespace
}  // namespace deepinfer
