// SPDX-License-Identifier: Apache-2.0
// The sparse sink attention on tensor cores (fast GEMM mode, official numerics), in the form of
// DeepSeek's `sparse_attn` kernel (spec §2.8): per query row, the 64 heads of a block (V4's heads share
// each candidate's K=V row) against candidates in blocks of 64 with an online softmax —
//   s = (q · kv) · scale           bf16 x bf16 on m16n8k16 MMAs, f32 accumulation
//   m' = max(m, max_j s_j)         per head, f32
//   l = l · e^(m - m') + Σ_j e^(s_j - m')       f32 probabilities
//   o = o · e^(m - m') + Σ_j bf16(e^(s_j - m')) · kv_j     bf16 P x bf16 V on MMAs, f32 accumulation
// then den = l + e^(sink - m), o / den -> bf16, inverse RoPE of the rope dims -> bf16 (as the CUDA-core
// kernels). q and kv hold bf16 values in official numerics, so converting them to bf16 is exact; the
// result differs from the reference kernels only in the order of the f32 sums and the online
// rescaling. Every row's block reads only that row's candidates: batch-invariant.
//
// Block layout, staging, MMA loops and the split of a row's candidate blocks over the CTAs of a cluster
// (each CTA an online softmax over its blocks, merged in CTA order): attention_tc_common.cuh.
#pragma once

#include <cuda_bf16.h>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/attention_tc_common.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

// The pipelined kernel's staging: a block's 64 rows move in 4 batches of 16 rows through a ring of two
// batch slots in shared memory (cp.async, f32: no registers held while they fly), then into the
// block's bf16 buffer. Thread t copies and converts the float4s i = t + (4·batch + k)·kTcaThreads of
// the block (row i / kQuads, column i % kQuads; k < kPerBatch: tca_stage_rows' mapping and conversion),
// so it waits only for its own copies and no barrier separates a batch's arrival, conversion and the
// slot's next copy. kSwz: the block buffer in the wgmma kernel's layout (tcw::index), else rows
// tca_pitch apart.
template <int kD, bool kSwz = false>
struct TcaRing {
    // This thread's index, read anew at each use under kSwz (an opaque read: the compiler cannot hoist
    // the addresses made from it out of the block loop, where the wgmma kernel has no registers to keep
    // them and would spill them).
    __device__ __forceinline__ static int thread() {
        if constexpr (kSwz) {
            int t;
            asm volatile("mov.u32 %0, %%tid.x;\n" : "=r"(t));
            return t;
        } else {
            return static_cast<int>(threadIdx.x);
        }
    }
    static constexpr int kQuads = kD / 4, kRowStep = kTcaThreads / kQuads;
    static constexpr int kBatchRows = kTcaRingRows / 2, kPerBatch = kBatchRows / kRowStep;
    static_assert(kTcaThreads % kQuads == 0 && kBatchRows % kRowStep == 0 && kTcaBlock == 4 * kBatchRows,
                  "4 batches of whole float4s per thread");
    // Batch `batch` of the block whose rows are rows[] into slot batch % 2 (zeros for null rows), then
    // one commit group (also when nothing is copied: every thread counts the same groups).
    __device__ __forceinline__ static void issue(float* ring, const float* const* rows, int batch, const float* any) {
        const int t = thread(), c = (t % kQuads) * 4;
        const float* const* rr = rows + batch * kBatchRows + t / kQuads;
        float* dst = ring + ((batch % 2) * kBatchRows + t / kQuads) * kD + c;
#pragma unroll
        for (int k = 0; k < kPerBatch; ++k) {
            const float* src = rr[k * kRowStep];
            dev::cp_async16(dst + k * kRowStep * kD, src ? src + c : any, src ? 16 : 0);
        }
        dev::cp_async_commit();
    }
    __device__ __forceinline__ static void commit_none() { dev::cp_async_commit(); }
    // Waits for this thread's copies of the batch before the last committed one, converts them into the
    // block buffer kv [64, pitch].
    __device__ __forceinline__ static void convert(__nv_bfloat16* kv, const float* ring, int batch) {
        dev::cp_async_wait<1>();
        const int t = thread(), c = (t % kQuads) * 4;
        const float* src = ring + ((batch % 2) * kBatchRows + t / kQuads) * kD + c;
        const int row = batch * kBatchRows + t / kQuads;
        __nv_bfloat16* dst = kv + row * tca_pitch(kD) + c;
        float4 v[kPerBatch];
#pragma unroll
        for (int k = 0; k < kPerBatch; ++k) v[k] = *reinterpret_cast<const float4*>(src + k * kRowStep * kD);
#pragma unroll
        for (int k = 0; k < kPerBatch; ++k) {
            const uint2 packed{pack_bf16x2(v[k].x, v[k].y), pack_bf16x2(v[k].z, v[k].w)};
            if constexpr (kSwz) *reinterpret_cast<uint2*>(kv + tcw::index(row + k * kRowStep, c)) = packed;
            else *reinterpret_cast<uint2*>(dst + k * kRowStep * tca_pitch(kD)) = packed;
        }
        asm volatile("" ::: "memory");  // the slot's reads stay before its next copy
    }
    // A whole block into kv: its batches 0 and 1 are in flight (the last two commit groups); batches 2
    // and 3 follow through the ring, then batches 0 and 1 of the next block (rows `next`, or nothing)
    // stay in flight. kv must be free (a barrier after its last reader).
    __device__ __forceinline__ static void stage(__nv_bfloat16* kv, float* ring, const float* const* rows,
                                                 const float* const* next, const float* any) {
#pragma unroll
        for (int batch = 0; batch < 4; ++batch) {
            convert(kv, ring, batch);
            if (batch < 2) issue(ring, rows, batch + 2, any);
            else if (next) issue(ring, next, batch - 2, any);
            else commit_none();
        }
        if constexpr (kSwz) tcw::fence_proxy_async();  // kv's generic stores, before the barrier, for the wgmmas
    }
};

