// SPDX-License-Identifier: Apache-2.0
// The full-width V4.1 per-layer CPU benchmark behind `deepinfer bench --synthetic v41-layers`.
#pragma once

#include <cstdint>
#include <string>

namespace deepinfer::cli {

struct V41LayerBenchOptions {
    std::string dir;        // where the synthetic checkpoint is written (reused when present)
    std::string tokenizer;  // tokenizer.json for the Engram token map
    std::string output;     // append the JSON lines here too
    int64_t prefill = 64, decode = 8, repeats = 1;
    uint64_t seed = 1;
};

int run_v41_layer_bench(const V41LayerBenchOptions& options);

// f32 GEMM throughput of the CPU linear kernel at [tokens, 4096] x [4096, 4096]ᵀ (GFLOP/s), the
// ceiling every CPU benchmark reports beside its own rate (cmd_bench.cpp).
double cpu_gemm_gflops(int64_t tokens);

}  // namespace deepinfer::cli
