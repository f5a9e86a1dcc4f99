// SPDX-License-Identifier: Apache-2.0
// Warp-level tensor-core primitives (sm_80+): ldmatrix loads of 8x8 b16 matrices from shared memory
// and the m16n8k16 bf16 MMA with f32 accumulation. Fragment layouts are PTX's (ISA "mma.m16n8k16"):
// A (16x16, row-major) a0..a3 = rows {g, g+8} x cols {2q, 2q+1} then the same at cols + 8;
// B (16x8, "col") b0, b1 = rows {2q, 2q+1} and + 8 of column g; C/D c0, c1 = row g, cols {2q, 2q+1},
// c2, c3 = row g + 8; where g = lane / 4 and q = lane % 4.
#pragma once

#include <cstdint>

#include "backends/cuda/common/cp_async.cuh"

namespace deepinfer::cuda::dev {

// Four 8x8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
// The same, each matrix transposed (a row-major K x N tile of B read as the "col" fragment).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_addr(p)));
}
// d += a · b over k = 16 (bf16 inputs, f32 accumulate).
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
        "{%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

}  // namespace deepinfer::cuda::dev
