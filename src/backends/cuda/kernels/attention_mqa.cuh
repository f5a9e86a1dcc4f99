// SPDX-License-Identifier: Apache-2.0
// The sparse sink attention of a query row for kHeads heads at once. V4's heads share one K=V row per
// candidate (MQA), so a block stages each candidate's row once in shared memory (cp.async, double
// buffered) and uses it for all its heads, instead of one block per head re-reading every candidate.
// Arithmetic as sparse_attention_kernel (attention.cuh), element by element: the score of (head,
// candidate) is one 8-thread group's cpu::dot times the softmax scale; the maximum, the exponentials,
// the denominator (sink first, then candidates in order) and each output element's sum over the
// candidates in order are unchanged — bit-identical to it and to the CPU, batch-invariant.
#pragma once

#include "backends/cuda/common/cp_async.cuh"
#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kMqaThreads = 256;
constexpr int kMqaChunk = 16;    // candidates per pipeline stage
constexpr int kMqaMaxDim = 512;  // head_dim <= 512 (two output elements per thread)

__host__ __device__ constexpr int64_t mqa_pitch(int64_t head_dim) { return head_dim + 8; }  // floats (bank spread)
// Dynamic shared memory: kHeads query rows, two stages of kMqaChunk candidate rows, two stages of the
// chunk's probabilities.
__host__ __device__ constexpr int64_t mqa_smem_bytes(int heads, int64_t head_dim) {
    return 4 * (heads * head_dim + 2 * kMqaChunk * mqa_pitch(head_dim) + 2 * heads * kMqaChunk);
}

