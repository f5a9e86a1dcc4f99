// SPDX-License-Identifier: Apache-2.0
// Device code of V4.1's Engram (model/v41/ffn.cpp engram_forward): the gather of table rows (the table
// may be mapped host memory; each element decoded exactly as the CPU's dequantize_rows) and the fusion
// into the streams (gate from sequential f32 sums in the CPU's order, then h += gate · v).
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/linear.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// grid (tokens, cols), block 128.
static __global__ void engram_gather_kernel(const __grid_constant__ EngramGatherParams p) {
    const int64_t t = blockIdx.x, c = blockIdx.y, hd = p.table.in_features;
    const int64_t row = p.rows[t * p.cols + c];
    float* out = p.out + (t * p.cols + c) * hd;
    for (int64_t i = threadIdx.x; i < hd; i += blockDim.x) out[i] = weight_at(p.table, row, i);
}

// grid (tokens, hc), block kEngramFuseThreads: the gate's three sums on thread 0 in the CPU's sequential order (its
// bits), over chunks of the rows that all threads first stage in shared memory (coalesced; the serial loop then
// reads shared memory, not one global load after another), or with tree_sum on every thread (fast mode), then
// every thread updates its elements.
constexpr int kEngramFuseChunk = 1024;
constexpr int kEngramFuseThreads = 256;
static __global__ void engram_fuse_kernel(const __grid_constant__ EngramFuseParams p) {
    __shared__ float gate_sh;
    __shared__ __align__(16) float hs[kEngramFuseChunk], ks[kEngramFuseChunk], gs[kEngramFuseChunk];
    const int64_t t = blockIdx.x, j = blockIdx.y, hc = p.hc, D = p.hidden;
    float* h = p.streams + (t * hc + j) * D;
    const float* key = p.kv + t * (hc + 1) * D + j * D;
    const float* value = p.kv + t * (hc + 1) * D + hc * D;
    const float* gw = p.gate_weight + j * D;
    float hh = 0.0f, kk = 0.0f, dot = 0.0f;
    if (p.tree_sum) {  // (uniform) EngramFuseParams::tree_sum's order; the results in thread 0's hh, kk, dot
        __shared__ float warp_sh[3][32];
        float s[3] = {0.0f, 0.0f, 0.0f};  // |h|², |key|², h·w·key
        for (int64_t d = threadIdx.x; d < D; d += kEngramFuseThreads) {
            const float hv = h[d], kv = key[d], gv = gw[d];
            s[0] = dev::add(s[0], dev::mul(hv, hv));
            s[1] = dev::add(s[1], dev::mul(kv, kv));
            s[2] = dev::add(s[2], dev::mul(dev::mul(hv, gv), kv));
        }
        dev::block_tree_sums(s, warp_sh, kEngramFuseThreads / 32);
        hh = s[0], kk = s[1], dot = s[2];
    }
    for (int64_t c0 = 0; c0 < (p.tree_sum ? 0 : D); c0 += kEngramFuseChunk) {
        const int64_t n = D - c0 < kEngramFuseChunk ? D - c0 : kEngramFuseChunk;
        for (int64_t d = threadIdx.x; d < n; d += blockDim.x) {
            hs[d] = h[c0 + d];
            ks[d] = key[c0 + d];
            gs[d] = gw[c0 + d];
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int64_t d = 0; d < n; ++d) {
                hh = dev::add(hh, dev::mul(hs[d], hs[d]));
                kk = dev::add(kk, dev::mul(ks[d], ks[d]));
                dot = dev::add(dot, dev::mul(dev::mul(hs[d], gs[d]), ks[d]));
            }
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        const float inv_sqrt_d = 1.0f / sqrtf(static_cast<float>(D));
        const float rstd = dev::mul(1.0f / sqrtf(dev::add(hh / static_cast<float>(D), p.eps)),
                                    1.0f / sqrtf(dev::add(kk / static_cast<float>(D), p.eps)));
        const float dd = dev::mul(dev::mul(dot, rstd), inv_sqrt_d);
        float gate = dev::sigmoid(copysignf(sqrtf(fmaxf(fabsf(dd), 1e-6f)), dd));
        if (p.gate_off && p.gate_off[t]) gate = 0.0f;
        gate_sh = gate;
    }
    __syncthreads();
    const float gate = gate_sh;
    for (int64_t d = threadIdx.x; d < D; d += kEngramFuseThreads) h[d] = dev::maybe_bf16(dev::add(h[d], dev::mul(gate, value[d])), p.round_bf16);
}

}  // namespace deepinfer::cuda::kernels
