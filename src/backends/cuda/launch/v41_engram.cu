// SPDX-License-Identifier: Apache-2.0
// Launchers of V4.1's Engram ops: table-row gather and fusion into the streams.
#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/kernels/v41_engram.cuh"

namespace deepinfer::cuda {
namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }
}  // namespace

void engram_gather(const EngramGatherParams& p, Stream s) {
    if (p.tokens == 0 || p.cols == 0) return;
    DI_CHECK(p.table.weight && p.rows && p.out, "engram_gather: missing pointer");
    const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.cols));
    kernels::engram_gather_kernel<<<grid, 128, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void engram_fuse(const EngramFuseParams& p, Stream s) {
    if (p.tokens == 0) return;
    DI_CHECK(p.kv && p.gate_weight && p.streams, "engram_fuse: missing pointer");
    const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.hc));
    kernels::engram_fuse_kernel<<<grid, kernels::kEngramFuseThreads, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
