// SPDX-License-Identifier: Apache-2.0
// Device code of the fast mode's mHC mixing logits on tensor cores (HcMixSplitKParams, launch/rows.cu's
// hc_mix_splitk, for up to 32 outputs and flat % 16 == 0): the same partial planes [chunks, rows,
// outputs + 1] over the same 512-wide chunks as hc_mix_splitk.cuh, each (row, output) dot product of a
// chunk as f32-accurate TF32 MMAs instead of lane-strided f32 FMAs.
//
// Why: at prefill the FMA kernel issued ~1.75 instructions per x element (25 FMAs per element over 32
// lanes, each x element read from shared memory by 8 warps, a 5-level butterfly per row and output) and
// ran at ~22% of the copy bandwidth (587 us per 8K-token launch on the H200). Here a warp's 32 rows x
// 16 K cost ~140 instructions (~0.28 per element, counted in the source): x and fn are read from global
// memory straight into MMA fragments, and a chunk is split over the block's 8 warps (short chains for
// decode-sized batches). 279 us per 8K-token launch (bench/results/cuda-session30-h200-hcmix.md).
//
// Arithmetic (3xTF32): each f32 v is split as hi = tf32(v) (round to nearest, ties away) and
// lo = tf32(v - hi); per k8 MMA step the accumulator adds x_lo·fn_hi, x_hi·fn_lo, then x_hi·fn_hi (the
// lo·lo term, ~2^-22 of a product, is dropped). The products of 11-bit significands are exact in f32, so
// the result is f32-accurate (not bit-equal to the FMA kernel's order). dot(x, x) (output `outputs`) stays f32 FMAs: each thread
// sums its own elements in K order, the 4 lanes of a row add theirs (xor 1, then xor 2), and the warps'
// slices are added in warp order.
// Within a 16-wide K block, MMA step s (0, 1) takes physical K 4·t4 + 2s as logical column t4 and
// 4·t4 + 2s + 1 as t4 + 4 (t4 = lane % 4), for x and fn alike, so each thread reads one float4 per row
// and per output group. Every row's result depends on its own x row and fn only, in a fixed order
// (a warp's K steps ascending, the 8 slices of a chunk in warp order, the chunks summed in order by the
// consumer): deterministic and independent of the batch and of the grid.
#pragma once

#include <cstdint>

#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/hc_mix_splitk.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kHcMmaWarps = 8;                      // warps per block: the chunk's 8 slices of 64
constexpr int kHcMmaRows = 32;                      // rows per block (and warp): two m16 MMA tiles (16: one, <= 16 rows)
constexpr int kHcMmaSliceSteps = kHcChunk / 16 / kHcMmaWarps;  // 16-wide K steps per warp: 4
constexpr int kHcMmaMaxGroups = 4;                  // output groups of 8: outputs <= 32
constexpr int kHcMmaThreads = 32 * kHcMmaWarps;

// Whether hc_mix_splitk takes this kernel for a shape (never depends on the rows).
constexpr bool hc_mix_mma_shape(int64_t flat, int64_t outputs) {
    return flat % 16 == 0 && outputs >= 1 && outputs <= 8 * kHcMmaMaxGroups;
}

// tf32(v) with round to nearest (ties away from zero), as its 32-bit pattern (low 13 bits zero).
__device__ __forceinline__ uint32_t tf32_rna(float v) {
    uint32_t r;
    asm("cvt.rna.tf32.f32 %0, %1;\n" : "=r"(r) : "f"(v));
    return r;
}
__device__ __forceinline__ void tf32_split(float v, uint32_t& hi, uint32_t& lo) {
    hi = tf32_rna(v);
    lo = tf32_rna(v - __uint_as_float(hi));
}

// d += A (16 x 8, row-major fragments a) · B (8 x 8, column fragments b), TF32 inputs, f32 accumulate.
__device__ __forceinline__ void mma_tf32(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
    (void)d; (void)a; (void)b0; (void)b1;
    __trap();  // the launcher takes this kernel on sm_80 and newer only
#endif
}

