// SPDX-License-Identifier: Apache-2.0
// Device sampling reproducing src/engine/sampler.cpp: the probabilities are computed in parallel (each
// element's arithmetic is the CPU's), while every sum whose order decides the pick runs on one thread
// in the CPU's order. Greedy and top-k rows: one block per row (sample_kernel; the top-p cumulative sum
// and the final walk on one thread). Untruncated rows: in blocks of kDraftSumBlock ids as the CPU
// (model/draft_sampling.h's order), one warp per block across the GPU, then the blocked inverse CDF
// (sample_argmax_blocks_kernel, sample_block_sums_kernel, sample_pick_kernel). The uniform is the CPU's
// counter-based splitmix64 stream. Verify rows (a draft to test, engine/speculative/verify.cpp): greedy
// and top-k ones in sample_kernel, top-p / min-p ones without top-k in sample_nucleus_kernel (both: the
// residual over the candidates on one thread, as the CPU: candidate_draw); untruncated ones add the
// residual's block sums (sample_residual_sums_kernel) and the acceptance test in sample_pick_kernel.
#pragma once

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/blocked_sums.cuh"
#include "backends/cuda/kernels/topk.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::kernels {

__device__ __forceinline__ uint64_t splitmix(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}
__device__ __forceinline__ double counter_uniform(uint64_t seed, uint64_t stream, uint64_t counter) {
    const uint64_t h = splitmix(splitmix(splitmix(seed) ^ stream) ^ counter);
    return static_cast<double>(h >> 11) * (1.0 / 9007199254740992.0);
}

// The block's first maximum of l[0, V): the lowest id among the largest values (NaN never wins), as
// the CPU's "strictly greater replaces" scan; also the plain maximum (fmaxf: order-free). Every
// thread gets both.
struct BlockArgmax {
    float value;
    int32_t index;
};
__device__ inline BlockArgmax block_argmax(const float* l, int64_t V) {
    __shared__ float val_sh[kTopkThreads];
    __shared__ int32_t idx_sh[kTopkThreads];
    float best = -INFINITY;
    int32_t at = static_cast<int32_t>(V);  // none yet
    // A thread visits its ids in ascending order (the first equal one stays); 8 loads are issued
    // before their comparisons, so a row is not read one load latency at a time.
    const int64_t B = blockDim.x;
    auto visit = [&](float x, int64_t v) {
        if (x > best || (x == best && v < at)) {
            best = x;
            at = static_cast<int32_t>(v);
        }
    };
    int64_t v = threadIdx.x;
    for (; v + 7 * B < V; v += 8 * B) {
        float x[8];
#pragma unroll
        for (int u = 0; u < 8; ++u) x[u] = l[v + u * B];
#pragma unroll
        for (int u = 0; u < 8; ++u) visit(x[u], v + u * B);
    }
    for (; v < V; v += B) visit(l[v], v);
    val_sh[threadIdx.x] = best;
    idx_sh[threadIdx.x] = at;
    __syncthreads();
    for (int half = blockDim.x / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) {
            const float o = val_sh[threadIdx.x + half];
            const int32_t oi = idx_sh[threadIdx.x + half];
            if (o > val_sh[threadIdx.x] || (o == val_sh[threadIdx.x] && oi < idx_sh[threadIdx.x])) {
                val_sh[threadIdx.x] = o;
                idx_sh[threadIdx.x] = oi;
            }
        }
        __syncthreads();
    }
    BlockArgmax out{val_sh[0], idx_sh[0]};
    __syncthreads();  // (the shared slots may be reused by the caller's next call)
    return out;
}

