// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/rope_tables.h"

#include <cmath>

namespace deepinfer::cuda {

std::vector<float> rope_cos_sin(const cpu::RopeTable& t, int64_t positions) {
    const int64_t half = t.rope_dim() / 2;
    std::vector<float> cs(static_cast<size_t>(positions * half * 2));
    for (int64_t p = 0; p < positions; ++p)
        for (int64_t i = 0; i < half; ++i) {
            const float angle = static_cast<float>(p) * t.inv_freq()[size_t(i)];
            cs[size_t((p * half + i) * 2)] = std::cos(angle);
            cs[size_t((p * half + i) * 2 + 1)] = std::sin(angle);
        }
    return cs;
}

}  // namespace deepinfer::cuda
