// SPDX-License-Identifier: Apache-2.0
// Launchers of V4.1's CSA2 attention ops: indexer scores, candidate blocks, top-k publishing, sink attention.
#include <algorithm>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/v41_attention.cuh"
#include "backends/cuda/kernels/v41_attention_tc.cuh"
#include "backends/cuda/kernels/v41_attention_tc_heads.cuh"
#include "backends/cuda/kernels/v41_attention_tc_split.cuh"
#include "backends/cuda/kernels/v41_indexer_tc.cuh"
#include "backends/cuda/kernels/v41_indexer_tc_gemm.cuh"
#include "backends/cuda/kernels/v41_key_rows.cuh"
#include "backends/cuda/launch/attention_tc_launch.cuh"

namespace deepinfer::cuda {
namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }
}  // namespace

namespace {
template <int kD>
bool launch_index_tc(const IndexScoresParams& p, Stream s) {
    const int64_t smem = kernels::itc_smem_bytes(kD);
    if (smem > max_shared_memory_per_block()) return false;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::v41_indexer_tc_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    const int64_t span = kernels::itc_span(p.max_entries, p.num_rows, multiprocessor_count());
    const dim3 grid(static_cast<unsigned>(p.num_rows), static_cast<unsigned>((p.max_entries + span - 1) / span));
    kernels::v41_indexer_tc_kernel<kD><<<grid, kernels::kItcThreads, static_cast<size_t>(smem), raw(s)>>>(p, span);
    DI_CUDA_CHECK(cudaGetLastError());
    return true;
}

// 8 index rows per block as a tiled GEMM (prefill); false when the shared memory does not fit.
template <int kD, int kMt, bool kStagger>
bool launch_index_tc_gemm(const IndexScoresParams& p, Stream s) {
    const int64_t smem = kernels::v41_ig_smem_bytes(kD, kMt);
    if (smem > max_shared_memory_per_block()) return false;
    auto* kernel = kernels::v41_indexer_tc_gemm_kernel<kD, kMt, kStagger>;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const int64_t groups = (p.num_rows + kernels::kIgRows - 1) / kernels::kIgRows;
    const int64_t span = kernels::itc_span(p.max_entries, groups, multiprocessor_count());
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>((p.max_entries + span - 1) / span));
    kernel<<<grid, kernels::kIgThreads, static_cast<size_t>(smem), raw(s)>>>(p, span);
    DI_CUDA_CHECK(cudaGetLastError());
    return true;
}

template <int kD>
bool launch_index_tc_any(const IndexScoresParams& p, Stream s) {
    int64_t per_block = p.tc_rows_per_block;
    if (per_block == 0) per_block = p.max_segment_rows >= kernels::kIgRows ? kernels::kIgRows : 1;
    DI_CHECK(per_block == 1 || per_block == kernels::kIgRows, "index_scores: ", per_block, " rows per block (1 or 8)");
    if (per_block == kernels::kIgRows) {
        const bool lock = p.gemm_lockstep;
        const bool done = p.heads <= 32 ? (lock ? launch_index_tc_gemm<kD, 2, false>(p, s) : launch_index_tc_gemm<kD, 2, true>(p, s))
                                        : (lock ? launch_index_tc_gemm<kD, 4, false>(p, s) : launch_index_tc_gemm<kD, 4, true>(p, s));
        if (done) return true;
        DI_CHECK(p.tc_rows_per_block == 0, "index_scores: the 8-row kernel's shared memory does not fit this device");
    }
    return launch_index_tc<kD>(p, s);
}

bool index_tensor_cores(const IndexScoresParams& p, Stream s) {
    if (!p.tensor_cores || !p.official || p.heads > kernels::kItcHeads) return false;
    if (reinterpret_cast<uintptr_t>(p.q) % 16 != 0) return false;
    // (the kernel stages its keys 16 values per read: one scale per 16)
    if (p.key_format != CacheFormat::kF32 && p.key_block % 16 != 0) return false;
    switch (p.head_dim) {
        case 32: return launch_index_tc_any<32>(p, s);
        case 64: return launch_index_tc_any<64>(p, s);
        case 128: return launch_index_tc_any<128>(p, s);
        default: return false;
    }
}
}  // namespace