// Parts per row of the sampler's untruncated draws, each [blocks] f64: argmax value, argmax id, sum of
// the weights, sum of the residual (verify rows).
constexpr int64_t kSampleParts = 4;
__device__ inline bool sample_blocked(const SampleRow& row) { return row.temperature > 0 && row.top_k == 0; }
// Top-p / min-p without top-k: the blocked sums give the normalizer, sample_nucleus_kernel the draw.
__device__ inline bool sample_nucleus(const SampleRow& row) {
    return sample_blocked(row) && (row.top_p < 1.0 || row.min_p > 0.0);
}
// A verify row's residual weight of id `id` whose weight in p is `*weight` of `total`: max(*weight / total -
// q(id), 0) (verify_row's arithmetic; q one-hot on the draft without a distribution; the weight is read
// after q, as the kernels did before they shared this).
__device__ inline double residual_weight(const double* weight, double total, const SampleRow& row, int64_t id) {
    const double q = row.q ? static_cast<double>(row.q[id]) : (id == row.draft ? 1.0 : 0.0);
    const double x = *weight / total - q;
    return x < 0.0 ? 0.0 : x;
}
// The inverse CDF over n candidates in their order (sampler.cpp's draw of a truncated distribution): the
// first whose weight exceeds what is left of u, else the last.
template <class Weight>
__device__ inline int64_t candidate_walk(const Weight& weight, int64_t n, double u) {
    int64_t pick = 0;
    for (; pick + 1 < n; ++pick) {
        const double w = weight(pick);
        if (u < w) break;
        u -= w;
    }
    return pick;
}
// One thread: the token of row r drawn from a truncated distribution, its candidates cand[0, n) in
// (logit desc, id asc) order with weights prob[0, n) (the CPU's Distribution of ids and weights; the
// total is their sum in that order). An ordinary row: the inverse CDF at the row's uniform. A verify row
// (verify_row): accept its draft with probability min(1, p/q) (p = 0 outside the candidates), else draw
// from the residual max(p - q, 0) over the candidates in their order, one sum, its zero tail trimmed
// (recomputed for the walk: the same values); no residual mass left: from p itself.
__device__ inline void candidate_draw(const SampleParams& p, int64_t r, const double* prob, const int32_t* cand, int64_t n) {
    const SampleRow& row = p.row[r];
    double total = 0;
    for (int64_t i = 0; i < n; ++i) total += prob[i];
    const double u_draw = counter_uniform(row.seed, row.stream, row.counter);
    if (row.draft >= 0) {
        double px = 0;
        for (int64_t i = 0; i < n; ++i)
            if (cand[i] == row.draft) {
                px = prob[i] / total;
                break;
            }
        const double qx = row.q ? static_cast<double>(row.q[row.draft]) : 1.0;
        if (counter_uniform(row.seed, row.accept_stream, row.counter) * qx < px) {
            p.tokens[r] = row.draft;
            if (p.accepted) p.accepted[r] = 1;
            return;
        }
        auto residual = [&](int64_t i) { return residual_weight(prob + i, total, row, cand[i]); };
        double rt = 0;
        for (int64_t i = 0; i < n; ++i) rt += residual(i);
        if (rt > 0) {
            int64_t m = n;
            while (m > 1 && residual(m - 1) == 0) --m;
            p.tokens[r] = cand[candidate_walk(residual, m, u_draw * rt)];
            if (p.accepted) p.accepted[r] = 0;
            return;
        }
    }
    p.tokens[r] = cand[candidate_walk([&](int64_t i) { return prob[i]; }, n, u_draw * total)];
    if (p.accepted) p.accepted[r] = 0;
}
__device__ inline const float* sample_logits(const SampleParams& p, int64_t r) {
    return p.logits + (p.logit_row ? static_cast<int64_t>(p.logit_row[r]) : r) * p.vocab;
}
// The row's maximum (the CPU's max_element value: an all-NaN row keeps l[0]) from its blocks'.
__device__ inline double sample_row_max(const SampleParams& p, int64_t r) {
    const int64_t nb = draft_sum_blocks(p.vocab), lane = threadIdx.x % 32;
    const double* part = p.parts + r * kSampleParts * nb;
    float best = -INFINITY;
    int64_t at = p.vocab;
    for (int64_t b = lane; b < nb; b += 32) argmax_visit(best, at, static_cast<float>(part[b]), static_cast<int64_t>(part[nb + b]));
    argmax_warp(best, at);
    return at >= p.vocab ? static_cast<double>(sample_logits(p, r)[0]) : static_cast<double>(best);
}