// grid (rows, ceil(heads / kHeads)), block kMqaThreads, dynamic shared memory mqa_smem_bytes.
template <int kHeads>
static __global__ void __launch_bounds__(kMqaThreads) mqa_attention_kernel(const __grid_constant__ SparseAttentionParams p) {
    extern __shared__ __align__(16) float sm[];
    __shared__ float mx_sh[kHeads], den_sh[kHeads];
    const int64_t r = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kHeads, Dh = p.head_dim;
    const int64_t pitch = mqa_pitch(Dh);
    float* q_s = sm;                                 // [kHeads, Dh]
    float* kv_s = q_s + kHeads * Dh;                 // [2, kMqaChunk, pitch]
    float* p_s = kv_s + 2 * kMqaChunk * pitch;       // [2, kHeads, kMqaChunk]
    const RowCandidates rc = row_candidates(p, r, Dh);
    const int64_t pos = rc.pos, nc = rc.nc, chunks = (nc + kMqaChunk - 1) / kMqaChunk;
    const Candidates& cand = rc.cand;
    const int tid = threadIdx.x, group = tid / 8, lane = tid % 8, q4 = static_cast<int>(Dh / 4);
    auto head = [&](int hh) { return h0 + hh < p.heads ? h0 + hh : p.heads - 1; };  // past the end: a duplicate
    auto scores = [&](int hh) { return p.scratch + (r * p.heads + head(hh)) * p.max_candidates; };
    auto stage = [&](int64_t c) {
        float* dst = kv_s + (c % 2) * kMqaChunk * pitch;
        const int64_t j0 = c * kMqaChunk, n = nc - j0 < kMqaChunk ? nc - j0 : kMqaChunk;
        for (int i = tid; i < n * q4; i += kMqaThreads) {
            const int jj = i / q4, k = i % q4;
            dev::cp_async16(dst + jj * pitch + 4 * k, cand(j0 + jj) + 4 * k, 16);
        }
    };
    for (int i = tid; i < kHeads * q4; i += kMqaThreads) {
        const int hh = i / q4, k = i % q4;
        dev::cp_async16(q_s + hh * Dh + 4 * k, p.q + (r * p.heads + head(hh)) * Dh + 4 * k, 16);
    }
    // Pass 1: scores. Group g takes (head, candidate) pairs g, g + 32, ... of each chunk.
    if (chunks > 0) stage(0);
    dev::cp_async_commit();
    for (int64_t c = 0; c < chunks; ++c) {
        if (c + 1 < chunks) stage(c + 1);
        dev::cp_async_commit();
        dev::cp_async_wait<1>();
        __syncthreads();
        const float* kvc = kv_s + (c % 2) * kMqaChunk * pitch;
        const int64_t j0 = c * kMqaChunk;
        for (int pi = group; pi < kHeads * kMqaChunk; pi += kMqaThreads / 8) {  // uniform trip count
            const int hh = pi / kMqaChunk, jj = pi % kMqaChunk;
            const bool valid = j0 + jj < nc;
            const float d = dev::dot_group8(q_s + hh * Dh, kvc + (valid ? jj : 0) * pitch, Dh, lane);
            if (lane == 0 && valid) scores(hh)[j0 + jj] = dev::mul(d, p.softmax_scale);
        }
        __syncthreads();
    }
    // Softmax: the maximum and the denominator per head in candidate order, exponentials in parallel.
    if (tid < kHeads) {
        const float* sc = scores(tid);
        float mx = -__int_as_float(0x7F800000);
        for (int64_t j = 0; j < nc; ++j) mx = fmaxf(mx, sc[j]);
        mx_sh[tid] = mx;
    }
    __syncthreads();
    for (int64_t i = tid; i < kHeads * nc; i += kMqaThreads) {
        const int hh = static_cast<int>(i / nc);
        float* sc = scores(hh);
        sc[i % nc] = dev::exp_f32(dev::add(sc[i % nc], -mx_sh[hh]));
    }
    __syncthreads();
    if (tid < kHeads) {
        const float* sc = scores(tid);
        float den = dev::exp_f32(dev::add(p.sink[head(tid)], -mx_sh[tid]));
        for (int64_t j = 0; j < nc; ++j) den = dev::add(den, sc[j]);
        den_sh[tid] = den;
    }
    __syncthreads();
    // Pass 2: outputs. Thread t owns elements t and t + 256 of every head; sums over candidates in order.
    float acc[kHeads][2];
#pragma unroll
    for (int hh = 0; hh < kHeads; ++hh) acc[hh][0] = acc[hh][1] = 0.0f;
    const int64_t d0 = tid, d1 = tid + kMqaThreads;
    if (chunks > 0) stage(0);
    dev::cp_async_commit();
    for (int64_t c = 0; c < chunks; ++c) {
        if (c + 1 < chunks) stage(c + 1);
        dev::cp_async_commit();
        const int64_t j0 = c * kMqaChunk, n = nc - j0 < kMqaChunk ? nc - j0 : kMqaChunk;
        float* pc = p_s + (c % 2) * kHeads * kMqaChunk;
        for (int i = tid; i < kHeads * n; i += kMqaThreads) {
            const int hh = i / static_cast<int>(n), jj = i % static_cast<int>(n);
            const float pj = scores(hh)[j0 + jj];
            pc[hh * kMqaChunk + jj] = p.official ? dev::round_bf16(pj) : pj;
        }
        dev::cp_async_wait<1>();
        __syncthreads();
        const float* kvc = kv_s + (c % 2) * kMqaChunk * pitch;
        for (int jj = 0; jj < n; ++jj) {
            const float v0 = d0 < Dh ? kvc[jj * pitch + d0] : 0.0f, v1 = d1 < Dh ? kvc[jj * pitch + d1] : 0.0f;
#pragma unroll
            for (int hh = 0; hh < kHeads; ++hh) {
                const float pj = pc[hh * kMqaChunk + jj];
                acc[hh][0] = dev::add(acc[hh][0], dev::mul(pj, v0));
                acc[hh][1] = dev::add(acc[hh][1], dev::mul(pj, v1));
            }
        }
        __syncthreads();
    }
    // Normalize into shared memory (the candidate stages are free now), inverse RoPE, write.
    float* o_s = kv_s;  // [kHeads, Dh]
#pragma unroll
    for (int hh = 0; hh < kHeads; ++hh) {
        if (d0 < Dh) o_s[hh * Dh + d0] = dev::maybe_bf16(acc[hh][0] / den_sh[hh], p.official);
        if (d1 < Dh) o_s[hh * Dh + d1] = dev::maybe_bf16(acc[hh][1] / den_sh[hh], p.official);
    }
    __syncthreads();
    const int warp = tid / 32, wl = tid % 32;
    const float* cs = p.cos_sin + pos * p.rope_dim;
    for (int hh = warp; hh < kHeads; hh += kMqaThreads / 32) {
        if (h0 + hh >= p.heads) continue;
        float* o = o_s + hh * Dh;
        for (int64_t i = wl; i < p.rope_dim / 2; i += 32) dev::rope_pair(o + (Dh - p.rope_dim), static_cast<int>(i), cs, true);
        __syncwarp();
        float* out = p.out + (r * p.heads + h0 + hh) * Dh;
        for (int64_t d = wl; d < Dh; d += 32) out[d] = (p.official && d >= Dh - p.rope_dim) ? dev::round_bf16(o[d]) : o[d];
    }
}

}  // namespace deepinfer::cuda::kernels
