// SPDX-License-Identifier: Apache-2.0
// Device code of the MoE block's non-GEMM parts: router (scores, selection, weights), token
// permutation by expert (stable counting sort), SwiGLU with clamp, row scatter/gather and the
// combine in ascending expert order plus the shared expert (src/model/moe_block.cpp's order).
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/act_quant_warp.cuh"
#include "backends/cuda/kernels/topk.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kRouteMaxTopK = 32;

// One block (kTopkThreads) per token.
static __global__ void __launch_bounds__(kTopkThreads) route_kernel(const __grid_constant__ RouterParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t t = blockIdx.x, E = p.experts, K = p.top_k;
    float* s = p.logits + t * E;
    if (p.scoring == ScoringFunc::kSqrtSoftplus) {
        for (int64_t e = threadIdx.x; e < E; e += blockDim.x) s[e] = sqrtf(dev::softplus(s[e] / p.temperature));
    } else if (p.scoring == ScoringFunc::kSigmoid) {
        for (int64_t e = threadIdx.x; e < E; e += blockDim.x) s[e] = dev::sigmoid(s[e] / p.temperature);
    } else {
        __syncthreads();
        if (threadIdx.x == 0) {
            float mx = s[0];
            for (int64_t e = 1; e < E; ++e) mx = fmaxf(mx, s[e]);
            float den = 0;
            for (int64_t e = 0; e < E; ++e) den = dev::add(den, s[e] = dev::exp_f32(dev::add(s[e], -mx)));
            for (int64_t e = 0; e < E; ++e) s[e] = s[e] / den;
        }
    }
    __syncthreads();
    int32_t* id = p.ids + t * K;
    if (p.tid2eid) {
        for (int64_t k = threadIdx.x; k < K; k += blockDim.x) id[k] = p.tid2eid[static_cast<int64_t>(p.tokens[t]) * K + k];
    } else {
        float* b = p.biased + t * E;
        const float* bias = p.vl_rows && p.vl_rows[t] ? p.bias_vl : p.bias;
        for (int64_t e = threadIdx.x; e < E; e += blockDim.x) b[e] = bias ? dev::add(s[e], bias[e]) : s[e];
        __syncthreads();
        topk_row(b, E, K, id);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float sum = 0;
        if (p.sum_in_selection_order && !p.tid2eid) {
            int32_t order[kRouteMaxTopK];  // the picks by biased score descending, ties to the lower id
            const float* b = p.biased + t * E;
            for (int64_t k = 0; k < K; ++k) {
                int64_t at = k;
                while (at > 0 && (b[order[at - 1]] < b[id[k]] || (b[order[at - 1]] == b[id[k]] && order[at - 1] > id[k]))) {
                    order[at] = order[at - 1];
                    --at;
                }
                order[at] = id[k];
            }
            for (int64_t k = 0; k < K; ++k) sum = dev::add(sum, s[order[k]]);
        } else {
            for (int64_t k = 0; k < K; ++k) sum = dev::add(sum, s[id[k]]);
        }
        if (!p.official) sum = dev::add(sum, 1e-20f);
        for (int64_t k = 0; k < K; ++k)
            p.weights[t * K + k] = p.norm_topk_prob ? dev::mul(s[id[k]] / sum, p.routed_scaling_factor)
                                                    : dev::mul(s[id[k]], p.routed_scaling_factor);
    }
}