// grid (ceil(blocks / kDraftWarps), rows), block 32 * kDraftWarps: untruncated rows only.
static __global__ void __launch_bounds__(32 * kDraftWarps) sample_argmax_blocks_kernel(const __grid_constant__ SampleParams p) {
    const int64_t r = blockIdx.y, nb = draft_sum_blocks(p.vocab);
    const int64_t b = static_cast<int64_t>(blockIdx.x) * kDraftWarps + threadIdx.x / 32;
    if (b >= nb || !sample_blocked(p.row[r])) return;
    float best;
    int64_t at;
    warp_block_argmax(sample_logits(p, r), p.vocab, b, best, at);
    if (threadIdx.x % 32 == 0) {
        double* part = p.parts + r * kSampleParts * nb;
        part[b] = best;
        part[nb + b] = static_cast<double>(at);
    }
}

// grid (ceil(blocks / kDraftWarps), rows), block 32 * kDraftWarps: the weights w = exp((l - max) / T)
// (the CPU's arithmetic: times 1 / T) into the scratch, and each block's sum.
static __global__ void __launch_bounds__(32 * kDraftWarps) sample_block_sums_kernel(const __grid_constant__ SampleParams p) {
    __shared__ double buf_sh[kDraftWarps][kDraftSumBlock];
    const int64_t r = blockIdx.y, nb = draft_sum_blocks(p.vocab), V = p.vocab;
    const int64_t b = static_cast<int64_t>(blockIdx.x) * kDraftWarps + threadIdx.x / 32;
    const SampleRow& row = p.row[r];
    if (b >= nb || !sample_blocked(row)) return;
    const double mx = sample_row_max(p, r), inv_t = 1.0 / row.temperature;
    const float* l = sample_logits(p, r);
    double* w = p.scratch + r * V;
    const double s = warp_block_sum(V, b, buf_sh[threadIdx.x / 32], [&](int64_t v) {
        const double e = exp((static_cast<double>(l[v]) - mx) * inv_t);
        w[v] = e;
        return e;
    });
    if (threadIdx.x % 32 == 0) p.parts[r * kSampleParts * nb + 2 * nb + b] = s;
}

// The residual weight of id v of an untruncated verify row (weights w in id order).
__device__ inline double verify_residual(const double* w, double total, const SampleRow& row, int64_t v) {
    return residual_weight(w + v, total, row, v);
}

// grid (ceil(blocks / kDraftWarps), rows), block 32 * kDraftWarps: untruncated verify rows, each block of
// ids' residual sum (after sample_block_sums_kernel; the total is the blocks' sums added in block order).
static __global__ void __launch_bounds__(32 * kDraftWarps) sample_residual_sums_kernel(const __grid_constant__ SampleParams p) {
    __shared__ double sums_sh[kDraftMaxBlocks];
    __shared__ double buf_sh[kDraftWarps][kDraftSumBlock];
    const int64_t r = blockIdx.y, nb = draft_sum_blocks(p.vocab), V = p.vocab;
    const SampleRow& row = p.row[r];
    if (!sample_blocked(row) || sample_nucleus(row) || row.draft < 0) return;  // (the whole thread block)
    const double* part = p.parts + r * kSampleParts * nb;
    for (int64_t b = threadIdx.x; b < nb; b += blockDim.x) sums_sh[b] = part[2 * nb + b];
    __syncthreads();
    const int64_t b = static_cast<int64_t>(blockIdx.x) * kDraftWarps + threadIdx.x / 32;
    if (b >= nb) return;
    const double total = __shfl_sync(0xffffffffu, lane0_sum(sums_sh, nb), 0);
    const double* w = p.scratch + r * V;
    const double s = warp_block_sum(V, b, buf_sh[threadIdx.x / 32], [&](int64_t v) { return verify_residual(w, total, row, v); });
    if (threadIdx.x % 32 == 0) p.parts[r * kSampleParts * nb + 3 * nb + b] = s;
}