// A row's candidates (attention.cuh) and their count, kept in shared memory by the pipelined kernel and
// read back (volatile) where a block's row addresses are made: held in registers across the block loop
// they would spill (the loop needs the 64 accumulators and the MMA fragments).
struct TcaCandidates {
    Candidates cand;
    int64_t count;
    // Candidate j's row, null past the last one.
    __device__ __forceinline__ static const float* row(const TcaCandidates* shared, int64_t j) {
        const volatile TcaCandidates* v = shared;
        if (j >= v->count) return nullptr;
        const Candidates c{v->cand.chunk_kv, v->cand.window,     v->cand.seg,         v->cand.selected, v->cand.lo,
                           v->cand.P0,       v->cand.window_rows, v->cand.num_window, v->cand.head_dim};
        return c(j);
    }
};
static_assert(sizeof(TcaCandidates) <= 128, "tca_pipelined_smem_bytes holds 128 bytes for it");

// grid (rows, ceil(heads / 64), kSplit), cluster (1, 1, kSplit), block kTcaThreads, dynamic shared
// memory tca_smem_bytes(kD), or tca_pipelined_smem_bytes(kD) with kPipe.
//
// kPipe (kD >= 128): a block's rows are copied asynchronously (cp.async) into a ring of 32 f32 rows in
// shared memory (TcaRing) and converted from there into the bf16 block buffer: while a block's MMAs
// run, the next block's first 32 rows (64 KB at kD = 512) are in flight, and its last 32 follow while
// the first are converted. Without kPipe a CTA alternates a staging phase (each thread's loads in
// registers: 64 KB in flight, tensor cores idle) and an MMA phase (no loads in flight), and holding
// the loads' registers next to the 64 accumulators spills. The row addresses of the block after next
// are made during a block's MMAs. The arithmetic is the same with and without kPipe (the same values
// staged, the same MMAs in the same order): both produce the same bits.
//
// kWg >= 1 (sm_90a, kPipe, kD = 512, dynamic shared memory tcw_smem_bytes(kD)): the scores and P·V on
// warpgroup MMAs (attention_tc_wgmma.cuh) instead of per-warp mma.sync, q, kv and P in their swizzled
// layout: the same fragments, k-steps and order, about half the shared-memory operand traffic (a
// warpgroup reads each operand tile once, not once per warp that shares it). kWg = 2 also shortens
// what a row costs besides its blocks (at prefill a row's q in and output out cost about three blocks):
// the output goes from the accumulators straight to global memory (tca_merge_store's arithmetic with
// one part, without its two passes through shared memory and their barriers), and the CTA asks L2 for
// the q of the row one wave ahead (r + the SM count: the row that starts when a CTA of this wave ends).
// kWg = 3 also computes the scores on warpgroups 0 and 1 only (m64n32: each reads the q tile once per
// k-step for 32 candidates, not 16), the same k-steps per output.
template <int kD, int kSplit, bool kPipe, int kWg = 0>
static __global__ void __launch_bounds__(kTcaThreads, 1) tc_attention_kernel(const __grid_constant__ SparseAttentionParams p) {
    static_assert(!kWg || (kPipe && kD == 512 && kSplit == 1 && kWg <= 4), "the wgmma kernel: pipelined, kD = 512, one CTA per row");
    extern __shared__ __align__(16) unsigned char tca_sm[];
    const TcaShared<kD> sm = kWg ? TcaShared<kD>(tca_sm, TcwLayout{}) : TcaShared<kD>(tca_sm);
    constexpr int kPP = TcaShared<kD>::kPP;

    const int64_t r = blockIdx.x, h0 = static_cast<int64_t>(blockIdx.y) * kTcaHeads;
    const int split = static_cast<int>(blockIdx.z);
    const RowCandidates rc = row_candidates(p, r, kD);
    const int64_t pos = rc.pos, nc = rc.nc;
    const Candidates& cand = rc.cand;
    const int64_t nh = p.heads - h0 < kTcaHeads ? p.heads - h0 : kTcaHeads;
    const int64_t num_blocks = (nc + kTcaBlock - 1) / kTcaBlock;
    // Candidate j's row, null past the last one.
    auto row_of = [&](int64_t j) -> const float* { return j < nc ? cand(j) : nullptr; };

    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32, qd = lane % 4;
    // The warpgroup index, warp-uniform to the compiler (a lane-0 shuffle) where it guards wgmmas.
    const int hg = warp % 4, quarter = kWg ? __shfl_sync(0xffffffffu, warp / 4, 0) : warp / 4;
    const int row0 = hg * 16 + lane / 4, row1 = row0 + 8;  // this thread's two heads (block-local)
    constexpr float kLog2e = 1.4426950408889634f;
    const float scale2 = p.softmax_scale * kLog2e;  // scores in base-2 units
    const float neg_inf = -__int_as_float(0x7F800000);

    constexpr int kNt = kD / 32;  // output n-tiles of 8 columns per warp
    constexpr int kKs = kD / 16;  // k-steps of the scores
    float acc[kNt][4];
    float m_run[2] = {neg_inf, neg_inf}, l_run[2] = {0.f, 0.f};

    // One block of n candidates in kv: the online softmax's step. hook(0) runs after the first half of
    // the scores, hook(1) after the barrier that publishes the row maxima, hook(2) after the first half
    // of P·V, hook(3) after the second.
    // Quarters of the block's candidates whose scores this thread holds: its own (kWg < 3), or with
    // kWg = 3 two for warpgroups 0 and 1 (quarters 2·wg and 2·wg + 1: m64n32 wgmmas, the q tile read by
    // two warpgroups instead of four) and none for warpgroups 2 and 3. Each quarter's maxima, sums and
    // P entries are the same expressions whichever thread computes them.
    // kWg = 4: all four quarters on warpgroup 0 (m64n64: the q tile read once per k-step).
    constexpr int kQ = kWg >= 4 ? 4 : kWg >= 3 ? 2 : 1;
    const int nq = kWg >= 4 ? (quarter == 0 ? 4 : 0) : kWg >= 3 ? (quarter < 2 ? 2 : 0) : 1;
    auto quarter_of = [&](int qq) { return kWg >= 4 ? qq : kWg >= 3 ? 2 * quarter + qq : quarter; };
    auto attend = [&](const __nv_bfloat16* kv, int n, auto&& hook) {
        float sc[kQ][2][4];
#pragma unroll
        for (int qq = 0; qq < kQ; ++qq)
#pragma unroll
            for (int t = 0; t < 2; ++t) sc[qq][t][0] = sc[qq][t][1] = sc[qq][t][2] = sc[qq][t][3] = 0.f;
        if constexpr (kWg >= 4) {
            // Warpgroup 0: the 64 heads x the block's 64 candidates, k-steps 0..kKs-1 in order.
            if (nq > 0) {
                const uint64_t da = tcw::desc_k(sm.q), db = tcw::desc_k(kv);
                dev::wgmma_fence();
#pragma unroll 1
                for (int kb = 0; kb < kKs / 4; ++kb) {
#pragma unroll
                    for (int k4 = 0; k4 < 4; ++k4)
                        tcw::mma_n64(sc, da + (kb * tcw::kSubRows * 128 + k4 * 32) / 16, db + (kb * tcw::kSubRows * 128 + k4 * 32) / 16);
                }
                tcw::commit_wait();
            }
            hook(0);
        } else if constexpr (kWg >= 3) {
            // Warpgroups 0 and 1: the 64 heads x candidates 32·wg.. +31, k-steps 0..kKs-1 in order.
            if (nq > 0) {
                const uint64_t da = tcw::desc_k(sm.q), db = tcw::desc_k(kv + quarter * 32 * 64);
                dev::wgmma_fence();
#pragma unroll 1
                for (int kb = 0; kb < kKs / 4; ++kb) {
#pragma unroll
                    for (int k4 = 0; k4 < 4; ++k4)
                        tcw::mma_n32(sc, da + (kb * tcw::kSubRows * 128 + k4 * 32) / 16, db + (kb * tcw::kSubRows * 128 + k4 * 32) / 16);
                }
                tcw::commit_wait();
            }
            hook(0);
        } else if constexpr (kWg) {
            // Warpgroup `quarter`: the 64 heads x candidates 16·quarter.. +15, k-steps 0..kKs-1 in order.
            // Descriptors advance by 16 bytes a unit: 32 bytes a k-step, a sub-tile (8 KiB) every 4.
            const uint64_t da = tcw::desc_k(sm.q), db = tcw::desc_k(kv + quarter * 16 * 64);
            dev::wgmma_fence();
#pragma unroll 1
            for (int kb = 0; kb < kKs / 4; ++kb) {
#pragma unroll
                for (int k4 = 0; k4 < 4; ++k4)
                    tcw::mma_n16(sc[0], da + (kb * tcw::kSubRows * 128 + k4 * 32) / 16, db + (kb * tcw::kSubRows * 128 + k4 * 32) / 16);
            }
            tcw::commit_wait();
            hook(0);
        } else {
            tca_scores_part<kD, 0, kKs / 2>(sc[0], sm, kv, hg, quarter, lane);
            hook(0);
            tca_scores_part<kD, kKs / 2, kKs>(sc[0], sm, kv, hg, quarter, lane);
        }
        // Mask, row maxima of each quarter (quad shuffle), exchanged through shared memory.
#pragma unroll
        for (int qq = 0; qq < kQ; ++qq) {
            if (qq >= nq) continue;
            const int qr = quarter_of(qq);
            float mx[2] = {neg_inf, neg_inf};
#pragma unroll
            for (int t = 0; t < 2; ++t)
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    const int j = qr * 16 + t * 8 + qd * 2 + (e % 2);
                    sc[qq][t][e] = j < n ? sc[qq][t][e] * scale2 : neg_inf;
                    mx[e / 2] = fmaxf(mx[e / 2], sc[qq][t][e]);
                }
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
            }
            if (qd == 0) {
                sm.red_max[qr * kTcaHeads + row0] = mx[0];
                sm.red_max[qr * kTcaHeads + row1] = mx[1];
            }
        }
        __syncthreads();
        hook(1);
        float m_new[2], alpha[2];
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = i ? row1 : row0;
            const float bm = fmaxf(fmaxf(sm.red_max[row], sm.red_max[kTcaHeads + row]),
                                   fmaxf(sm.red_max[2 * kTcaHeads + row], sm.red_max[3 * kTcaHeads + row]));
            m_new[i] = fmaxf(m_run[i], bm);  // finite: every block holds at least one candidate
            alpha[i] = exp2f(m_run[i] - m_new[i]);
        }
        // Probabilities: f32 into each quarter's row sums, bf16 into P.