// A stable counting sort of the (token, slot) pairs by expert, one block of kPermuteThreads per tile of
// kPermuteThreads pairs (one pair per thread). Every block counts all pairs per expert (the ids are read
// from L2 by each block; no scratch, no second launch) and, apart, those before its tile; the counts'
// exclusive scan gives each expert's first position. A pair's position: its expert's first position + the
// expert's pairs in earlier tiles + those in earlier warps of its tile + those in earlier lanes of its warp
// (__match_any_sync) — its rank among the pairs of its expert in pair order, whatever the grid.
constexpr int kPermuteThreads = 1024;
constexpr int kPermuteWarps = kPermuteThreads / 32;
__host__ __device__ constexpr size_t permute_smem_bytes(int64_t experts) {
    return static_cast<size_t>(experts + 1 + experts + kPermuteWarps * experts) * sizeof(int32_t);
}
static __global__ void __launch_bounds__(kPermuteThreads) permute_kernel(const __grid_constant__ PermuteParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    extern __shared__ int32_t counts[];         // [experts + 1]: counts, then each expert's first position
    int32_t* earlier = counts + p.experts + 1;  // [experts]: pairs of each expert in earlier tiles
    int32_t* in_warp = earlier + p.experts;     // [warps, experts]: pairs of each expert per warp of this tile
    const int64_t pairs = p.rows * p.top_k, E = p.experts, base = int64_t(blockIdx.x) * kPermuteThreads;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    for (int64_t e = tid; e <= E; e += blockDim.x) counts[e] = 0;
    for (int64_t e = tid; e < E; e += blockDim.x) earlier[e] = 0;
    for (int64_t k = tid; k < kPermuteWarps * E; k += kPermuteThreads) in_warp[k] = 0;
    __syncthreads();
    for (int64_t i = tid; i < pairs; i += blockDim.x) {
        const int32_t e = p.ids[i];
        atomicAdd(&counts[e], 1);
        if (i < base) atomicAdd(&earlier[e], 1);
    }
    __syncthreads();
    if (tid == 0) {
        int32_t run = 0;
        for (int64_t e = 0; e < E; ++e) {
            const int32_t c = counts[e];
            counts[e] = run;
            run += c;
        }
        counts[E] = run;
    }
    __syncthreads();
    if (blockIdx.x == 0)
        for (int64_t e = tid; e <= E; e += blockDim.x) p.expert_offsets[e] = counts[e];
    const unsigned lanes_below = (1u << lane) - 1u;
    const int64_t i = base + tid;
    const int32_t e = i < pairs ? p.ids[i] : -1;
    const unsigned same = __match_any_sync(0xffffffffu, e);
    const int rank = __popc(same & lanes_below);
    if (e >= 0 && rank == 0) in_warp[warp * E + e] = __popc(same);
    __syncthreads();
    if (e >= 0) {
        int32_t at = counts[e] + earlier[e] + rank;
        for (int w = 0; w < warp; ++w) at += in_warp[w * E + e];
        p.perm_src[at] = static_cast<int32_t>(i / p.top_k);
        p.perm_slot[at] = static_cast<int32_t>(i);
        p.perm_expert[at] = e;
    }
}

// Row r's routing weight (1 without row weights) and one SwiGLU value: clamp, silu(g)·u, · weight, [bf16].
__device__ __forceinline__ float swiglu_row_weight(const SwigluParams& p, int64_t r) {
    return p.row_weight ? p.row_weight[p.row_weight_index ? p.row_weight_index[r] : r] : 1.0f;
}
__device__ __forceinline__ float swiglu_value(const SwigluParams& p, float g, float u, float w) {
    if (p.limit > 0) {
        g = fminf(g, p.limit);
        u = fminf(fmaxf(u, -p.limit), p.limit);
    }
    float h = dev::mul(dev::silu(g), u);
    if (p.row_weight) h = dev::mul(h, w);
    return dev::maybe_bf16(h, p.round_bf16);
}

static __global__ void swiglu_kernel(const __grid_constant__ SwigluParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t r = blockIdx.x;
    const float w = swiglu_row_weight(p, r);
    const int64_t ld = p.ld > 0 ? p.ld : p.width;
    for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x)
        p.g[r * ld + i] = swiglu_value(p, p.g[r * ld + i], p.u[r * ld + i], w);
}

