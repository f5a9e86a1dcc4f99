// SPDX-License-Identifier: Apache-2.0
// Launchers of the attention block's ops: ring writes, ape, compressor, indexer + top-k, sparse attention.
#include "backends/cuda/attention_tc.h"
#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/kernels/attention.cuh"
#include "backends/cuda/kernels/attention_mqa.cuh"
#include "backends/cuda/kernels/attention_tc.cuh"
#include "backends/cuda/kernels/indexer_tc.cuh"
#include "backends/cuda/kernels/indexer_tc_gemm.cuh"
#include "backends/cuda/kernels/indexer_tc_rows.cuh"
#include "backends/cuda/launch/attention_tc_launch.cuh"
#include "backends/cuda/kernels/topk.cuh"

namespace deepinfer::cuda {
namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }
}  // namespace

void ring_write(const RingWriteParams& p, Stream s) {
    if (p.num_segments == 0 || p.max_rows == 0) return;
    DI_CHECK(!p.add2 || (p.src2 && p.add2_ratio > 0), "ring_write: add2 needs src2 and add2_ratio > 0 (", p.add2_ratio, ")");
    const dim3 grid(static_cast<unsigned>(p.num_segments), static_cast<unsigned>(p.max_rows));
    launch_pdl(kernels::ring_write_kernel, grid, 128, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void add_ape(const AddApeParams& p, Stream s) {
    if (p.rows == 0) return;
    launch_pdl(kernels::add_ape_kernel, static_cast<unsigned>(p.rows), 128, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void compressor(const CompressorParams& p, Stream s) {
    if (p.num_segments == 0 || p.max_windows == 0) return;
    DI_CHECK(p.ring_rows >= (p.overlap ? 2 : 1) * p.ratio, "compressor: ring of ", p.ring_rows, " rows");
    DI_CHECK(p.qat != Qat::kHadamardFp4 || (p.head_dim & (p.head_dim - 1)) == 0, "compressor: Hadamard needs a power-of-two head_dim, got ",
             p.head_dim);
    const dim3 grid(static_cast<unsigned>(p.num_segments), static_cast<unsigned>(p.max_windows));
    launch_pdl(kernels::compressor_kernel, grid, static_cast<unsigned>(kernels::compressor_threads(p.head_dim, p.overlap ? 2 * p.ratio : p.ratio)),
               static_cast<size_t>(p.head_dim) * sizeof(float), s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void topk(const TopkParams& p, Stream s) {
    if (p.rows == 0) return;
    const unsigned grid = static_cast<unsigned>(p.rows);
    switch (p.variant) {
        case 1: launch_pdl(kernels::topk_kernel<1>, grid, kernels::kTopkThreads, 0, s, p); break;
        case 2: launch_pdl(kernels::topk_kernel<2>, grid, kernels::kTopkThreads, 0, s, p); break;
        case 3: launch_pdl(kernels::topk_kernel<3>, grid, kernels::kTopkThreads, 0, s, p); break;
        default: launch_pdl(kernels::topk_kernel<0>, grid, kernels::kTopkThreads, 0, s, p); break;
    }
    DI_CUDA_CHECK(cudaGetLastError());
}

namespace {
template <int kD>
bool launch_indexer_tc(const IndexerParams& p, Stream s) {
    const int64_t smem = kernels::itc_smem_bytes(kD);
    if (smem > max_shared_memory_per_block()) return false;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::indexer_tc_kernel<kD>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
    const int64_t span = kernels::itc_span(p.max_visible, p.rows, multiprocessor_count());
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>((p.max_visible + span - 1) / span));
    kernels::indexer_tc_kernel<kD><<<grid, kernels::kItcThreads, static_cast<size_t>(smem), raw(s)>>>(p, span);
    DI_CUDA_CHECK(cudaGetLastError());
    return true;
}

// kR rows per block sharing each key tile (prefill); false when the shared memory does not fit.
template <int kD, int kR>
bool launch_indexer_tc_rows(const IndexerParams& p, Stream s) {
    const int64_t smem = kernels::itr_smem_bytes(kD, kR);
    if (smem > max_shared_memory_per_block()) return false;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::indexer_tc_rows_kernel<kD, kR>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const int64_t groups = (p.rows + kR - 1) / kR;
    const int64_t span = kernels::itc_span(p.max_visible, groups, multiprocessor_count());
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>((p.max_visible + span - 1) / span));
    kernels::indexer_tc_rows_kernel<kD, kR>
        <<<grid, kernels::itr_threads<kR>(), static_cast<size_t>(smem), raw(s)>>>(p, span);
    DI_CUDA_CHECK(cudaGetLastError());
    return true;
}

// 8 rows per block as a tiled GEMM (prefill); false when the shared memory does not fit.
template <int kD, bool kStagger>
bool launch_indexer_tc_gemm(const IndexerParams& p, Stream s) {
    const int64_t smem = kernels::ig_smem_bytes(kD);
    if (smem > max_shared_memory_per_block()) return false;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::indexer_tc_gemm_kernel<kD, kStagger>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const int64_t groups = (p.rows + kernels::kIgRows - 1) / kernels::kIgRows;
    const int64_t span = kernels::itc_span(p.max_visible, groups, multiprocessor_count());
    const dim3 grid(static_cast<unsigned>(groups), static_cast<unsigned>((p.max_visible + span - 1) / span));
    kernels::indexer_tc_gemm_kernel<kD, kStagger><<<grid, kernels::kIgThreads, static_cast<size_t>(smem), raw(s)>>>(p, span);
    DI_CUDA_CHECK(cudaGetLastError());
    return true;
}

template <int kD>
bool launch_indexer_tc_any(const IndexerParams& p, Stream s) {
    int64_t per_block = p.tc_rows_per_block;
    if (per_block == 0) per_block = p.max_segment_rows >= 2 * kernels::kItrRows ? kernels::kIgRows : 1;
    DI_CHECK(per_block == -1 || per_block == 1 || per_block == 2 || per_block == 4 || per_block == 8, "indexer: ", per_block,
             " rows per block");
    if (per_block == 8 && (p.gemm_lockstep ? launch_indexer_tc_gemm<kD, false>(p, s) : launch_indexer_tc_gemm<kD, true>(p, s)))
        return true;
    if (per_block == 4 && launch_indexer_tc_rows<kD, 4>(p, s)) return true;
    if (per_block == 2 && launch_indexer_tc_rows<kD, 2>(p, s)) return true;
    // Decode: one row per block, still float4 key loads with the next tile in flight (the reference
    // kernel below loads a float at a time with a page lookup per element).
    if (per_block == 1 && launch_indexer_tc_rows<kD, 1>(p, s)) return true;
    return launch_indexer_tc<kD>(p, s);
}

bool indexer_tensor_cores(const IndexerParams& p, Stream s) {
    if (!p.tensor_cores || !p.official || p.heads > kernels::kItcHeads) return false;
    if (reinterpret_cast<uintptr_t>(p.q) % 16 != 0) return false;
    switch (p.head_dim) {
        case 32: return launch_indexer_tc_any<32>(p, s);
        case 64: return launch_indexer_tc_any<64>(p, s);
        case 128: return launch_indexer_tc_any<128>(p, s);
        default: return false;
    }
}
}  // namespace

void indexer_topk(const IndexerParams& p, Stream s) {
    if (p.rows == 0) return;
    if (p.max_visible > 0 && !indexer_tensor_cores(p, s)) {
        const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>((p.max_visible + 31) / 32));
        kernels::indexer_scores_kernel<<<grid, 256, 0, raw(s)>>>(p);
        DI_CUDA_CHECK(cudaGetLastError());
    }
    if (p.scores_only) return;
    launch_pdl(kernels::visible_counts_kernel, static_cast<unsigned>((p.rows + 127) / 128), 128, 0, s, p.positions, p.rows, p.ratio, p.num_selected);
    DI_CUDA_CHECK(cudaGetLastError());
    topk({.scores = p.scores, .ld = p.max_visible, .lengths = p.num_selected, .n = p.max_visible, .rows = p.rows,
          .k = p.topk, .out = p.selected},
         s);
}

namespace {
template <int kHeads>
void launch_mqa(const SparseAttentionParams& p, Stream s) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::mqa_attention_kernel<kHeads>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kernels::mqa_smem_bytes(kHeads, p.head_dim))));
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(p.heads / kHeads));
    kernels::mqa_attention_kernel<kHeads><<<grid, kernels::kMqaThreads,
                                            static_cast<size_t>(kernels::mqa_smem_bytes(kHeads, p.head_dim)), raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}
