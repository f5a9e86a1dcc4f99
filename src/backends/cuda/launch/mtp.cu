// SPDX-License-Identifier: Apache-2.0
// Launchers of the MTP drafter's ops.
#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/kernels/mtp.cuh"

namespace deepinfer::cuda {
namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }
}  // namespace

void gather_row_sources(const RowSourcesParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.src_ptr && p.dst && p.width > 0, "gather_row_sources: missing buffers");
    kernels::gather_row_sources_kernel<<<static_cast<unsigned>(p.rows), 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void scatter_row_ptrs(const ScatterRowPtrsParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.src && p.dst_ptr && p.width > 0, "scatter_row_ptrs: missing buffers");
    kernels::scatter_row_ptrs_kernel<<<static_cast<unsigned>(p.rows), 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void add_streams(const AddStreamsParams& p, Stream s) {
    if (p.rows == 0) return;
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(p.hc));
    kernels::add_streams_kernel<<<grid, 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void draft_sample(const DraftSampleParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.logits && p.temperature && p.sampled && p.uniform && p.parts && p.probs && p.tokens,
             "draft_sample: missing buffers");
    DI_CHECK(p.vocab > 0 && draft_sum_blocks(p.vocab) <= kernels::kDraftMaxBlocks, "draft_sample: a vocabulary of ",
             p.vocab, " ids (1 to ", kernels::kDraftMaxBlocks * kDraftSumBlock, ")");
    DI_CHECK(p.rows <= 65535, "draft_sample: ", p.rows, " rows");
    const dim3 grid(static_cast<unsigned>((draft_sum_blocks(p.vocab) + kernels::kDraftWarps - 1) / kernels::kDraftWarps),
                    static_cast<unsigned>(p.rows));
    kernels::draft_argmax_blocks_kernel<<<grid, 32 * kernels::kDraftWarps, 0, raw(s)>>>(p);
    kernels::draft_block_sums_kernel<<<grid, 32 * kernels::kDraftWarps, 0, raw(s)>>>(p);
    kernels::draft_probs_kernel<<<grid, 32 * kernels::kDraftWarps, 0, raw(s)>>>(p);
    kernels::draft_pick_kernel<<<static_cast<unsigned>(p.rows), 32, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

int64_t draft_sample_parts(int64_t rows, int64_t vocab) { return rows * kernels::kDraftParts * draft_sum_blocks(vocab); }

}  // namespace deepinfer::cuda
