// SPDX-License-Identifier: Apache-2.0
// Device code of the attention block's stateful parts: ring writes, the compressor (pooling +
// finalization of completed windows), lightning-indexer scores and the sparse sink attention.
// Candidate order and every per-query reduction follow src/model/attention_block.cpp and
// compressor.cpp, so a query's result is independent of the batch and of how the chunk was split.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/rows.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

__device__ __forceinline__ float* ring_of(const DeviceSegment& s, RingKind k) {
    switch (k) {
        case RingKind::kWindow: return s.window;
        case RingKind::kCompKv: return s.comp_kv;
        case RingKind::kCompGate: return s.comp_gate;
        case RingKind::kIdxKv: return s.idx_kv;
        case RingKind::kIdxGate: return s.idx_gate;
    }
    return nullptr;
}

// Row i of a segment's compressed KV entries (width head_dim) or indexer keys, contiguous or paged.
__device__ __forceinline__ float* entry_row(const DeviceSegment& s, bool indexer, int64_t i, int64_t width) {
    if (s.pages == nullptr) return (indexer ? s.idx_entries : s.comp_entries) + i * width;
    return s.pages[i / s.entries_per_page] + (indexer ? s.idx_offset : s.comp_offset) + (i % s.entries_per_page) * width;
}

// grid (num_segments, max_rows), block 128.
static __global__ void ring_write_kernel(const __grid_constant__ RingWriteParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const DeviceSegment& s = p.segments[blockIdx.x];
    const int64_t t = blockIdx.y;
    if (t >= s.num_rows || t < s.num_rows - p.ring_rows) return;
    const int64_t pos = s.first_position + t, ld = p.src_ld > 0 ? p.src_ld : p.width;
    float* dst = ring_of(s, p.ring) + (pos % p.ring_rows) * p.width;
    const float* src = p.src + (s.row_begin + t) * ld;
    for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) dst[i] = src[i];
    if (p.src2 == nullptr) return;
    float* dst2 = ring_of(s, p.ring2) + (pos % p.ring_rows) * p.width;
    const float* src2 = p.src2 + (s.row_begin + t) * ld;
    if (p.add2) {
        const float* add = p.add2 + (pos % p.add2_ratio) * p.width;  // (add_ape_kernel's row and addition)
        for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) dst2[i] = dev::add(src2[i], add[i]);
    } else {
        for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) dst2[i] = src2[i];
    }
}

static __global__ void add_ape_kernel(const __grid_constant__ AddApeParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t r = blockIdx.x;
    const float* ape = p.ape + (p.positions[r] % p.ratio) * p.width;
    float* gate = p.gate + r * (p.ld > 0 ? p.ld : p.width);
    for (int64_t i = threadIdx.x; i < p.width; i += blockDim.x) gate[i] = dev::add(gate[i], ape[i]);
}

