// SPDX-License-Identifier: Apache-2.0
// What V4's and V4.1's tensor-core sink attention kernels (attention_tc.cuh, v41_attention_tc.cuh)
// share: the block layout (512 threads = 16 warps; warp w owns head group w % 4 = 16 heads and quarter
// w / 4 of a 64-candidate block for the scores, of the head dimension for the outputs), the staging of
// rows into shared memory as bf16, the q·k and P·V MMA loops, and the split over candidates.
//
// Split (flash decoding): a row's candidate blocks of 64 are dealt round-robin to the kSplit CTAs of a
// thread-block cluster (block b to CTA b % kSplit), so one token fills kSplit SMs instead of one. Each
// CTA leaves its partial output (f32, unnormalized), row maxima and sums in its shared memory; after a
// cluster barrier CTA t merges heads [t·64/kSplit, (t+1)·64/kSplit) over the partials in ascending CTA
// order, through distributed shared memory, and writes them. kSplit is a constant of the launch (the
// device's, never the batch's) and a row's CTAs read only that row's candidates, so a row's result
// does not depend on the batch. kSplit = 1 (devices without clusters) is the one-CTA kernel.
#pragma once

#include <cooperative_groups.h>
#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/mma_sync.cuh"
#include "backends/cuda/kernels/attention_tc_wgmma.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kTcaThreads = 512;
constexpr int kTcaHeads = 64;  // heads per block (MMA rows; missing heads are zero rows)
constexpr int kTcaBlock = 64;  // candidates per online-softmax block
// CTAs per row on devices with thread-block clusters (sm_90+). Measured on the 2-layer proxy (H200,
// bench/results/cuda-decode-latency-h200-*): 4 was 2% faster than 2 at batch 1 and 7% slower at
// prefill (each CTA restages q; a cluster holds its SMs until its longest CTA ends), 1 was 6% slower at
// batch 1 and 5% faster at batch 256; later (bench/results/cuda-decode-large-batch-h200-*) 1 was 0.6%
// slower at batch 1, 5% faster at 128, 9% at 512 and 3% at prefill: offline batches run large, so 1.
constexpr int kTcaSplit = 1;

__host__ __device__ constexpr int64_t tca_pitch(int64_t kd) { return kd + 8; }  // bf16 elements per row
// Dynamic shared memory: q [64, pitch] and the candidate block [64, pitch] in bf16 (at the end the f32
// partial output [64, kD] over both), P [64, 64 + 8] bf16, the per-quarter row maxima and sums
// [2, 4, 64] f32, the partial row maxima and sums [2, 64] f32, the staged rows' addresses [64].
__host__ __device__ constexpr int64_t tca_smem_bytes(int64_t kd) {
    return 2 * (2 * kTcaHeads * tca_pitch(kd) + kTcaHeads * (kTcaBlock + 8)) + 4 * 2 * 4 * kTcaHeads +
           4 * 2 * kTcaHeads + 8 * kTcaBlock;
}

// The pipelined V4 kernel (attention_tc.cuh) appends a ring of 32 candidate rows [32, kd] f32 (two
// batches of 16 rows in flight), two blocks' row addresses [2, 64] and 128 bytes for its row's
// candidate source to that layout; the shared part keeps its offsets.
constexpr int kTcaRingRows = 32;
__host__ __device__ constexpr int64_t tca_pipelined_smem_bytes(int64_t kd) {
    return tca_smem_bytes(kd) + 4 * kTcaRingRows * kd + 2 * 8 * kTcaBlock + 128;
}

// The wgmma kernel (attention_tc.cuh, kWg; attention_tc_wgmma.cuh) lays the same parts out unpadded, q,
// kv and P in the 128-byte swizzle from a 1024-aligned base: q, kv [64, kd] and P [64, 64] bf16, then
// the pipelined kernel's reductions, row tables, ring, next rows and candidate source; + 1024 bytes to
// align the base.
__host__ __device__ constexpr int64_t tcw_smem_bytes(int64_t kd) {
    return 2 * (2 * kTcaHeads * kd + kTcaHeads * kTcaBlock) + 4 * 2 * 4 * kTcaHeads + 4 * 2 * kTcaHeads + 8 * kTcaBlock +
           4 * kTcaRingRows * kd + 2 * 8 * kTcaBlock + 128 + 1024;
}
struct TcwLayout {};  // tag: TcaShared over tcw_smem_bytes' layout

