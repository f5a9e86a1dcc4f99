// SPDX-License-Identifier: Apache-2.0
// Device code of V4.1's CSA2 attention (model/v41/attention.cpp): indexer scores against the compact
// MXFP4 index keys, the candidate-block stage, publishing the top-k, and the sink attention over the
// window (compact FP8 ring + this chunk's rows) and the selected compact FP4 entries. Every per-query
// reduction runs in the CPU's order, so a row's result does not depend on the batch.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/rows.cuh"
#include "backends/cuda/kernels/sink_softmax.cuh"
#include "backends/cuda/kernels/topk.cuh"
#include "backends/cuda/kernels/v41_cache.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

constexpr int kIndexKeysPerBlock = 32;  // one key per 8-thread group, 256 threads

// grid (num_rows, ceil(max_entries / 32)), block 256; dynamic shared memory: 32 x head_dim floats.
static __global__ void index_scores_kernel(const __grid_constant__ IndexScoresParams p) {
    extern __shared__ float keys_sh[];
    const IndexRow& ir = p.rows[blockIdx.x];
    const int group = threadIdx.x / 8, lane = threadIdx.x % 8;
    const int64_t j_raw = static_cast<int64_t>(blockIdx.y) * kIndexKeysPerBlock + group;
    if (static_cast<int64_t>(blockIdx.y) * kIndexKeysPerBlock >= ir.num_entries) return;  // uniform per block
    const int64_t ID = p.head_dim;
    const int64_t j = j_raw < ir.visible ? j_raw : 0;
    float* key = keys_sh + group * ID;
    const int64_t key_bytes = row_bytes_of(p.key_format, ID, p.key_block);
    if (ir.visible > 0) {
        const uint8_t* row = cache_row(ir.keys, p.paged_keys, ir.segment, j, key_bytes);
        for (int64_t i = lane; i < ID; i += 8) key[i] = cache_value(row, p.key_format, ID, p.key_block, i);
    }
    __syncwarp();
    const float softmax_scale = 1.0f / sqrtf(static_cast<float>(ID));
    const float heads_scale = 1.0f / sqrtf(static_cast<float>(p.heads));
    float acc = 0.0f;
    if (ir.visible > 0) {
        for (int64_t h = 0; h < p.heads; ++h) {
            const float d = dev::dot_group8(p.q + (static_cast<int64_t>(ir.row) * p.heads + h) * ID, key, ID, lane);
            const float hw = p.weights[static_cast<int64_t>(ir.row) * p.heads + h];
            if (p.official) {
                const float wgt = dev::round_bf16(dev::mul(dev::mul(hw, softmax_scale), heads_scale));
                acc = dev::round_bf16(dev::add(acc, dev::round_bf16(dev::mul(fmaxf(dev::round_bf16(d), 0.0f), wgt))));
            } else {
                acc = dev::add(acc, dev::mul(dev::mul(fmaxf(d, 0.0f), softmax_scale), dev::mul(hw, heads_scale)));
            }
        }
    }
    if (lane == 0 && j_raw < ir.num_entries)
        p.scores[blockIdx.x * p.max_entries + j_raw] = j_raw < ir.visible ? acc : -__int_as_float(0x7F800000);
}

// grid (num_rows), block kTopkThreads.
static __global__ void __launch_bounds__(kTopkThreads) candidate_kernel(const __grid_constant__ CandidateParams p) {
    const IndexRow& ir = p.rows[blockIdx.x];
    const int64_t n = ir.num_entries;
    float* sc = p.scores + blockIdx.x * p.ld;
    const float neg_inf = -__int_as_float(0x7F800000);
    if (!p.build) {
        if (ir.mask_entries < 0) return;
        const uint8_t* m = p.mask + static_cast<int64_t>(ir.row) * p.mask_ld;
        for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
            if (j >= ir.mask_entries || !m[j]) sc[j] = neg_inf;
        return;
    }
    const int64_t bs = p.block_size, nb = (n + bs - 1) / bs, max_blocks = (p.ld + bs - 1) / bs;
    float* block = p.block_scores + blockIdx.x * max_blocks;
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) {
        float v = neg_inf;
        const int64_t end = (b + 1) * bs < n ? (b + 1) * bs : n;
#pragma unroll 8
        for (int64_t j = b * bs; j < end; ++j) v = fmaxf(v, sc[j]);  // (the loads of 8 in flight)
        block[b] = v;
    }
    __syncthreads();
    if (threadIdx.x == 0 && ir.visible > 0) block[(ir.visible - 1) / bs] = __int_as_float(0x7F800000);
    uint8_t* m = p.mask + static_cast<int64_t>(ir.row) * p.mask_ld;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m[j] = 0;
    __syncthreads();
    int32_t* picked = p.block_picked + blockIdx.x * p.keep_blocks;
    topk_row(block, nb, p.keep_blocks, picked);  // the stable sort's first keep_blocks blocks
    __syncthreads();
    // The kept blocks' entries marked, a block per thread (the same mask as block after block: only 1s
    // are written, over the zeros above; was one block at a time with bs of the threads).
    const int64_t keep = p.keep_blocks < nb ? p.keep_blocks : nb;
    for (int64_t k = threadIdx.x; k < keep; k += blockDim.x) {
        const int32_t b = picked[k];
        if (b < 0 || !(block[b] > neg_inf)) continue;
        const int64_t end = (b + 1) * bs < n ? (b + 1) * bs : n;
        for (int64_t j = b * bs; j < end; ++j) m[j] = 1;
    }
}

