// SPDX-License-Identifier: Apache-2.0
// The reference GEMM y = x · Wᵀ for f32 / bf16 / f16 weights with its operands staged through a
// cp.async pipeline in shared memory. Same arithmetic as linear_kernel (linear.cuh): each output
// element is one 8-thread group's cpu::dot — lane j sums k = j, j+8, ... in ascending order (products
// of x and the weight as f32, no FMA), then the lanes combine in cpu::dot's order — so results are
// bit-identical to it and to the CPU, and batch-invariant. What changes is the memory side: the block
// copies K chunks of its x rows and weight rows with 16-byte asynchronous copies, kStagedStages chunks
// in flight, instead of each lane loading its strided elements one by one; small batches (decode) are
// bound by exactly that load latency. Also serves mHC's mixing logits with one more output per row,
// dot(x_r, x_r) (`self_dot`).
#pragma once

#include "backends/cuda/common/cp_async.cuh"
#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kStagedChunk = 256;  // K elements per pipeline stage
constexpr int kStagedStages = 4;   // stages in flight

struct StagedLinearArgs {
    const float* x = nullptr;  // [*, x_ld] f32, 16-byte aligned rows
    int64_t x_ld = 0;
    const int32_t* row_src = nullptr;  // [rows] or null
    const uint8_t* w = nullptr;        // [N, K] f32 | bf16 | f16, 16-byte aligned rows
    WeightKind kind = WeightKind::kF32;
    int elt_bytes = 4;
    int64_t N = 0, K = 0;  // K % 8 == 0
    bool self_dot = false;  // output N of each row is dot(x_r, x_r)
    float* y = nullptr;     // [rows, y_ld]
    int64_t y_ld = 0, rows = 0;
    bool round_bf16 = false;
};

// Bytes of one pipeline stage: kTR x rows (f32) and kTN weight rows, padded against bank conflicts.
__host__ __device__ constexpr int64_t staged_x_pitch() { return kStagedChunk + 8; }  // floats
__host__ __device__ constexpr int64_t staged_w_pitch(int elt_bytes) { return kStagedChunk * elt_bytes + 32; }
__host__ __device__ constexpr int64_t staged_stage_bytes(int tr, int tn, int elt_bytes) {
    return tr * staged_x_pitch() * 4 + tn * staged_w_pitch(elt_bytes);
}

// acc += Σ x[k] · w(k) over k = lane, lane + 8, ... < len, in that order; the shared-memory loads of
// 8 steps are issued before their (dependent) adds.
template <class W>
__device__ __forceinline__ float staged_chunk_dot(float acc, const float* x, W w, int lane, int len) {
    int k = lane;
    for (; k + 56 < len; k += 64) {
        float xv[8], wv[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) {
            xv[u] = x[k + 8 * u];
            wv[u] = w(k + 8 * u);
        }
#pragma unroll
        for (int u = 0; u < 8; ++u) acc = dev::add(acc, dev::mul(xv[u], wv[u]));
    }
    for (; k < len; k += 8) acc = dev::add(acc, dev::mul(x[k], w(k)));
    return acc;
}

// grid (ceil(rows / kTR), ceil((N + self_dot) / kTN)), block 8·kTR·kTN, dynamic shared memory
// kStagedStages · staged_stage_bytes(kTR, kTN, elt_bytes). Group g of the block computes row g / kTN,
// output g % kTN of its tile.
template <int kTR, int kTN>
static __global__ void __launch_bounds__(8 * kTR* kTN) staged_linear_kernel(const __grid_constant__ StagedLinearArgs p) {
    extern __shared__ __align__(16) uint8_t smem[];
    constexpr int kThreads = 8 * kTR * kTN;
    const int64_t x_pitch = staged_x_pitch(), w_pitch = staged_w_pitch(p.elt_bytes);
    const int64_t stage_bytes = staged_stage_bytes(kTR, kTN, p.elt_bytes);
    const int group = threadIdx.x / 8, lane = threadIdx.x % 8;
    const int r = group / kTN, j = group % kTN;
    const int64_t row0 = static_cast<int64_t>(blockIdx.x) * kTR, n0 = static_cast<int64_t>(blockIdx.y) * kTN;
    const int64_t chunks = (p.K + kStagedChunk - 1) / kStagedChunk;
    auto x_row = [&](int rr) {
        const int64_t row = min(row0 + rr, p.rows - 1);  // rows past the end: a duplicate, never stored
        return p.x + (p.row_src ? static_cast<int64_t>(p.row_src[row]) : row) * p.x_ld;
    };
    auto issue = [&](int64_t c) {
        uint8_t* st = smem + (c % kStagedStages) * stage_bytes;
        const int64_t k0 = c * kStagedChunk;
        const int len = static_cast<int>(min(static_cast<int64_t>(kStagedChunk), p.K - k0));  // a multiple of 8
        const int xq = len / 4;
        for (int i = threadIdx.x; i < kTR * xq; i += kThreads) {
            const int rr = i / xq, q = i % xq;
            dev::cp_async16(st + (rr * x_pitch + q * 4) * 4, x_row(rr) + k0 + q * 4, 16);
        }
        const int wq = len * p.elt_bytes / 16;
        uint8_t* ws = st + kTR * x_pitch * 4;
        for (int i = threadIdx.x; i < kTN * wq; i += kThreads) {
            const int nn = i / wq, q = i % wq;
            const int64_t n = min(n0 + nn, p.N - 1);  // outputs past the weight rows: a duplicate, never used
            dev::cp_async16(ws + nn * w_pitch + q * 16, p.w + (n * p.K + k0) * p.elt_bytes + q * 16, 16);
        }
    };
    // Prologue: kStagedStages - 1 groups (some may be empty), so the wait count below is uniform.
    for (int c = 0; c < kStagedStages - 1; ++c) {
        if (c < chunks) issue(c);
        dev::cp_async_commit();
    }
    const bool self = p.self_dot && n0 + j == p.N;
    float acc = 0.0f;
    for (int64_t c = 0; c < chunks; ++c) {
        if (c + kStagedStages - 1 < chunks) issue(c + kStagedStages - 1);
        dev::cp_async_commit();
        dev::cp_async_wait<kStagedStages - 1>();  // chunk c has landed (this thread's copies)
        __syncthreads();                           // (and every thread's)
        const uint8_t* st = smem + (c % kStagedStages) * stage_bytes;
        const float* xa = reinterpret_cast<const float*>(st) + r * x_pitch;
        const uint8_t* wr = st + kTR * x_pitch * 4 + j * w_pitch;
        const int len = static_cast<int>(min(static_cast<int64_t>(kStagedChunk), p.K - c * kStagedChunk));
        const auto* w16 = reinterpret_cast<const uint16_t*>(wr);
        if (self) acc = staged_chunk_dot(acc, xa, [&](int k) { return xa[k]; }, lane, len);
        else if (p.kind == WeightKind::kBF16) acc = staged_chunk_dot(acc, xa, [&](int k) { return dev::bf16_value(w16[k]); }, lane, len);
        else if (p.kind == WeightKind::kF16) acc = staged_chunk_dot(acc, xa, [&](int k) { return dev::f16_value(w16[k]); }, lane, len);
        else acc = staged_chunk_dot(acc, xa, [&](int k) { return reinterpret_cast<const float*>(wr)[k]; }, lane, len);
        __syncthreads();  // the stage is refilled by the next iteration's issue
    }
    const float t = dev::hsum8(acc);
    const int64_t row = row0 + r, n = n0 + j;
    if (lane == 0 && row < p.rows && n < p.N + (p.self_dot ? 1 : 0)) p.y[row * p.y_ld + n] = dev::maybe_bf16(t, p.round_bf16);
}

}  // namespace deepinfer::cuda::kernels

