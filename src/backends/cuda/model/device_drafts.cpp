// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/device_drafts.h"

#include <cstring>

namespace deepinfer::cuda {

void unpack_device_drafts(const uint8_t* host_out, const float* host_probs, int64_t steps, int64_t vocab, int64_t slots,
                          std::span<const int64_t> order, std::span<const DraftRequest> requests,
                          std::span<const int32_t> sampled, std::vector<Draft>& out) {
    const int64_t R = slots, V = vocab;
    const auto* toks = reinterpret_cast<const int32_t*>(host_out);
    const auto* conf = reinterpret_cast<const float*>(host_out + size_t(steps * R) * 4);
    for (int64_t a = 0; a < static_cast<int64_t>(order.size()); ++a) {
        Draft& d = out[size_t(order[size_t(a)])];
        const int64_t nd = requests[size_t(order[size_t(a)])].num_drafts;
        for (int64_t k = 0; k < nd; ++k) {
            d.tokens.push_back(toks[k * R + a]);
            d.confidence.push_back(conf[k * R + a]);
            if (sampled[size_t(a)]) std::memcpy(d.probs.data() + k * V, host_probs + (k * R + a) * V, size_t(V) * 4);
        }
    }
}

}  // namespace deepinfer::cuda