// grid (rows), block 32: the draw by the blocked inverse CDF at the row's uniform times the total. A verify
// row first tests its draft (accepted: the draft), then draws from the residual (none left: from p).
static __global__ void __launch_bounds__(32) sample_pick_kernel(const __grid_constant__ SampleParams p) {
    __shared__ double parts_sh[kDraftMaxBlocks];
    __shared__ double block_sh[kDraftSumBlock];
    const int64_t r = blockIdx.x, lane = threadIdx.x, V = p.vocab, nb = draft_sum_blocks(V);
    const SampleRow& row = p.row[r];
    if (!sample_blocked(row) || sample_nucleus(row)) return;
    const double* part = p.parts + r * kSampleParts * nb;
    const double* w = p.scratch + r * V;
    for (int64_t b = lane; b < nb; b += 32) parts_sh[b] = part[2 * nb + b];
    __syncwarp();
    const double total = __shfl_sync(0xffffffffu, lane0_sum(parts_sh, nb), 0);
    double mass = total;  // of the distribution drawn from
    bool residual = false;
    if (row.draft >= 0) {
        const int64_t x = row.draft;
        const double px = w[x] / total, qx = row.q ? static_cast<double>(row.q[x]) : 1.0;
        if (counter_uniform(row.seed, row.accept_stream, row.counter) * qx < px) {
            if (lane == 0) {
                p.tokens[r] = static_cast<int32_t>(x);
                if (p.accepted) p.accepted[r] = 1;
            }
            return;
        }
        __syncwarp();
        for (int64_t b = lane; b < nb; b += 32) parts_sh[b] = part[3 * nb + b];
        __syncwarp();
        const double rt = __shfl_sync(0xffffffffu, lane0_sum(parts_sh, nb), 0);
        residual = rt > 0;
        if (residual) {
            mass = rt;
        } else {  // (no residual mass, numerically: p itself)
            __syncwarp();
            for (int64_t b = lane; b < nb; b += 32) parts_sh[b] = part[2 * nb + b];
            __syncwarp();
        }
    }
    auto prob = [&](int64_t v) { return residual ? verify_residual(w, total, row, v) : w[v]; };
    double u = 0;
    int64_t b = 0;
    if (lane == 0) {
        u = counter_uniform(row.seed, row.stream, row.counter) * mass;
        b = draft_cdf_block(parts_sh, nb, u);
    }
    b = __shfl_sync(0xffffffffu, b, 0);
    const int64_t v0 = b * kDraftSumBlock, end = V < v0 + kDraftSumBlock ? V : v0 + kDraftSumBlock;
    for (int64_t v = v0 + lane; v < end; v += 32) block_sh[v - v0] = prob(v);
    __syncwarp();
    if (lane == 0) {
        p.tokens[r] = static_cast<int32_t>(
            draft_cdf_in_block([&](int64_t v) { return v >= v0 && v < end ? block_sh[v - v0] : prob(v); }, V, b, u));
        if (p.accepted) p.accepted[r] = 0;
    }
}

// Greedy rows over several blocks: block (r, y) of grid (rows, slices) writes the first maximum of its
// slice of ids [y·span, (y+1)·span) (block_argmax: NaN never wins; none: index V) into slot y of the row's
// scratch, which a greedy row does not otherwise use; sample_kernel takes the first maximum of the
// slices in slice order: the lowest id among the largest values, as block_argmax over the whole row.
struct ArgmaxPart {
    float value;
    int32_t index;
};
static_assert(sizeof(ArgmaxPart) <= sizeof(double), "an argmax part fits a scratch slot");
__host__ __device__ constexpr int64_t argmax_span(int64_t V, int64_t slices) { return (V + slices - 1) / slices; }

// Top-k rows over several blocks too (topk_slices > 1, and k small enough: topk_sliced): block (r, y < topk_slices)
// writes its slice's top-k (topk_row_adaptive: the k largest by (value, then lowest id), ascending ids) as
// global ids, and their logits, into the second half of the row's scratch (k ids then k values per slice, in
// slice order); sample_kernel takes the top-k of those topk_slices x k values. Every id of the row's top-k is
// in its slice's top-k under the same order, and the candidates stand in id order, so the lowest-position
// ties are the lowest ids: the same k ids as topk_row_adaptive over the whole row (one block reads a
// 129K-id row in three passes: ~0.3 ms).
constexpr int64_t kSampleTopkSliceMin = 8192;  // ids per top-k slice at least
constexpr int64_t kSampleTopkSlices = 16;
__host__ __device__ constexpr int64_t sample_topk_slices(int64_t V) {
    return V / kSampleTopkSliceMin < kSampleTopkSlices ? V / kSampleTopkSliceMin : kSampleTopkSlices;
}
// Whether a row's top-k of k ids takes the slices: every slice (the last is the shortest, at least
// V / slices - slices + 1 ids) holds more than k ids, and the candidates fit the scratch's second half.
__host__ __device__ constexpr bool topk_sliced(int64_t k, int64_t V, int64_t slices) {
    return slices > 1 && k <= kMaxSampleTopK && k < V / slices - slices;
}
__device__ __forceinline__ int32_t* topk_slice_ids(const SampleParams& p, int64_t r) {
    return reinterpret_cast<int32_t*>(p.scratch + r * p.vocab) + p.vocab;  // byte 4V of the row's 8V
}