// grid (num_segments, max_windows), block compressor_threads(head_dim, slots); dynamic shared memory:
// head_dim floats. A channel's arithmetic never depends on the block size.
constexpr int kCompressorBatch = 8;
constexpr int kCompressorMaxThreads = 512;
// A thread per channel, up to 512 for windows of many slots (HCA's 128: 299 -> 173 us per 8K-token launch
// with 512 threads) and up to 256 for few (CSA's 8: its 512-dim compressor took 133 -> 165 us with 512, as
// the block's warp-0 finalization then holds more idle threads; its 128-dim indexer compressor 63 -> 44 us
// with 128), bench/results/cuda-session30-h200-compressor.md.
inline int compressor_threads(int64_t head_dim, int64_t slots) {
    const int64_t cap = slots >= 64 ? kCompressorMaxThreads : 256;
    const int64_t t = (head_dim + 31) / 32 * 32;
    return static_cast<int>(t < 32 ? 32 : t > cap ? cap : t);
}
static __global__ void __launch_bounds__(kCompressorMaxThreads) compressor_kernel(const __grid_constant__ CompressorParams p) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    extern __shared__ float entry[];
    const DeviceSegment& s = p.segments[blockIdx.x];
    const int64_t m = p.ratio, d = p.head_dim, P0 = s.first_position, n = s.num_rows;
    const int64_t first = (P0 + m) / m - 1;  // first window ending inside the chunk
    const int64_t last = (P0 + n) / m - 1;   // last one
    const int64_t i = first + blockIdx.y;
    if (i > last) return;
    const int64_t width = p.overlap ? 2 * d : d;
    const float* ring_kv = p.indexer ? s.idx_kv : s.comp_kv;
    const float* ring_gate = p.indexer ? s.idx_gate : s.comp_gate;
    const int64_t ld = p.ld > 0 ? p.ld : width;  // the chunk's rows (the rings' rows are width apart)
    auto row_kv = [&](int64_t pos) {
        return pos >= P0 ? p.kv + (s.row_begin + pos - P0) * ld : ring_kv + (pos % p.ring_rows) * width;
    };
    // Gate value c of position pos: the ring's (ape included), or the chunk's plus its ape row (pos % m, as
    // add_ape_kernel adds it) where the ape is folded in here.
    auto gate_at = [&](int64_t pos, int64_t c) {
        if (pos < P0) return ring_gate[(pos % p.ring_rows) * width + c];
        const float v = p.gate[(s.row_begin + pos - P0) * ld + c];
        return p.ape ? dev::add(v, p.ape[(pos % m) * width + c]) : v;
    };
    const int64_t slots = p.overlap ? 2 * m : m;
    const float neg_inf = -__int_as_float(0x7F800000);
    for (int64_t ch = threadIdx.x; ch < d; ch += blockDim.x) {
        // Slot s: overlap -> s < m: previous window's first half (empty for window 0), else this window's
        // second half; no overlap -> this window's rows.
        auto slot = [&](int64_t sl, float* kv, float* g) {
            if (p.overlap && sl < m) {
                if (i == 0) {
                    *kv = 0.0f;
                    *g = neg_inf;
                    return;
                }
                const int64_t pos = (i - 1) * m + sl;
                *kv = row_kv(pos)[ch];
                *g = gate_at(pos, ch);
                return;
            }
            const int64_t pos = i * m + (p.overlap ? sl - m : sl);
            const int64_t off = p.overlap ? d : 0;
            *kv = row_kv(pos)[off + ch];
            *g = gate_at(pos, off + ch);
        };
        float mx = neg_inf;
        for (int64_t sl = 0; sl < slots; ++sl) {
            float kv, g;
            slot(sl, &kv, &g);
            mx = fmaxf(mx, g);
        }
        // The softmax over the slots, kCompressorBatch slots at a time: their loads, exponentials and
        // divisions are independent (issued together), only the sums run in slot order, as before.
        auto slot_sum = [&](auto term_of) {
            float sum = 0;
            for (int64_t s0 = 0; s0 < slots; s0 += kCompressorBatch) {
                float term[kCompressorBatch];
#pragma unroll
                for (int j = 0; j < kCompressorBatch; ++j) {
                    float kv = 0.0f, g = neg_inf;
                    if (s0 + j < slots) slot(s0 + j, &kv, &g);
                    term[j] = s0 + j < slots ? term_of(kv, g) : 0.0f;
                }
#pragma unroll
                for (int j = 0; j < kCompressorBatch; ++j)
                    if (s0 + j < slots) sum = dev::add(sum, term[j]);
            }
            return sum;
        };
        const float den = slot_sum([&](float, float g) { return dev::exp_f32(dev::add(g, -mx)); });
        const float acc = slot_sum([&](float kv, float g) { return dev::mul(kv, dev::exp_f32(dev::add(g, -mx)) / den); });
        entry[ch] = dev::maybe_bf16(acc, p.official);
    }
    __syncthreads();
    if (threadIdx.x >= 32) return;
    // Warp 0: weighted RMS norm, bf16, RoPE at the window's first position, bf16, QAT.
    const float dd = dev::dot_group8(entry, entry, d, threadIdx.x % 8);
    const float r = 1.0f / sqrtf(dev::add(dd / static_cast<float>(d), p.eps));
    __syncwarp();
    for (int64_t c = threadIdx.x; c < d; c += 32) entry[c] = dev::maybe_bf16(dev::mul(p.norm[c], dev::mul(entry[c], r)), p.official);
    __syncwarp();
    rope_warp(entry, d, p.rope_dim, p.cos_sin + (i * m) * p.rope_dim, false);
    if (p.official) {
        for (int64_t c = threadIdx.x; c < d; c += 32) entry[c] = dev::round_bf16(entry[c]);
        __syncwarp();
        if (p.qat == Qat::kFp8Nope) fp8_simulate_nope_warp(entry, d - p.rope_dim);
        else if (p.qat == Qat::kHadamardFp4) hadamard_fp4_warp(entry, d);
    }
    __syncwarp();
    float* out = entry_row(s, p.indexer, i, d);
    for (int64_t c = threadIdx.x; c < d; c += 32) out[c] = entry[c];
}

// grid (rows, ceil(max_visible / 32)), block 256: one key per 8-thread group.
static __global__ void indexer_scores_kernel(const __grid_constant__ IndexerParams p) {
    const int64_t r = blockIdx.x;
    const int group = threadIdx.x / 8, lane = threadIdx.x % 8;
    const DeviceSegment& s = p.segments[p.row_segment[r]];
    const int64_t visible = (static_cast<int64_t>(p.positions[r]) + 1) / p.ratio;
    const int64_t key_raw = static_cast<int64_t>(blockIdx.y) * 32 + group;
    const int64_t key = key_raw < visible ? key_raw : 0;
    if (static_cast<int64_t>(blockIdx.y) * 32 >= visible) return;  // no key of this block is visible (uniform)
    const float softmax_scale = 1.0f / sqrtf(static_cast<float>(p.head_dim));
    const float weights_scale = 1.0f / sqrtf(static_cast<float>(p.heads));
    const float* k = entry_row(s, true, key, p.head_dim);
    float score = 0;
    for (int64_t h = 0; h < p.heads; ++h) {
        const float dp = dev::dot_group8(p.q + (r * p.heads + h) * p.head_dim, k, p.head_dim, lane);
        const float hw = p.weights[r * p.heads + h];
        if (p.official) {
            const float wgt = dev::round_bf16(dev::mul(dev::mul(hw, softmax_scale), weights_scale));
            score = dev::round_bf16(dev::add(score, dev::round_bf16(dev::mul(fmaxf(dev::round_bf16(dp), 0.0f), wgt))));
        } else {
            score = dev::add(score, dev::mul(dev::mul(fmaxf(dp, 0.0f), softmax_scale), dev::mul(hw, weights_scale)));
        }
    }
    if (lane == 0 && key_raw < visible) p.scores[r * p.max_visible + key_raw] = score;
}