#pragma unroll
        for (int qq = 0; qq < kQ; ++qq) {
            if (qq >= nq) continue;
            const int qr = quarter_of(qq);
            float sum[2] = {0.f, 0.f};
#pragma unroll
            for (int t = 0; t < 2; ++t) {
                float e4[4];
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    e4[e] = exp2f(sc[qq][t][e] - m_new[e / 2]);
                    sum[e / 2] += e4[e];
                }
                const int col = qr * 16 + t * 8 + qd * 2;
                if constexpr (kWg) {
                    *reinterpret_cast<uint32_t*>(sm.p + tcw::index(row0, col)) = pack_bf16x2(e4[0], e4[1]);
                    *reinterpret_cast<uint32_t*>(sm.p + tcw::index(row1, col)) = pack_bf16x2(e4[2], e4[3]);
                } else {
                    *reinterpret_cast<uint32_t*>(sm.p + row0 * kPP + col) = pack_bf16x2(e4[0], e4[1]);
                    *reinterpret_cast<uint32_t*>(sm.p + row1 * kPP + col) = pack_bf16x2(e4[2], e4[3]);
                }
            }
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 1);
                sum[i] += __shfl_xor_sync(0xffffffffu, sum[i], 2);
            }
            if (qd == 0) {
                sm.red_sum[qr * kTcaHeads + row0] = sum[0];
                sm.red_sum[qr * kTcaHeads + row1] = sum[1];
            }
        }
        if constexpr (kWg) tcw::fence_proxy_async();  // P's generic stores, before the barrier, for the wgmmas
        __syncthreads();
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = i ? row1 : row0;
            const float bs = (sm.red_sum[row] + sm.red_sum[kTcaHeads + row]) +
                             (sm.red_sum[2 * kTcaHeads + row] + sm.red_sum[3 * kTcaHeads + row]);
            l_run[i] = l_run[i] * alpha[i] + bs;
            m_run[i] = m_new[i];
        }
        // o = o · alpha + P · V over this block.
