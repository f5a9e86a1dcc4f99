// SPDX-License-Identifier: Apache-2.0
// The warpgroup MMAs' ordering instructions (sm_90a; no-ops where wgmma does not exist), shared by the
// wgmma GEMMs (kernels/gemm_wgmma*.cuh) and the wgmma attention (kernels/attention_tc_wgmma.cuh).
#pragma once

namespace deepinfer::cuda::dev {

// Generic-proxy shared-memory stores made visible to the async proxy (wgmma reads shared memory there).
__device__ __forceinline__ void fence_proxy_async() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}
// Before the first wgmma of a group: the accumulator registers' earlier writes are ordered before it.
__device__ __forceinline__ void wgmma_fence() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}
// Closes the wgmmas issued since the last commit into one group.
__device__ __forceinline__ void wgmma_commit() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}
// Waits until at most kPending of the committed groups are still in flight.
template <int kPending>
__device__ __forceinline__ void wgmma_wait_pending() {
#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(kPending) : "memory");
#endif
}
// Waits for every committed group.
__device__ __forceinline__ void wgmma_wait() { wgmma_wait_pending<0>(); }

}  // namespace deepinfer::cuda::dev
