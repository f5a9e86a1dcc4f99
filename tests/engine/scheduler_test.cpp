// SPDX-License-Identifier: Apache-2.0
// Verify-length scheduling: fixed lengths; the confidence scheduler's budget follows the measured cost
// of tapped steps (all drafts when verification is nearly free, none when it is expensive and
// confidences are low), its allocation gives each request a prefix and prefers likely drafts; it
// speculates only when the expected gain over plain steps reaches 1 (batch, drafter cost, acceptance)
// and probes again; at large batches it explores with a subset of the requests and confirms a near miss
// with full steps; the step-cost model drops warm-ups; online calibration moves toward realized acceptance.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
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
    for (int i = 0; i < 20; ++i) cheap.observe_step(10 + i, true, 1.0, 4, 0.0);
    std::vector<VerifyCandidate> c = {{4, high, high}, {4, low, low}};
    EXPECT_EQ(cheap.plan(c, 2, 100), (std::vector<int64_t>{4, 4}));
    // Steep cost per token: only drafts whose survival beats the marginal cost (here the four of the
    // confident request: expected tokens per second 10 at B = 0, 13.2 at B = 4, 12.2 at B = 5).
    VerifyScheduler linear(4, true);
    for (int i = 0; i < 20; ++i) linear.observe_step(10 + i, true, 0.1 + 0.05 * (10 + i), 4, 0.0);
    const std::vector<int64_t> l = linear.plan(c, 2, 100);
    EXPECT_EQ(l, (std::vector<int64_t>{4, 0}));  // survival 0.2: verifying it lowers tokens per second
    EXPECT_EQ(linear.last_budget(), 4);
    // Plain steps do not enter the verify cost: the same line with cheap plain steps plans the same.
    VerifyScheduler mixed(4, true);
    for (int i = 0; i < 20; ++i) {
        mixed.observe_step(10 + i, true, 0.1 + 0.05 * (10 + i), 4, 0.0);
        mixed.observe_step(40 + i, false, 0.01, 0, 0.0);
    }
    EXPECT_EQ(mixed.plan(c, 2, 100), (std::vector<int64_t>{4, 0}));
    // With a tight budget the likely request gets the slots, as a prefix.
    VerifyScheduler tight(4, true);
    std::vector<VerifyCandidate> c2 = {{4, low, low}, {4, high, high}};
    const std::vector<int64_t> t = tight.plan(c2, 2, 3);  // cost model cold: budget = cap
    EXPECT_EQ(t, (std::vector<int64_t>{0, 3}));
}

TEST(StepCostModel, DropsTheWarmUpAndCaptureOutliersButFollowsGrowth) {
    StepCostModel m;
    m.observe(StepKind::kPlain, 8, 50.0);  // the first: a graph capture
    EXPECT_FALSE(m.known(StepKind::kPlain));
    m.observe(StepKind::kPlain, 8, 1.0);
    EXPECT_TRUE(m.known(StepKind::kPlain));
    EXPECT_DOUBLE_EQ(m.predict(StepKind::kPlain, 8), 1.0);
    m.observe(StepKind::kPlain, 8, 40.0);  // a new bucket's capture at a size already seen: dropped
    EXPECT_DOUBLE_EQ(m.predict(StepKind::kPlain, 8), 1.0);
    m.observe(StepKind::kPlain, 64, 8.0);  // a larger batch really costs more: taken
    EXPECT_GT(m.predict(StepKind::kPlain, 64), 2.0);
    EXPECT_FALSE(m.known(StepKind::kTapped));
    EXPECT_EQ(m.predict(StepKind::kTapped, 8), 0.0);
}

// A scheduler that has seen `steps` tapped steps (cost tapped(tokens)), drafts (draft(requests)) and
// plain steps (plain(tokens)) of batches around `n`, then is asked what to do at batch n.
template <typename Tapped, typename Plain>
VerifyScheduler trained(int64_t n, Tapped tapped, Plain plain, double draft_seconds, int steps = 20) {
    VerifyScheduler s(4, true);
    for (int i = 0; i < steps; ++i) {
        const int64_t rows = n + (i % 5) * n;  // anchors plus 0..4 drafts each
        s.observe_step(rows, true, tapped(rows), n, draft_seconds);
        s.observe_step(n, false, plain(n), 0, 0.0);
    }
    return s;
}

