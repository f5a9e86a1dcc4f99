// SPDX-License-Identifier: Apache-2.0
// launch_pdl: the kernel launch with programmatic dependent launch (PDL, Hopper and newer). The launch
// carries cudaLaunchAttributeProgrammaticStreamSerialization, so the kernel may be scheduled while the
// kernel before it on the stream still runs (inside CUDA graphs too: capture makes the edge
// programmatic): its launch, block dispatch and any prologue that reads no earlier result overlap the
// previous kernel's tail instead of following its completion.
//
// The contract, for every kernel launched through launch_pdl: every thread calls pdl_wait() before it
// reads anything an earlier kernel wrote, before it writes anything (an earlier kernel may still read
// it) and before it exits (so that no grid completes before the grids it follows: completion stays
// transitive down the stream). Only reads of memory no kernel writes (weights, tables) may come
// before it. pdl_wait() returns once every prerequisite grid has completed and its writes are visible.
// pdl_launch_dependents() (called right after the wait by pdl_enter()) lets the next kernel's blocks be
// scheduled; they then sit in their own pdl_wait(). Without it a kernel triggers when its blocks exit.
// On devices before sm_90 both are no-ops and the attribute is not set (plain stream order); a Stream with
// pdl = false (ModelOptions::cuda_pdl off) launches plainly too (a diagnostic for timing).
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

// Waits for the previous grids on the stream (complete, writes visible). Every thread that reads an
// earlier kernel's results must have passed it (or a barrier after a thread that did).
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Lets the next PDL-launched kernel on the stream be scheduled once every block of this grid has called it
// (or exited).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The first statement of a launch_pdl kernel with no prologue of its own.
__device__ __forceinline__ void pdl_enter() {
    pdl_wait();
    pdl_launch_dependents();
}

// Whether the current device supports programmatic dependent launch: compute capability 9.0 or newer.
inline bool pdl_supported() {
    int dev = 0, major = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess) {
        (void)cudaGetLastError();
        return false;
    }
    return major >= 9;
}

// kernel<<<grid, block, smem, stream>>>(args...) with the PDL attribute where the stream asks for it and the
// device supports it; throws on a launch error.
template <typename... Params, typename... Args>
void launch_pdl(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, Stream stream, Args&&... args) {
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = static_cast<cudaStream_t>(stream.handle);
    cfg.attrs = attr;
    cfg.numAttrs = stream.pdl && pdl_supported() ? 1 : 0;
    DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...));
}

}  // namespace deepinfer::cuda
