// SPDX-License-Identifier: Apache-2.0
// Verify lengths per request and step (speculative-decoding.md §4). Fixed: every request verifies
// min(k, drafts it has). Confidence-scheduled: the step's draft-token budget B* maximizes expected
// emitted tokens per second of step time, computed from STALE confidences (the drafts of one step
// earlier than the ones being verified; in an asynchronous engine these are the scores of two steps
// earlier), then the B* slots go to the globally largest CURRENT survival probabilities (prefix
// products of calibrated confidences): rank-preserving top-K, non-anticipating, hence lossless (§3.5).
// Step costs are measured online by kind (step_cost.h: plain decode steps, steps that update the
// drafter, drafter calls); confidences are calibrated online per draft position (binned hit rates
// against realized acceptance). Each step first decides whether to speculate at all: the expected gain
// (best expected tokens per second over draft budgets, from the recent survival profile and the
// measured costs, against plain steps) must reach 1; otherwise the step is plain (no drafter taps, so a
// GPU model replays its CUDA graph) and nothing is drafted. Probes keep both sides measured (the
// interval between probes of speculation doubles while they find no gain, and is long enough that a
// probe's predicted cost over plain steps is at most 1% of the plain steps between probes: a probe costs a
// speculative step, which is exactly what does not pay). At large batches (where speculation rarely pays) the
// exploration — learning the speculative costs, probes — speculates for a subset of the requests only,
// so it costs a fraction of a full speculative step; the cost lines extrapolate to the full step, and a
// near miss (an estimated gain in [0.9, 1)) is confirmed by full speculative steps.
#pragma once

#include <climits>
#include <cstdint>
#include <span>
#include <vector>

#include "engine/speculative/step_cost.h"

namespace deepinfer {

struct VerifyCandidate {
    int64_t available = 0;               // drafts this request may verify (drafts in hand, max_tokens cap)
    std::span<const float> confidence;   // current drafts' raw confidences [>= available] (may be empty)
    std::span<const float> stale;        // the previous drafts' raw confidences (may be empty)
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
    static constexpr int64_t kProbeEvery = 32;     // plain steps before the first probe of speculation;
    static constexpr int64_t kMaxProbeEvery = 512;  // doubled after each probe that finds no gain
    static constexpr int64_t kProbeSteps = 2;      // a probe: a tapped step, then one that verifies
    static constexpr int64_t kReprobePlain = 128;  // speculating steps between re-measures of plain steps
    static constexpr double kSureGain = 1.5;       // above it (against a tapped step as the plain cost),
                                                   // plain steps need not be measured
    static constexpr double kSwitchOnMargin = 0.02;  // hysteresis: from plain, speculate at gain >= 1.02
    static constexpr int64_t kSubsetFrom = 96;     // default: from this many decode rows, exploration
                                                   // (learning, probes) speculates for a subset only
    static constexpr int64_t kSubsetShare = 8;     // the subset: a 1/8 of the decode rows (1/4 on every
                                                   // other learning step, so the draft line has a slope)
    static constexpr double kConfirmFloor = 0.9;   // a gain estimated from subset steps in [0.9, 1):
                                                   // full speculative steps confirm it
    static constexpr int64_t kAll = INT64_MAX;     // speculate(): every decode row speculates
    static constexpr double kProbeShare = 0.01;    // probes cost at most this share of the plain steps'
                                                   // time between them (predicted; kProbeEvery at least)

    // `subset_from`: the smallest batch (decode rows) whose exploration speculates for a subset.
    VerifyScheduler(int64_t max_drafts, bool adaptive, int64_t subset_from = kSubsetFrom);
    bool adaptive() const { return adaptive_; }

    // Once per step, before its rows are laid out: how many of its decode rows speculate, i.e. update
    // the drafter's state, with drafting following (0: a plain step; kAll, or any count >= the decode
    // rows: every one; fixed mode: kAll). `decode_rows`: rows that emit a token (the requests that would
    // draft); `tokens`: the rows the costs are weighed at, drafts left out (an engine passes its decode
    // rows: prefill chunks in the step cost the same either way, so they are left out too). A subset (the first rows in a stable order)
    // explores at large batches: learning the speculative costs and probing cost a fraction of a full
    // speculative step there, where speculation rarely pays; the cost lines extrapolate to the full
    // step, and an estimate near 1 is confirmed by full steps before falling back.
    int64_t speculate(int64_t decode_rows, int64_t tokens);
    // The expected gain of speculating at this shape: the best expected tokens per second of a
    // speculative step over draft budgets (recent survival profile, measured tapped-step and draft
    // costs) over those of a plain step (measured; a tapped step without drafts while unmeasured).
    // 0 while the speculative costs are unknown.
    double expected_gain(int64_t decode_rows, int64_t tokens) const;

