// SPDX-License-Identifier: Apache-2.0
// Shared-memory mbarriers (shared::cta) of the warp-specialized kernels (gemm_wgmma_fp4ws.cuh,
// gemm_wgmma_dense_ws.cuh): init, arrive (release), and the spin on a phase's parity (acquire).
#pragma once

#include <cstdint>

#include "backends/cuda/common/cp_async.cuh"

namespace deepinfer::cuda::dev {

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
// Arrive (release: this thread's earlier shared-memory accesses happen before the phase completes).
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
    asm volatile("{\n.reg .b64 state;\nmbarrier.arrive.shared::cta.b64 state, [%0];\n}\n" ::"r"(smem_addr(bar)) : "memory");
}
// Wait (acquire) for the completion of the phase of the given parity.
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
    const uint32_t addr = smem_addr(bar);
    uint32_t done = 0;
    do {
        asm volatile(
            "{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
            : "=r"(done)
            : "r"(addr), "r"(parity)
            : "memory");
    } while (!done);
}

}  // namespace deepinfer::cuda::dev
