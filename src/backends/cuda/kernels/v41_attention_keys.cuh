// SPDX-License-Identifier: Apache-2.0
// The keys of one row of V4.1's tensor-core sink attention (v41_attention_tc.cuh,
// v41_attention_tc_heads.cuh) decoded into shared memory as bf16, a block of rows at a time: the window's
// (this chunk's f32 rows, the compact FP8 ring) then the selected compact FP4 entries (SinkKeys' order).
// Every key is located once into a table of its row's address and a kind byte (0: f32, 1: the window
// ring's format, 2: the entries' format); a thread always decodes the same 16 columns d0 .. d0 + 15 of
// its keys jt, jt + kKeyStep, ... (a warp: one key of 512 values, or several of fewer), so its code and
// scale offsets in either format are worked out once, and each staging puts two items' code loads in
// flight per thread before decoding them.
// A staging may cover a column slice [c0, c0 + kCols) of the keys (the split form's P·V CTAs,
// v41_attention_tc_split.cuh) and a table of a range of keys [first, end) (its score CTAs): the same
// values, decoded by the same code, into rows of kCols columns. (Was an item index split, a format lookup through the segment
// and a 64-bit division by the scale block per item: most of the kernel's integer instructions, ncu,
// session 36.) The values are cache_values16's, by way of cache_codes16 / cache_decode16's two steps.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/cp_async.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/kernels/v41_attention.cuh"
#include "backends/cuda/kernels/v41_cache.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// Keys per row the kernels hold (the window's and the picks': window + topk <= this, the release's 128 +
// 512; the launcher takes the reference kernel otherwise), and the bytes of their table: an address and a
// kind byte each.
constexpr int kV41KeyTable = 640;
constexpr int64_t kV41KeyTableBytes = 9 * kV41KeyTable;

// Row r's keys (SinkKeys' order: the window's max(0, P - W + 1, window_begin) .. P, then the valid picks) and
// their count, into nc. Every thread of the CTA (kThreads; a __syncthreads_count loop over the picks).
template <int kD, int kThreads>
__device__ __forceinline__ SinkKeys v41_row_keys(const SinkAttentionParams& p, int64_t r, int tid, int64_t& nc) {
    const SinkSegment& seg = p.segments[p.row_segment[r]];
    const int64_t pos = p.positions[r];
    const int64_t lo0 = seg.window_begin > 0 ? seg.window_begin : 0;  // (bounded replay's floor)
    const int64_t lo = pos - p.window + 1 > lo0 ? pos - p.window + 1 : lo0;
    const int32_t* sel = (seg.entries && p.selected) ? p.selected + r * p.topk : nullptr;
    int64_t nsel = 0;  // the picks are ascending and -1 padded
    for (int64_t base = 0; base < (sel ? p.topk : 0); base += kThreads)
        nsel += __syncthreads_count(base + tid < p.topk && sel[base + tid] >= 0);
    const SinkKeys key{&seg, p.kv + seg.row_begin * kD, sel, lo, pos - lo + 1, kD, p.window_rows,
                       row_bytes_of(p.window_format, kD, p.window_block), row_bytes_of(p.entry_format, kD, p.entry_block),
                       p.window_block, p.entry_block, p.window_format, p.entry_format, &p.paged_entries, p.row_segment[r]};
    nc = key.num_window + nsel;
    return key;
}

// A row's keys for a CTA of kThreads threads. Construct with every thread of the CTA (it ends with a
// barrier that publishes the table, when there is one), then stage<kRows>() blocks of keys.
// kBf16: the row's keys are pre-decoded bf16 rows (SinkAttentionParams::keys_bf16; the caller checked that the row's
// segment has them): the table holds their addresses and stage_async copies them.
template <int kD, int kThreads, int kCols = kD, bool kBf16 = false>
struct V41KeyStaging {
    static constexpr int kLanesPerKey = kCols / 16, kKeyStep = kThreads / kLanesPerKey;
    static_assert(kD % 16 == 0 && kCols % 16 == 0 && kD % kCols == 0 && kThreads % kLanesPerKey == 0,
                  "whole keys per sweep of the CTA");
    const uint8_t** rows;  // [kV41KeyTable] in shared memory
    uint8_t* kind;         // [kV41KeyTable]: 0: f32 row, 1: window format, 2: entry format
    bool by16;
    int tid, c0, d0, jt;
    int64_t first;  // the table's first key

