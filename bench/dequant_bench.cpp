// SPDX-License-Identifier: Apache-2.0
// Throughput of the CPU weight dequantization (load-time work): FP8 block-scaled and FP4 experts
// at V4-Flash shapes, in output bytes per second (compare with memcpy bandwidth in the same run).
#include <benchmark/benchmark.h>

#include <cstring>
#include <random>

#include "deepinfer/dequant.h"

namespace {
using namespace deepinfer;

void fill_random(const Buffer& b, uint32_t seed) {
    std::mt19937 rng(seed);
    auto* p = static_cast<uint8_t*>(b.data());
    for (size_t i = 0; i < b.nbytes(); ++i) p[i] = static_cast<uint8_t>(rng() & 0x7E);  // avoid NaN codes
}

void BM_DequantFp8Block(benchmark::State& state) {
    const int64_t rows = 4096, cols = 4096;
    Buffer w(DType::kF8E4M3, {rows, cols}), s(DType::kF8E8M0, {rows / 128, cols / 128}), o(DType::kBF16, {rows, cols});
    fill_random(w, 1);
    std::memset(s.data(), 127, s.nbytes());
    for (auto _ : state) dequant_fp8_block({.weight = w.view(), .scale = s.view(), .out = o.view()});
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(o.nbytes()));
}
BENCHMARK(BM_DequantFp8Block)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_DequantFp4(benchmark::State& state) {
    const int64_t rows = 2048, cols = 4096;
    Buffer w(DType::kU8, {rows, cols / 2}), s(DType::kF8E8M0, {rows, cols / 32}), o(DType::kBF16, {rows, cols});
    fill_random(w, 2);
    std::memset(s.data(), 127, s.nbytes());
    for (auto _ : state) dequant_fp4({.weight = w.view(), .scale = s.view(), .out = o.view()});
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(o.nbytes()));
}
BENCHMARK(BM_DequantFp4)->Unit(benchmark::kMillisecond)->UseRealTime();

void BM_Memcpy(benchmark::State& state) {
    Buffer a(size_t{32} << 20), b(size_t{32} << 20);
    for (auto _ : state) {
        std::memcpy(b.data(), a.data(), a.nbytes());
        benchmark::ClobberMemory();
    }
    state.SetBytesProcessed(state.iterations() * static_cast<int64_t>(a.nbytes()));
}
BENCHMARK(BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
}  // namespace

BENCHMARK_MAIN();