// Pointers into one CTA's dynamic shared memory (layout of tca_smem_bytes; ring and next_rows only
// within tca_pipelined_smem_bytes; or tcw_smem_bytes' with TcwLayout).
template <int kD>
struct TcaShared {
    static constexpr int kP = static_cast<int>(tca_pitch(kD));
    static constexpr int kPP = kTcaBlock + 8;
    __nv_bfloat16* q;     // [64, kP]
    __nv_bfloat16* kv;    // [64, kP]
    __nv_bfloat16* p;     // [64, kPP]
    float* red_max;       // [4, 64]
    float* red_sum;       // [4, 64]
    float* part_m;        // [64] this CTA's row maxima (base-2 units)
    float* part_l;        // [64] this CTA's row sums
    const float** rows;   // [64] the rows being staged (null: a zero row)
    float* o;             // [64, kD] f32 partial output, over q and kv
    float* ring;               // [kTcaRingRows, kD] the pipelined kernel's rows in flight (f32)
    const float** next_rows;   // [2, 64] the pipelined kernel's block rows by iteration parity (null: a zero row)
    __device__ explicit TcaShared(unsigned char* base) {
        q = reinterpret_cast<__nv_bfloat16*>(base);
        kv = q + kTcaHeads * kP;
        p = kv + kTcaHeads * kP;
        red_max = reinterpret_cast<float*>(p + kTcaHeads * kPP);
        red_sum = red_max + 4 * kTcaHeads;
        part_m = red_sum + 4 * kTcaHeads;
        part_l = part_m + kTcaHeads;
        rows = reinterpret_cast<const float**>(part_l + kTcaHeads);
        o = reinterpret_cast<float*>(base);
        ring = reinterpret_cast<float*>(base + tca_smem_bytes(kD));
        next_rows = reinterpret_cast<const float**>(ring + kTcaRingRows * kD);
    }
    __device__ TcaShared(unsigned char* base, TcwLayout) {
        base = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(base) + 1023) & ~uintptr_t(1023));
        q = reinterpret_cast<__nv_bfloat16*>(base);
        kv = q + kTcaHeads * kD;
        p = kv + kTcaHeads * kD;
        red_max = reinterpret_cast<float*>(p + kTcaHeads * kTcaBlock);
        red_sum = red_max + 4 * kTcaHeads;
        part_m = red_sum + 4 * kTcaHeads;
        part_l = part_m + kTcaHeads;
        rows = reinterpret_cast<const float**>(part_l + kTcaHeads);
        o = reinterpret_cast<float*>(base);
        ring = reinterpret_cast<float*>(rows + kTcaBlock);
        next_rows = reinterpret_cast<const float**>(ring + kTcaRingRows * kD);
    }
};

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
}
// v[0..15] as bf16 into dst[0..15] (16-byte aligned): two 16-byte stores.
__device__ __forceinline__ void store_bf16x16(__nv_bfloat16* dst, const float (&v)[16]) {
    uint4* d = reinterpret_cast<uint4*>(dst);
    d[0] = make_uint4(pack_bf16x2(v[0], v[1]), pack_bf16x2(v[2], v[3]), pack_bf16x2(v[4], v[5]), pack_bf16x2(v[6], v[7]));
    d[1] = make_uint4(pack_bf16x2(v[8], v[9]), pack_bf16x2(v[10], v[11]), pack_bf16x2(v[12], v[13]), pack_bf16x2(v[14], v[15]));
}

// The 64 rows whose addresses are in rows[] (kD floats each; null: zeros) into dst as bf16. Each thread
// issues 8 16-byte loads before it stores any (a block is bound by load latency, not bandwidth).
// Call after a barrier that publishes rows[]; the caller syncs before reading dst. kSwz: dst in the wgmma
// kernel's layout (attention_tc_wgmma.cuh: tcw::index), else rows tca_pitch apart.
template <int kD, int kMaxBatch = 8, bool kSwz = false>
__device__ __forceinline__ void tca_stage_rows(__nv_bfloat16* dst, const float* const* rows) {
    constexpr int kQuads = kD / 4;
    constexpr int kPer = kTcaBlock * kQuads / kTcaThreads;  // float4 per thread: 2 .. 16
    constexpr int kBatch = kPer < kMaxBatch ? kPer : kMaxBatch;
    static_assert(kPer % kBatch == 0, "staging batches");
#pragma unroll
    for (int k0 = 0; k0 < kPer; k0 += kBatch) {
        float4 v[kBatch];
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            const int i = static_cast<int>(threadIdx.x) + (k0 + k) * kTcaThreads;
            const float* src = rows[i / kQuads];
            v[k] = src ? *reinterpret_cast<const float4*>(src + (i % kQuads) * 4) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int k = 0; k < kBatch; ++k) {
            const int i = static_cast<int>(threadIdx.x) + (k0 + k) * kTcaThreads;
            const uint2 packed{pack_bf16x2(v[k].x, v[k].y), pack_bf16x2(v[k].z, v[k].w)};
            if constexpr (kSwz) *reinterpret_cast<uint2*>(dst + tcw::index(i / kQuads, (i % kQuads) * 4)) = packed;
            else *reinterpret_cast<uint2*>(dst + (i / kQuads) * tca_pitch(kD) + (i % kQuads) * 4) = packed;
        }
    }
}