TEST(VerifyScheduler, SpeculatesOnlyWhenTheExpectedGainReachesOne) {
    const std::vector<float> sure = {0.99f, 0.99f, 0.99f, 0.99f};
    const int64_t n = 64;
    std::vector<VerifyCandidate> c(size_t(n), VerifyCandidate{4, sure, sure});
    // A GPU at large batch: plain steps replay a graph (1 ms + 0.01 ms a row), tapped steps run eagerly
    // and every verify row costs 0.1 ms: 5 tokens per request per step cannot pay for 5x the rows.
    auto eager = [](int64_t rows) { return 1e-3 + 1e-4 * double(rows); };
    auto graph = [](int64_t rows) { return 1e-3 + 1e-5 * double(rows); };
    VerifyScheduler loses = trained(n, eager, graph, 2e-3);
    loses.plan(c, n, 10000);  // the survival profile from these confidences
    EXPECT_LT(loses.expected_gain(n, n), 1.0);
    EXPECT_EQ(loses.speculate(n, n), 0);
    // Small batch, the same costs: a step is mostly fixed cost, five tokens per step pay.
    VerifyScheduler pays = trained(2, eager, graph, 2e-4);
    std::vector<VerifyCandidate> c2(2, VerifyCandidate{4, sure, sure});
    pays.plan(c2, 2, 10000);
    EXPECT_GT(pays.expected_gain(2, 2), 2.0);
    EXPECT_EQ(pays.speculate(2, 2), VerifyScheduler::kAll);
    // The drafter alone can make it lose: the same small batch with a drafter that costs 10 steps.
    VerifyScheduler slow_drafter = trained(2, eager, graph, 20e-3);
    slow_drafter.plan(c2, 2, 10000);
    EXPECT_EQ(slow_drafter.speculate(2, 2), 0);
    // Rejected drafts (the calibrated survival falls) make it lose at a batch where sure drafts pay.
    VerifyScheduler doubtful = trained(8, eager, graph, 2e-4);
    std::vector<VerifyCandidate> c8(8, VerifyCandidate{4, sure, sure});
    doubtful.plan(c8, 8, 10000);
    EXPECT_EQ(doubtful.speculate(8, 8), VerifyScheduler::kAll);
    for (int i = 0; i < 400; ++i) doubtful.observe_acceptance(sure, 4, 0);  // nothing is ever accepted
    for (int i = 0; i < 20; ++i) doubtful.plan(c8, 8, 10000);
    EXPECT_LT(doubtful.expected_gain(8, 8), 1.0);
    EXPECT_EQ(doubtful.speculate(8, 8), 0);
}

// 300 steps of batch n (every request with 4 sure drafts), costs from the given lines; whether each
// step speculated.
template <typename Tapped, typename Plain>
std::vector<int> run_modes(VerifyScheduler& s, int64_t n, Tapped tapped, Plain plain, double draft_seconds) {
    const std::vector<float> sure = {0.99f, 0.99f, 0.99f, 0.99f};
    std::vector<VerifyCandidate> c(size_t(n), VerifyCandidate{4, sure, sure});
    std::vector<int> modes;
    for (int step = 0; step < 300; ++step) {
        const bool spec = s.speculate(n, n) > 0;
        modes.push_back(spec);
        int64_t rows = n;
        if (spec) rows += s.plan(c, n, 10000).empty() ? 0 : s.last_budget();
        s.observe_step(rows, spec, spec ? tapped(rows) : plain(rows), spec ? n : 0, spec ? draft_seconds : 0.0);
    }
    return modes;
}

TEST(VerifyScheduler, MeasuresPlainStepsThenProbesSpeculationPeriodically) {
    const int64_t n = 64;
    // A probe costs about what its tokens are worth at plain steps (verify rows a little dearer than plain
    // rows; the drafter makes speculation lose, gain 0.86): probes come kProbeEvery plain steps after the
    // fallback, then at doubling intervals while they find no gain.
    auto graph = [](int64_t rows) { return 1e-3 + 1e-5 * double(rows); };
    auto tapped = [](int64_t rows) { return 1e-3 + 1.1e-5 * double(rows); };
    VerifyScheduler s(4, true);
    const std::vector<int> modes = run_modes(s, n, tapped, graph, 5e-3);
    EXPECT_EQ(modes[0], 1);  // cold: speculate (the speculative costs are learned first)
    EXPECT_LT(s.expected_gain(n, n), 1.0);
    int spec_steps = 0, switches = 0;
    for (size_t i = 0; i < modes.size(); ++i) {
        spec_steps += modes[i];
        switches += i > 0 && modes[i] != modes[i - 1];
    }
    EXPECT_LT(spec_steps, 30);  // mostly plain: a few steps to learn, then probes
    std::vector<size_t> probes;  // two speculating steps after a plain run
    for (size_t i = 1; i + 1 < modes.size(); ++i)
        if (modes[i] && modes[i + 1] && !modes[i - 1] && i > 20) probes.push_back(i);
    ASSERT_GE(probes.size(), 2u);
    EXPECT_GE(probes[1] - probes[0], size_t(2 * VerifyScheduler::kProbeEvery));
    EXPECT_GT(switches, 4);

    // Verify rows 10x dearer than plain rows: a probe costs about 17 plain steps more than its tokens are
    // worth, so probes wait until that is at most kProbeShare of the plain steps between them (here the
    // longest interval): no probe within these 300 steps once speculation stopped.
    auto eager = [](int64_t rows) { return 1e-3 + 1e-4 * double(rows); };
    VerifyScheduler dear(4, true);
    const std::vector<int> m2 = run_modes(dear, n, eager, graph, 2e-3);
    const auto last_spec = std::find(m2.rbegin(), m2.rend(), 1) - m2.rbegin();
    EXPECT_GT(last_spec, 280);  // speculated only while learning (the first steps)
    EXPECT_LT(std::count(m2.begin(), m2.end(), 1), 10);
}

