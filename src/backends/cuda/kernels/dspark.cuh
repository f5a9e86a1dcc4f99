// SPDX-License-Identifier: Apache-2.0
// Device code of the DSpark drafter's ops (ops.h "DSpark drafting"): the taps' stream means, the
// stage attention over the context ring and the whole block, and the Markov head's step (draft logits
// and the confidence head). Every reduction that decides a value runs in the CPU reference's order
// (src/model/dspark_common.cpp, src/model/v41/dspark.cpp), so a row's result does not depend on the batch.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/rows.cuh"
#include "backends/cuda/kernels/sink_softmax.cuh"
#include "backends/cuda/kernels/v41_cache.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// grid (num), block 256.
static __global__ void tap_mean_kernel(const __grid_constant__ TapMeanParams p) {
    const int64_t m = blockIdx.x, D = p.hidden;
    const float* x = p.x + static_cast<int64_t>(p.src_row[m]) * p.hc * D;
    float* out = p.out + m * p.ld;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) {
        float s = 0.0f;
        for (int64_t j = 0; j < p.hc; ++j) s = dev::add(s, x[j * D + d]);
        out[d] = dev::maybe_bf16(s / static_cast<float>(p.hc), p.round_bf16);
    }
}

// Key j of a block row: the ring's context rows lo .. P-1, then the block's rows.
struct DSparkKeys {
    const uint8_t* ring;
    const float* block_kv;  // this request's first block row
    int64_t lo, num_ring, Dh, window_rows, ring_bytes, ring_block;
    CacheFormat ring_format;
    __device__ float operator()(int64_t j, int64_t d) const {
        if (j < num_ring) return cache_value(ring + ((lo + j) % window_rows) * ring_bytes, ring_format, Dh, ring_block, d);
        return block_kv[(j - num_ring) * Dh + d];
    }
};

// grid (requests * block, heads), block 256; dynamic shared memory: head_dim floats.
static __global__ void dspark_attention_kernel(const __grid_constant__ DSparkAttentionParams p) {
    extern __shared__ float o_sh[];
    __shared__ float mx_sh, den_sh;
    const int64_t r = blockIdx.x, h = blockIdx.y, Dh = p.head_dim, G = p.block;
    const int64_t i = r / G, P = p.anchor_positions[i], pos = P + r % G;
    const int64_t lo = P - p.window > 0 ? P - p.window : 0;
    const DSparkKeys key{p.rings[i], p.block_kv + i * G * Dh, lo, P - lo, Dh, p.window_rows,
                         row_bytes_of(p.ring_format, Dh, p.ring_block), p.ring_block, p.ring_format};
    const int64_t nc = key.num_ring + G;
    const float* q = p.q + (r * p.heads + h) * Dh;
    float* sc = p.scratch + (r * p.heads + h) * (p.window + G);
    sink_scores(q, key, nc, Dh, p.softmax_scale, sc);
    const float sink = p.sink[h];
    const float den = sink_softmax_exp(sc, nc, sink, &mx_sh, &den_sh);
    for (int64_t j = threadIdx.x; j < nc; j += blockDim.x)
        sc[j] = dev::maybe_bf16(p.sum_then_divide ? sc[j] : sc[j] / den, p.official);
    __syncthreads();
    for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) {
        float o = 0.0f;
        for (int64_t j = 0; j < nc; ++j) o = dev::add(o, dev::mul(sc[j], key(j, d)));
        if (p.sum_then_divide) o = o / den;
        o_sh[d] = dev::maybe_bf16(o, p.official);
    }
    __syncthreads();
    if (threadIdx.x < 32) {
        rope_warp(o_sh, Dh, p.rope_dim, p.cos_sin + pos * p.rope_dim, true);
        float* out = p.out + (r * p.heads + h) * Dh;
        for (int64_t d = threadIdx.x; d < Dh; d += 32)
            out[d] = (p.official && d >= Dh - p.rope_dim) ? dev::round_bf16(o_sh[d]) : o_sh[d];
    }
}

// Ids of the draft logits per block of dspark_markov_step_kernel (256 threads, 8 ids each: the loads of
// a thread are issued before its stores).
constexpr int64_t kMarkovIdsPerBlock = 2048;

// grid (ceil(vocab / kMarkovIdsPerBlock), rows), block 256: the logits l = U + bias by every block; the
// confidence by warp 0 of block 0 (cpu::dot's eight accumulators over [y; e], one per lane, then their
// fixed combination and the tail).
static __global__ void __launch_bounds__(256) dspark_markov_step_kernel(const __grid_constant__ DSparkMarkovStepParams p) {
    const int64_t a = blockIdx.y, V = p.vocab, D = p.hidden, row = a * p.block + p.step;
    const float* __restrict__ U = p.U + row * V;
    const float* __restrict__ b = p.bias + a * V;
    float* __restrict__ l = p.logits + a * V;
    const int64_t v0 = static_cast<int64_t>(blockIdx.x) * kMarkovIdsPerBlock + threadIdx.x;
    constexpr int kPer = static_cast<int>(kMarkovIdsPerBlock / 256);
    float x[kPer];
#pragma unroll
    for (int u = 0; u < kPer; ++u) {
        const int64_t v = v0 + u * 256;
        x[u] = v < V ? dev::add(U[v], b[v]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kPer; ++u)
        if (v0 + u * 256 < V) l[v0 + u * 256] = x[u];
    if (blockIdx.x != 0 || threadIdx.x >= 32) return;
    // cpu::dot's accumulator j (k = j, j + 8, ... below n rounded down to 8) on lane j of warp 0, its
    // loads independent of its adds (lane 0 alone took ~45 us at hidden 512 + rank 512); then the fixed
    // combination on every lane, and the tail on lane 0.
    const float* y = p.y + row * D;
    const float* e = p.e + a * p.rank;
    auto cat = [&](int64_t i) { return i < D ? y[i] : e[i - D]; };
    const int64_t n = D + p.rank, n8 = n / 8 * 8, j = threadIdx.x;
    float acc = 0;
    if (j < 8) {  // k over y, then over e (two loops of plain loads, the same k order)
        int64_t k = j;
        const int64_t y_end = D < n8 ? D : n8;
#pragma unroll 4
        for (; k < y_end; k += 8) acc = dev::add(acc, dev::mul(p.weight[k], y[k]));
#pragma unroll 4
        for (; k < n8; k += 8) acc = dev::add(acc, dev::mul(p.weight[k], e[k - D]));
    }
    auto lane = [&](int l) { return __shfl_sync(0xffffffffu, acc, l); };
    const float a0 = lane(0), a1 = lane(1), a2 = lane(2), a3 = lane(3), a4 = lane(4), a5 = lane(5), a6 = lane(6), a7 = lane(7);
    if (j != 0) return;
    float t = dev::add(dev::add(dev::add(a0, a4), dev::add(a2, a6)), dev::add(dev::add(a1, a5), dev::add(a3, a7)));
    for (int64_t k = n8; k < n; ++k) t = dev::add(t, dev::mul(p.weight[k], cat(k)));
    p.confidence[a] = dev::sigmoid(t);
}

}  // namespace deepinfer::cuda::kernels