#pragma unroll
        for (int t = 0; t < kNt; ++t) {
            acc[t][0] *= alpha[0];
            acc[t][1] *= alpha[0];
            acc[t][2] *= alpha[1];
            acc[t][3] *= alpha[1];
        }
        if constexpr (kWg) {
            // Warpgroup `quarter`: the 64 heads x columns quarter·kD/4.. (two sub-tiles), candidates in
            // k-steps of 16 in order.
            const uint64_t da = tcw::desc_k(sm.p), db = tcw::desc_n(kv + quarter * 2 * (tcw::kSubRows * 64));
            dev::wgmma_fence();
#pragma unroll
            for (int ks = 0; ks < kTcaBlock / 16; ++ks) tcw::mma_n128_bt(acc, da + ks * 32 / 16, db + ks * 16 * 128 / 16);
            tcw::commit_wait();
            hook(2);
        } else {
            tca_pv_part<kD, 0, kTcaBlock / 32>(acc, sm, kv, hg, quarter, lane);
            hook(2);
            tca_pv_part<kD, kTcaBlock / 32, kTcaBlock / 16>(acc, sm, kv, hg, quarter, lane);
        }
        hook(3);
    };

    if constexpr (!kPipe) {
#pragma unroll
        for (int t = 0; t < kNt; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
        if (split < num_blocks) {
            if (tid < kTcaBlock) sm.rows[tid] = tid < nh && p.q ? p.q + (r * p.heads + h0 + tid) * kD : nullptr;
            __syncthreads();
            if (p.q_bf16) tca_stage_q_bf16<kD>(sm.q, p.q_bf16 + (r * p.heads + h0) * kD, nh);
            else tca_stage_rows<kD>(sm.q, sm.rows);
        }
        for (int64_t b = split; b < num_blocks; b += kSplit) {
            const int64_t j0 = b * kTcaBlock;
            const int n = static_cast<int>(nc - j0 < kTcaBlock ? nc - j0 : kTcaBlock);
            __syncthreads();  // the previous block's MMAs and staging are done with kv, p and rows
            if (tid < kTcaBlock) sm.rows[tid] = row_of(j0 + tid);
            __syncthreads();
            tca_stage_rows<kD>(sm.kv, sm.rows);
            __syncthreads();
            attend(sm.kv, n, [](int) {});
        }
    } else {
        using Ring = TcaRing<kD, (kWg > 0)>;
        TcaCandidates* const cands = reinterpret_cast<TcaCandidates*>(sm.next_rows + 2 * kTcaBlock);
        const float* const any = p.kv;  // a valid address for the zero-filling copies (never read)
        // next_rows[i % 2]: the rows of the CTA's i-th block. Prologue: block 0's first two batches in
        // flight while q is staged, then block 0 staged with block 1's first two batches in flight.
        if (split < num_blocks) {
            const int i = tid / kTcaBlock, j = tid % kTcaBlock;
            if (i == 0) sm.rows[j] = j < nh && p.q ? p.q + (r * p.heads + h0 + j) * kD : nullptr;
            else if (i < 3) sm.next_rows[(i - 1) * kTcaBlock + j] = row_of((split + (i - 1) * kSplit) * kTcaBlock + j);
            else if (tid == 3 * kTcaBlock) *cands = TcaCandidates{cand, nc};
            __syncthreads();
            Ring::issue(sm.ring, sm.next_rows, 0, any);
            Ring::issue(sm.ring, sm.next_rows, 1, any);
            if constexpr (kWg >= 2) {
                // The q of the row one wave ahead into L2 (a hint: bulk prefetches of 16 KiB, 8 for f32, 4 for bf16).
                const int64_t ahead_row = r + tcw::sm_count();
                const int qsize = p.q_bf16 ? 2 : 4;
                const char* qbase = p.q_bf16 ? reinterpret_cast<const char*>(p.q_bf16) : reinterpret_cast<const char*>(p.q);
                if (ahead_row < p.rows && warp == kTcaThreads / 32 - 1 && lane < kTcaHeads * kD * qsize / 16384 &&
                    (lane + 1) * (16384 / (kD * qsize)) <= p.heads - h0)
                    tcw::prefetch_l2(qbase + ((ahead_row * p.heads + h0) * kD) * qsize + lane * 16384, 16384);
                // ... and its CSA picks (its first blocks' window rows are this chunk's recent rows).
                if (ahead_row < p.rows && p.selected && p.topk % 4 == 0 && tid == kTcaThreads - 32 + 31)
                    tcw::prefetch_l2(p.selected + ahead_row * p.topk, static_cast<uint32_t>(p.topk * 4));
            }
            if (p.q_bf16) tca_stage_q_bf16<kD, (kWg > 0)>(sm.q, p.q_bf16 + (r * p.heads + h0) * kD, nh);
            else tca_stage_rows<kD, 8, (kWg > 0)>(sm.q, sm.rows);
            Ring::stage(sm.kv, sm.ring, sm.next_rows, split + kSplit < num_blocks ? sm.next_rows + kTcaBlock : nullptr, any);
        }
#pragma unroll
        for (int t = 0; t < kNt; ++t) acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.f;
        // Warp-uniform to the compiler (a lane-0 shuffle): the block loop holds the wgmmas.
        const int nb = __shfl_sync(0xffffffffu, static_cast<int>(num_blocks), 0);
        const int ncount = __shfl_sync(0xffffffffu, static_cast<int>(nc), 0);
        for (int b = split, parity = 0; b < nb; b += kSplit, parity ^= 1) {
            const int j0 = b * kTcaBlock, n = ncount - j0 < kTcaBlock ? ncount - j0 : kTcaBlock;
            // The rows of the block after next, loaded now, published after this block's MMAs into this
            // block's half of next_rows (whose last reader was this block's staging).
            const float* ahead = tid < kTcaBlock ? TcaCandidates::row(cands, (b + 2 * kSplit) * kTcaBlock + tid) : nullptr;
            __syncthreads();  // kv holds this block (every thread's conversions are visible)
            attend(sm.kv, n, [&](int stage) {
                if (stage == 3 && tid < kTcaBlock) sm.next_rows[parity * kTcaBlock + tid] = ahead;
            });
            if (b + kSplit < nb) {
                __syncthreads();  // every warp is done with kv; the block after next's rows are published
                Ring::stage(sm.kv, sm.ring, sm.next_rows + (parity ^ 1) * kTcaBlock,
                            b + 2 * kSplit < nb ? sm.next_rows + parity * kTcaBlock : nullptr, any);
            }
        }
        dev::cp_async_wait<0>();  // nothing is in flight (the last blocks committed empty groups)
    }
    if constexpr (kWg >= 2) {
        // One CTA per row: tca_merge_store's arithmetic with one part (M = m, w = 2^(m - M) = 1, den = 0 +
        // l·w + 2^(sink·log2e - M), o = bf16((0 + acc·w) / den), inverse RoPE of the rope dims -> bf16),
        // from this thread's accumulators (heads row0, row1; columns quarter·kD/4 + 8t + 2·qd and + 1, a
        // RoPE pair) straight to global memory.
        const float* cs = p.cos_sin + pos * p.rope_dim;
        const int64_t rope0 = kD - p.rope_dim;
        const TcaBf16Out out16 = TcaBf16Out::of(p, r);
#pragma unroll
        for (int i = 0; i < 2; ++i) {
            const int row = i ? row1 : row0;
            if (row >= nh) continue;
            uint16_t* dst16 = out16.base ? out16.head(h0 + row, kD) + quarter * (kD / 4) + qd * 2 : nullptr;
            const float mx = fmaxf(neg_inf, m_run[i]);
            const float w = exp2f(m_run[i] - mx);
            float den = 0.f;
            den += l_run[i] * w;
            den += exp2f(p.sink[h0 + row] * kLog2e - mx);
            float* dst = p.f32_unused ? nullptr : p.out + (r * p.heads + h0 + row) * kD + quarter * (kD / 4) + qd * 2;
#pragma unroll
            for (int t = 0; t < kNt; ++t) {
                float o2[2] = {0.f, 0.f};
                o2[0] += acc[t][2 * i] * w;
                o2[1] += acc[t][2 * i + 1] * w;
                o2[0] = dev::round_bf16(o2[0] / den);
                o2[1] = dev::round_bf16(o2[1] / den);
                const int col = quarter * (kD / 4) + t * 8 + qd * 2;
                if (col >= rope0) {
                    dev::rope_pair(o2, 0, cs + (col - rope0), true);
                    o2[0] = dev::round_bf16(o2[0]);
                    o2[1] = dev::round_bf16(o2[1]);
                }
                if (!p.f32_unused) *reinterpret_cast<float2*>(dst + t * 8) = make_float2(o2[0], o2[1]);
                if (dst16)  // bf16-rounded values: their high halves, exact
                    *reinterpret_cast<uint32_t*>(dst16 + t * 8) = __byte_perm(__float_as_uint(o2[0]), __float_as_uint(o2[1]), 0x7632u);
            }
        }
    } else {
        const int parts = static_cast<int>(num_blocks < kSplit ? num_blocks : kSplit);
        tca_merge_store<kD, kSplit, true>(sm, acc, m_run, l_run, split, parts, nh, p.sink, h0, p.cos_sin + pos * p.rope_dim,
                                          p.rope_dim, p.f32_unused ? nullptr : p.out + r * p.heads * kD, TcaBf16Out::of(p, r));
    }
}

}  // namespace deepinfer::cuda::kernels