// swiglu_kernel's values, quantized as act_quant_fp8_kernel does (dev::act_quant_quad) instead of stored
// (with fine_block, after act_quant_dequant's per-32 step: dev::act_dequant_quad): one pass instead of a
// store and reloads. A warp takes kSwigluQuantBlocks 128-column blocks of a row
// (lane l: columns 4l..4l+3 of each), their loads all issued before the arithmetic.
constexpr int kSwigluQuantBlocks = 4;
static __global__ void swiglu_quant_kernel(const __grid_constant__ SwigluParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t blocks = p.width / 128, groups = (blocks + kSwigluQuantBlocks - 1) / kSwigluQuantBlocks;
    const int64_t gw = (int64_t(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
    if (gw >= p.rows * groups) return;  // whole warps
    const int64_t r = gw / groups, b0 = (gw % groups) * kSwigluQuantBlocks;
    const int lane = static_cast<int>(threadIdx.x % 32);
    const float w = swiglu_row_weight(p, r);
    const int64_t ld = p.ld > 0 ? p.ld : p.width;
    float4 g4[kSwigluQuantBlocks], u4[kSwigluQuantBlocks];
#pragma unroll
    for (int i = 0; i < kSwigluQuantBlocks; ++i)
        if (b0 + i < blocks) {
            const int64_t c = (b0 + i) * 128 + lane * 4;
            g4[i] = *reinterpret_cast<const float4*>(p.g + r * ld + c);
            u4[i] = *reinterpret_cast<const float4*>(p.u + r * ld + c);
        }
    auto h = [&](float g, float u) { return swiglu_value(p, g, u, w); };
#pragma unroll
    for (int i = 0; i < kSwigluQuantBlocks; ++i)
        if (b0 + i < blocks) {  // warp-uniform
            const float4 a = g4[i], b = u4[i];
            float4 v = make_float4(h(a.x, b.x), h(a.y, b.y), h(a.z, b.z), h(a.w, b.w));
            if (p.fine_block == 32) v = dev::act_dequant_quad(v, 8);  // (uniform)
            const dev::Fp8Quad o = dev::act_quant_quad(v, 32);
            *reinterpret_cast<uint32_t*>(p.q + r * p.width + (b0 + i) * 128 + lane * 4) = o.packed;
            if (lane == 0) p.q_scale[r * blocks + b0 + i] = o.scale;
        }
}

static __global__ void scatter_rows_kernel(const __grid_constant__ ScatterRowsParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t i = blockIdx.x;
    const float* src = p.src + i * p.width;
    float* dst = p.dst + static_cast<int64_t>(p.index[i]) * p.width;
    for (int64_t c = threadIdx.x; c < p.width; c += blockDim.x) dst[c] = src[c];
}

// grid (n, column blocks), block 256: block y copies its span of the row (float4 where the rows are
// 16-byte aligned, several loads in flight per thread).
static __global__ void gather_rows_kernel(const __grid_constant__ ScatterRowsParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t i = blockIdx.x;
    const float* src = p.src + static_cast<int64_t>(p.index[i]) * p.width;
    float* dst = p.dst + i * p.width;
    const int64_t span = ((p.width + gridDim.y - 1) / gridDim.y + 3) / 4 * 4;
    const int64_t c0 = static_cast<int64_t>(blockIdx.y) * span, c1 = c0 + span < p.width ? c0 + span : p.width;
    if (p.width % 4 == 0 && reinterpret_cast<uintptr_t>(p.src) % 16 == 0 && reinterpret_cast<uintptr_t>(p.dst) % 16 == 0) {
        const int64_t B = blockDim.x;
        for (int64_t c = c0 / 4 + threadIdx.x; c < c1 / 4; c += 4 * B) {
            float4 v[4];
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (c + u * B < c1 / 4) v[u] = reinterpret_cast<const float4*>(src)[c + u * B];
#pragma unroll
            for (int u = 0; u < 4; ++u)
                if (c + u * B < c1 / 4) reinterpret_cast<float4*>(dst)[c + u * B] = v[u];
        }
        return;
    }
    for (int64_t c = c0 + threadIdx.x; c < c1; c += blockDim.x) dst[c] = src[c];
}

constexpr int kMaxTopK = 32;

// Token t's K slots in ascending expert id (insertion sort; order has at least K entries).
template <int kN>
__device__ __forceinline__ void combine_order(const CombineParams& p, int64_t t, int (&order)[kN]) {
    const int64_t K = p.top_k;
    if constexpr (kN <= 8) {  // the float4 kernel's array, kept in registers: every entry set, at constant indices
#pragma unroll
        for (int k = 0; k < kN; ++k) order[k] = k;
    } else {
        for (int64_t k = 0; k < K; ++k) order[k] = static_cast<int>(k);
    }
    for (int64_t a = 1; a < K; ++a)
        for (int64_t b = a; b > 0 && p.ids[t * K + order[b]] < p.ids[t * K + order[b - 1]]; --b) {
            const int tmp = order[b];
            order[b] = order[b - 1];
            order[b - 1] = tmp;
        }
}

// grid (rows, column blocks), block 256: each block sorts the token's slots and sums its share of
// the hidden columns (every element's sum in ascending expert order, whatever the grid).
static __global__ void moe_combine_kernel(const __grid_constant__ CombineParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t t = blockIdx.x, K = p.top_k, D = p.hidden;
    int order[kMaxTopK];
    combine_order(p, t, order);
    for (int64_t d = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; d < D; d += static_cast<int64_t>(gridDim.y) * blockDim.x) {
        float acc = 0;
        for (int64_t k = 0; k < K; ++k) {
            const int64_t slot = t * K + order[k];
            float y = p.expert_out[slot * D + d];
            if (p.scale_outputs) y = dev::mul(y, p.weights[slot]);
            acc = dev::add(acc, y);
        }
        p.out[t * D + d] = dev::maybe_bf16(dev::add(acc, p.shared[t * D + d]), p.round_bf16);
    }
}

// moe_combine_kernel's sums four columns at a time (float4 rows, K <= kK): every slot's loads in flight
// before the adds, which keep each element's order (ascending expert id, then the shared expert).
template <int kK>
static __global__ void moe_combine_vec_kernel(const __grid_constant__ CombineParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t t = blockIdx.x, K = p.top_k, D = p.hidden;
    int order[kK];
    combine_order(p, t, order);
    for (int64_t d = (static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x) * 4; d < D;
         d += static_cast<int64_t>(gridDim.y) * blockDim.x * 4) {
        float4 y[kK];
#pragma unroll
        for (int k = 0; k < kK; ++k)
            if (k < K) y[k] = *reinterpret_cast<const float4*>(p.expert_out + (t * K + order[k]) * D + d);
        const float4 sh = *reinterpret_cast<const float4*>(p.shared + t * D + d);
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
        for (int k = 0; k < kK; ++k)
            if (k < K) {
                float4 v = y[k];
                if (p.scale_outputs) {
                    const float w = p.weights[t * K + order[k]];
                    v = make_float4(dev::mul(v.x, w), dev::mul(v.y, w), dev::mul(v.z, w), dev::mul(v.w, w));
                }
                acc = make_float4(dev::add(acc.x, v.x), dev::add(acc.y, v.y), dev::add(acc.z, v.z), dev::add(acc.w, v.w));
            }
        *reinterpret_cast<float4*>(p.out + t * D + d) =
            make_float4(dev::maybe_bf16(dev::add(acc.x, sh.x), p.round_bf16), dev::maybe_bf16(dev::add(acc.y, sh.y), p.round_bf16),
                        dev::maybe_bf16(dev::add(acc.z, sh.z), p.round_bf16), dev::maybe_bf16(dev::add(acc.w, sh.w), p.round_bf16));
    }
}

// One block: the layer's expert load from permute's offsets (integer atomics: order-independent).
static __global__ void expert_load_kernel(const __grid_constant__ ExpertLoadParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    __shared__ unsigned long long touched, most;
    if (threadIdx.x == 0) touched = most = 0;
    __syncthreads();
    for (int64_t e = threadIdx.x; e < p.experts; e += blockDim.x) {
        const int32_t n = p.expert_offsets[e + 1] - p.expert_offsets[e];
        if (n > 0) {
            atomicAdd(&touched, 1ull);
            atomicMax(&most, static_cast<unsigned long long>(n));
        }
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        atomicAdd(p.acc + 0, touched);
        atomicAdd(p.acc + 1, most);
        atomicAdd(p.acc + 2, static_cast<unsigned long long>(p.expert_offsets[p.experts] - p.expert_offsets[0]));
        atomicAdd(p.acc + 3, 1ull);
    }
}

static __global__ void even_routing_kernel(const __grid_constant__ EvenRoutingParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= p.rows * p.top_k) return;
    const int64_t pair = p.first_row * p.top_k + i;  // (r·top_k + k) of the global row r
    p.ids[i] = static_cast<int32_t>((pair % p.experts) * p.stride % p.experts);
}

static __global__ void expert_local_ids_kernel(const __grid_constant__ ExpertLocalIdsParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    const int32_t local = p.ids[i] - p.first_expert;
    p.local_ids[i] = local >= 0 && local < p.experts_per_rank ? local : p.experts_per_rank;
}

static __global__ void expert_source_rows_kernel(const __grid_constant__ ExpertSourceRowsParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= p.n) return;
    p.index[i] = static_cast<int32_t>(static_cast<int64_t>(p.ids[i] / p.experts_per_rank) * p.n + i);
}

static __global__ void group_row_tables_kernel(const __grid_constant__ GroupRowTablesParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i <= p.groups) p.offsets[i] = static_cast<int32_t>(i * p.rows);
    if (i >= p.groups * p.rows) return;
    const int64_t g = i / p.rows, r = i % p.rows;
    p.rows_of[i] = static_cast<int32_t>(r * p.groups + g);
}

}  // namespace deepinfer::cuda::kernels
