// SPDX-License-Identifier: Apache-2.0
// Verify-length scheduling: fixed lengths; the confidence scheduler's budget follows the cost model
// (all drafts when verification is nearly free, none when it is expensive and confidences are low),
// its allocation gives each request a prefix and prefers likely drafts; it stops drafting when
// speculation does not pay and probes again; online calibration moves toward realized acceptance.
#include <gtest/gtest.h>

#include <vector>

#include "engine/speculative/scheduler.h"

namespace deepinfer {
namespace {

TEST(VerifyScheduler, FixedLengths) {
    VerifyScheduler s(4, false);
    std::vector<float> none;
    std::vector<VerifyCandidate> c = {{3, none, none}, {7, none, none}, {0, none, none}};
    EXPECT_EQ(s.plan(c, 3, 100), (std::vector<int64_t>{3, 4, 0}));
    EXPECT_EQ(s.plan(c, 3, 5), (std::vector<int64_t>{3, 2, 0}));  // the step's token budget
}

TEST(VerifyScheduler, BudgetFollowsCostsAndAllocationPrefersLikelyDrafts) {
    const std::vector<float> high = {0.95f, 0.9f, 0.9f, 0.9f}, low = {0.2f, 0.2f, 0.2f, 0.2f};
    // Verification nearly free (cost independent of tokens): every draft is worth verifying.
    VerifyScheduler cheap(4, true);
    for (int i = 0; i < 20; ++i) cheap.observe_step(10 + i, 1.0, 4, 0.1);
    std::vector<VerifyCandidate> c = {{4, high, high}, {4, low, low}};
    EXPECT_EQ(cheap.plan(c, 2, 100), (std::vector<int64_t>{4, 4}));
    // Steep cost per token: only drafts whose survival beats the marginal cost (here the four of the
    // confident request: expected tokens per second 10 at B = 0, 13.2 at B = 4, 12.2 at B = 5).
    VerifyScheduler linear(4, true);
    for (int i = 0; i < 20; ++i) linear.observe_step(10 + i, 0.1 + 0.05 * (10 + i), 4, 0.0);
    const std::vector<int64_t> l = linear.plan(c, 2, 100);
    EXPECT_EQ(l, (std::vector<int64_t>{4, 0}));  // survival 0.2: verifying it lowers tokens per second
    EXPECT_EQ(linear.last_budget(), 4);
    // With a tight budget the likely request gets the slots, as a prefix.
    VerifyScheduler tight(4, true);
    std::vector<VerifyCandidate> c2 = {{4, low, low}, {4, high, high}};
    const std::vector<int64_t> t = tight.plan(c2, 2, 3);  // cost model cold: budget = cap
    EXPECT_EQ(t, (std::vector<int64_t>{0, 3}));
}

TEST(VerifyScheduler, StopsDraftingWhenItDoesNotPayAndProbesAgain) {
    const std::vector<float> low = {0.05f, 0.05f};
    VerifyScheduler s(2, true);
    for (int i = 0; i < 20; ++i) s.observe_step(10 + i, 0.1 + 0.05 * (10 + i), 4, 0.0);
    std::vector<VerifyCandidate> c = {{2, low, low}, {2, low, low}};
    int drafted = 0;
    for (int step = 0; step < 200; ++step) {
        if (!s.should_draft()) continue;
        ++drafted;
        s.plan(c, 2, 100);
        EXPECT_LE(s.last_budget(), 1);  // 0, or 1 on a cost-model exploration plan
    }
    EXPECT_LT(drafted, 20);  // mostly off: 8 plans to learn it, then one step per probe
    EXPECT_GT(drafted, 8);   // but probing
}

TEST(VerifyScheduler, StopsDraftingWhenTheDrafterCostsMoreThanItsDraftsGain) {
    // Verification nearly free per token, likely drafts (survival 0.5, 0.25), but drafting costs five
    // times a step: 2 tokens per 1.0 s without drafting beat at most 3.5 per 6.0 s with it. A comparison
    // that charged the drafter to B = 0 as well would always verify everything.
    const std::vector<float> half = {0.5f, 0.5f};
    VerifyScheduler s(2, true);
    for (int i = 0; i < 20; ++i) s.observe_step(10 + i, 1.0 + 0.001 * (10 + i), 2, 5.0);
    std::vector<VerifyCandidate> c = {{2, half, half}, {2, half, half}};
    EXPECT_EQ(s.plan(c, 2, 100), (std::vector<int64_t>{0, 0}));
    int drafted = 0;
    for (int step = 0; step < 200; ++step) {
        if (!s.should_draft()) continue;
        ++drafted;
        s.plan(c, 2, 100);
    }
    EXPECT_LT(drafted, 60);
    // The same drafter when drafting is cheap: verifying pays.
    VerifyScheduler cheap(2, true);
    for (int i = 0; i < 20; ++i) cheap.observe_step(10 + i, 1.0 + 0.001 * (10 + i), 2, 0.01);
    EXPECT_EQ(cheap.plan(c, 2, 100), (std::vector<int64_t>{2, 2}));
}

TEST(ConfidenceCalibrator, MovesTowardRealizedAcceptance) {
    ConfidenceCalibrator cal(3);
    EXPECT_NEAR(cal.calibrated(0, 0.9f), double(0.9f), 1e-12);  // cold start: the raw score
    const std::vector<float> raw = {0.9f, 0.9f, 0.9f};
    // Position 0 accepted 30% of the time; position 1 (when tried) always rejected.
    for (int i = 0; i < 1000; ++i) cal.observe(raw, 3, i % 10 < 3 ? 1 : 0);
    EXPECT_NEAR(cal.calibrated(0, 0.9f), 0.3, 0.05);
    EXPECT_LT(cal.calibrated(1, 0.9f), 0.1);
    EXPECT_NEAR(cal.calibrated(2, 0.9f), double(0.9f), 1e-12);  // never tried
    EXPECT_GT(cal.mean_abs_error(0), 0.3);             // it started overconfident
}

}  // namespace
}  // namespace deepinfer