// q's 64 heads from bf16 rows kD apart (SparseAttentionParams::q_bf16; heads from nh on are zeros) into dst,
// in 16-byte copies, all of a thread's loads issued before its stores: tca_stage_rows' result for the same
// values, without the conversion and with half the bytes. The caller syncs before reading dst.
template <int kD, bool kSwz = false>
__device__ __forceinline__ void tca_stage_q_bf16(__nv_bfloat16* dst, const uint16_t* src, int64_t nh) {
    constexpr int kOcts = kD / 8;                           // 16-byte pieces per row
    constexpr int kPer = kTcaBlock * kOcts / kTcaThreads;  // per thread: 1 .. 8
    static_assert(kPer >= 1 && kTcaBlock * kOcts % kTcaThreads == 0, "whole 16-byte pieces per thread");
    uint4 v[kPer];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int i = static_cast<int>(threadIdx.x) + k * kTcaThreads, row = i / kOcts, col = (i % kOcts) * 8;
        v[k] = row < nh ? *reinterpret_cast<const uint4*>(src + static_cast<int64_t>(row) * kD + col) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
        const int i = static_cast<int>(threadIdx.x) + k * kTcaThreads, row = i / kOcts, col = (i % kOcts) * 8;
        if constexpr (kSwz) *reinterpret_cast<uint4*>(dst + tcw::index(row, col)) = v[k];
        else *reinterpret_cast<uint4*>(dst + row * tca_pitch(kD) + col) = v[k];
    }
}

// Scores of this warp's 16 heads x 16 candidates (its quarter of the block): two n-tiles, accumulated
// over the k-steps [kK0, kK1) of K = kD (16 each; tca_scores: all of them, from zero).
template <int kD, int kK0, int kK1>
__device__ __forceinline__ void tca_scores_part(float (&sc)[2][4], const TcaShared<kD>& sm, const __nv_bfloat16* kv, int hg,
                                                int quarter, int lane) {
    constexpr int kP = TcaShared<kD>::kP;
#pragma unroll 4
    for (int ks = kK0; ks < kK1; ++ks) {
        uint32_t a[4], b[4];
        dev::ldmatrix_x4(a, sm.q + (hg * 16 + lane % 16) * kP + ks * 16 + (lane / 16) * 8);
        dev::ldmatrix_x4(b, kv + (quarter * 16 + lane % 8 + (lane / 16) * 8) * kP + ks * 16 + ((lane / 8) % 2) * 8);
        dev::mma_bf16_16816(sc[0], a, b[0], b[1]);
        dev::mma_bf16_16816(sc[1], a, b[2], b[3]);
    }
}
template <int kD>
__device__ __forceinline__ void tca_scores(float (&sc)[2][4], const TcaShared<kD>& sm, const __nv_bfloat16* kv, int hg,
                                           int quarter, int lane) {
#pragma unroll
    for (int t = 0; t < 2; ++t) sc[t][0] = sc[t][1] = sc[t][2] = sc[t][3] = 0.f;
    tca_scores_part<kD, 0, kD / 16>(sc, sm, kv, hg, quarter, lane);
}
template <int kD>
__device__ __forceinline__ void tca_scores(float (&sc)[2][4], const TcaShared<kD>& sm, int hg, int quarter, int lane) {
    tca_scores<kD>(sc, sm, sm.kv, hg, quarter, lane);
}

