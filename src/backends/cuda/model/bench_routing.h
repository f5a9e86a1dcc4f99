// SPDX-License-Identifier: Apache-2.0
// The benchmark switches of a CUDA model's MoE layers (CudaModelOptions::expert_load_stats and
// even_routing), shared by the V4 and V4.1 models: device counters of how evenly each layer's pairs
// spread over the experts held here (CudaModelStats::moe_layer_forwards ..), and the even routing that
// stands in for a trained model's balanced router. Guarded by the model's forward mutex.
#pragma once

#include <cstdint>
#include <memory>

#include "backends/cuda/cuda_backend.h"

namespace deepinfer::cuda {

class ExpertExchange;
struct CudaModelStats;

class BenchRouting {
public:
    BenchRouting(bool expert_load_stats, bool even_routing);
    // The counters routed_experts adds to (RoutedExpertsParams::expert_load), or null when off.
    unsigned long long* counters() const;
    // Overwrites the router's picks ids [rows, top_k] on s when even routing is on (the rows' global
    // index from the exchange under expert parallelism; replay_tail: its counts from the bounded replay's cut on).
    void route(int32_t* ids, int64_t rows, int64_t top_k, int64_t experts, const ExpertExchange* exchange, int rank,
               Stream s, bool replay_tail = false) const;
    bool even() const { return even_; }
    // Returns whether it changed (the caller drops its captured graphs).
    bool set_even(bool on);
    // After s has finished (synchronizes it): the counters into st, with the experts held per layer.
    void read(CudaModelStats& st, int64_t experts_here, Stream s) const;
    void reset(Stream s) const;  // synchronizes s, zeroes the counters

private:
    std::unique_ptr<DeviceBuffer> counters_;
    bool even_ = false;
};

}  // namespace deepinfer::cuda
