// SPDX-License-Identifier: Apache-2.0
// The drafters' draw (src/model/draft_sampling.h): softmax at the temperature in the blocked summation
// order, and the inverse CDF over the stored f32 probabilities walking the same blocks, checked against a
// long-double inverse CDF in id order over the same probabilities (away from ties at a cumulative
// boundary), at block boundaries, across blocks, with zero-probability tails and at V4's vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "model/draft_sampling.h"

namespace deepinfer {
namespace {

// The id order's inverse CDF in long double over probs at u·total; -1 when u·total lies within `margin`
// of a cumulative boundary (both rules may then round either way).
int64_t reference_draw(const std::vector<float>& probs, double u, long double margin) {
    long double total = 0;
    for (float p : probs) total += p;
    const long double target = static_cast<long double>(u) * total;
    long double cum = 0;
    for (size_t v = 0; v < probs.size(); ++v) {
        const long double next = cum + probs[v];
        if (std::fabs(static_cast<double>(target - next)) < static_cast<double>(margin)) return -1;
        if (target < next && probs[v] > 0) return static_cast<int64_t>(v);
        cum = next;
    }
    int64_t v = static_cast<int64_t>(probs.size()) - 1;
    while (v > 0 && probs[size_t(v)] == 0) --v;
    return v;
}

std::vector<float> random_logits(std::mt19937& rng, int64_t V, float spread) {
    std::normal_distribution<float> n(0.0f, spread);
    std::vector<float> l(static_cast<size_t>(V));
    for (float& x : l) x = n(rng);
    return l;
}

TEST(DraftSampling, ProbabilitiesAreTheSoftmaxAtTheTemperature) {
    std::mt19937 rng(1);
    for (int64_t V : {7, 512, 513, 1300}) {
        const std::vector<float> l = random_logits(rng, V, 3.0f);
        const double T = 0.7, u = 0.5;
        std::vector<float> probs;
        draw_draft(l.data(), V, T, &u, probs);
        ASSERT_EQ(int64_t(probs.size()), V);
        double mx = l[0], den = 0;
        for (float x : l) mx = std::max(mx, double(x));
        for (float x : l) den += std::exp((double(x) - mx) / T);
        for (int64_t v = 0; v < V; ++v)
            EXPECT_NEAR(probs[size_t(v)], std::exp((double(l[size_t(v)]) - mx) / T) / den, 1e-7) << V << " id " << v;
    }
}

TEST(DraftSampling, DrawIsTheInverseCdfOfTheStoredProbabilities) {
    std::mt19937 rng(2);
    std::uniform_real_distribution<double> u01(0.0, 1.0);
    int checked = 0;
    for (int64_t V : {5, 511, 512, 513, 1024, 1300, 129280}) {
        const std::vector<float> l = random_logits(rng, V, V > 2000 ? 6.0f : 2.0f);
        for (int k = 0; k < (V > 2000 ? 40 : 200); ++k) {
            const double u = u01(rng);
            std::vector<float> probs;
            const int32_t got = draw_draft(l.data(), V, 0.9, &u, probs);
            const int64_t want = reference_draw(probs, u, 1e-12L);
            if (want < 0) continue;  // at a boundary
            ASSERT_EQ(got, want) << "V " << V << " u " << u;
            ++checked;
        }
    }
    EXPECT_GT(checked, 1000);
}

TEST(DraftSampling, BlockBoundariesAndZeroTails) {
    const int64_t V = 3 * kDraftSumBlock + 17;
    // All the mass on the first id of the second block, then on the last id of a block.
    for (int64_t hot : {kDraftSumBlock, 2 * kDraftSumBlock - 1, V - 1}) {
        std::vector<float> l(static_cast<size_t>(V), -1e30f);
        l[size_t(hot)] = 0.0f;
        for (double u : {0.0, 0.3, 0.999999}) {
            std::vector<float> probs;
            EXPECT_EQ(draw_draft(l.data(), V, 1.0, &u, probs), hot) << "hot " << hot << " u " << u;
        }
    }
    // Two ids share the mass, one per block: u below one half picks the first, above it the second.
    std::vector<float> l(static_cast<size_t>(V), -1e30f);
    l[10] = l[size_t(2 * kDraftSumBlock + 3)] = 0.0f;
    std::vector<float> probs;
    const double lo = 0.25, hi = 0.75;
    EXPECT_EQ(draw_draft(l.data(), V, 1.0, &lo, probs), 10);
    EXPECT_EQ(draw_draft(l.data(), V, 1.0, &hi, probs), 2 * kDraftSumBlock + 3);
    // A u at 1 (past every boundary) steps back over the zero tail to the last nonzero id.
    const double one = 1.0;
    EXPECT_EQ(draw_draft(l.data(), V, 1.0, &one, probs), 2 * kDraftSumBlock + 3);
}

TEST(DraftSampling, ArgmaxWithoutUniformOrTemperature) {
    const std::vector<float> l = {0.5f, 2.0f, 2.0f, -1.0f};
    std::vector<float> probs;
    EXPECT_EQ(draw_draft(l.data(), 4, 0.8, nullptr, probs), 1);  // the first of the largest
    const double u = 0.99;
    EXPECT_EQ(draw_draft(l.data(), 4, 0.0, &u, probs), 1);
    EXPECT_TRUE(probs.empty());  // argmax drafts store no distribution
    // The confidence proxy is the softmax at temperature 1 of the pick.
    const double den = std::exp(0.5 - 2.0) + 2.0 + std::exp(-3.0);
    EXPECT_NEAR(draft_confidence_proxy(l.data(), 4, 1), 1.0 / den, 1e-7);
}

}  // namespace
}  // namespace deepinfer
