// SPDX-License-Identifier: Apache-2.0
// The launch of V4's and V4.1's tensor-core attention kernels (attention_tc_common.cuh), shared by
// launch/attention.cu and launch/v41_attention.cu: opt in to the kernel's dynamic shared memory (false
// when the device has too little: the caller falls back to the CUDA-core kernels), then the split
// kernel on a cluster of kTcaSplit CTAs per row where the device runs clusters of that size, else the
// one-CTA kernel. The choice depends on the device only, never on the batch.
#pragma once

#include <cuda_runtime.h>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/attention_tc_common.cuh"

namespace deepinfer::cuda {

// Whether `kernel` runs on clusters of `split` CTAs of `smem` bytes each on the current device.
template <class Params>
bool tca_clusters_fit(void (*kernel)(Params), int split, int64_t smem) {
    int major = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, current_device()));
    if (major < 9) return false;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(1, 1, static_cast<unsigned>(split));
    cfg.blockDim = dim3(kernels::kTcaThreads);
    cfg.dynamicSmemBytes = static_cast<size_t>(smem);
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = static_cast<unsigned>(split);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return clusters > 0;
}

// grid (rows, ceil(heads / 64), split), cluster (1, 1, split) of split_kernel, or grid (rows,
// ceil(heads / 64)) of single_kernel. The cluster check runs once per kernel (kD) and process, before
// any graph capture can be under way (the first launch of a model is an eager prefill), so eager
// launches and graph replays always take the same kernel.
// kSmem: the kernels' dynamic shared memory (tca_smem_bytes(kD) unless the kernel says otherwise).
template <int kD, int64_t kSmem = kernels::tca_smem_bytes(kD), class Params>
bool launch_tca(void (*split_kernel)(Params), void (*single_kernel)(Params), const Params& p, int64_t rows,
                int64_t heads, cudaStream_t stream) {
    constexpr int64_t smem = kSmem;
    if (smem > max_shared_memory_per_block()) return false;
    for (auto* k : {split_kernel, single_kernel})
        DI_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    static const bool split = tca_clusters_fit(split_kernel, kernels::kTcaSplit, smem);
    const auto groups = static_cast<unsigned>((heads + kernels::kTcaHeads - 1) / kernels::kTcaHeads);
    if (!split) {
        single_kernel<<<dim3(static_cast<unsigned>(rows), groups), kernels::kTcaThreads, static_cast<size_t>(smem), stream>>>(p);
        DI_CUDA_CHECK(cudaGetLastError());
        return true;
    }
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(static_cast<unsigned>(rows), groups, kernels::kTcaSplit);
    cfg.blockDim = dim3(kernels::kTcaThreads);
    cfg.dynamicSmemBytes = static_cast<size_t>(smem);
    cfg.stream = stream;
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = kernels::kTcaSplit;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, split_kernel, p));
    return true;
}

}  // namespace deepinfer::cuda