    // Verify lengths, one per candidate. `non_draft_tokens`: the step's decode rows but drafts (one anchor
    // row per candidate included); an engine leaves its prefill chunks out (the same work with or without
    // drafts: drafts must pay against plain decoding, not against the step's total). `budget`: tokens left
    // for drafts this step.
    std::vector<int64_t> plan(std::span<const VerifyCandidate> candidates, int64_t non_draft_tokens, int64_t budget);
    // plan() in two halves, for an engine that fixes the step's size before the drafts exist
    // (asynchronous scheduling, spec §4.3): the draft-token budget B* from the candidates' stale
    // confidences (`confidence` unused), then, once the drafts exist, the allocation of B* slots by
    // current survivals (`stale` unused). Fixed mode: B* = min(budget, Σ available), in request order.
    int64_t budget(std::span<const VerifyCandidate> candidates, int64_t non_draft_tokens, int64_t budget);
    std::vector<int64_t> allocate(std::span<const VerifyCandidate> candidates, int64_t draft_budget) const;
    // After a step made only of decode rows (anchors, drafts): its rows, whether they updated the
    // drafter, its wall time without the drafting; the requests drafted during it and that time.
    void observe_step(int64_t tokens, bool tapped, double seconds, int64_t drafted_requests, double draft_seconds);
    void observe_acceptance(std::span<const float> raw, int64_t verified, int64_t accepted) {
        calibrator_.observe(raw, verified, accepted);
    }
    int64_t last_budget() const { return last_budget_; }
    // The expected gain speculate() last computed (-1 before any: learning, or fixed mode).
    double last_gain() const { return last_gain_; }
    const ConfidenceCalibrator& calibrator() const { return calibrator_; }
    const StepCostModel& costs() const { return costs_; }

private:
    // Expected tokens per second of a speculative step of `n` requests over `tokens` non-draft rows
    // verifying `b` drafts with expected survivals summing to `tau_drafts`.
    double spec_rate(int64_t n, int64_t tokens, int64_t b, double tau_drafts) const;
    // The requests of an exploring step at batch n (all of them below subset_from).
    int64_t subset(int64_t n, bool wide) const;
    // Plain steps between probes at this shape so that a probe's predicted excess over plain steps that
    // emit the same tokens is at most kProbeShare of their time (kProbeEvery .. kMaxProbeEvery).
    int64_t probe_interval(int64_t n, int64_t tokens) const;
    // Whether tapped steps were measured near the size of a full speculative step at this shape (else
    // the tapped line is extrapolated from subset steps).
    bool full_measured(int64_t n, int64_t tokens) const;

    int64_t max_drafts_;
    bool adaptive_;
    StepCostModel costs_;
    ConfidenceCalibrator calibrator_;
    std::vector<double> profile_;  // [max_drafts] mean calibrated survival by draft position (recent plans)
    int64_t subset_from_;
    bool speculating_ = true;      // the last step speculated (every request, or any for n = 0)
    int64_t probe_left_ = 0;       // steps left of a probe or confirmation (speculate: probe_requests_)
    int64_t probe_requests_ = kAll;
    int64_t learn_steps_ = 0;      // steps spent learning the speculative costs
    int64_t confirmed_ = -1;       // the batch at which full steps last confirmed a subset estimate
    int64_t plain_left_ = 0;       // steps left of a re-measure of plain steps (speculate: false)
    int64_t plain_steps_ = 0;      // consecutive plain steps
    int64_t probe_every_ = kProbeEvery;  // plain steps between probes (backs off while probes find no gain)
    bool probed_ = false;          // a probe ran since the last decision by the expected gain
    int64_t spec_steps_ = 0;       // speculating steps since plain steps were last measured
    int64_t last_budget_ = 0;
    double last_gain_ = -1;
    int64_t plans_ = 0;
};

}  // namespace deepinfer