    // table: kV41KeyTableBytes of shared memory; the table of keys first .. end - 1 (end <= the row's keys,
    // end - first <= kV41KeyTable), columns col0 .. col0 + kCols - 1.
    __device__ V41KeyStaging(const SinkKeys& key, const SinkAttentionParams& p, unsigned char* table, int64_t end, int thread,
                             int64_t first_key = 0, int col0 = 0)
        : rows(reinterpret_cast<const uint8_t**>(table)), kind(table + 8 * kV41KeyTable), by16(key.by16()), tid(thread),
          c0(col0), d0(col0 + (thread % kLanesPerKey) * 16), jt(thread / kLanesPerKey), first(first_key) {
        if constexpr (kBf16) {
            // Key rows (SinkBf16Keys): this chunk's rows at their batch row, older window positions from the
            // ring's rows, picks at entry_row + the entry.
            const SinkBf16Keys bk = p.bf16_keys[key.segment];
            const uint16_t* base = p.keys_bf16;
            for (int64_t j = first + tid; j < end; j += kThreads) {
                int64_t kr;
                if (j < key.num_window) {
                    const int64_t q = key.lo + j;
                    kr = q >= key.seg->first_position ? key.seg->row_begin + (q - key.seg->first_position) : bk.ring_row + (q - bk.ring_lo);
                } else {
                    kr = bk.entry_row + key.selected[j - key.num_window];
                }
                rows[j - first] = reinterpret_cast<const uint8_t*>(base + kr * kD);
            }
            __syncthreads();
        } else if (by16) {
            for (int64_t j = first + tid; j < end; j += kThreads) {
                CacheFormat f;
                int64_t blk;
                key.format_of(j, f, blk);
                rows[j - first] = key.row_of(j);
                kind[j - first] = f == CacheFormat::kF32 ? 0 : j >= key.num_window ? 2 : 1;
            }
            __syncthreads();
        }
    }

