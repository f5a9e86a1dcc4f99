// SPDX-License-Identifier: Apache-2.0
// Launcher of the GPU sampler.
#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/sampling.cuh"

namespace deepinfer::cuda {

void sample(const SampleParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.logits && p.row && p.scratch && p.index_scratch && p.tokens, "cuda sample: missing buffers");
    launch_pdl(kernels::sample_kernel, static_cast<unsigned>(p.rows), kernels::kTopkThreads, 0, static_cast<cudaStream_t>(s.handle), p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