// Whether the device runs the wgmma kernel (sm_90: the binary's sm_90a code); once per process.
bool wgmma_device() {
    static const bool yes = [] {
        int major = 0, minor = 0;
        DI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current_device()));
        DI_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, current_device()));
        return major == 9 && minor == 0;
    }();
    return yes;
}

// The wgmma kernel (kWg = 3) on sm_90 at kD = 512, else the pipelined kernel (kPipe) where the device's
// shared memory holds its ring of rows in flight (sm_90: 227 KB per block), else the one-buffer kernel
// (sm_80 at kD = 512, and kD = 64); all give the same bits. The choice depends on the device only
// (`variant` forces one, for tests and benchmarks).
template <int kD>
bool launch_tc(const SparseAttentionParams& p, Stream s, TcaVariant variant) {
    if constexpr (kD == 512)
        if (wgmma_device() && kernels::tcw_smem_bytes(kD) <= max_shared_memory_per_block()) {
            if (variant == TcaVariant::kAuto || variant == TcaVariant::kWgmma)
                return launch_tca<kD, kernels::tcw_smem_bytes(kD)>(kernels::tc_attention_kernel<kD, 1, true, 3>,
                                                                   kernels::tc_attention_kernel<kD, 1, true, 3>, p, p.rows, p.heads, raw(s));
            if (variant == TcaVariant::kWgmmaScores1)
                return launch_tca<kD, kernels::tcw_smem_bytes(kD)>(kernels::tc_attention_kernel<kD, 1, true, 4>,
                                                                   kernels::tc_attention_kernel<kD, 1, true, 4>, p, p.rows, p.heads, raw(s));
            if (variant == TcaVariant::kWgmmaScores4)
                return launch_tca<kD, kernels::tcw_smem_bytes(kD)>(kernels::tc_attention_kernel<kD, 1, true, 2>,
                                                                   kernels::tc_attention_kernel<kD, 1, true, 2>, p, p.rows, p.heads, raw(s));
            if (variant == TcaVariant::kWgmmaShared)
                return launch_tca<kD, kernels::tcw_smem_bytes(kD)>(kernels::tc_attention_kernel<kD, 1, true, 1>,
                                                                   kernels::tc_attention_kernel<kD, 1, true, 1>, p, p.rows, p.heads, raw(s));
        }
    if (variant == TcaVariant::kWgmma || variant == TcaVariant::kWgmmaScores1 || variant == TcaVariant::kWgmmaScores4 ||
        variant == TcaVariant::kWgmmaShared)
        return false;
    if constexpr (kD >= 128)  // the ring's batches hold whole float4s per thread from kD = 128
        if (variant != TcaVariant::kOneBuffer && kernels::tca_pipelined_smem_bytes(kD) <= max_shared_memory_per_block())
            return launch_tca<kD, kernels::tca_pipelined_smem_bytes(kD)>(kernels::tc_attention_kernel<kD, kernels::kTcaSplit, true>,
                                                                     kernels::tc_attention_kernel<kD, 1, true>, p, p.rows, p.heads, raw(s));
    if (variant == TcaVariant::kRing) return false;
    return launch_tca<kD>(kernels::tc_attention_kernel<kD, kernels::kTcaSplit, false>, kernels::tc_attention_kernel<kD, 1, false>,
                          p, p.rows, p.heads, raw(s));
}

