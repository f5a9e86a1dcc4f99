// SPDX-License-Identifier: Apache-2.0
// Online step-cost lines by step kind (speculative-decoding.md §4.4).
#include "engine/speculative/step_cost.h"

#include <algorithm>

namespace deepinfer {

void OnlineLinearFit::add(double x, double y) {
    n_ = n_ * decay_ + 1;
    sx_ = sx_ * decay_ + x;
    sy_ = sy_ * decay_ + y;
    sxx_ = sxx_ * decay_ + x * x;
    sxy_ = sxy_ * decay_ + x * y;
}
double OnlineLinearFit::var_x() const { return n_ > 0 ? std::max(0.0, sxx_ / n_ - (sx_ / n_) * (sx_ / n_)) : 0; }
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

void StepCostModel::observe(StepKind kind, int64_t x, double seconds) {
    Table& t = tables_[static_cast<size_t>(kind)];
    if (t.seen++ == 0 || seconds < 0) return;  // the warm-up
    if (!t.fit.empty() && x <= t.max_x && seconds > kOutlier * t.fit.predict(double(x))) return;
    t.max_x = std::max(t.max_x, x);
    t.fit.add(double(x), seconds);
}

double StepCostModel::predict(StepKind kind, int64_t x) const {
    const Table& t = table(kind);
    return t.fit.empty() ? 0.0 : t.fit.predict(double(x));
}

}  // namespace deepinfer
