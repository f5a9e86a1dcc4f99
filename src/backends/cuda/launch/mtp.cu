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
    DI_CHECK(p.logits && p.temperature && p.sampled && p.uniform && p.scratch && p.probs && p.tokens,
             "draft_sample: missing buffers");
    DI_CHECK(draft_sum_blocks(p.vocab) <= kernels::kDraftMaxBlocks, "draft_sample: a vocabulary of ", p.vocab,
             " ids is over ", kernels::kDraftMaxBlocks * kDraftSumBlock);
    kernels::draft_sample_kernel<<<static_cast<unsigned>(p.rows), kernels::kTopkThreads, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
