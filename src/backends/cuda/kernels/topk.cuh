// SPDX-License-Identifier: Apache-2.0
// Device top-k (lightning indexer, router, sampler, V4.1 candidate blocks): one block of kTopkThreads
// (= 256) threads per row. Radix select of the take-th largest score on order-preserving 32-bit keys,
// then a stable compaction in index order: every score above the threshold key, and the lowest-index
// ties at it. The result is the CPU's topk_lowest_index (ascending indices), independent of the thread
// count, whatever the digit layout: the threshold key and the count of ties taken are exact integers.
//
// topk_row_adaptive<kBits>: kBits-wide digits from the top bit down, each pass a shared-memory histogram
// of the candidates (keys whose bits above the digit equal the prefix so far) and their AND and OR. Bits
// below the digit that no candidate varies in belong to the threshold as they are (the next candidates
// are a subset), so the next digit starts at the highest bit that still varies, and the passes end when
// none does: bf16-valued scores (indexer) leave bits 0-15 of every key of one sign equal, so they take 2
// passes; f32 logits (sampler) take 4 with 8-bit digits, 3 with 11-bit ones. The bin search is a
// block-wide scan over the histogram (2^kBits / 256 bins per thread). The compaction gives each warp a
// contiguous range of the row (a count pass, one block-wide exchange of the 8 warps' counts, then
// ballots: no block barrier per 256 entries).
// topk_row (indexer, router, V4.1 candidate blocks) = topk_row_adaptive<kTopkBits = 8>; the sampler's
// top-k over the vocabulary = topk_row_adaptive<kTopkVocabBits = 11>: measured on one H200 (bench/results/
// cuda-topk-h200-*.md), 8-bit digits were fastest on the indexer's rows (11-bit: 1.1x slower), 11-bit on
// f32 logits over 129K entries (8-bit: 1.35x slower: one pass more).
// topk_row_radix8: the previous form (4 passes of 8-bit digits, two block scans per 256 entries in the
// compaction), kept for the benchmark (TopkParams::variant = 1).
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kTopkThreads = 256;
constexpr int kTopkWarps = kTopkThreads / 32;
constexpr int kTopkBits = 8;        // topk_row's digit width: 256 bins
constexpr int kTopkVocabBits = 11;  // the sampler's: 2048 bins (8 KiB of shared memory)
constexpr int kTopkUnroll = 4;  // loads in flight per thread in the row passes