void index_scores(const IndexScoresParams& p, Stream s) {
    if (p.num_rows == 0 || p.max_entries == 0) return;
    DI_CHECK(p.rows && p.q && p.weights && p.scores, "index_scores: missing pointer");
    DI_CHECK(!p.paged_keys.tables || (p.paged_keys.per_page > 0 && p.paged_keys.table_len > 0),
             "index_scores: paged keys without a page size or table length");
    if (index_tensor_cores(p, s)) return;
    const dim3 grid(static_cast<unsigned>(p.num_rows),
                    static_cast<unsigned>((p.max_entries + kernels::kIndexKeysPerBlock - 1) / kernels::kIndexKeysPerBlock));
    const size_t shared = static_cast<size_t>(kernels::kIndexKeysPerBlock * p.head_dim) * sizeof(float);
    DI_CHECK(shared <= 48 * 1024, "index_scores: index_head_dim ", p.head_dim, " too large");
    kernels::index_scores_kernel<<<grid, 256, shared, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void candidate_blocks(const CandidateParams& p, Stream s) {
    if (p.num_rows == 0) return;
    DI_CHECK(p.rows && p.scores && p.mask && p.block_size > 0, "candidate_blocks: missing pointer or block size");
    DI_CHECK(!p.build || (p.block_scores && p.block_picked && p.keep_blocks > 0), "candidate_blocks: build needs scratch");
    kernels::candidate_kernel<<<static_cast<unsigned>(p.num_rows), kernels::kTopkThreads, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void topk_publish(const TopkPublishParams& p, Stream s) {
    if (p.num_rows == 0) return;
    kernels::topk_publish_kernel<<<static_cast<unsigned>(p.num_rows), 32, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

namespace {
// Which kernel a sink attention launch takes: the reference kernel (sink_attention_kernel), the split form's two
// kernels (head_dim 512), the few-rows tensor-core kernel of 16 heads per CTA (or CTA pairs of 8; head_dim 512) or
// the 64-head tensor-core kernel.
enum class V41Path { kReference, kSplit, kHeads, kTca };

// The split form (kernels/v41_attention_tc_split.cuh): head_dim 512, up to tc_split_rows rows, no pinned heads per
// CTA, and its shared memory fits.
template <int kD>
bool split_form(const SinkAttentionParams& p) {
    if constexpr (kD != 512) {
        return false;
    } else {
        return p.tc_heads_per_cta == 0 && p.rows <= p.tc_split_rows &&
               kernels::v41s_pv_smem_bytes() <= max_shared_memory_per_block() &&
               kernels::v41s_scores_smem_bytes(kD) <= max_shared_memory_per_block();
    }
}

// The 16-heads-per-CTA kernel (head_dim 512): by the row count, or as pinned. false: the 64-head kernel.
// A pinned 16 the kernel cannot serve is an error, not a silent fallback (a test pinning it must run it).
template <int kD>
bool heads_kernel(const SinkAttentionParams& p) {
    if constexpr (kD != 512) {
        DI_CHECK(p.tc_heads_per_cta != 16 && p.tc_heads_per_cta != 8, "sink_attention: 8 or 16 heads per CTA needs head_dim 512, not ", kD);
        return false;
    } else {
        const int64_t groups = (p.heads + kernels::kV41hHeads - 1) / kernels::kV41hHeads, ctas = p.rows * groups;
        if (p.tc_heads_per_cta == 64 || (p.tc_heads_per_cta == 0 && ctas > multiprocessor_count())) return false;
        constexpr int64_t smem = kernels::v41h_smem_bytes(kD);
        if (smem > max_shared_memory_per_block()) {
            DI_CHECK(p.tc_heads_per_cta != 16 && p.tc_heads_per_cta != 8, "sink_attention: 16 heads per CTA needs ", smem,
                     " bytes of shared memory per block");
            return false;
        }
        return true;
    }
}

template <int kD>
V41Path path_of(const SinkAttentionParams& p) {
    // (the kernels locate a row's keys once: window + picks within their table)
    if (p.window + (p.selected ? p.topk : 0) > kernels::kV41KeyTable) return V41Path::kReference;
    DI_CHECK(p.tc_heads_per_cta == 0 || p.tc_heads_per_cta == 8 || p.tc_heads_per_cta == 16 || p.tc_heads_per_cta == 64,
             "sink_attention: tc_heads_per_cta must be 0, 8, 16 or 64, not ", p.tc_heads_per_cta);
    if (split_form<kD>(p)) return V41Path::kSplit;
    if (heads_kernel<kD>(p)) return V41Path::kHeads;
    return kernels::v41_tca_smem_bytes(kD) <= max_shared_memory_per_block() ? V41Path::kTca : V41Path::kReference;
}

V41Path path_of(const SinkAttentionParams& p) {
    if (!p.tensor_cores || !p.official) return V41Path::kReference;
    const void* q = p.q_bf16 ? static_cast<const void*>(p.q_bf16) : static_cast<const void*>(p.q);
    if (reinterpret_cast<uintptr_t>(q) % 16 != 0 || reinterpret_cast<uintptr_t>(p.kv) % 16 != 0) return V41Path::kReference;
    switch (p.head_dim) {
        case 64: return path_of<64>(p);
        case 128: return path_of<128>(p);
        case 256: return path_of<256>(p);
        case 512: return path_of<512>(p);
        default: return V41Path::kReference;
    }
}

// The few-rows kernel (head_dim 512): 16 heads per CTA, or pairs of CTAs per 16 heads (clusters: compute capability
// 9.0+; the rope dims in the second CTA's half) while twice the CTAs still fit the SMs once and the rows have
// compressed picks beside their window (measured at b1: 94.0 -> 80.6 us per launch with 128 + 512 keys, but 23.6 ->
// 34.9 us with the window's 128 alone, where each CTA of a pair gets one key block and the cluster barriers cost more
// than the halved MMAs save: bench/results/cuda-session39-h200-call1.md), or as pinned (8).
void launch_heads(const SinkAttentionParams& p, Stream s) {
    constexpr int kD = 512;
    const int64_t groups = (p.heads + kernels::kV41hHeads - 1) / kernels::kV41hHeads, ctas = p.rows * groups;
    constexpr int64_t smem = kernels::v41h_smem_bytes(kD);
    const bool pairable = compute_capability() >= 90 && p.rope_dim <= kD / 2;
    const bool long_rows = p.selected != nullptr && p.topk > 0;
    DI_CHECK(p.tc_heads_per_cta != 8 || pairable, "sink_attention: 8 heads per CTA (CTA pairs) needs compute capability 9.0 "
             "and rope_dim <= head_dim / 2");
    const bool pair = p.tc_heads_per_cta == 8 || (p.tc_heads_per_cta == 0 && pairable && long_rows && 2 * ctas <= multiprocessor_count());
    auto* kernel = pair ? kernels::v41_tc_attention_heads_kernel<kD, true> : kernels::v41_tc_attention_heads_kernel<kD, false>;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[1]{};
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = pair ? 2 : 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(static_cast<unsigned>(p.rows), static_cast<unsigned>(groups * (pair ? 2 : 1)));
    cfg.blockDim = dim3(kernels::kV41hThreads);
    cfg.dynamicSmemBytes = static_cast<size_t>(smem);
    cfg.stream = raw(s);
    cfg.attrs = attr;
    cfg.numAttrs = pair ? 1 : 0;
    DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, p));
}

// The split form: the score CTAs (one per 64 keys a row can have: window + picks, at most the key table's), then
// the softmax + P·V CTAs (one per 64 output columns), on the same stream.
void launch_split(const SinkAttentionParams& p, Stream s) {
    constexpr int kD = 512;
    const int64_t groups = (p.heads + kernels::kV41hHeads - 1) / kernels::kV41hHeads;
    const int64_t max_keys = std::min<int64_t>(p.window + (p.selected ? p.topk : 0), p.max_candidates);
    const int64_t blocks = std::max<int64_t>(1, (max_keys + kernels::kV41sKeys - 1) / kernels::kV41sKeys);
    constexpr int64_t smem1 = kernels::v41s_scores_smem_bytes(kD), smem2 = kernels::v41s_pv_smem_bytes();
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::v41_tc_split_scores_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem1)));
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::v41_tc_split_pv_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem2)));
    kernels::v41_tc_split_scores_kernel<kD><<<dim3(static_cast<unsigned>(p.rows), static_cast<unsigned>(groups),
                                                   static_cast<unsigned>(blocks)),
                                              kernels::kV41sThreads, static_cast<size_t>(smem1), raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
    kernels::v41_tc_split_pv_kernel<kD><<<dim3(static_cast<unsigned>(p.rows), static_cast<unsigned>(groups), kD / kernels::kV41sCols),
                                          kernels::kV41sThreads, static_cast<size_t>(smem2), raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