bool try_tensor_cores(const SparseAttentionParams& p, Stream s, TcaVariant variant = TcaVariant::kAuto) {
    switch (p.head_dim) {
        case 64: return launch_tc<64>(p, s, variant);
        case 128: return launch_tc<128>(p, s, variant);
        case 256: return launch_tc<256>(p, s, variant);
        case 512: return launch_tc<512>(p, s, variant);
        default: return false;
    }
}

// q (or q_bf16 where given: the tensor-core kernels read it instead) and kv 16-byte aligned.
bool tc_aligned16(const SparseAttentionParams& p) {
    const void* q = p.q_bf16 ? static_cast<const void*>(p.q_bf16) : static_cast<const void*>(p.q);
    return reinterpret_cast<uintptr_t>(q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.kv) % 16 == 0;
}
}  // namespace

bool sparse_attention_tensor_cores_fit(int64_t head_dim) {
    // launch_tc falls back from the wgmma and pipelined kernels to the one-buffer kernel, which runs
    // wherever its shared memory fits.
    const bool supported = head_dim == 64 || head_dim == 128 || head_dim == 256 || head_dim == 512;  // try_tensor_cores' dims
    return supported && kernels::tca_smem_bytes(head_dim) <= max_shared_memory_per_block();
}

bool sparse_attention_tc_variant(const SparseAttentionParams& p, Stream s, TcaVariant variant) {
    return p.rows > 0 && p.official && tc_aligned16(p) && try_tensor_cores(p, s, variant);
}

