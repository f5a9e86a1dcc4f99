// SPDX-License-Identifier: Apache-2.0
// Launchers of V4.1's single-pass mHC ops.
#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/kernels/v41_mhc.cuh"

namespace deepinfer::cuda {
namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }
}  // namespace

void hc_mixes(const HcMixesParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.hc >= 1 && p.hc <= kernels::kV41HcMax, "hc_mixes: hc_mult ", p.hc, " > ", kernels::kV41HcMax);
    DI_CHECK(p.x && p.fn && p.base && p.scale && p.pre && p.post && p.comb && (!p.collapsed || p.collapse_pre),
             "hc_mixes: missing pointer");
    kernels::hc_mixes_kernel<<<static_cast<unsigned>(p.rows), 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void hc_collapse(const HcCollapseParams& p, Stream s) {
    if (p.rows == 0) return;
    kernels::hc_collapse_kernel<<<static_cast<unsigned>(p.rows), 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