template <int kD>
void launch_tca_kernel(const SinkAttentionParams& p, Stream s) {
    // Pre-decoded keys: the pipelined form (its own shared memory size, one CTA per row: kTcaSplit is 1) takes the
    // rows of segments that have them, where its second key buffer fits the device; then, unless every segment has
    // them, the decoding form takes the others (each form's CTAs leave the other's rows at once). Where the pipelined
    // form does not fit, the decoding form takes every row and ignores the pre-decoded keys.
    SinkAttentionParams rest = p;
    if constexpr (kernels::kTcaSplit == 1) {
        if (p.keys_bf16 && p.bf16_keys && sink_attention_async_keys_fit(kD)) {
            constexpr int64_t smem = kernels::v41_tca_async_smem_bytes(kD);
            const bool launched = launch_tca<kD, smem>(kernels::v41_tc_attention_kernel<kD, 1, true>,
                                                       kernels::v41_tc_attention_kernel<kD, 1, true>, p, p.rows, p.heads, raw(s));
            DI_CHECK(launched, "sink_attention: the pipelined 64-head tensor-core kernel did not launch");
            if (p.keys_bf16_all) return;
        } else {
            rest.keys_bf16 = nullptr;
            rest.bf16_keys = nullptr;
        }
    } else {
        rest.keys_bf16 = nullptr;
        rest.bf16_keys = nullptr;
    }
    const bool launched = launch_tca<kD, kernels::v41_tca_smem_bytes(kD)>(kernels::v41_tc_attention_kernel<kD, kernels::kTcaSplit>,
                                                                          kernels::v41_tc_attention_kernel<kD, 1>, rest, rest.rows,
                                                                          rest.heads, raw(s));
    DI_CHECK(launched, "sink_attention: the 64-head tensor-core kernel did not launch");
}
}  // namespace

