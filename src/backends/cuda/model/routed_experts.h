// SPDX-License-Identifier: Apache-2.0
// The routed experts of one MoE layer on the GPU, shared by the V4 (cuda_model.cpp) and V4.1
// (cuda_v41_model.cpp) models: the pairs (row, k) grouped by expert, the grouped w1/w3 GEMMs, the
// clamped SwiGLU, the grouped w2, each pair's output in slot order. Under expert parallelism
// (expert_exchange.h) the same steps run on the rows sent to this rank (every rank's rows, or under
// the routed dispatch only those with an expert here), the other ranks' experts skipped, and each
// pair's output comes back from the rank holding its expert, so a rank's result equals the single-GPU
// one bit for bit. The transfers run on the exchange's side stream while `overlap` (the caller's
// shared expert) runs on the compute stream. Router and combine stay with the caller.
#pragma once

#include <cstdint>
#include <functional>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_weights.h"

namespace deepinfer::cuda {

class ExpertExchange;

struct RoutedExpertsParams {
    const DeviceExperts* experts = nullptr;  // this GPU's experts (under expert parallelism: its slice)
    const float* x = nullptr;                // [rows, hidden] f32 MoE input of this GPU's rows
    // x already in the fast GEMMs' form (act_quant_fp8 per 128 columns: [rows, hidden] e4m3 and
    // [rows, hidden / 128] scales), or null: the fast path then quantizes x itself (the same bits).
    const uint8_t* xq = nullptr;
    const float* xs = nullptr;
    const int32_t* ids = nullptr;            // [rows, top_k] each pair's expert (global ids)
    const float* weights = nullptr;          // [rows, top_k] each pair's routing weight
    int64_t rows = 0, hidden = 0, top_k = 0;
    int64_t experts_total = 0;               // routed experts of the layer (all ranks)
    float swiglu_limit = 0;
    // Official numerics: bf16 rounding points, and activations act_quant'ed per `act_block` elements
    // before quantized (FP8/FP4) expert weights on the reference kernels.
    bool official = false;
    int64_t act_block = 128;
    // The routing weight scales the SwiGLU output before w2 (V4 official, V4.1 always); else the
    // caller's combine applies it.
    bool weight_before_w2 = false;
    // Tensor-core grouped GEMMs (gemm_fast.h) over FP8 activations quantized per 128, when the
    // experts' formats allow; otherwise the reference kernels. Official numerics with act_block < 128:
    // act_quant per act_block first (the reference's rounding), then the kernels' per-128 FP8 form.
    bool fast = false;
    // Benchmarks (CudaModelOptions::expert_load_stats): the experts' load here accumulated into these
    // [4] device counters (ops.h: expert_load_accumulate); null: not counted.
    unsigned long long* expert_load = nullptr;
    ExpertExchange* exchange = nullptr;      // expert parallelism, else null
    int rank = 0;                            // this GPU's rank in `exchange`
    bool replay_tail = false;                // a layer from V4.1's bounded-replay cut on: the exchange's tail counts
    // Work independent of the routed experts (the shared expert), enqueued on `s` exactly once: under
    // expert parallelism while the rows travel (and, routed, while the host waits for the counts);
    // on one GPU after the experts. May allocate from `ws` and release its scratch in stream order on
    // `s` (the transfers' buffers are allocated before it runs).
    std::function<void()> overlap;
};

// The routed dispatch's workspace beyond the all-gather's (ep/dispatch_plan.h): the per-peer staging
// of at most `rows` own rows (f32 or FP8 + scales, ids, weights), the plan's and the receiving side's
// index arrays over at most `gathered` rows, and the allocations' alignment.
size_t ep_staging_bytes(int64_t ranks, int64_t rows, int64_t gathered, int64_t top_k, int64_t hidden);

// Returns each pair's expert output (before routing weights unless weight_before_w2), [rows · top_k,
// hidden] f32 in slot order (pair (r, k) at row r · top_k + k), allocated in `ws`; enqueued on `s`.
float* routed_experts(const RoutedExpertsParams& p, DeviceArena& ws, Stream s);

}  // namespace deepinfer::cuda
