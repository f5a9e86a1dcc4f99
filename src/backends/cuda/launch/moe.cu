// SPDX-License-Identifier: Apache-2.0
// Launchers of the MoE ops: router, permutation, SwiGLU, scatter/gather, combine, and the expert-
// parallel pair maps.
#include <algorithm>
#include <numeric>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/launch/column_blocks.h"
#include "backends/cuda/kernels/moe.cuh"

namespace deepinfer::cuda {

void route(const RouterParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.top_k <= p.experts && p.top_k <= kernels::kMaxTopK, "route: top_k ", p.top_k, " of ", p.experts);
    DI_CHECK(p.tid2eid || p.biased, "route: score routing needs the biased scratch");
    DI_CHECK(!p.vl_rows || (p.bias_vl && !p.tid2eid), "route: image-span rows need bias_vl (score routing)");
    launch_pdl(kernels::route_kernel, static_cast<unsigned>(p.rows), kernels::kTopkThreads, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void permute(const PermuteParams& p, Stream s) {
    if (p.rows == 0) return;
    const size_t smem = kernels::permute_smem_bytes(p.experts);
    DI_CHECK(static_cast<int64_t>(smem) <= max_shared_memory_per_block(), "permute: ", p.experts, " experts");
    if (smem > 48 * 1024)
        DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::permute_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const int64_t tiles = (p.rows * p.top_k + kernels::kPermuteThreads - 1) / kernels::kPermuteThreads;
    DI_CHECK(tiles < (int64_t(1) << 31), "permute: ", p.rows * p.top_k, " pairs");
    launch_pdl(kernels::permute_kernel, static_cast<unsigned>(tiles), kernels::kPermuteThreads, smem, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void swiglu(const SwigluParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.ld == 0 || p.ld >= p.width, "swiglu: row stride ", p.ld, " below the width ", p.width);
    DI_CHECK(p.fine_block == 0 || (p.q && p.fine_block == 32), "swiglu: fine_block ", p.fine_block,
             " (32 with a quantized output, or 0)");
    if (p.q) {
        DI_CHECK(p.q_scale && p.width % 128 == 0 && p.ld % 4 == 0 && reinterpret_cast<uintptr_t>(p.g) % 16 == 0 &&
                     reinterpret_cast<uintptr_t>(p.u) % 16 == 0,
                 "swiglu: quantized output needs width % 128 == 0 (", p.width, "), a row stride of whole float4s (", p.ld,
                 ") and 16-byte aligned rows");
        const int64_t groups = (p.width / 128 + kernels::kSwigluQuantBlocks - 1) / kernels::kSwigluQuantBlocks;
        const int64_t threads = p.rows * groups * 32;
        launch_pdl(kernels::swiglu_quant_kernel, static_cast<unsigned>((threads + 255) / 256), 256, 0, s, p);
        DI_CUDA_CHECK(cudaGetLastError());
        return;
    }
    launch_pdl(kernels::swiglu_kernel, static_cast<unsigned>(p.rows), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void scatter_rows(const ScatterRowsParams& p, Stream s) {
    if (p.n == 0) return;
    launch_pdl(kernels::scatter_rows_kernel, static_cast<unsigned>(p.n), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void gather_rows(const ScatterRowsParams& p, Stream s) {
    if (p.n == 0) return;
    const dim3 grid(static_cast<unsigned>(p.n), static_cast<unsigned>(column_blocks(p.n, p.width, 1024)));
    launch_pdl(kernels::gather_rows_kernel, grid, 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void moe_combine(const CombineParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.top_k <= kernels::kMaxTopK, "moe_combine: top_k ", p.top_k);
    const auto a16 = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    if (p.top_k <= 8 && p.hidden % 4 == 0 && a16(p.expert_out) && a16(p.shared) && a16(p.out)) {
        const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(column_blocks(p.rows, p.hidden / 4, 256)));
        launch_pdl(kernels::moe_combine_vec_kernel<8>, grid, 256, 0, s, p);
        DI_CUDA_CHECK(cudaGetLastError());
        return;
    }
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(column_blocks(p.rows, p.hidden, 256)));
    launch_pdl(kernels::moe_combine_kernel, grid, 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void expert_load_accumulate(const ExpertLoadParams& p, Stream s) {
    DI_CHECK(p.experts > 0 && p.expert_offsets && p.acc, "expert_load_accumulate: ", p.experts, " experts");
    launch_pdl(kernels::expert_load_kernel, 1, 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

int64_t even_routing_stride(int64_t experts) {
    int64_t stride = 37;
    while (std::gcd(stride, experts) != 1) stride += 2;
    return stride;
}

void even_routing(const EvenRoutingParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.top_k >= 1 && p.top_k <= p.experts && p.first_row >= 0, "even_routing: top_k ", p.top_k, " of ",
             p.experts, " experts");
    DI_CHECK(p.stride >= 1 && std::gcd(p.stride, p.experts) == 1, "even_routing: stride ", p.stride,
             " must be coprime with ", p.experts, " experts");
    const int64_t n = p.rows * p.top_k;
    launch_pdl(kernels::even_routing_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void expert_local_ids(const ExpertLocalIdsParams& p, Stream s) {
    if (p.n == 0) return;
    DI_CHECK(p.experts_per_rank > 0 && p.first_expert >= 0, "expert_local_ids: ", p.experts_per_rank,
             " experts per rank from ", p.first_expert);
    launch_pdl(kernels::expert_local_ids_kernel, static_cast<unsigned>((p.n + 255) / 256), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void group_row_tables(const GroupRowTablesParams& p, Stream s) {
    DI_CHECK(p.groups > 0 && p.rows >= 0 && p.groups * p.rows < (int64_t(1) << 31), "group_row_tables: ", p.groups,
             " groups of ", p.rows, " rows");
    const int64_t n = std::max(p.groups * p.rows, p.groups + 1);
    launch_pdl(kernels::group_row_tables_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void expert_source_rows(const ExpertSourceRowsParams& p, Stream s) {
    if (p.n == 0) return;
    DI_CHECK(p.experts_per_rank > 0, "expert_source_rows: ", p.experts_per_rank, " experts per rank");
    launch_pdl(kernels::expert_source_rows_kernel, static_cast<unsigned>((p.n + 255) / 256), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
