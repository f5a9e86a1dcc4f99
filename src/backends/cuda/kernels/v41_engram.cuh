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

// grid (tokens, hc), block 256: thread 0 forms the gate, then every thread updates its elements.
static __global__ void engram_fuse_kernel(const __grid_constant__ EngramFuseParams p) {
    __shared__ float gate_sh;
    const int64_t t = blockIdx.x, j = blockIdx.y, hc = p.hc, D = p.hidden;
    float* h = p.streams + (t * hc + j) * D;
    const float* key = p.kv + t * (hc + 1) * D + j * D;
    const float* value = p.kv + t * (hc + 1) * D + hc * D;
    const float* gw = p.gate_weight + j * D;
    if (threadIdx.x == 0) {
        float hh = 0.0f, kk = 0.0f, dot = 0.0f;
        for (int64_t d = 0; d < D; ++d) {
            hh = dev::add(hh, dev::mul(h[d], h[d]));
            kk = dev::add(kk, dev::mul(key[d], key[d]));
            dot = dev::add(dot, dev::mul(dev::mul(h[d], gw[d]), key[d]));
        }
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
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) h[d] = dev::maybe_bf16(dev::add(h[d], dev::mul(gate, value[d])), p.round_bf16);
}

}  // namespace deepinfer::cuda::kernels
