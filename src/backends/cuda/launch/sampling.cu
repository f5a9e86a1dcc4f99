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
    DI_CHECK(p.logits && p.row && p.scratch && p.index_scratch && p.tokens, "cuda sample: missing buffers");
    const auto st = static_cast<cudaStream_t>(s.handle);
    // Greedy rows: the argmax over slices of 2048 ids or more on many blocks first (a single block reads a
    // 129K-id row at ~15 GB/s); the slices depend on the vocabulary only, and the pick on neither.
    const int64_t slices = std::min<int64_t>(kSampleArgmaxSlices, std::max<int64_t>(p.vocab / 2048, 1));
    if (slices > 1)
        launch_pdl(kernels::argmax_slices_kernel, dim3(static_cast<unsigned>(p.rows), static_cast<unsigned>(slices)), kernels::kTopkThreads,
                   0, st, p);
    launch_pdl(kernels::sample_kernel, static_cast<unsigned>(p.rows), kernels::kTopkThreads, 0, st, p, static_cast<int>(slices));
}

}  // namespace deepinfer::cuda