static __global__ void visible_counts_kernel(const int32_t* positions, int64_t rows, int64_t ratio, int32_t* out) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (r < rows) out[r] = static_cast<int32_t>((static_cast<int64_t>(positions[r]) + 1) / ratio);
}

// Candidate j of a row: window positions lo..pos, then compressed entries.
struct Candidates {
    const float* chunk_kv;  // this segment's first chunk row
    const float* window;
    const DeviceSegment* seg;  // its compressed entries
    const int32_t* selected;  // CSA picks of this row or null
    int64_t lo, P0, window_rows, num_window, head_dim;
    __device__ const float* operator()(int64_t j) const {
        if (j < num_window) {
            const int64_t q = lo + j;
            return q >= P0 ? chunk_kv + (q - P0) * head_dim : window + (q % window_rows) * head_dim;
        }
        const int64_t c = j - num_window;
        return entry_row(*seg, false, selected ? static_cast<int64_t>(selected[c]) : c, head_dim);
    }
};

// Row r of a sparse attention: its position, its candidates (the window, then the compressed entries: every
// visible one for HCA, the indexer's picks for CSA; rows of `width` floats) and how many.
struct RowCandidates {
    int64_t pos;
    Candidates cand;
    int64_t nc;
};
__device__ __forceinline__ RowCandidates row_candidates(const SparseAttentionParams& p, int64_t r, int64_t width) {
    const DeviceSegment& s = p.segments[p.row_segment[r]];
    const int64_t pos = p.positions[r];
    const int64_t lo = pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
    int64_t num_comp = 0;
    if (p.kind == AttentionKind::kHca) num_comp = (pos + 1) / p.ratio;
    if (p.kind == AttentionKind::kCsa) {
        const int64_t vis = (pos + 1) / p.ratio;
        num_comp = vis < p.topk ? vis : p.topk;
    }
    const Candidates cand{p.kv + s.row_begin * width, s.window, &s,
                          p.kind == AttentionKind::kCsa ? p.selected + r * p.topk : nullptr,
                          lo, s.first_position, p.window_rows, pos - lo + 1, width};
    return {pos, cand, cand.num_window + num_comp};
}

// grid (rows, heads), block 256; dynamic shared memory: head_dim floats.
static __global__ void sparse_attention_kernel(const __grid_constant__ SparseAttentionParams p) {
    extern __shared__ float o_sh[];
    __shared__ float mx_sh, den_sh;
    const int64_t r = blockIdx.x, h = blockIdx.y, Dh = p.head_dim;
    const RowCandidates rc = row_candidates(p, r, Dh);
    const int64_t pos = rc.pos, nc = rc.nc;
    const Candidates& cand = rc.cand;
    const float* q = p.q + (r * p.heads + h) * Dh;
    float* sc = p.scratch + (r * p.heads + h) * p.max_candidates;
    const int group = threadIdx.x / 8, lane = threadIdx.x % 8;
    for (int64_t base = 0; base < nc; base += blockDim.x / 8) {
        const int64_t j = base + group;
        const float d = dev::dot_group8(q, cand(j < nc ? j : 0), Dh, lane);
        if (lane == 0 && j < nc) sc[j] = dev::mul(d, p.softmax_scale);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        float mx = -__int_as_float(0x7F800000);
        for (int64_t j = 0; j < nc; ++j) mx = fmaxf(mx, sc[j]);
        mx_sh = mx;
    }
    __syncthreads();
    const float mx = mx_sh;
    for (int64_t j = threadIdx.x; j < nc; j += blockDim.x) sc[j] = dev::exp_f32(dev::add(sc[j], -mx));
    __syncthreads();
    if (threadIdx.x == 0) {
        float den = dev::exp_f32(dev::add(p.sink[h], -mx));
        for (int64_t j = 0; j < nc; ++j) den = dev::add(den, sc[j]);
        den_sh = den;
    }
    __syncthreads();
    const float den = den_sh;
    for (int64_t d = threadIdx.x; d < Dh; d += blockDim.x) {
        float o = 0;
        for (int64_t j = 0; j < nc; ++j) {
            const float pj = p.official ? dev::round_bf16(sc[j]) : sc[j];
            o = dev::add(o, dev::mul(pj, cand(j)[d]));
        }
        o_sh[d] = dev::maybe_bf16(o / den, p.official);
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