__device__ __forceinline__ float hc_mma_comp(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

// grid (ceil(rows / (16 kTiles)), hc_mix_splits(flat)), block kHcMmaThreads; kGroups = ceil(outputs / 8);
// kTiles m16 tiles per block (2; 1 for <= 16 rows: no MMAs on 16 rows of zeros; a row's sums are the same).
// Block (bx, c) takes rows 16·kTiles·bx .. + 16·kTiles - 1 of chunk c; warp w the chunk's K slice [64w, 64w + 64) (its 4 steps'
// loads issued before any MMA). The slices' sums are added in warp order through shared memory:
// partial = (((s_0 + s_1) + s_2) + ... + s_7), s_w the warp's accumulator (zero past the chunk's end).
template <int kGroups, int kTiles>
static __global__ void __launch_bounds__(kHcMmaThreads, 2) hc_mix_mma_kernel(const __grid_constant__ HcMixSplitKParams p) {
    static_assert(kGroups >= 1 && kGroups <= kHcMmaMaxGroups && (kTiles == 1 || kTiles == 2), "1-4 output groups, 1-2 m tiles");
    constexpr int kAcc = kTiles * kGroups * 4, kVals = kAcc + 2 * kTiles;  // a thread's sums: accumulators, dot(x, x) of its rows
    __shared__ float slice_sums[kHcMmaWarps][kVals][32];
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
    const int g = lane / 4, t4 = lane % 4;
    const int64_t r0 = static_cast<int64_t>(blockIdx.x) * 16 * kTiles;
    const int64_t c0 = static_cast<int64_t>(blockIdx.y) * kHcChunk;
    const int chunk_steps = static_cast<int>((p.flat - c0 < kHcChunk ? p.flat - c0 : kHcChunk) / 16);
    const int s0 = warp * kHcMmaSliceSteps;
    // This thread's rows r0 + g + 8i (i < 2 kTiles: m tile i / 2, fragment row half i % 2) and outputs 8j + g.
    float4 xv[kHcMmaSliceSteps][2 * kTiles], wv[kHcMmaSliceSteps][kGroups];
    const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int s = 0; s < kHcMmaSliceSteps; ++s) {
        const bool in = s0 + s < chunk_steps;
        const int64_t k = c0 + 16 * (s0 + s) + 4 * t4;
#pragma unroll
        for (int i = 0; i < 2 * kTiles; ++i) {
            const int64_t row = r0 + g + 8 * i;
            xv[s][i] = in && row < p.rows ? __ldg(reinterpret_cast<const float4*>(p.x + row * p.flat + k)) : zero;
        }
#pragma unroll
        for (int j = 0; j < kGroups; ++j) {
            const int64_t o = 8 * j + g;
            wv[s][j] = in && o < p.outputs ? __ldg(reinterpret_cast<const float4*>(p.fn + o * p.flat + k)) : zero;
        }
    }
    float acc[kTiles][kGroups][4], xx[2 * kTiles];
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
        for (int j = 0; j < kGroups; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[m][j][e] = 0.0f;
#pragma unroll
    for (int i = 0; i < 2 * kTiles; ++i) xx[i] = 0.0f;
#pragma unroll
    for (int s = 0; s < kHcMmaSliceSteps; ++s) {
#pragma unroll
        for (int i = 0; i < 2 * kTiles; ++i) {
            xx[i] = fmaf(xv[s][i].x, xv[s][i].x, xx[i]);
            xx[i] = fmaf(xv[s][i].y, xv[s][i].y, xx[i]);
            xx[i] = fmaf(xv[s][i].z, xv[s][i].z, xx[i]);
            xx[i] = fmaf(xv[s][i].w, xv[s][i].w, xx[i]);
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // MMA step h of the 16-wide block: physical K 4·t4 + 2h, + 1
            uint32_t bh[kGroups][2], bl[kGroups][2];
#pragma unroll
            for (int j = 0; j < kGroups; ++j) {
                tf32_split(hc_mma_comp(wv[s][j], 2 * h), bh[j][0], bl[j][0]);
                tf32_split(hc_mma_comp(wv[s][j], 2 * h + 1), bh[j][1], bl[j][1]);
            }
#pragma unroll
            for (int m = 0; m < kTiles; ++m) {
                // a0 (row g, col t4), a1 (row g + 8, col t4), a2 (row g, col t4 + 4), a3 (row g + 8, col t4 + 4)
                uint32_t ah[4], al[4];
                tf32_split(hc_mma_comp(xv[s][2 * m], 2 * h), ah[0], al[0]);
                tf32_split(hc_mma_comp(xv[s][2 * m + 1], 2 * h), ah[1], al[1]);
                tf32_split(hc_mma_comp(xv[s][2 * m], 2 * h + 1), ah[2], al[2]);
                tf32_split(hc_mma_comp(xv[s][2 * m + 1], 2 * h + 1), ah[3], al[3]);
#pragma unroll
                for (int j = 0; j < kGroups; ++j) {
                    mma_tf32(acc[m][j], al, bh[j][0], bh[j][1]);
                    mma_tf32(acc[m][j], ah, bl[j][0], bl[j][1]);
                    mma_tf32(acc[m][j], ah, bh[j][0], bh[j][1]);
                }
            }
        }
    }
    // The warp's slice sums: the 4 lanes of a row add their dot(x, x) (xor 1, then xor 2).
#pragma unroll
    for (int m = 0; m < kTiles; ++m)
#pragma unroll
        for (int j = 0; j < kGroups; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) slice_sums[warp][(m * kGroups + j) * 4 + e][lane] = acc[m][j][e];
#pragma unroll
    for (int i = 0; i < 2 * kTiles; ++i) {
        float v = xx[i];
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 1);
        v += __shfl_xor_sync(0xFFFFFFFFu, v, 2);
        slice_sums[warp][kAcc + i][lane] = v;
    }
    __syncthreads();
    // Thread (v, l) of the block adds value v of lane l over the warps in order and stores it.
    const int64_t O = p.outputs;
    float* out = p.partial + static_cast<int64_t>(blockIdx.y) * p.rows * (O + 1);
    for (int idx = static_cast<int>(threadIdx.x); idx < kVals * 32; idx += kHcMmaThreads) {
        const int v = idx / 32, l = idx % 32, lg = l / 4, lt = l % 4;
        float sum = slice_sums[0][v][l];
#pragma unroll
        for (int w = 1; w < kHcMmaWarps; ++w) sum += slice_sums[w][v][l];
        int64_t row, col;
        if (v < kAcc) {
            // Accumulator e of (m tile, group j): c0, c1 row g, columns 2·t4 + e; c2, c3 row g + 8.
            const int m = v / (kGroups * 4), j = (v / 4) % kGroups, e = v % 4;
            row = r0 + 16 * m + lg + 8 * (e / 2);
            col = 8 * j + 2 * lt + e % 2;
            if (col >= O) continue;
        } else {
            row = r0 + lg + 8 * (v - kAcc);
            col = O;
            if (lt != 0) continue;
        }
        if (row < p.rows) out[row * (O + 1) + col] = sum;
    }
}

}  // namespace deepinfer::cuda::kernels
