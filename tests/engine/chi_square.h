// SPDX-License-Identifier: Apache-2.0
// Two-sample chi-square homogeneity test of token histograms (speculative-decoding tests).
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace deepinfer {

// Two-sample chi-square homogeneity statistic of two histograms over the same cells; `df` = used
// cells - 1.
inline double two_sample_chi_square(const std::vector<int64_t>& a, const std::vector<int64_t>& b, int* df) {
    double na = 0, nb = 0;
    for (size_t i = 0; i < a.size(); ++i) na += double(a[i]), nb += double(b[i]);
    const double ka = std::sqrt(nb / na), kb = std::sqrt(na / nb);
    double x2 = 0;
    *df = -1;
    for (size_t i = 0; i < a.size(); ++i) {
        if (a[i] + b[i] == 0) continue;
        const double d = ka * double(a[i]) - kb * double(b[i]);
        x2 += d * d / double(a[i] + b[i]);
        ++*df;
    }
    return x2;
}

// Upper 1e-6 tail of chi-square, df <= 15 (regularized upper incomplete gamma, inverted by bisection).
inline double chi_square_bound(int df) {
    static const double t[] = {0, 23.93, 27.63, 30.66, 33.38, 35.89, 38.26, 40.52, 42.70, 44.81,
                               46.86, 48.87, 50.83, 52.75, 54.64, 56.49};
    return t[df];
}

}  // namespace deepinfer