bool sink_attention_async_keys_fit(int64_t kd) {
    return kernels::v41_tca_async_smem_bytes(kd) <= max_shared_memory_per_block();
}

bool sink_attention_reads_bf16_keys(const SinkAttentionParams& p) {
    // (launch_tca_kernel's condition for the pipelined form, on the launch's kernel choice)
    return p.rows > 0 && p.heads > 0 && path_of(p) == V41Path::kTca && kernels::kTcaSplit == 1 && sink_attention_async_keys_fit(p.head_dim);
}

void key_rows_bf16(const KeyRowsBf16Params& p, Stream s) {
    if (p.num_segments == 0 || p.max_rows == 0) return;
    DI_CHECK(p.segments && p.keys && p.out, "key_rows_bf16: missing pointer");
    DI_CHECK(p.head_dim % 16 == 0 && p.window_rows > 0, "key_rows_bf16: head_dim ", p.head_dim, " (a multiple of 16), window rows ",
             p.window_rows);
    DI_CHECK(p.window_format == CacheFormat::kF32 || p.window_block % 16 == 0, "key_rows_bf16: window block ", p.window_block);
    DI_CHECK(p.entry_format == CacheFormat::kF32 || p.entry_block % 16 == 0, "key_rows_bf16: entry block ", p.entry_block);
    const dim3 grid(static_cast<unsigned>((p.max_rows + kernels::kKeyRowsPerBlock - 1) / kernels::kKeyRowsPerBlock),
                    static_cast<unsigned>(p.num_segments));
    launch_pdl(kernels::key_rows_bf16_kernel, grid, kernels::kKeyRowsThreads, 0, s, p);
}

bool sink_attention_bf16_io(const SinkAttentionParams& p) {
    return p.rows > 0 && p.heads > 0 && path_of(p) == V41Path::kTca;
}

void sink_attention(const SinkAttentionParams& p, Stream s) {
    if (p.rows == 0 || p.heads == 0) return;
    DI_CHECK(p.segments && p.row_segment && p.positions && (p.q || p.q_bf16) && p.kv && p.sink && p.scratch && (p.out || p.out_bf16),
             "sink_attention: missing pointer");
    DI_CHECK(p.rope_dim == 0 || p.cos_sin, "sink_attention: no cos/sin table");
    DI_CHECK(!p.paged_entries.tables || (p.paged_entries.per_page > 0 && p.paged_entries.table_len > 0),
             "sink_attention: paged entries without a page size or table length");
    const V41Path path = path_of(p);
    DI_CHECK(path == V41Path::kTca || (p.q && p.out && !p.q_bf16 && !p.out_bf16),
             "sink_attention: q_bf16 / out_bf16 (or a null q or out) need the 64-head tensor-core kernel (sink_attention_bf16_io)");
    DI_CHECK(!p.out_bf16 || p.bf16_group_heads == 0 || (p.heads % p.bf16_group_heads == 0 && p.bf16_group_stride > 0),
             "sink_attention: bf16 groups of ", p.bf16_group_heads, " heads (stride ", p.bf16_group_stride, ") over ", p.heads,
             " heads");
    if (path == V41Path::kSplit) return launch_split(p, s);
    if (path == V41Path::kHeads) return launch_heads(p, s);
    if (path == V41Path::kTca) {
        switch (p.head_dim) {
            case 64: return launch_tca_kernel<64>(p, s);
            case 128: return launch_tca_kernel<128>(p, s);
            case 256: return launch_tca_kernel<256>(p, s);
            default: return launch_tca_kernel<512>(p, s);
        }
    }
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(p.heads));
    kernels::sink_attention_kernel<<<grid, 256, static_cast<size_t>(p.head_dim) * sizeof(float), raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
