// SPDX-License-Identifier: Apache-2.0
// Confidence-scheduled verification (speculative-decoding.md §4.3, §4.4, §1.7).
#include "engine/speculative/scheduler.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "deepinfer/check.h"

namespace deepinfer {
namespace {
constexpr double kPriorWeight = 16;     // calibration prior (in trials) toward the raw score
constexpr int64_t kExploreEvery = 16;   // plans between cost-model exploration plans (once the slope is known)
constexpr double kProfileDecay = 0.8;   // weight of the previous survival profile per plan
}  // namespace

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

VerifyScheduler::VerifyScheduler(int64_t max_drafts, bool adaptive, int64_t subset_from)
    : max_drafts_(max_drafts), adaptive_(adaptive), calibrator_(max_drafts), profile_(size_t(max_drafts), 1.0),
      subset_from_(std::max<int64_t>(1, subset_from)) {}

void VerifyScheduler::observe_step(int64_t tokens, bool tapped, double seconds, int64_t drafted, double draft_seconds) {
    costs_.observe(tapped ? StepKind::kTapped : StepKind::kPlain, tokens, seconds);
    if (drafted > 0) costs_.observe(StepKind::kDraft, drafted, draft_seconds);
}

double VerifyScheduler::spec_rate(int64_t n, int64_t tokens, int64_t b, double tau_drafts) const {
    const double cost = costs_.predict(StepKind::kDraft, n) + costs_.predict(StepKind::kTapped, tokens + b);
    return (double(n) + tau_drafts) / std::max(cost, 1e-12);
}

double VerifyScheduler::expected_gain(int64_t n, int64_t tokens) const {
    if (n <= 0 || !costs_.known(StepKind::kTapped) || !costs_.known(StepKind::kDraft)) return 0;
    // Plain: n tokens per plain step; while plain steps are unmeasured, a tapped step without drafts
    // stands in for one (it costs at least as much: an upper bound of the gain).
    const StepKind plain = costs_.known(StepKind::kPlain) ? StepKind::kPlain : StepKind::kTapped;
    const double plain_rate = double(n) / std::max(costs_.predict(plain, tokens), 1e-12);
    // Speculative: every request alike, with the recent survival profile; whole positions at a time.
    double best = 0, tau = 0;
    for (int64_t j = 0; j < max_drafts_; ++j) {
        tau += double(n) * profile_[size_t(j)];
        best = std::max(best, spec_rate(n, tokens, n * (j + 1), tau));
    }
    return best / plain_rate;
}

int64_t VerifyScheduler::subset(int64_t n, bool wide) const {
    if (n < subset_from_) return kAll;
    return std::max<int64_t>(1, n / (wide ? kSubsetShare / 2 : kSubsetShare));
}

int64_t VerifyScheduler::probe_interval(int64_t n, int64_t tokens) const {
    const double plain = costs_.predict(StepKind::kPlain, tokens);
    if (plain <= 0) return kProbeEvery;
    const int64_t m = std::min(subset(n, false), n);
    double tau = 0;  // expected accepted drafts of a request verifying every draft (the recent profile)
    for (double p : profile_) tau += p;
    // A probe: a tapped step without drafts (about a plain step: a GPU replays its graph), then one where m
    // requests verify every draft; its excess over plain steps emitting the same tokens.
    const double cost = plain + costs_.predict(StepKind::kTapped, tokens + m * max_drafts_) + costs_.predict(StepKind::kDraft, m);
    const double worth = (2 + double(m) * tau / double(n)) * plain;
    const double excess = std::max(0.0, cost - worth);
    const double steps = std::ceil(excess / (kProbeShare * plain));
    return std::clamp<int64_t>(static_cast<int64_t>(std::min(steps, 1e9)), kProbeEvery, kMaxProbeEvery);
}

bool VerifyScheduler::full_measured(int64_t n, int64_t tokens) const {
    return costs_.max_x(StepKind::kTapped) >= tokens + n * max_drafts_ / 2;
}

int64_t VerifyScheduler::speculate(int64_t n, int64_t tokens) {
    if (!adaptive_) return kAll;
    if (n <= 0) return speculating_ ? kAll : 0;  // no decode rows: nothing to decide (prefill rows always tap)
    int64_t m = kAll;
    if (probe_left_ > 0) {
        --probe_left_;
        m = probe_requests_;
    } else if (plain_left_ > 0) {
        --plain_left_;
        m = 0;
    } else if (!costs_.known(StepKind::kTapped) || !costs_.known(StepKind::kDraft) || !costs_.tapped_slope_known()) {
        // Learn the speculative costs first (an optimistic start); at large batches on a subset of the
        // requests, alternating two sizes (rows and requests apart: both lines get a slope).
        m = subset(n, learn_steps_++ % 2 == 1);
    } else {
        const double gain = expected_gain(n, tokens);
        last_gain_ = gain;
        bool want;
        if (!costs_.known(StepKind::kPlain)) {
            // Measure plain steps unless speculation beats even a tapped step without drafts by far.
            want = gain >= kSureGain;
        } else {
            want = gain >= (speculating_ ? 1.0 : 1.0 + kSwitchOnMargin);
            if (want && gain < kSureGain && spec_steps_ >= kReprobePlain) {  // plain costs may have moved
                want = false;
                plain_left_ = kProbeSteps - 1;
            }
        }
        m = want ? kAll : 0;
        if (!want && costs_.known(StepKind::kPlain) && gain >= kConfirmFloor && !full_measured(n, tokens) &&
            confirmed_ != n) {
            // A near miss extrapolated from subset steps: full speculative steps measure it (a tapped
            // step, then one that verifies every request's drafts).
            m = kAll;
            probe_left_ = kProbeSteps - 1;
            probe_requests_ = kAll;
            confirmed_ = n;
        } else if (!want && costs_.known(StepKind::kPlain) &&
                   plain_steps_ >= std::max(probe_every_, probe_interval(n, tokens))) {
            // Probe: a tapped step (the drafter catches up), then one that verifies fresh drafts; at
            // large batches a subset's (the acceptance profile and the lines, at a fraction of the cost).
            m = subset(n, false);
            probe_left_ = kProbeSteps - 1;
            probe_requests_ = m;
            probed_ = true;
        } else if (want) {
            probe_every_ = kProbeEvery;  // speculation pays again: probe promptly after the next fallback
            probed_ = false;
        } else if (probed_) {  // the probe found no gain: wait twice as long for the next one
            probe_every_ = std::min(2 * probe_every_, kMaxProbeEvery);
            probed_ = false;
        }
    }
    if (m > 0) {
        ++spec_steps_;
        plain_steps_ = 0;
    } else {
        ++plain_steps_;
        spec_steps_ = 0;
    }
    speculating_ = m >= n;
    return m;
}

int64_t VerifyScheduler::budget(std::span<const VerifyCandidate> cands, int64_t non_draft, int64_t budget) {
    int64_t cap = 0;
    for (size_t i = 0; i < cands.size(); ++i) cap += std::min(cands[i].available, max_drafts_);
    cap = std::min(cap, std::max<int64_t>(budget, 0));
    int64_t B = cap;
    if (adaptive_) {
        // Budget from the stale confidences: survival products, sorted, unconstrained search for the
        // best expected tokens per second. Requests without stale scores count as fully confident.
        std::vector<double> s, profile(profile_.size(), 0), counted(profile_.size(), 0);
        const int64_t n_sample = static_cast<int64_t>(cands.size());
        for (const VerifyCandidate& c : cands) {
            double surv = 1;
            for (int64_t j = 0; j < std::min(c.available, max_drafts_); ++j) {
                if (j >= static_cast<int64_t>(c.stale.size())) {
                    s.push_back(surv);
                    continue;
                }
                surv *= calibrator_.calibrated(j, c.stale[size_t(j)]);
                s.push_back(surv);
                profile[size_t(j)] += surv;
                counted[size_t(j)] += 1;
            }
        }
        for (size_t j = 0; j < profile_.size(); ++j)
            if (counted[j] > 0) profile_[j] = kProfileDecay * profile_[j] + (1 - kProfileDecay) * profile[j] / counted[j];
        std::sort(s.begin(), s.end(), std::greater<>());
        if (costs_.known(StepKind::kTapped)) {
            // Drafting is decided (speculate()); its cost is the same for every B.
            double tau = 0, best = -1;
            int64_t best_b = 0;
            for (int64_t b = 0; b <= cap; ++b) {
                if (b > 0) tau += s[size_t(b - 1)];
                const double theta = spec_rate(n_sample, non_draft, b, tau);
                if (theta > best * (1 + 1e-9)) {  // first maximum: smallest B on ties
                    best = theta;
                    best_b = b;
                }
            }
            B = best_b;
        }
        // Keep the tapped line's slope identified: until it is, every other plan, then a fixed share of
        // plans verifies a different budget (the choice never depends on the drafts: lossless). Without a
        // slope, a tapped step without drafts would look as costly as a full verify step.
        // From a full budget it drops about one draft per request (a fifth at k = 5): enough rows apart for
        // the slope where it matters (large batches), little lost where drafts are cheap (small ones).
        const bool explore = costs_.tapped_slope_known() ? ++plans_ % kExploreEvery == 0 : ++plans_ % 2 == 0;
        if (explore) B = (B == cap ? cap - std::max<int64_t>(1, cap / 5) : std::min(cap, 2 * B + 1));
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