// grid (num_rows), block 32: the picks with a finite score, in order, then -1 (a warp compacts 32 picks
// at a time: each kept pick's slot is the kept picks before it).
static __global__ void topk_publish_kernel(const __grid_constant__ TopkPublishParams p) {
    const IndexRow& ir = p.rows[blockIdx.x];
    const int32_t* picked = p.picked + blockIdx.x * p.k;
    const float* sc = p.scores + blockIdx.x * p.ld;
    int32_t* out = p.out + static_cast<int64_t>(ir.row) * p.k;
    const int lane = static_cast<int>(threadIdx.x);
    int64_t w = 0;
    for (int64_t base = 0; base < p.k; base += 32) {
        const int64_t i = base + lane;
        const int32_t j = i < p.k ? picked[i] : -1;
        const bool keep = j >= 0 && sc[j] > -__int_as_float(0x7F800000);
        const unsigned m = __ballot_sync(0xFFFFFFFFu, keep);
        if (keep) out[w + __popc(m & ((1u << lane) - 1u))] = j;
        w += __popc(m);
    }
    for (int64_t i = w + lane; i < p.k; i += 32) out[i] = -1;
}

// Key j of a query: window positions lo..P (chunk rows or the compact ring), then selected entries.
struct SinkKeys {
    const SinkSegment* seg;
    const float* chunk_kv;    // this segment's first chunk row
    const int32_t* selected;  // this row's picks (ascending, -1 padded) or null
    int64_t lo, num_window, Dh, window_rows, window_bytes, entry_bytes, window_block, entry_block;
    CacheFormat window_format, entry_format;
    const PagedCacheRows* paged;  // the entries' pages (tables null: contiguous from seg->entries)
    int64_t segment;
    __device__ float operator()(int64_t j, int64_t d) const {
        if (j < num_window) {
            const int64_t q = lo + j;
            if (q >= seg->first_position) return chunk_kv[(q - seg->first_position) * Dh + d];
            return cache_value(seg->window + (q % window_rows) * window_bytes, window_format, Dh, window_block, d);
        }
        const int64_t e = selected[j - num_window];
        return cache_value(cache_row(seg->entries, *paged, segment, e, entry_bytes), entry_format, Dh, entry_block, d);
    }
    // Whether the keys may be read 16 values at a time (every format's scale block a multiple of 16).
    __device__ bool by16() const {
        auto ok = [&](CacheFormat f, int64_t block) { return f == CacheFormat::kF32 || block % 16 == 0; };
        return Dh % 16 == 0 && ok(window_format, window_block) && ok(entry_format, entry_block);
    }
    // The row key j is read from: this chunk's f32 row, the window ring's row or the selected entry's row.
    __device__ const uint8_t* row_of(int64_t j) const {
        if (j < num_window) {
            const int64_t q = lo + j;
            if (q >= seg->first_position) return reinterpret_cast<const uint8_t*>(chunk_kv + (q - seg->first_position) * Dh);
            return seg->window + (q % window_rows) * window_bytes;
        }
        return cache_row(seg->entries, *paged, segment, selected[j - num_window], entry_bytes);
    }
    // How row_of(j) is stored: its format and scale block.
    __device__ void format_of(int64_t j, CacheFormat& f, int64_t& block) const {
        if (j >= num_window) {
            f = entry_format, block = entry_block;
        } else if (lo + j >= seg->first_position) {
            f = CacheFormat::kF32, block = 1;
        } else {
            f = window_format, block = window_block;
        }
    }
};

// grid (rows, heads), block 256; dynamic shared memory: head_dim floats.
static __global__ void sink_attention_kernel(const __grid_constant__ SinkAttentionParams p) {
    extern __shared__ float o_sh[];
    __shared__ float mx_sh, den_sh;
    __shared__ int64_t nsel_sh;
    const int64_t r = blockIdx.x, h = blockIdx.y, Dh = p.head_dim;
    const SinkSegment& seg = p.segments[p.row_segment[r]];
    const int64_t pos = p.positions[r];
    const int64_t lo0 = seg.window_begin > 0 ? seg.window_begin : 0;  // (bounded replay's floor)
    const int64_t lo = pos - p.window + 1 > lo0 ? pos - p.window + 1 : lo0;
    const int32_t* sel = (seg.entries && p.selected) ? p.selected + r * p.topk : nullptr;
    if (threadIdx.x == 0) {
        int64_t n = 0;
        if (sel)
            while (n < p.topk && sel[n] >= 0) ++n;
        nsel_sh = n;
    }
    __syncthreads();
    const SinkKeys key{&seg, p.kv + seg.row_begin * Dh, sel, lo, pos - lo + 1, Dh, p.window_rows,
                       row_bytes_of(p.window_format, Dh, p.window_block), row_bytes_of(p.entry_format, Dh, p.entry_block),
                       p.window_block, p.entry_block, p.window_format, p.entry_format, &p.paged_entries, p.row_segment[r]};
    const int64_t nc = key.num_window + nsel_sh;
    const float* q = p.q + (r * p.heads + h) * Dh;
    float* sc = p.scratch + (r * p.heads + h) * p.max_candidates;
    sink_scores(q, key, nc, Dh, p.softmax_scale, sc);
    const float sink = p.sink[h];
    const float den = sink_softmax_exp(sc, nc, sink, &mx_sh, &den_sh);
    for (int64_t j = threadIdx.x; j < nc; j += blockDim.x) sc[j] = dev::maybe_bf16(sc[j] / den, p.official);
    __syncthreads();
    for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) {
        float o = 0.0f;
        for (int64_t j = 0; j < nc; ++j) o = dev::add(o, dev::mul(sc[j], key(j, d)));
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

}  // namespace deepinfer::cuda::kernels
