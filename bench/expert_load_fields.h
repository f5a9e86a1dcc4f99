// SPDX-License-Identifier: Apache-2.0
// The expert load a CUDA benchmark's measurement saw (CudaModelOptions::expert_load_stats), summed over
// an expert-parallel model's ranks, as JSON fields: how many of the experts each MoE layer held were
// given rows, and how far the busiest expert's share was above the mean. A trained model's balanced
// router gives every expert rows at large batches; a random-weight model's router may not, which
// changes what a decode step costs (bench/results: the routing arms of the proxy runs).
#pragma once

#include <nlohmann/json.hpp>

#include <vector>

#include "backends/cuda/model/cuda_model.h"
#include "deepinfer/model.h"

namespace deepinfer::bench {

inline void add_expert_load_fields(nlohmann::json& r, const std::vector<const Model*>& models) {
    int64_t touched = 0, most = 0, pairs = 0, slots = 0, layer_forwards = 0;
    for (const Model* m : models) {
        const cuda::CudaModelStats st = cuda::cuda_model_stats(*m);
        touched += st.experts_touched;
        most += st.expert_pairs_max * st.experts_here;
        pairs += st.expert_pairs;
        slots += st.moe_layer_forwards * st.experts_here;
        layer_forwards += st.moe_layer_forwards;
    }
    if (layer_forwards == 0) return;
    r["moe_layer_forwards"] = layer_forwards;
    r["experts_touched_frac"] = double(touched) / double(slots);
    // the busiest expert's pairs over the mean pairs per expert held (1 = perfectly even)
    r["expert_max_over_mean"] = pairs > 0 ? double(most) / double(pairs) : 0.0;
}

}  // namespace deepinfer::bench
