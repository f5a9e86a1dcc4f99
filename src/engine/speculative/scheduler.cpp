// SPDX-License-Identifier: Apache-2.0
// Confidence-scheduled verification (speculative-decoding.md §4.3, §4.4, §1.7).
#include "engine/speculative/scheduler.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "deepinfer/check.h"

namespace deepinfer {
namespace {
constexpr int64_t kFallbackAfter = 8;   // consecutive B* = 0 plans before drafting stops
constexpr int64_t kProbeEvery = 32;     // steps without drafting between probes
constexpr double kPriorWeight = 16;     // calibration prior (in trials) toward the raw score
constexpr int64_t kExploreEvery = 16;   // plans between cost-model exploration plans
}  // namespace

void OnlineLinearFit::add(double x, double y) {
    n_ = n_ * decay_ + 1;
    sx_ = sx_ * decay_ + x;
    sy_ = sy_ * decay_ + y;
    sxx_ = sxx_ * decay_ + x * x;
    sxy_ = sxy_ * decay_ + x * y;
}
double OnlineLinearFit::var_x() const { return n_ > 0 ? sxx_ / n_ - (sx_ / n_) * (sx_ / n_) : 0; }
double OnlineLinearFit::slope() const {
    if (!ready()) return 0;
    const double cov = sxy_ / n_ - (sx_ / n_) * (sy_ / n_);
    return std::max(0.0, cov / var_x());  // costs never fall with more work
}
double OnlineLinearFit::intercept() const {
    if (n_ <= 0) return 0;
    return std::max(0.0, sy_ / n_ - slope() * sx_ / n_);
}
double OnlineLinearFit::predict(double x) const { return intercept() + slope() * x; }

ConfidenceCalibrator::ConfidenceCalibrator(int64_t positions)
    : bins_(size_t(positions), std::vector<Bin>(kBins)), abs_err_(size_t(positions), 0), trials_(size_t(positions), 0) {}

double ConfidenceCalibrator::calibrated(int64_t j, float raw) const {
    const double r = std::clamp(double(raw), 0.0, 1.0);
    if (j < 0 || j >= static_cast<int64_t>(bins_.size())) return r;
    const Bin& b = bins_[size_t(j)][size_t(std::min<int>(kBins - 1, static_cast<int>(r * kBins)))];
    return (b.hits + kPriorWeight * r) / (b.trials + kPriorWeight);
}

void ConfidenceCalibrator::observe(std::span<const float> raw, int64_t verified, int64_t accepted) {
    const int64_t trials = std::min({accepted + 1, verified, static_cast<int64_t>(raw.size()),
                                     static_cast<int64_t>(bins_.size())});
    for (int64_t j = 0; j < trials; ++j) {
        const double r = std::clamp(double(raw[size_t(j)]), 0.0, 1.0);
        const bool hit = j < accepted;
        abs_err_[size_t(j)] += std::abs(calibrated(j, raw[size_t(j)]) - (hit ? 1.0 : 0.0));
        trials_[size_t(j)] += 1;
        Bin& b = bins_[size_t(j)][size_t(std::min<int>(kBins - 1, static_cast<int>(r * kBins)))];
        b.trials = b.trials * 0.999 + 1;
        b.hits = b.hits * 0.999 + (hit ? 1 : 0);
    }
}

double ConfidenceCalibrator::mean_abs_error(int64_t j) const {
    return trials_[size_t(j)] > 0 ? abs_err_[size_t(j)] / trials_[size_t(j)] : 0;
}

VerifyScheduler::VerifyScheduler(int64_t max_drafts, bool adaptive)
    : max_drafts_(max_drafts), adaptive_(adaptive), calibrator_(max_drafts) {}

void VerifyScheduler::observe_step(int64_t tokens, double verify_seconds, int64_t drafted, double draft_seconds) {
    verify_cost_.add(double(tokens), verify_seconds);
    if (drafted > 0) draft_cost_.add(double(drafted), draft_seconds);
}

bool VerifyScheduler::should_draft() {
    if (!adaptive_ || zero_budget_steps_ < kFallbackAfter) return true;
    if (++idle_steps_ >= kProbeEvery) {
        idle_steps_ = 0;
        // Probe: draft again and re-plan with fresh costs; one more B* = 0 plan turns drafting off
        // again at once (a probe that finds B* > 0 resets the count and drafting stays on).
        zero_budget_steps_ = kFallbackAfter - 1;
        return true;
    }
    return false;
}

int64_t VerifyScheduler::budget(std::span<const VerifyCandidate> cands, int64_t non_draft, int64_t budget) {
    int64_t cap = 0;
    for (size_t i = 0; i < cands.size(); ++i) cap += std::min(cands[i].available, max_drafts_);
    cap = std::min(cap, std::max<int64_t>(budget, 0));
    int64_t B = cap;
    if (adaptive_) {
        // Budget from the stale confidences: survival products, sorted, unconstrained search for the
        // best expected tokens per second. Requests without stale scores count as fully confident.
        std::vector<double> s;
        int64_t n_sample = 0;
        for (const VerifyCandidate& c : cands) {
            ++n_sample;
            double surv = 1;
            for (int64_t j = 0; j < std::min(c.available, max_drafts_); ++j) {
                if (j < static_cast<int64_t>(c.stale.size())) surv *= calibrator_.calibrated(j, c.stale[size_t(j)]);
                s.push_back(surv);
            }
        }
        std::sort(s.begin(), s.end(), std::greater<>());
        if (verify_cost_.ready()) {
            const double draft = draft_cost_.predict(double(cands.size()));
            double tau = double(n_sample), best = -1;
            int64_t best_b = 0;
            for (int64_t b = 0; b <= cap; ++b) {
                if (b > 0) tau += s[size_t(b - 1)];
                // B = 0 is a step without drafting: it does not pay the drafter (else drafting, a
                // cost of every B > 0, would never be compared against not drafting at all).
                const double cost = (b > 0 ? draft : 0.0) + verify_cost_.predict(double(non_draft + b));
                const double theta = cost > 0 ? tau / cost : tau;
                if (theta > best * (1 + 1e-9)) {  // first maximum: smallest B on ties
                    best = theta;
                    best_b = b;
                }
            }
            B = best_b;
        }
        zero_budget_steps_ = B == 0 && cap > 0 ? zero_budget_steps_ + 1 : 0;
        // Keep the cost fit identifiable: a fixed share of plans verifies half the budget (the choice
        // never depends on the drafts, so it stays lossless).
        if (++plans_ % kExploreEvery == 0) B = (B == cap ? cap / 2 : std::min(cap, 2 * B + 1));
    }
    last_budget_ = B;
    return B;
}

std::vector<int64_t> VerifyScheduler::allocate(std::span<const VerifyCandidate> cands, int64_t B) const {
    std::vector<int64_t> len(cands.size(), 0);
    if (adaptive_) {
        // The B largest current survivals (ties toward the lower position, then the earlier request);
        // each request's admitted drafts form a prefix because survivals never increase.
        struct Slot { double surv; int64_t pos; size_t req; };
        std::vector<Slot> slots;
        for (size_t i = 0; i < cands.size(); ++i) {
            double surv = 1;
            for (int64_t j = 0; j < std::min(cands[i].available, max_drafts_); ++j) {
                if (j < static_cast<int64_t>(cands[i].confidence.size()))
                    surv *= calibrator_.calibrated(j, cands[i].confidence[size_t(j)]);
                slots.push_back({surv, j, i});
            }
        }
        std::stable_sort(slots.begin(), slots.end(), [](const Slot& a, const Slot& b) {
            return a.surv != b.surv ? a.surv > b.surv : a.pos < b.pos;
        });
        for (int64_t b = 0; b < B && b < static_cast<int64_t>(slots.size()); ++b) ++len[slots[size_t(b)].req];
    } else {
        int64_t left = B;
        for (size_t i = 0; i < cands.size(); ++i) {
            len[i] = std::min({cands[i].available, max_drafts_, left});
            left -= len[i];
        }
    }
    return len;
}

std::vector<int64_t> VerifyScheduler::plan(std::span<const VerifyCandidate> cands, int64_t non_draft, int64_t budget) {
    return allocate(cands, this->budget(cands, non_draft, budget));
}

}  // namespace deepinfer