__device__ __forceinline__ uint32_t order_key(float f) {
    if (f == 0.0f) f = 0.0f;  // -0 ties with +0, as in the CPU's comparisons
    const uint32_t u = __float_as_uint(f);
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// Exclusive prefix sum of v over the block (kTopkThreads threads); `total` gets the sum.
__device__ __forceinline__ int block_exclusive_scan(int v, int* total) {
    __shared__ int warp_sums[kTopkThreads / 32];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int x = v;
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xFFFFFFFFu, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    int offset = 0, sum = 0;
    for (int w = 0; w < kTopkThreads / 32; ++w) {
        if (w < warp) offset += warp_sums[w];
        sum += warp_sums[w];
    }
    __syncthreads();
    *total = sum;
    return offset + x - v;
}

// take = min(k, len) == len: every entry, then -1 up to k. Returns whether the row is done.
__device__ __forceinline__ bool topk_trivial(int64_t len, int64_t k, int32_t* out) {
    const int64_t take = k < len ? k : len;
    if (take == len) {  // every entry is selected
        for (int64_t j = threadIdx.x; j < k; j += blockDim.x) out[j] = j < len ? static_cast<int32_t>(j) : -1;
        return true;
    }
    return take <= 0;  // nothing to select (the passes need need >= 1)
}

template <int kBits>
static __device__ void topk_row_adaptive(const float* scores, int64_t len, int64_t k, int32_t* out) {
    static_assert(kBits >= 8 && kBits <= 16, "256 to 65536 bins");
    constexpr int kBins = 1 << kBits, kPer = kBins / kTopkThreads;
    __shared__ __align__(16) int hist[kBins];
    __shared__ uint32_t and_w[kTopkWarps], or_w[kTopkWarps];
    __shared__ int gt_w[kTopkWarps], eq_w[kTopkWarps];
    __shared__ uint32_t prefix_sh;
    __shared__ int need_sh;
    if (topk_trivial(len, k, out)) return;
    const int64_t take = k < len ? k : len;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    uint32_t prefix = 0, mask = 0;      // the threshold's bits found so far, and which they are
    int need = static_cast<int>(take);  // how many still to select among the keys matching prefix
    for (int hi = 32; hi > 0;) {        // this pass: key bits [lo, hi)
        const int lo = hi > kBits ? hi - kBits : 0;
        const uint32_t dmask = (1u << (hi - lo)) - 1u;
        for (int b = threadIdx.x; b < kBins; b += kTopkThreads) hist[b] = 0;
        __syncthreads();
        uint32_t a = 0xFFFFFFFFu, o = 0;  // AND and OR of this thread's candidates
        for (int64_t base = threadIdx.x; base < len; base += int64_t(kTopkThreads) * kTopkUnroll) {
            uint32_t key[kTopkUnroll];
#pragma unroll
            for (int u = 0; u < kTopkUnroll; ++u) {
                const int64_t i = base + int64_t(u) * kTopkThreads;
                key[u] = i < len ? order_key(scores[i]) : 0u;
            }
#pragma unroll
            for (int u = 0; u < kTopkUnroll; ++u) {
                const int64_t i = base + int64_t(u) * kTopkThreads;
                if (i < len && (key[u] & mask) == prefix) {
                    atomicAdd(&hist[(key[u] >> lo) & dmask], 1);
                    a &= key[u];
                    o |= key[u];
                }
            }
        }
        a = __reduce_and_sync(0xFFFFFFFFu, a);
        o = __reduce_or_sync(0xFFFFFFFFu, o);
        if (lane == 0) {
            and_w[warp] = a;
            or_w[warp] = o;
        }
        __syncthreads();
        uint32_t all_and = 0xFFFFFFFFu, all_or = 0;
#pragma unroll
        for (int w = 0; w < kTopkWarps; ++w) {
            all_and &= and_w[w];
            all_or |= or_w[w];
        }
        {
            // The bin of the need-th largest key: the largest b >= 1 whose count of keys in bins b.. reaches
            // `need`, else 0; `cum` = the keys in the bins above it. Thread t holds bins g*kPer .. g*kPer+kPer-1
            // with g = 255 - t, so its exclusive prefix sum counts the bins above its own; exactly one bin
            // matches. Bins above dmask are empty.
            const int g = kTopkThreads - 1 - static_cast<int>(threadIdx.x);
            int h[kPer];
            int sum = 0;
#pragma unroll
            for (int j = 0; j < kPer; ++j) sum += h[j] = hist[g * kPer + j];
            int total = 0;
            int cum = block_exclusive_scan(sum, &total);
#pragma unroll
            for (int j = kPer - 1; j >= 0; --j) {
                const int b = g * kPer + j;
                if (cum < need && (b == 0 || cum + h[j] >= need)) {
                    prefix_sh = prefix | (static_cast<uint32_t>(b) << lo);
                    need_sh = need - cum;
                }
                cum += h[j];
            }
        }
        __syncthreads();
        prefix = prefix_sh;
        need = need_sh;
        mask |= dmask << lo;
        // Bits below lo that this pass's candidates all share are the threshold's: take them, and start the
        // next digit at the highest bit that varies (none: the threshold is complete).
        const uint32_t low = (1u << lo) - 1u;  // lo <= 32 - kBits < 32
        const uint32_t var = (all_and ^ all_or) & low;
        hi = var ? 32 - __clz(var) : 0;
        const uint32_t fixed = low & ~((1u << hi) - 1u);  // bits [hi, lo)
        prefix |= all_and & fixed;
        mask |= fixed;
    }
    // prefix = threshold key; the keys above it and the first `need` equal to it are taken, in index order.
    // Warp w compacts groups [g0, g1) of 32 entries: counts first, then ballots with the counts of the
    // warps before it as offsets (an entry's slot = keys above before it + min(ties before it, need)).
    const uint32_t thr = prefix;
    const int64_t groups = (len + 31) / 32;
    const int64_t g0 = groups * warp / kTopkWarps, g1 = groups * (warp + 1) / kTopkWarps;
    int gt = 0, eq = 0;
    for (int64_t g = g0; g < g1; g += kTopkUnroll) {
        uint32_t key[kTopkUnroll];
#pragma unroll
        for (int u = 0; u < kTopkUnroll; ++u) {
            const int64_t i = (g + u) * 32 + lane;
            key[u] = g + u < g1 && i < len ? order_key(scores[i]) : 0u;
        }
#pragma unroll
        for (int u = 0; u < kTopkUnroll; ++u) {
            const int64_t i = (g + u) * 32 + lane;
            if (g + u < g1 && i < len) {
                gt += key[u] > thr;
                eq += key[u] == thr;
            }
        }
    }
    gt = __reduce_add_sync(0xFFFFFFFFu, gt);
    eq = __reduce_add_sync(0xFFFFFFFFu, eq);
    if (lane == 0) {
        gt_w[warp] = gt;
        eq_w[warp] = eq;
    }
    __syncthreads();
    int gt_before = 0, eq_before = 0;
    for (int w = 0; w < warp; ++w) {
        gt_before += gt_w[w];
        eq_before += eq_w[w];
    }
    const uint32_t lt = (1u << lane) - 1u;
    for (int64_t g = g0; g < g1; g += kTopkUnroll) {
        if (gt_before + (eq_before < need ? eq_before : need) >= take) break;  // warp-uniform: the rest is not taken
        uint32_t key[kTopkUnroll];
#pragma unroll
        for (int u = 0; u < kTopkUnroll; ++u) {
            const int64_t i = (g + u) * 32 + lane;
            key[u] = g + u < g1 && i < len ? order_key(scores[i]) : 0u;
        }
#pragma unroll
        for (int u = 0; u < kTopkUnroll; ++u) {
            if (g + u >= g1) break;  // warp-uniform
            const int64_t i = (g + u) * 32 + lane;
            const bool is_gt = i < len && key[u] > thr, is_eq = i < len && key[u] == thr;
            const uint32_t bg = __ballot_sync(0xFFFFFFFFu, is_gt), be = __ballot_sync(0xFFFFFFFFu, is_eq);
            const int er = eq_before + __popc(be & lt);
            if (is_gt || (is_eq && er < need)) out[gt_before + __popc(bg & lt) + (er < need ? er : need)] = static_cast<int32_t>(i);
            gt_before += __popc(bg);
            eq_before += __popc(be);
        }
    }
    for (int64_t j = take + threadIdx.x; j < k; j += blockDim.x) out[j] = -1;
}

static __device__ void topk_row_radix8(const float* scores, int64_t len, int64_t k, int32_t* out) {
    __shared__ int hist[256];
    __shared__ uint32_t prefix_sh;
    __shared__ int need_sh;
    if (topk_trivial(len, k, out)) return;
    const int64_t take = k < len ? k : len;
    uint32_t prefix = 0, mask = 0;
    int need = static_cast<int>(take);  // how many still to select at or below the current prefix
    for (int shift = 24; shift >= 0; shift -= 8) {
        for (int b = threadIdx.x; b < 256; b += blockDim.x) hist[b] = 0;
        __syncthreads();
        for (int64_t i = threadIdx.x; i < len; i += blockDim.x) {
            const uint32_t key = order_key(scores[i]);
            if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 0xFF], 1);
        }
        __syncthreads();
        {
            // As in topk_row_adaptive's bin search with one bin per thread.
            const int b = kTopkThreads - 1 - static_cast<int>(threadIdx.x);
            const int h = hist[b];
            int total = 0;
            const int cum = block_exclusive_scan(h, &total);
            if (cum < need && (b == 0 || cum + h >= need)) {
                prefix_sh = prefix | (static_cast<uint32_t>(b) << shift);
                need_sh = need - cum;
            }
        }
        __syncthreads();
        prefix = prefix_sh;
        need = need_sh;
        mask |= 0xFFu << shift;
        __syncthreads();
    }
    // prefix = threshold key; `need` entries equal to it are taken, lowest index first.
    int written = 0, eq_seen = 0;
    for (int64_t base = 0; base < len; base += blockDim.x) {
        const int64_t i = base + threadIdx.x;
        uint32_t key = 0;
        if (i < len) key = order_key(scores[i]);
        const int is_eq = i < len && key == prefix;
        int eq_total = 0;
        const int eq_rank = eq_seen + block_exclusive_scan(is_eq, &eq_total);
        const int sel = i < len && (key > prefix || (is_eq && eq_rank < need));
        int sel_total = 0;
        const int pos = written + block_exclusive_scan(sel, &sel_total);
        if (sel) out[pos] = static_cast<int32_t>(i);
        written += sel_total;
        eq_seen += eq_total;
    }
    for (int64_t j = take + threadIdx.x; j < k; j += blockDim.x) out[j] = -1;
}

// The top-k of one row for the block's kTopkThreads threads (all must call it).
static __device__ void topk_row(const float* scores, int64_t len, int64_t k, int32_t* out) {
    topk_row_adaptive<kTopkBits>(scores, len, k, out);
}

// kVariant: TopkParams::variant (0 = topk_row).
template <int kVariant>
static __global__ void __launch_bounds__(kTopkThreads) topk_kernel(const __grid_constant__ TopkParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t r = blockIdx.x;
    const int64_t len = p.lengths ? p.lengths[r] : p.n;
    const float* row = p.scores + r * p.ld;
    int32_t* out = p.out + r * p.k;
    if constexpr (kVariant == 1) topk_row_radix8(row, len, p.k, out);
    else if constexpr (kVariant == 2) topk_row_adaptive<kTopkVocabBits>(row, len, p.k, out);
    else if constexpr (kVariant == 3) topk_row_adaptive<12>(row, len, p.k, out);
    else topk_row(row, len, p.k, out);
}

}  // namespace deepinfer::cuda::kernels