namespace deepinfer::cuda::kernels {

constexpr int kStagedWholeThreads = 128;                  // threads issuing the copies
constexpr int64_t kStagedWholeMaxBytes = 200 * 1024;      // shared memory of one block

// Bytes of one row's x (f32) and kTN weight rows when all of K is staged at once.
__host__ __device__ constexpr int64_t staged_whole_bytes(int tn, int64_t K, int elt_bytes) {
    return K * 4 + tn * K * elt_bytes;
}

// Decode-sized batches with narrow outputs: one row per block, kTN outputs, and ALL of K staged at once
// (every copy in flight together), then each output's chain runs from shared memory. Same arithmetic as
// staged_linear_kernel. grid (rows, ceil((N + self_dot) / kTN)), block kStagedWholeThreads, dynamic
// shared memory staged_whole_bytes(kTN, K, elt_bytes).
template <int kTN>
static __global__ void __launch_bounds__(kStagedWholeThreads)
    staged_linear_whole_kernel(const __grid_constant__ StagedLinearArgs p) {
    extern __shared__ __align__(16) uint8_t smem[];
    const int64_t row = blockIdx.x, n0 = static_cast<int64_t>(blockIdx.y) * kTN, K = p.K;
    const float* x = p.x + (p.row_src ? static_cast<int64_t>(p.row_src[row]) : row) * p.x_ld;
    float* xs = reinterpret_cast<float*>(smem);
    uint8_t* ws = smem + K * 4;
    const int64_t xq = K / 4, wq = K * p.elt_bytes / 16;
    for (int64_t i = threadIdx.x; i < xq; i += kStagedWholeThreads) dev::cp_async16(xs + 4 * i, x + 4 * i, 16);
    for (int64_t i = threadIdx.x; i < kTN * wq; i += kStagedWholeThreads) {
        const int64_t nn = i / wq, q = i % wq;
        const int64_t n = min(n0 + nn, p.N - 1);  // outputs past the weight rows: a duplicate, never used
        dev::cp_async16(ws + nn * K * p.elt_bytes + q * 16, p.w + n * K * p.elt_bytes + q * 16, 16);
    }
    dev::cp_async_commit();
    dev::cp_async_wait<0>();
    __syncthreads();
    if (threadIdx.x >= 32 * ((kTN + 3) / 4)) return;  // whole warps past the outputs (the shuffles need whole warps)
    const int group = threadIdx.x / 8, lane = threadIdx.x % 8;
    const int g = group < kTN ? group : 0;  // groups past kTN in the last warp: a duplicate, never stored
    const int64_t n = n0 + g;
    const bool self = p.self_dot && n == p.N;
    const uint8_t* wr = ws + g * K * p.elt_bytes;
    const auto* w16 = reinterpret_cast<const uint16_t*>(wr);
    const int len = static_cast<int>(K);
    float acc = 0.0f;
    if (self) acc = staged_chunk_dot(acc, xs, [&](int k) { return xs[k]; }, lane, len);
    else if (p.kind == WeightKind::kBF16) acc = staged_chunk_dot(acc, xs, [&](int k) { return dev::bf16_value(w16[k]); }, lane, len);
    else if (p.kind == WeightKind::kF16) acc = staged_chunk_dot(acc, xs, [&](int k) { return dev::f16_value(w16[k]); }, lane, len);
    else acc = staged_chunk_dot(acc, xs, [&](int k) { return reinterpret_cast<const float*>(wr)[k]; }, lane, len);
    const float t = dev::hsum8(acc);
    if (lane == 0 && group < kTN && n < p.N + (p.self_dot ? 1 : 0)) p.y[row * p.y_ld + n] = dev::maybe_bf16(t, p.round_bf16);
}

}  // namespace deepinfer::cuda::kernels