// acc += P · V over the k-steps [kK0, kK1) of one block (16 candidates each; tca_pv: all 4): this
// warp's 16 heads x kD / 4 columns (quarter).
template <int kD, int kK0, int kK1>
__device__ __forceinline__ void tca_pv_part(float (&acc)[kD / 32][4], const TcaShared<kD>& sm, const __nv_bfloat16* kv, int hg,
                                            int quarter, int lane) {
    constexpr int kP = TcaShared<kD>::kP, kPP = TcaShared<kD>::kPP, kNt = kD / 32;
    const int c0 = quarter * (kD / 4);
#pragma unroll
    for (int ks = kK0; ks < kK1; ++ks) {
        uint32_t a[4];
        dev::ldmatrix_x4(a, sm.p + (hg * 16 + lane % 16) * kPP + ks * 16 + (lane / 16) * 8);
#pragma unroll
        for (int t = 0; t < kNt; t += 2) {
            uint32_t b[4];
            dev::ldmatrix_x4_trans(b, kv + (ks * 16 + lane % 8 + ((lane / 8) % 2) * 8) * kP + c0 + t * 8 + (lane / 16) * 8);
            dev::mma_bf16_16816(acc[t], a, b[0], b[1]);
            dev::mma_bf16_16816(acc[t + 1], a, b[2], b[3]);
        }
    }
}
template <int kD>
__device__ __forceinline__ void tca_pv(float (&acc)[kD / 32][4], const TcaShared<kD>& sm, const __nv_bfloat16* kv, int hg,
                                       int quarter, int lane) {
    tca_pv_part<kD, 0, kTcaBlock / 16>(acc, sm, kv, hg, quarter, lane);
}
template <int kD>
__device__ __forceinline__ void tca_pv(float (&acc)[kD / 32][4], const TcaShared<kD>& sm, int hg, int quarter, int lane) {
    tca_pv<kD>(acc, sm, sm.kv, hg, quarter, lane);
}

// Barrier over the CTAs of a row (the cluster), with release/acquire of shared and global memory.
template <int kSplit>
__device__ __forceinline__ void tca_row_sync() {
    if constexpr (kSplit == 1) {
        __syncthreads();
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
        __trap();  // the launcher uses kSplit > 1 only on sm_90+
#else
        cooperative_groups::this_cluster().sync();
#endif
    }
}

// Where CTA t of this row keeps `local` (an address in this CTA's shared memory).
template <int kSplit, class T>
__device__ __forceinline__ T* tca_peer(T* local, int t) {
    if constexpr (kSplit == 1) {
        return local;
    } else {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
        __trap();
        return local;
#else
        return cooperative_groups::this_cluster().map_shared_rank(local, static_cast<unsigned>(t));
#endif
    }
}

// SparseAttentionParams::out_bf16's heads per group (bf16_group_heads, 0: all).
__host__ __device__ inline int64_t tca_bf16_group_heads(const SparseAttentionParams& p) {
    return p.bf16_group_heads > 0 ? p.bf16_group_heads : p.heads;
}

// The optional bf16 copy of an attention output row (SparseAttentionParams::out_bf16's layout).
struct TcaBf16Out {
    uint16_t* base = nullptr;  // null: none
    int64_t group_heads = 1, group_stride = 0, row = 0;
    __device__ static TcaBf16Out of(const SparseAttentionParams& p, int64_t row) {
        return {p.out_bf16, tca_bf16_group_heads(p), p.bf16_group_stride, row};
    }
    __device__ uint16_t* head(int64_t h, int kD) const {
        return base + (h / group_heads) * group_stride + (row * group_heads + h % group_heads) * kD;
    }
};