static __global__ void __launch_bounds__(kTopkThreads) argmax_slices_kernel(const __grid_constant__ SampleParams p, int topk_slices) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t r = blockIdx.x, V = p.vocab;
    const SampleRow& row = p.row[r];
    if (row.temperature > 0) {
        const int64_t k = row.top_k < V ? row.top_k : V;
        if (row.top_k <= 0 || blockIdx.y >= static_cast<unsigned>(topk_slices) || !topk_sliced(k, V, topk_slices)) return;
        const int64_t span = argmax_span(V, topk_slices), lo = static_cast<int64_t>(blockIdx.y) * span;
        const int64_t n = V - lo < span ? V - lo : span;
        const float* l = p.logits + (p.logit_row ? static_cast<int64_t>(p.logit_row[r]) : r) * V;
        int32_t* ids = topk_slice_ids(p, r) + static_cast<int64_t>(blockIdx.y) * k;
        float* vals = reinterpret_cast<float*>(topk_slice_ids(p, r) + topk_slices * k) + static_cast<int64_t>(blockIdx.y) * k;
        topk_row_adaptive<kTopkVocabBits>(l + lo, n, k, ids);
        __syncthreads();
        for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
            const int32_t j = static_cast<int32_t>(lo) + ids[i];
            ids[i] = j;
            vals[i] = l[j];
        }
        return;
    }
    const int64_t span = argmax_span(V, gridDim.y), lo = static_cast<int64_t>(blockIdx.y) * span;
    const int64_t n = lo < V ? (V - lo < span ? V - lo : span) : 0;
    const float* l = p.logits + (p.logit_row ? static_cast<int64_t>(p.logit_row[r]) : r) * V;
    const BlockArgmax a = block_argmax(l + lo, n);
    if (threadIdx.x == 0)
        reinterpret_cast<ArgmaxPart*>(p.scratch + r * V)[blockIdx.y] = {a.value, a.index >= n ? static_cast<int32_t>(V)
                                                                                                : static_cast<int32_t>(lo + a.index)};
}

// The row's k top-k candidates (ascending ids in cand, k <= kMaxSampleTopK) reordered by (logit descending, then
// id ascending), the order of the CPU's sort and of an insertion sort on one thread (which took ~k^2/4 dependent
// global loads there: tens of microseconds at k = 50). Without NaN the order is strict and total (ids differ,
// -0 ties +0 and falls to the ids), so each candidate's place is the number of candidates before it, counted
// by its own thread; with a NaN among them (no total order) the insertion sort on one thread, as before. Every
// thread of the block calls it; cand is complete on return.
__device__ inline void sort_candidates(const float* l, int32_t* cand, int64_t k) {
    __shared__ float val_sh[kMaxSampleTopK];
    __shared__ int32_t id_sh[kMaxSampleTopK];
    __shared__ int nan_sh;
    if (threadIdx.x == 0) nan_sh = 0;
    __syncthreads();
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
        const int32_t id = cand[i];
        const float v = l[id];
        val_sh[i] = v;
        id_sh[i] = id;
        if (isnan(v)) nan_sh = 1;
    }
    __syncthreads();
    if (nan_sh) {
        if (threadIdx.x == 0)
            for (int64_t a = 1; a < k; ++a)
                for (int64_t b = a; b > 0; --b) {
                    const int32_t x = cand[b], y = cand[b - 1];
                    const bool before = l[x] != l[y] ? l[x] > l[y] : x < y;
                    if (!before) break;
                    cand[b] = y;
                    cand[b - 1] = x;
                }
        __syncthreads();
        return;
    }
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) {
        const float v = val_sh[i];
        const int32_t id = id_sh[i];
        int64_t place = 0;
        for (int64_t j = 0; j < k; ++j) {
            const float w = val_sh[j];
            place += w != v ? w > v : id_sh[j] < id;
        }
        cand[place] = id;
    }
    __syncthreads();
}