// Runs `steps` steps of batch n against step costs (as an asynchronous engine: each step's cost is
// observed after the next step is planned); returns the requests that speculated per step.
template <typename Tapped, typename Plain, typename Draft>
std::vector<int64_t> simulate(VerifyScheduler& s, int64_t n, int steps, Tapped tapped, Plain plain, Draft draft) {
    const std::vector<float> sure = {0.99f, 0.99f, 0.99f, 0.99f};
    std::vector<int64_t> out;
    std::function<void()> pending;
    for (int step = 0; step < steps; ++step) {
        const int64_t m = std::min(s.speculate(n, n), n);
        out.push_back(m);
        int64_t rows = n;
        if (m > 0) {
            std::vector<VerifyCandidate> c(size_t(m), VerifyCandidate{4, sure, sure});
            s.plan(c, n, 100000);
            rows += s.last_budget();
        }
        if (pending) pending();
        pending = [&s, rows, m, tapped, plain, draft] {
            s.observe_step(rows, m > 0, m > 0 ? tapped(rows) : plain(rows), m, m > 0 ? draft(m) : 0.0);
        };
    }
    return out;
}

TEST(VerifyScheduler, ExploresWithASubsetAtLargeBatches) {
    const int64_t n = 256;
    // A GPU at a large batch: every row costs the same in a plain (graph) and a tapped (eager) step, a
    // tapped step has a larger fixed cost, the drafter costs per request: 5 tokens per request cannot pay
    // for 5x the rows and the draft (true gain 0.85).
    auto graph = [](int64_t rows) { return 1e-3 + 5e-5 * double(rows); };
    auto eager = [](int64_t rows) { return 2e-3 + 5e-5 * double(rows); };
    auto draft = [](int64_t req) { return 1e-3 + 5e-5 * double(req); };
    VerifyScheduler loses(4, true);
    const std::vector<int64_t> m = simulate(loses, n, 200, eager, graph, draft);
    int64_t spec = 0;
    for (size_t i = 0; i < m.size(); ++i) {
        spec += m[i] > 0;
        // Learning and probes speculate for an eighth or a quarter of the requests, never all of them.
        EXPECT_LE(m[i], n / 4) << "step " << i;
    }
    EXPECT_EQ(m[0], n / 8);
    EXPECT_EQ(m[1], n / 4);
    EXPECT_LE(spec, 12);  // 5 learning steps, then 2-step probes at growing intervals
    EXPECT_EQ(m[199], 0);
    EXPECT_NEAR(loses.expected_gain(n, n), 0.85, 0.03);  // the lines extrapolate to the full step

    // Rows beyond 600 cost less (the GPU fills up): the subset steps (up to 512 rows) see only the steep
    // part and estimate a gain just below 1 (0.98); full steps confirm it and find 1.4: it speculates.
    auto concave = [](int64_t rows) {
        return 2e-3 + 5e-5 * double(std::min<int64_t>(rows, 600)) + 2e-5 * double(std::max<int64_t>(0, rows - 600));
    };
    auto cheap_draft = [](int64_t req) { return 1e-3 + 1e-5 * double(req); };
    VerifyScheduler pays(4, true);
    const std::vector<int64_t> p = simulate(pays, n, 200, concave, graph, cheap_draft);
    const auto first_full = std::find(p.begin(), p.end(), n) - p.begin();
    EXPECT_GT(std::count(p.begin(), p.begin() + first_full, 0), 0);  // plain steps measured first
    EXPECT_LT(first_full, 12);
    EXPECT_GE(std::count(p.begin(), p.end(), n), 185);
    EXPECT_NEAR(pays.expected_gain(n, n), 1.4, 0.05);

    // Below the subset threshold exploration speculates for every request (where speculation pays).
    VerifyScheduler small(4, true);
    EXPECT_EQ(small.speculate(64, 64), VerifyScheduler::kAll);
    VerifyScheduler low_threshold(4, true, 16);
    EXPECT_EQ(low_threshold.speculate(64, 64), 64 / VerifyScheduler::kSubsetShare);
}

TEST(VerifyScheduler, FixedModeAlwaysSpeculates) {
    VerifyScheduler s(4, false);
    for (int i = 0; i < 10; ++i) s.observe_step(8, true, 1.0, 8, 1.0);
    EXPECT_TRUE(s.speculate(8, 8));
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
