// SPDX-License-Identifier: Apache-2.0
// Verify lengths per request and step (speculative-decoding.md §4). Fixed: every request verifies
// min(k, drafts it has). Confidence-scheduled: the step's draft-token budget B* maximizes expected
// emitted tokens per second of step time, computed from STALE confidences (the drafts of one step
// earlier than the ones being verified; in an asynchronous engine these are the scores of two steps
// earlier), then the B* slots go to the globally largest CURRENT survival probabilities (prefix
// products of calibrated confidences): rank-preserving top-K, non-anticipating, hence lossless (§3.5).
// The step cost model (verify cost by token count, draft cost by request count) is fitted online by
// least squares with exponential forgetting; confidences are calibrated online per draft position
// (binned hit rates against realized acceptance). When the optimum stays at B* = 0 the engine stops
// drafting (speculation does not pay) and probes again periodically.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace deepinfer {

struct VerifyCandidate {
    int64_t available = 0;               // drafts this request may verify (drafts in hand, max_tokens cap)
    std::span<const float> confidence;   // current drafts' raw confidences [>= available] (may be empty)
    std::span<const float> stale;        // the previous drafts' raw confidences (may be empty)
};

// Linear cost y = a + b x fitted by least squares with exponential forgetting.
class OnlineLinearFit {
public:
    explicit OnlineLinearFit(double decay = 0.98) : decay_(decay) {}
    void add(double x, double y);
    bool ready() const { return n_ >= 4 && var_x() > 1e-9; }
    double predict(double x) const;
    double slope() const;
    double intercept() const;

private:
    double var_x() const;
    double decay_;
    double n_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

// Per-position calibration of raw confidences: EMA hit/trial counts in bins of the raw score, blended
// toward the raw score with a prior weight (cold start: the raw score).
class ConfidenceCalibrator {
public:
    static constexpr int kBins = 10;
    explicit ConfidenceCalibrator(int64_t positions);
    double calibrated(int64_t position, float raw) const;
    // A verified request: draft j (0-based) was a trial when every earlier draft was accepted
    // (j < min(accepted + 1, verified)); a hit when j < accepted.
    void observe(std::span<const float> raw, int64_t verified, int64_t accepted);
    // Per position: sum over trials of |calibrated - hit| (calibration error), trials.
    double mean_abs_error(int64_t position) const;

private:
    struct Bin { double trials = 0, hits = 0; };
    std::vector<std::vector<Bin>> bins_;  // [position][bin]
    std::vector<double> abs_err_, trials_;
};

class VerifyScheduler {
public:
    VerifyScheduler(int64_t max_drafts, bool adaptive);
    bool adaptive() const { return adaptive_; }
    // Verify lengths, one per candidate. `non_draft_tokens`: every other row of this step (one anchor
    // row per candidate included, prefill chunks). `budget`: tokens left for drafts this step.
    std::vector<int64_t> plan(std::span<const VerifyCandidate> candidates, int64_t non_draft_tokens, int64_t budget);
    // plan() in two halves, for an engine that fixes the step's size before the drafts exist
    // (asynchronous scheduling, spec §4.3): the draft-token budget B* from the candidates' stale
    // confidences (`confidence` unused), then, once the drafts exist, the allocation of B* slots by
    // current survivals (`stale` unused). Fixed mode: B* = min(budget, Σ available), in request order.
    int64_t budget(std::span<const VerifyCandidate> candidates, int64_t non_draft_tokens, int64_t budget);
    std::vector<int64_t> allocate(std::span<const VerifyCandidate> candidates, int64_t draft_budget) const;
    // After a step: its total rows, wall time of the target forward; requests drafted and drafting time.
    void observe_step(int64_t tokens, double verify_seconds, int64_t drafted_requests, double draft_seconds);
    void observe_acceptance(std::span<const float> raw, int64_t verified, int64_t accepted) {
        calibrator_.observe(raw, verified, accepted);
    }
    // Whether to draft at all this step (false while speculation does not pay; periodic probes).
    bool should_draft();
    int64_t last_budget() const { return last_budget_; }
    const ConfidenceCalibrator& calibrator() const { return calibrator_; }

private:
    int64_t max_drafts_;
    bool adaptive_;
    OnlineLinearFit verify_cost_, draft_cost_;
    ConfidenceCalibrator calibrator_;
    int64_t zero_budget_steps_ = 0;  // consecutive plans with B* = 0
    int64_t idle_steps_ = 0;         // steps without drafting since the fallback began
    int64_t last_budget_ = 0;
    int64_t plans_ = 0;
};

}  // namespace deepinfer