// slices > 1: greedy rows take argmax_slices_kernel's parts (launched just before, same grid rows), and top-k
// rows its slices' candidates (topk_slices > 1, topk_sliced).
static __global__ void __launch_bounds__(kTopkThreads) sample_kernel(const __grid_constant__ SampleParams p, int slices, int topk_slices) {
    pdl_enter();  // launched by launch_pdl (common/launch.cuh)
    const int64_t r = blockIdx.x, V = p.vocab;
    const SampleRow& row = p.row[r];
    const float* l = p.logits + (p.logit_row ? static_cast<int64_t>(p.logit_row[r]) : r) * V;
    double* prob = p.scratch + r * V;
    if (row.temperature <= 0) {
        // The CPU keeps id 0 unless a later logit is strictly greater: a NaN at 0 is never replaced;
        // otherwise the first of the largest (an all -inf or NaN row: id 0 too).
        if (slices > 1) {
            if (threadIdx.x == 0) {
                const ArgmaxPart* part = reinterpret_cast<const ArgmaxPart*>(prob);
                float best = -INFINITY;
                int32_t at = static_cast<int32_t>(V);
                for (int y = 0; y < slices; ++y)
                    if (part[y].value > best || (part[y].value == best && part[y].index < at)) {
                        best = part[y].value;
                        at = part[y].index;
                    }
                const int32_t t = isnan(l[0]) || at >= V ? 0 : at;
                p.tokens[r] = t;
                if (p.accepted) p.accepted[r] = row.draft >= 0 && t == row.draft;
            }
            return;
        }
        const BlockArgmax a = block_argmax(l, V);
        if (threadIdx.x == 0) {
            const int32_t t = isnan(l[0]) || a.index >= V ? 0 : a.index;
            p.tokens[r] = t;
            if (p.accepted) p.accepted[r] = row.draft >= 0 && t == row.draft;
        }
        return;
    }
    const double inv_t = 1.0 / row.temperature;
    if (row.top_k == 0) return;  // untruncated: the blocked kernels (sample_block_sums_kernel, ...)
    // Top-k candidates (ascending ids), then sorted by (logit desc, id asc) on one thread.
    const int64_t k = row.top_k < V ? row.top_k : V;
    int32_t* cand = p.index_scratch + r * kMaxSampleTopK;
    if (slices > 1 && topk_sliced(k, V, topk_slices)) {
        const int32_t* sid = topk_slice_ids(p, r);
        topk_row_adaptive<kTopkVocabBits>(reinterpret_cast<const float*>(sid + topk_slices * k), topk_slices * k, k, cand);
        __syncthreads();
        for (int64_t i = threadIdx.x; i < k; i += blockDim.x) cand[i] = sid[cand[i]];  // positions -> ids
    } else {
        topk_row_adaptive<kTopkVocabBits>(l, V, k, cand);
    }
    __syncthreads();
    sort_candidates(l, cand, k);
    // The weights exp((l - max) / T), each by its own thread (the same expression as on one thread: the same
    // values), their sum on one thread in candidate order, then the quotients.
    __shared__ double den_sh;
    const double mx = l[cand[0]];
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) prob[i] = exp((static_cast<double>(l[cand[i]]) - mx) * inv_t);
    __syncthreads();
    if (threadIdx.x == 0) {
        double den = 0;
        for (int64_t i = 0; i < k; ++i) den += prob[i];
        den_sh = den;
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < k; i += blockDim.x) prob[i] /= den_sh;
    __syncthreads();
    if (threadIdx.x != 0) return;
    int64_t n = k;
    if (row.top_p < 1.0) {
        double cum = 0;
        int64_t i = 0;
        for (; i < n; ++i) {
            cum += prob[i];
            if (cum >= row.top_p) break;
        }
        n = n < i + 1 ? n : i + 1;
    }
    if (row.min_p > 0.0) {
        const double floor_p = row.min_p * prob[0];
        int64_t i = 1;
        while (i < n && prob[i] >= floor_p) ++i;
        n = i;
    }
    while (n > 1 && prob[n - 1] == 0) --n;  // underflowed tail: never drawn (as on the CPU)
    candidate_draw(p, r, prob, cand, n);
}