bool sparse_attention_tc_one_buffer(const SparseAttentionParams& p, Stream s) {
    return sparse_attention_tc_variant(p, s, TcaVariant::kOneBuffer);
}

namespace {
// The kernels without a bf16 store: their f32 output converted into out_bf16's groups.
void output_to_bf16(const SparseAttentionParams& p, Stream s) {
    const int64_t gh = kernels::tca_bf16_group_heads(p);
    for (int64_t g = 0; g * gh < p.heads; ++g)
        to_bf16({.x = p.out + g * gh * p.head_dim, .x_ld = p.heads * p.head_dim, .rows = p.rows, .cols = gh * p.head_dim,
                 .out = p.out_bf16 + g * p.bf16_group_stride},
                s);
}
void sparse_attention_f32(const SparseAttentionParams& p, Stream s);
}  // namespace

void sparse_attention(const SparseAttentionParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.kind != AttentionKind::kCsa || p.selected, "sparse_attention: CSA needs the indexer's picks");
    DI_CHECK(p.out || (p.f32_unused && p.out_bf16), "sparse_attention: no output");
    DI_CHECK(p.q || p.q_bf16, "sparse_attention: no q");
    const int64_t gh = kernels::tca_bf16_group_heads(p);
    DI_CHECK(!p.out_bf16 || (p.heads % gh == 0 && (p.heads == gh || p.bf16_group_stride >= p.rows * gh * p.head_dim)),
             "sparse_attention: bf16 output groups of ", gh, " heads, stride ", p.bf16_group_stride);
    if (p.tensor_cores && p.official && tc_aligned16(p) && try_tensor_cores(p, s)) return;
    // The CUDA-core kernels read the f32 q and write the f32 output.
    DI_CHECK(p.q && p.out, "sparse_attention: bf16-only q or no f32 output, but the tensor-core kernels cannot run "
             "(head_dim ", p.head_dim, ", official ", p.official, "; see sparse_attention_tensor_cores_fit)");
    sparse_attention_f32(p, s);
    if (p.out_bf16) output_to_bf16(p, s);
}

namespace {
void sparse_attention_f32(const SparseAttentionParams& p, Stream s) {
    // Heads sharing each staged candidate row (attention_mqa.cuh): 16 for batches of many rows, 4 for
    // a few rows (more blocks); the one-block-per-head kernel where the shapes do not fit.
    const bool aligned = reinterpret_cast<uintptr_t>(p.q) % 16 == 0 && reinterpret_cast<uintptr_t>(p.kv) % 16 == 0;
    const bool mqa = aligned && p.head_dim % 8 == 0 && p.head_dim <= kernels::kMqaMaxDim;
    const int64_t smem = mqa ? max_shared_memory_per_block() : 0;  // 16 heads need ~101 KiB at head_dim 512
    if (mqa && p.heads % 16 == 0 && p.rows > 8 && kernels::mqa_smem_bytes(16, p.head_dim) <= smem) return launch_mqa<16>(p, s);
    if (mqa && p.heads % 4 == 0 && kernels::mqa_smem_bytes(4, p.head_dim) <= smem) return launch_mqa<4>(p, s);
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(p.heads));
    kernels::sparse_attention_kernel<<<grid, 256, static_cast<size_t>(p.head_dim) * sizeof(float), raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

}  // namespace deepinfer::cuda
