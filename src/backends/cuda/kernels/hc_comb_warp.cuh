// SPDX-License-Identifier: Apache-2.0
// mHC's comb matrix (spec §2.4) on one warp: the hc x hc logits' row softmax + eps, then Sinkhorn's
// column and row normalizations, with element e = j·hc + k of the matrix on lane e % 32 (slot e / 32:
// two slots for hc = 6). Each lane forms its row's or column's sums itself from the other lanes' values
// (shuffles), from 0 in the CPU's order (k or j ascending), so every element sees exactly the CPU's
// sequence of operations (cpu::hc_pre, model/v41/mhc.cpp): the same bits as the one-thread loops. hc is
// a template parameter (a switch over 1..kHcCombMax), so the 2·iters normalizations are straight-line
// code: a chain of hc shuffled adds and one division each, instead of loops of dependent shared-memory
// loads and hc divisions.
#pragma once

#include <type_traits>

#include "backends/cuda/common/device_math.cuh"

namespace deepinfer::cuda::kernels {

constexpr int kHcCombMax = 6;

template <int kHc>
struct HcComb {
    static constexpr int kN = kHc * kHc, kSlots = kN > 32 ? 2 : 1;
    // Element e (< kN) from the lane that holds it; every lane of the warp calls it.
    __device__ __forceinline__ static float element(const float (&v)[kSlots], int e) {
        const float a = __shfl_sync(0xFFFFFFFFu, v[0], e % 32);
        if constexpr (kSlots == 1) {
            return a;
        } else {
            const float b = __shfl_sync(0xFFFFFFFFu, v[1], e % 32);
            return e < 32 ? a : b;
        }
    }
    __device__ __forceinline__ static void run(const float* logits, float scale, const float* base, int64_t iters, float eps,
                                               float (&c)[kSlots]) {
        const int lane = static_cast<int>(threadIdx.x % 32);
        int row[kSlots], col[kSlots];
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            const int e = lane + 32 * s < kN ? lane + 32 * s : 0;
            row[s] = e / kHc, col[s] = e % kHc;
            c[s] = dev::add(dev::mul(logits[e], scale), base[e]);
        }
        // Row softmax + eps: max, exp(v - max), their sum from 0 in k order, v / sum + eps.
        float m[kSlots], t[kSlots];
#pragma unroll
        for (int s = 0; s < kSlots; ++s) m[s] = -__int_as_float(0x7F800000);
#pragma unroll
        for (int k = 0; k < kHc; ++k)
#pragma unroll
            for (int s = 0; s < kSlots; ++s) m[s] = fmaxf(m[s], element(c, row[s] * kHc + k));
#pragma unroll
        for (int s = 0; s < kSlots; ++s) c[s] = dev::exp_f32(dev::add(c[s], -m[s])), t[s] = 0.0f;
#pragma unroll
        for (int k = 0; k < kHc; ++k)
#pragma unroll
            for (int s = 0; s < kSlots; ++s) t[s] = dev::add(t[s], element(c, row[s] * kHc + k));
#pragma unroll
        for (int s = 0; s < kSlots; ++s) c[s] = dev::add(c[s] / t[s], eps);
        normalize<false>(c, row, col, eps);
        for (int64_t it = 1; it < iters; ++it) {
            normalize<true>(c, row, col, eps);
            normalize<false>(c, row, col, eps);
        }
    }
    // v / (Σ + eps) over the column (kByRow false) or the row (true), Σ from 0 in index order.
    template <bool kByRow>
    __device__ __forceinline__ static void normalize(float (&c)[kSlots], const int (&row)[kSlots], const int (&col)[kSlots],
                                                     float eps) {
        float x[kSlots][kHc];
#pragma unroll
        for (int i = 0; i < kHc; ++i)  // every shuffle first, then the adds in order
#pragma unroll
            for (int s = 0; s < kSlots; ++s) x[s][i] = element(c, kByRow ? row[s] * kHc + i : i * kHc + col[s]);
#pragma unroll
        for (int s = 0; s < kSlots; ++s) {
            float t = 0.0f;
#pragma unroll
            for (int i = 0; i < kHc; ++i) t = dev::add(t, x[s][i]);
            c[s] = c[s] / dev::add(t, eps);
        }
    }
};

// All 32 lanes call it (hc <= kHcCombMax). logits: the hc·hc comb logits (mix + 2·hc), base: their
// biases. Lane l writes elements l and l + 32 (where < hc·hc) of comb.
__device__ __forceinline__ void hc_comb_warp(const float* logits, float scale, const float* base, int hc,
                                             int64_t sinkhorn_iters, float eps, float* comb) {
    const int lane = static_cast<int>(threadIdx.x % 32);
    auto go = [&](auto tag) {
        using C = HcComb<decltype(tag)::value>;
        float c[C::kSlots];
        C::run(logits, scale, base, sinkhorn_iters, eps, c);
#pragma unroll
        for (int s = 0; s < C::kSlots; ++s)
            if (lane + 32 * s < C::kN) comb[lane + 32 * s] = c[s];
    };
    switch (hc) {
        case 1: return go(std::integral_constant<int, 1>{});
        case 2: return go(std::integral_constant<int, 2>{});
        case 3: return go(std::integral_constant<int, 3>{});
        case 4: return go(std::integral_constant<int, 4>{});
        case 5: return go(std::integral_constant<int, 5>{});
        default: return go(std::integral_constant<int, 6>{});
    }
}

}  // namespace deepinfer::cuda::kernels