// grid (rows), block kTopkThreads: top-p / min-p rows without top-k (sampler.cpp's sampling_distribution):
// the normalizer is the blocked sum of the weights (sample_block_sums_kernel), the candidates the prefix of
// the (logit desc, id asc) order that the rules keep. Here the first kMaxSampleTopK ids of that order
// (topk_row_adaptive, then a bitonic sort in shared memory), then on one thread the cumulative sum in that
// order until top-p's mass or min-p's floor ends the prefix, the draw (verify rows: the acceptance test and
// the residual draw) as the CPU's. A prefix the rules do not end within those ids (a flat distribution) is
// not drawn here: token -1 (verify rows too, accepted 0), the caller decides the row on the host (the
// row's logits and, for a verify row, its draft's distribution come back: DeviceDraws::fallback).
static __global__ void __launch_bounds__(kTopkThreads) sample_nucleus_kernel(const __grid_constant__ SampleParams p) {
    __shared__ uint64_t key_sh[kMaxSampleTopK];
    __shared__ double prob_sh[kMaxSampleTopK];
    const int64_t r = blockIdx.x, V = p.vocab, nb = draft_sum_blocks(V);
    const SampleRow& row = p.row[r];
    if (!sample_nucleus(row)) return;  // (the whole thread block)
    const float* l = sample_logits(p, r);
    const double* w = p.scratch + r * V;
    int32_t* cand = p.index_scratch + r * kMaxSampleTopK;
    const int64_t M = V < kMaxSampleTopK ? V : kMaxSampleTopK;
    topk_row_adaptive<kTopkVocabBits>(l, V, M, cand);
    __syncthreads();
    // Sort keys: larger logit first, then lower id (a total order without NaN); padding sorts last.
    for (int64_t i = threadIdx.x; i < kMaxSampleTopK; i += blockDim.x) {
        uint64_t key = ~uint64_t{0};
        if (i < M) {
            const uint32_t bits = __float_as_uint(l[cand[i]]);
            const uint32_t asc = bits & 0x80000000u ? ~bits : bits | 0x80000000u;  // ascending in the float
            key = (static_cast<uint64_t>(~asc) << 32) | static_cast<uint32_t>(cand[i]);
        }
        key_sh[i] = key;
    }
    __syncthreads();
    for (int size = 2; size <= kMaxSampleTopK; size *= 2)
        for (int stride = size / 2; stride > 0; stride /= 2) {
            for (int i = threadIdx.x; i < kMaxSampleTopK; i += blockDim.x) {
                const int j = i ^ stride;
                if (j > i) {
                    const bool up = (i & size) == 0;
                    const uint64_t a = key_sh[i], b = key_sh[j];
                    if ((a > b) == up) {
                        key_sh[i] = b;
                        key_sh[j] = a;
                    }
                }
            }
            __syncthreads();
        }
    if (threadIdx.x != 0) return;
    const double* sums = p.parts + r * kSampleParts * nb + 2 * nb;
    double den = 0;
    for (int64_t b = 0; b < nb; ++b) den += sums[b];
    int64_t n = -1;
    double cum = 0;
    for (int64_t i = 0; i < M && n < 0; ++i) {
        const int32_t id = static_cast<int32_t>(key_sh[i] & 0xffffffffu);
        cand[i] = id;
        const double q = w[id] / den;
        prob_sh[i] = q;
        if (row.top_p < 1.0 && (cum += q) >= row.top_p) n = i + 1;
        if (n < 0 && row.min_p > 0.0 && i > 0 && q < row.min_p * prob_sh[0]) n = i + 1;
    }
    if (n < 0) {
        if (M < V) {  // the rules keep more than these ids: the host samples the row
            p.tokens[r] = -1;
            if (p.accepted) p.accepted[r] = 0;
            return;
        }
        n = M;
    }
    if (row.min_p > 0.0) {
        const double floor_p = row.min_p * prob_sh[0];
        int64_t i = 1;
        while (i < n && prob_sh[i] >= floor_p) ++i;
        n = i;
    }
    while (n > 1 && prob_sh[n - 1] == 0) --n;
    candidate_draw(p, r, prob_sh, cand, n);
}

}  // namespace deepinfer::cuda::kernels
