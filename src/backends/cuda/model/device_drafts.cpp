// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/device_drafts.h"

#include <cstring>

#include "deepinfer/check.h"

namespace deepinfer::cuda {

void unpack_device_drafts(const uint8_t* host_out, const float* host_probs, const float* device_probs, int64_t steps,
                          int64_t vocab, int64_t slots, std::span<const int64_t> order,
                          std::span<const DraftRequest> requests, std::span<const int32_t> sampled,
                          std::vector<Draft>& out) {
    const int64_t R = slots, V = vocab;
    const auto* toks = reinterpret_cast<const int32_t*>(host_out);
    const auto* conf = reinterpret_cast<const float*>(host_out + size_t(steps * R) * 4);
    for (int64_t a = 0; a < static_cast<int64_t>(order.size()); ++a) {
        Draft& d = out[size_t(order[size_t(a)])];
        const DraftRequest& r = requests[size_t(order[size_t(a)])];
        const int64_t nd = r.num_drafts;
        const bool smp = sampled[size_t(a)] != 0, host = smp && r.host_probs;
        if (smp) {
            DI_ICHECK(device_probs != nullptr);
            d.device_probs = device_probs + a * V;
            d.device_probs_stride = R * V;
        }
        if (host) {
            DI_ICHECK(host_probs != nullptr);
            d.probs.resize(size_t(nd * V));
        }
        for (int64_t k = 0; k < nd; ++k) {
            d.tokens.push_back(toks[k * R + a]);
            d.confidence.push_back(conf[k * R + a]);
            if (host) std::memcpy(d.probs.data() + k * V, host_probs + (k * R + a) * V, size_t(V) * 4);
        }
    }
}

}  // namespace deepinfer::cuda
