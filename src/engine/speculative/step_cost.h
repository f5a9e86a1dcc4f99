// SPDX-License-Identifier: Apache-2.0
// The measured cost of engine steps by kind (speculative-decoding.md §4.4), learned online from the
// steps the engine runs: a plain decode step (its rows keep nothing for the drafter, so a GPU model
// replays a CUDA graph), a tapped step (its rows update the drafter's state; verify rows included,
// eager on a GPU) and a drafter call. The confidence scheduler compares them to decide whether and how
// much to speculate; one least-squares line per kind, because a single fit over every step mixes
// prefill chunks with decode rows and graph replays with eager steps (it then sees no cost per row).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace deepinfer {

// Linear cost y = a + b x fitted by least squares with exponential forgetting. With one distinct x
// the slope is 0 and the prediction the (forgetting) mean.
class OnlineLinearFit {
public:
    explicit OnlineLinearFit(double decay = 0.98) : decay_(decay) {}
    void add(double x, double y);
    bool ready() const { return n_ >= 2.5 && var_x() > 1e-9; }  // the slope is identified (3 samples)
    bool empty() const { return n_ <= 0; }
    double predict(double x) const;
    double slope() const;
    double intercept() const;

private:
    double var_x() const;
    double decay_;
    double n_ = 0, sx_ = 0, sy_ = 0, sxx_ = 0, sxy_ = 0;
};

enum class StepKind : uint8_t {
    kPlain,   // a decode step whose rows keep nothing for the drafter; x = rows
    kTapped,  // a decode step whose rows update the drafter (verify rows included); x = rows
    kDraft,   // a drafter call; x = requests
};

// Not thread-safe (the engine thread owns it). The first observation of each kind is a warm-up (a CUDA
// graph's capture, first allocations) and dropped; so is any later one above kOutlier times the
// current line at an x no larger than one already seen (the capture of a new graph bucket), which
// would otherwise bias the line for a long time; larger x are always taken (costs grow with work).
class StepCostModel {
public:
    static constexpr double kOutlier = 3.0;
    void observe(StepKind kind, int64_t x, double seconds);
    bool known(StepKind kind) const { return !table(kind).fit.empty(); }
    // Seconds of a step of `kind` at `x` (0 when unknown).
    double predict(StepKind kind, int64_t x) const;
    // Whether tapped steps were seen at two distinct sizes (the line's slope is identified).
    bool tapped_slope_known() const { return table(StepKind::kTapped).fit.ready(); }
    // The largest x taken into the line of `kind` (0 before any).
    int64_t max_x(StepKind kind) const { return table(kind).max_x; }

private:
    struct Table {
        OnlineLinearFit fit;
        int64_t seen = 0;  // observations offered, the warm-up included
        int64_t max_x = 0;  // the largest x taken
    };
    const Table& table(StepKind k) const { return tables_[static_cast<size_t>(k)]; }
    std::array<Table, 3> tables_;
};

}  // namespace deepinfer