    // Keys j0 .. j0 + n - 1 of `key` and `p` (the constructor's; within its table) into rows 0 .. n - 1 of kv
    // ([kRows, kP] bf16: the columns c0 .. c0 + kCols - 1) as bf16; rows n .. kRows - 1 zero.
    // By 16 values (one vector load of a key's codes and one scale) where the formats allow (by16), kMaxBatch
    // items' code loads in flight per thread before it decodes them (the values do not depend on it; more
    // hides more load latency and holds 5 more registers an item), else 8 single decodes in flight per thread.
    template <int kRows, int kP, int kMaxBatch = 2>
    __device__ void stage(__nv_bfloat16* kv, int64_t j0, int64_t n, const SinkKeys& key, const SinkAttentionParams& p) const {
        static_assert(kRows * kCols % (8 * kThreads) == 0, "key staging in batches of 8");
        static_assert((kP * 2) % 16 == 0, "16-byte shared-memory stores");
        if (by16) {
            // The quantized formats' facts for this thread's columns (w: the window ring's, e: the entries'):
            // codes at row + *_codes, the scale byte at row + *_scale (scalars, not a struct picked by
            // reference, which the compiler kept in local memory; worked out per staging, not kept live
            // through the kernel).
            const bool w_fp8 = p.window_format == CacheFormat::kFp8Ue8m0, e_fp8 = p.entry_format == CacheFormat::kFp8Ue8m0;
            const bool w_e4m3 = p.window_format == CacheFormat::kFp4E4m3, e_e4m3 = p.entry_format == CacheFormat::kFp4E4m3;
            const int w_codes = w_fp8 ? d0 : d0 / 2, e_codes = e_fp8 ? d0 : d0 / 2;
            const int w_scale = static_cast<int>((w_fp8 ? kD : kD / 2) + d0 / static_cast<int>(p.window_block > 0 ? p.window_block : 1));
            const int e_scale = static_cast<int>((e_fp8 ? kD : kD / 2) + d0 / static_cast<int>(p.entry_block > 0 ? p.entry_block : 1));
            constexpr int kPer = (kRows + kKeyStep - 1) / kKeyStep, kBatch = kPer < kMaxBatch ? kPer : kMaxBatch;
            static_assert(kPer % kBatch == 0, "whole batches");
#pragma unroll
            for (int u0 = 0; u0 < kPer; u0 += kBatch) {
                Codes16 c[kBatch];
                const uint8_t* row[kBatch];
                int kd[kBatch];
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    const int j = jt + (u0 + u) * kKeyStep;
                    row[u] = nullptr, kd[u] = 0, c[u].direct = true;
                    if (j < n) {
                        row[u] = rows[j0 - first + j];
                        kd[u] = kind[j0 - first + j];
                        if (kd[u] != 0) {
                            const bool w = kd[u] == 1, fp8 = w ? w_fp8 : e_fp8;
                            const uint8_t* codes = row[u] + (w ? w_codes : e_codes);
                            const uintptr_t addr = reinterpret_cast<uintptr_t>(codes);
                            if (fp8 && (addr & 15u) == 0) {
                                const uint4 x = *reinterpret_cast<const uint4*>(codes);
                                c[u].w[0] = x.x, c[u].w[1] = x.y, c[u].w[2] = x.z, c[u].w[3] = x.w;
                                c[u].scale = row[u][w ? w_scale : e_scale], c[u].direct = false;
                            } else if (!fp8 && (addr & 7u) == 0) {
                                const uint2 x = *reinterpret_cast<const uint2*>(codes);
                                c[u].w[0] = x.x, c[u].w[1] = x.y;
                                c[u].scale = row[u][w ? w_scale : e_scale], c[u].direct = false;
                            }
                        }
                    }
                }
#pragma unroll
                for (int u = 0; u < kBatch; ++u) {
                    const int j = jt + (u0 + u) * kKeyStep;
                    if (j >= kRows) continue;
                    float v[16];
                    const bool w = kd[u] == 1;
                    if (!row[u]) {
#pragma unroll
                        for (int k = 0; k < 16; ++k) v[k] = 0.0f;
                    } else if (c[u].direct) {
                        // (f32 rows, and codes off their vector alignment)
                        cache_values16(row[u], kd[u] == 0 ? CacheFormat::kF32 : w ? p.window_format : p.entry_format, kD,
                                       kd[u] == 0 ? 1 : w ? p.window_block : p.entry_block, d0, v);
                    } else if (w ? w_fp8 : e_fp8) {
                        e4m3x16_values(c[u].w, dev::e8m0_value(c[u].scale), v);
                    } else {
                        e2m1x16_values(c[u].w[0], c[u].w[1],
                                       (w ? w_e4m3 : e_e4m3) ? dev::e4m3_value(c[u].scale) : dev::e8m0_value(c[u].scale), v);
                    }
                    store_bf16x16(kv + j * kP + (d0 - c0), v);
                }
            }
            return;
        }
        for (int i0 = tid; i0 < kRows * kCols; i0 += 8 * kThreads) {
            float v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int i = i0 + u * kThreads, j = i / kCols;
                v[u] = j < n ? key(j0 + j, c0 + i % kCols) : 0.0f;
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
                const int i = i0 + u * kThreads;
                kv[(i / kCols) * kP + i % kCols] = __float2bfloat16_rn(v[u]);
            }
        }
    }

    // stage()'s result for a row whose keys are bf16 rows (kBf16), by asynchronous copies (cp.async, 16 bytes;
    // rows n .. kRows - 1 zero-filled, reading nothing from `any`, a valid global address). The caller commits the
    // group and waits for it (and a barrier) before reading kv.
    template <int kRows, int kP>
    __device__ __forceinline__ void stage_async(__nv_bfloat16* kv, int64_t j0, int64_t n, const void* any) const {
        static_assert(kBf16, "asynchronous copies of pre-decoded keys only");
        constexpr int kPer = (kRows + kKeyStep - 1) / kKeyStep;
#pragma unroll
        for (int u = 0; u < kPer; ++u) {
            const int j = jt + u * kKeyStep;
            if (j >= kRows) continue;
            const bool on = j < n;
            const uint8_t* src = on ? rows[j0 - first + j] + 2 * d0 : static_cast<const uint8_t*>(any);
            __nv_bfloat16* dst = kv + j * kP + (d0 - c0);
            dev::cp_async16(dst, src, on ? 16 : 0);
            dev::cp_async16(dst + 8, on ? src + 16 : src, on ? 16 : 0);
        }
    }
};

}  // namespace deepinfer::cuda::kernels
