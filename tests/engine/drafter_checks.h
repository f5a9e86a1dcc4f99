// SPDX-License-Identifier: Apache-2.0
// Checks every DSpark drafter must pass whatever the backbone (tests/engine/dspark_test.cpp for
// V4.1, dspark_v4_test.cpp for V4-Flash-0731), and the small helpers they use: rejected rows need no
// undo (a drafter after a verify pass and truncate() drafts exactly as a fresh sequence that only ran
// the committed tokens), and drafting many sequences at once equals drafting each alone.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "backends/cpu/linear.h"
#include "deepinfer/drafter.h"
#include "deepinfer/model.h"
#include "model/dspark_common.h"

namespace deepinfer::drafter_checks {

// Random prompt tokens, never the last id (the drafters' noise token).
inline std::vector<int32_t> random_prompt(std::mt19937& rng, int64_t len, int64_t vocab) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (int32_t& t : p) t = static_cast<int32_t>(rng() % uint32_t(vocab - 1));
    return p;
}

// A sequence attached to the model's drafter that has run `tokens` (in chunks of `chunk`).
inline Sequence attached(const Model& model, std::span<const int32_t> tokens, size_t chunk) {
    Sequence s = model.new_sequence();
    model.drafter()->attach(s);
    for (size_t i = 0; i < tokens.size(); i += chunk) model.forward(s, tokens.subspan(i, std::min(chunk, tokens.size() - i)), false);
    return s;
}

inline void expect_same_draft(const Draft& a, const Draft& b, const std::string& what) {
    EXPECT_EQ(a.tokens, b.tokens) << what;
    EXPECT_EQ(a.confidence, b.confidence) << what;
    ASSERT_EQ(a.probs.size(), b.probs.size()) << what;
    for (size_t i = 0; i < a.probs.size(); ++i) ASSERT_EQ(a.probs[i], b.probs[i]) << what << " prob " << i;
}

// For prompts of each length in `lens` (pick lengths around and beyond the drafter's window and ring,
// so context rows wrap): a verify pass [anchor, d1..d5] truncated to 0, 2 or all 5 accepted drafts
// drafts (greedy and sampled) exactly as a sequence that ran only the committed tokens, in chunks of 7
// against one chunk.
inline void check_rollback_needs_no_undo(const Model& model, std::span<const int64_t> lens) {
    const Drafter& d = *model.drafter();
    const int64_t V = model.info().vocab_size;
    std::mt19937 rng(11);
    for (int64_t len : lens) {
        const std::vector<int32_t> prompt = random_prompt(rng, len, V);
        for (int64_t accepted : {0, 2, 5}) {  // all rejected, some, all accepted
            const std::vector<int32_t> pass = random_prompt(rng, 6, V);
            Sequence spec = attached(model, prompt, 7);
            model.forward(spec, pass, true);
            spec.truncate(len + 1 + accepted);
            std::vector<int32_t> committed = prompt;
            committed.insert(committed.end(), pass.begin(), pass.begin() + 1 + accepted);
            Sequence fresh = attached(model, committed, committed.size());
            const int32_t anchor = static_cast<int32_t>(rng() % uint32_t(V - 1));
            const std::vector<double> u = {0.3, 0.8, 0.15, 0.6, 0.45};
            for (double temp : {0.0, 0.7}) {
                DraftRequest a{.sequence = &spec, .anchor = anchor, .num_drafts = 5, .temperature = temp,
                               .uniforms = temp > 0 ? std::span<const double>(u) : std::span<const double>()};
                DraftRequest b = a;
                b.sequence = &fresh;
                expect_same_draft(d.draft({&a, 1})[0], d.draft({&b, 1})[0],
                                  "len " + std::to_string(len) + " accepted " + std::to_string(accepted) + " T " +
                                      std::to_string(temp));
            }
        }
    }
}

// Sequences with prompts of `lens` tokens, drafted together (mixed draft counts, greedy and sampled)
// and each alone: the same drafts. Returns the drafts made together.
inline std::vector<Draft> check_drafting_batch_invariant(const Model& model, std::span<const int64_t> lens) {
    const Drafter& d = *model.drafter();
    std::mt19937 rng(12);
    std::vector<Sequence> seqs;
    for (int64_t len : lens) seqs.push_back(attached(model, random_prompt(rng, len, model.info().vocab_size), 16));
    const std::vector<double> u = {0.9, 0.2, 0.4};
    std::vector<DraftRequest> reqs;
    for (size_t i = 0; i < seqs.size(); ++i)
        reqs.push_back({.sequence = &seqs[i], .anchor = int32_t(5 + i), .num_drafts = int64_t(1 + i % 3),
                        .temperature = i % 2 ? 0.9 : 0.0,
                        .uniforms = i % 2 ? std::span<const double>(u).first(1 + i % 3) : std::span<const double>()});
    std::vector<Draft> together = d.draft(reqs);
    for (size_t i = 0; i < reqs.size(); ++i)
        expect_same_draft(together[i], d.draft({&reqs[i], 1})[0], "request " + std::to_string(i));
    return together;
}

// A draft d of a DSpark drafter from `anchor` at temperature T against the closed form of the Markov
// and confidence heads (§1.6-§1.7) over the block's outputs b: ℓ_k = U[k] + W1[x_k]·W2ᵀ, the
// probabilities softmax(ℓ_k / T) within 1e-5, the confidence sigmoid(w · [y[k]; W1[x_k]]) within 1e-5,
// x_0 = the anchor and x_{k+1} = the draft's own token k. In double precision.
inline void expect_markov_and_confidence_heads(const DSparkHeads& h, const DSparkBlockOutput& b, const Draft& d,
                                               int32_t anchor, double T) {
    const int64_t D = h.hidden, V = h.vocab, r = h.rank;
    int32_t prev = anchor;
    for (int64_t k = 0; k < h.block; ++k) {
        std::vector<float> e(static_cast<size_t>(r)), head_row(static_cast<size_t>(r));
        cpu::dequantize_rows(*h.markov_embed, prev, prev + 1, e.data());
        std::vector<double> l(static_cast<size_t>(V));
        double mx = -1e300;
        for (int64_t v = 0; v < V; ++v) {
            cpu::dequantize_rows(*h.markov_head, v, v + 1, head_row.data());
            double beta = 0;
            for (int64_t i = 0; i < r; ++i) beta += double(e[size_t(i)]) * head_row[size_t(i)];
            l[size_t(v)] = double(b.U[size_t(k * V + v)]) + beta;
            mx = std::max(mx, l[size_t(v)]);
        }
        double den = 0;
        for (double x : l) den += std::exp((x - mx) / T);
        double worst = 0;
        for (int64_t v = 0; v < V; ++v)
            worst = std::max(worst, std::abs(std::exp((l[size_t(v)] - mx) / T) / den - d.probs[size_t(k * V + v)]));
        EXPECT_LT(worst, 1e-5) << "draft " << k;
        double z = 0;
        for (int64_t i = 0; i < D; ++i) z += double(h.confidence[size_t(i)]) * b.y[size_t(k * D + i)];
        for (int64_t i = 0; i < r; ++i) z += double(h.confidence[size_t(D + i)]) * e[size_t(i)];
        EXPECT_NEAR(d.confidence[size_t(k)], 1.0 / (1.0 + std::exp(-z)), 1e-5) << "draft " << k;
        prev = d.tokens[size_t(k)];
    }
}

}  // namespace deepinfer::drafter_checks