// The end of both kernels. Every CTA of the row publishes its partial output acc (this thread's two
// heads row0 = hg*16 + g, row1 = row0 + 8), and with `softmax` its running maxima m (base-2 units) and
// sums l; then CTA `split` merges its heads over the `parts` CTAs that had blocks, in CTA order:
//   softmax:  M = max_t m_t,  w_t = 2^(m_t - M),  den = Σ_t l_t·w_t + 2^(sink·log2e - M),
//             o = bf16(Σ_t acc_t·w_t / den)   (one part: w = 1, the one-CTA kernel's arithmetic)
//   else:     o = bf16(Σ_t acc_t)            (V4.1: P was normalized before P·V)
// then the inverse RoPE of the last rope_dim columns -> bf16, into out + (head h0 + hh) * kD (out null: not
// stored) and into out16 when given.
template <int kD, int kSplit, bool kSoftmax>
__device__ __forceinline__ void tca_merge_store(const TcaShared<kD>& sm, const float (&acc)[kD / 32][4], const float (&m)[2],
                                                const float (&l)[2], int split, int parts, int64_t nh, const float* sink,
                                                int64_t h0, const float* cos_sin, int64_t rope_dim, float* out,
                                                TcaBf16Out out16 = {}) {
    constexpr int kNt = kD / 32;
    constexpr float kLog2e = 1.4426950408889634f;
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32, g = lane / 4, qd = lane % 4;
    const int hg = warp % 4, quarter = warp / 4, row0 = hg * 16 + g;
    __syncthreads();  // every warp's MMAs are done with q and kv, which the partial output overwrites
#pragma unroll
    for (int t = 0; t < kNt; ++t) {
        const int col = quarter * (kD / 4) + t * 8 + qd * 2;
        *reinterpret_cast<float2*>(sm.o + row0 * kD + col) = make_float2(acc[t][0], acc[t][1]);
        *reinterpret_cast<float2*>(sm.o + (row0 + 8) * kD + col) = make_float2(acc[t][2], acc[t][3]);
    }
    if (kSoftmax && quarter == 0 && qd == 0) {
        sm.part_m[row0] = m[0];
        sm.part_l[row0] = l[0];
        sm.part_m[row0 + 8] = m[1];
        sm.part_l[row0 + 8] = l[1];
    }
    tca_row_sync<kSplit>();
    // This CTA's heads; a thread per 4 columns of a head, all parts' values in flight at once.
    constexpr int kRowsPerCta = kTcaHeads / kSplit, kQuads = kD / 4;
    const int r0 = split * kRowsPerCta;
    for (int i = static_cast<int>(threadIdx.x); i < kRowsPerCta * kQuads; i += kTcaThreads) {
        const int row = r0 + i / kQuads, c = (i % kQuads) * 4;
        if (row >= nh) continue;
        float4 v[kSplit];
#pragma unroll
        for (int t = 0; t < kSplit; ++t)
            if (t < parts) v[t] = *reinterpret_cast<const float4*>(tca_peer<kSplit>(sm.o + row * kD + c, t));
        float4 o = v[0];
        if constexpr (kSoftmax) {
            float mt[kSplit], mx = -__int_as_float(0x7F800000);
#pragma unroll
            for (int t = 0; t < kSplit; ++t)
                if (t < parts) {
                    mt[t] = *tca_peer<kSplit>(sm.part_m + row, t);
                    mx = fmaxf(mx, mt[t]);
                }
            float den = 0.f;
            o = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
            for (int t = 0; t < kSplit; ++t)
                if (t < parts) {
                    const float w = exp2f(mt[t] - mx);
                    den += *tca_peer<kSplit>(sm.part_l + row, t) * w;
                    o.x += v[t].x * w;
                    o.y += v[t].y * w;
                    o.z += v[t].z * w;
                    o.w += v[t].w * w;
                }
            den += exp2f(sink[h0 + row] * kLog2e - mx);
            o = make_float4(dev::round_bf16(o.x / den), dev::round_bf16(o.y / den), dev::round_bf16(o.z / den),
                            dev::round_bf16(o.w / den));
        } else {
#pragma unroll
            for (int t = 1; t < kSplit; ++t)
                if (t < parts) {
                    o.x += v[t].x;
                    o.y += v[t].y;
                    o.z += v[t].z;
                    o.w += v[t].w;
                }
            o = make_float4(dev::round_bf16(o.x), dev::round_bf16(o.y), dev::round_bf16(o.z), dev::round_bf16(o.w));
        }
        *reinterpret_cast<float4*>(sm.o + row * kD + c) = o;  // this CTA's own heads only: no peer reads them
    }
    // Every peer's reads of this CTA's partials are done (it may exit), and the merged rows are visible.
    tca_row_sync<kSplit>();
    for (int hh = r0 + warp; hh < r0 + kRowsPerCta && hh < nh; hh += kTcaThreads / 32) {
        float* o = sm.o + hh * kD;
        for (int64_t i = lane; i < rope_dim / 2; i += 32) dev::rope_pair(o + (kD - rope_dim), static_cast<int>(i), cos_sin, true);
        __syncwarp();
        float* dst = out ? out + (h0 + hh) * kD : nullptr;
        uint16_t* dst16 = out16.base ? out16.head(h0 + hh, kD) : nullptr;
        for (int d = lane; d < kD; d += 32) {
            const float v = d >= kD - rope_dim ? dev::round_bf16(o[d]) : o[d];
            if (dst) dst[d] = v;
            if (dst16) dst16[d] = static_cast<uint16_t>(__float_as_uint(v) >> 16);  // bf16-rounded: exact
        }
    }
}

}  // namespace deepinfer::cuda::kernels
