// SPDX-License-Identifier: Apache-2.0
// Launcher of the GPU sampler.
#include <algorithm>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/sampling.cuh"

namespace deepinfer::cuda {
namespace {
constexpr int64_t kSampleArgmaxSlices = 64;
}  // namespace

void sample(const SampleParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.logits && p.row && p.scratch && p.parts && p.index_scratch && p.tokens, "cuda sample: missing buffers");
    DI_CHECK(p.vocab > 0 && draft_sum_blocks(p.vocab) <= kernels::kDraftMaxBlocks, "cuda sample: a vocabulary of ",
             p.vocab, " ids (1 to ", kernels::kDraftMaxBlocks * kDraftSumBlock, ")");
    DI_CHECK(p.rows <= 65535, "cuda sample: ", p.rows, " rows");
    const auto st = static_cast<cudaStream_t>(s.handle);
    // Greedy rows: the argmax over slices of 2048 ids or more on many blocks first (a single block reads a
    // 129K-id row at ~15 GB/s); the slices depend on the vocabulary only, and the pick on neither.
    // Top-k rows: the top-k of slices of 8192 ids or more on as many blocks (the first of the same grid's
    // blocks), then the top-k of their candidates (kernels::topk_sliced: the same ids).
    const int64_t slices = std::min<int64_t>(kSampleArgmaxSlices, std::max<int64_t>(p.vocab / 2048, 1));
    const int64_t topk_slices = kernels::sample_topk_slices(p.vocab);
    static_assert(kernels::kSampleTopkSliceMin >= 2048, "the greedy slices' grid covers the top-k slices");
    if (slices > 1)
        launch_pdl(kernels::argmax_slices_kernel, dim3(static_cast<unsigned>(p.rows), static_cast<unsigned>(slices)), kernels::kTopkThreads,
                   0, s, p, static_cast<int>(topk_slices));
    // Greedy and top-k rows; then the untruncated rows in blocks of ids across the GPU.
    launch_pdl(kernels::sample_kernel, static_cast<unsigned>(p.rows), kernels::kTopkThreads, 0, s, p, static_cast<int>(slices),
               static_cast<int>(topk_slices));
    const dim3 grid(static_cast<unsigned>((draft_sum_blocks(p.vocab) + kernels::kDraftWarps - 1) / kernels::kDraftWarps),
                    static_cast<unsigned>(p.rows));
    kernels::sample_argmax_blocks_kernel<<<grid, 32 * kernels::kDraftWarps, 0, st>>>(p);
    kernels::sample_block_sums_kernel<<<grid, 32 * kernels::kDraftWarps, 0, st>>>(p);
    if (p.verify_rows) kernels::sample_residual_sums_kernel<<<grid, 32 * kernels::kDraftWarps, 0, st>>>(p);
    if (p.nucleus_rows) kernels::sample_nucleus_kernel<<<static_cast<unsigned>(p.rows), kernels::kTopkThreads, 0, st>>>(p);
    kernels::sample_pick_kernel<<<static_cast<unsigned>(p.rows), 32, 0, st>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

int64_t sample_parts(int64_t rows, int64_t vocab) { return rows * kernels::kSampleParts * draft_sum_blocks(vocab); }

}  // namespace deepinfer::cuda
