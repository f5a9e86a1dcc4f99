// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/bench_routing.h"

#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/expert_exchange.h"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda {
namespace {
constexpr int kCounters = 4;  // ops.h ExpertLoadParams::acc
}  // namespace

BenchRouting::BenchRouting(bool expert_load_stats, bool even_routing) : even_(even_routing) {
    if (!expert_load_stats) return;
    counters_ = std::make_unique<DeviceBuffer>(kCounters * sizeof(unsigned long long));
    const unsigned long long zero[kCounters] = {};
    counters_->copy_from_host(zero, sizeof zero);
}

unsigned long long* BenchRouting::counters() const {
    return counters_ ? static_cast<unsigned long long*>(counters_->data()) : nullptr;
}

void BenchRouting::route(int32_t* ids, int64_t rows, int64_t top_k, int64_t experts, const ExpertExchange* exchange,
                         int rank, Stream s, bool replay_tail) const {
    if (!even_) return;
    even_routing({.ids = ids, .rows = rows, .top_k = top_k, .experts = experts,
                  .first_row = exchange ? exchange->first_row(rank, replay_tail) : 0, .stride = even_routing_stride(experts)},
                 s);
}

bool BenchRouting::set_even(bool on) {
    if (on == even_) return false;
    even_ = on;
    return true;
}

void BenchRouting::read(CudaModelStats& st, int64_t experts_here, Stream s) const {
    if (!counters_) return;
    synchronize_stream(s);
    unsigned long long acc[kCounters];
    counters_->copy_to_host(acc, sizeof acc);
    st.experts_touched = int64_t(acc[0]);
    st.expert_pairs_max = int64_t(acc[1]);
    st.expert_pairs = int64_t(acc[2]);
    st.moe_layer_forwards = int64_t(acc[3]);
    st.experts_here = experts_here;
}

void BenchRouting::reset(Stream s) const {
    if (!counters_) return;
    synchronize_stream(s);
    const unsigned long long zero[kCounters] = {};
    counters_->copy_from_host(zero, sizeof zero);
}

}  // namespace deepinfer::cuda
