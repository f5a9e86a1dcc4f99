// SPDX-License-Identifier: Apache-2.0
// The warpgroup MMAs (wgmma, sm_90a) of V4's tensor-core sink attention (attention_tc.cuh, kWg), and the
// shared-memory layout they read. A CTA's 16 warps are 4 warpgroups; warpgroup w = quarter w of the
// mma.sync kernel, warp w·4 + i its head group i. Each wgmma's accumulator fragment is the mma.sync
// kernel's, element for element (warp i of a warpgroup holds rows 16i..16i+15; thread (g, t4) rows g and
// g + 8, columns 8j + 2·t4 and + 1 as d[4j .. 4j + 3]):
//   scores  m64n16k16 x kD/16 k-steps: the 64 heads x this quarter's 16 candidates, q and kv K-major
//           (kWg = 3: m64n32 on warpgroups 0 and 1, two quarters each; kWg = 4: m64n64 on warpgroup 0)
//   P·V     m64n(kD/4)k16 x 4 k-steps: the 64 heads x this quarter's kD/4 columns, P K-major, kv N-major
// and every output's chain of k-steps is the mma.sync kernel's (the same k-steps of 16 in the same
// order into the same f32 accumulator), so the two kernels give the same bits wherever one k-step of
// 16 is the same arithmetic on both instructions (tests/ops/ops_cuda_test.cpp compares them bit for
// bit at the model's shapes).
//
// Layout: q and the candidate block kv [64 rows, kD] bf16, P [64, 64] bf16, each as kD/64 (P: one)
// sub-tiles of 64 rows x 128 bytes in the 128-byte swizzle (row r at r·128, its 16-byte chunk c at
// (c ^ r % 8)·16; sub-tiles 8 KiB apart, 1024-aligned). The same kv bytes are the scores' B operand
// (K-major: a candidate row's dims contiguous) and P·V's (N-major: transposed B).
#pragma once

#include <cstdint>

#include "backends/cuda/common/cp_async.cuh"
#include "backends/cuda/common/wgmma_sync.cuh"

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define DI_TCW_ENABLED 1
#endif

namespace deepinfer::cuda::kernels::tcw {

constexpr int kSubRows = 64;  // rows of a sub-tile (heads or candidates)

// bf16 element index of (row, col) in a [64, kd] tile of this layout.
__host__ __device__ constexpr int index(int row, int col) {
    return (col >> 6) * (kSubRows * 64) + row * 64 + ((((col >> 3) & 7) ^ (row & 7)) << 3) + (col & 7);
}

// Descriptors of a 128-byte-swizzled operand at p (its first row 8-row aligned within a 1024-aligned
// sub-tile). K-major: rows 128 bytes apart, 8-row groups 1024 apart (a K step of 16 advances p by 32
// bytes inside the swizzle atom). N-major (transposed B): K rows (candidates) 128 bytes apart, 8-row
// groups 1024 apart (SBO), the next 64 N columns one sub-tile (8 KiB) further (LBO).
__device__ __forceinline__ uint64_t desc_k(const void* p) {
    const uint64_t a = dev::smem_addr(p);
    return ((a & 0x3FFFFu) >> 4) | (uint64_t(16 >> 4) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}
__device__ __forceinline__ uint64_t desc_n(const void* p) {
    const uint64_t a = dev::smem_addr(p);
    constexpr uint64_t kLbo = kSubRows * 128, kSbo = 1024;
    return ((a & 0x3FFFFu) >> 4) | ((kLbo >> 4) << 16) | ((kSbo >> 4) << 32) | (uint64_t(1) << 62);
}

using dev::fence_proxy_async;  // (common/wgmma_sync.cuh)
// Commits the wgmmas issued since the last commit and waits for every group.
__device__ __forceinline__ void commit_wait() {
    dev::wgmma_commit();
    dev::wgmma_wait();
}

// The number of SMs (%nsmid: an upper bound of the SM ids), for prefetch distances only.
__device__ __forceinline__ int sm_count() {
    int n;
    asm("mov.u32 %0, %%nsmid;\n" : "=r"(n));
    return n;
}
// A hint: bytes (a multiple of 16) at p (16-byte aligned) into L2.
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
#ifdef DI_TCW_ENABLED
    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;\n" ::"l"(p), "r"(bytes) : "memory");
#else
    (void)p; (void)bytes;
#endif
}

// d += A · B over one k-step of 16: m64n16k16, A and B K-major.
__device__ __forceinline__ void mma_n16(float (&d)[2][4], uint64_t da, uint64_t db) {
#ifdef DI_TCW_ENABLED
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %10, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n16k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0][0]), "+f"(d[0][1]), "+f"(d[0][2]), "+f"(d[0][3]), "+f"(d[1][0]), "+f"(d[1][1]), "+f"(d[1][2]),
          "+f"(d[1][3])
        : "l"(da), "l"(db), "r"(1)
        : "memory");
#else
    (void)d; (void)da; (void)db;
    __trap();  // the launcher picks the wgmma kernel on sm_90 devices only (built for sm_90a)
#endif
}

// d += A · B over one k-step of 16: m64n32k16, A and B K-major; d[h][t] = n-tile 2h + t.
__device__ __forceinline__ void mma_n32(float (&d)[2][2][4], uint64_t da, uint64_t db) {
#ifdef DI_TCW_ENABLED
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n32k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0][0][0]), "+f"(d[0][0][1]), "+f"(d[0][0][2]), "+f"(d[0][0][3]), "+f"(d[0][1][0]), "+f"(d[0][1][1]),
          "+f"(d[0][1][2]), "+f"(d[0][1][3]), "+f"(d[1][0][0]), "+f"(d[1][0][1]), "+f"(d[1][0][2]), "+f"(d[1][0][3]),
          "+f"(d[1][1][0]), "+f"(d[1][1][1]), "+f"(d[1][1][2]), "+f"(d[1][1][3])
        : "l"(da), "l"(db), "r"(1)
        : "memory");
#else
    (void)d; (void)da; (void)db;
    __trap();
#endif
}

#define DI_TCW_Q8(q) "+f"(d[q][0][0]), "+f"(d[q][0][1]), "+f"(d[q][0][2]), "+f"(d[q][0][3]), "+f"(d[q][1][0]), "+f"(d[q][1][1]), "+f"(d[q][1][2]), "+f"(d[q][1][3])
// d += A · B over one k-step of 16: m64n64k16, A and B K-major; d[q][t] = n-tile 2q + t.
__device__ __forceinline__ void mma_n64(float (&d)[4][2][4], uint64_t da, uint64_t db) {
#ifdef DI_TCW_ENABLED
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
        "%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        : DI_TCW_Q8(0), DI_TCW_Q8(1), DI_TCW_Q8(2), DI_TCW_Q8(3)
        : "l"(da), "l"(db), "r"(1)
        : "memory");
#else
    (void)d; (void)da; (void)db;
    __trap();
#endif
}
#undef DI_TCW_Q8

#define DI_TCW_R4(t) "+f"(d[t][0]), "+f"(d[t][1]), "+f"(d[t][2]), "+f"(d[t][3])
// d += A · B over one k-step of 16: m64n128k16, A K-major, B N-major (transposed).
__device__ __forceinline__ void mma_n128_bt(float (&d)[16][4], uint64_t da, uint64_t db) {
#ifdef DI_TCW_ENABLED
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 "
        "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,"
        "%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,"
        "%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, %64, %65, p, 1, 1, 0, 1;\n}\n"
        : DI_TCW_R4(0), DI_TCW_R4(1), DI_TCW_R4(2), DI_TCW_R4(3), DI_TCW_R4(4), DI_TCW_R4(5), DI_TCW_R4(6), DI_TCW_R4(7),
          DI_TCW_R4(8), DI_TCW_R4(9), DI_TCW_R4(10), DI_TCW_R4(11), DI_TCW_R4(12), DI_TCW_R4(13), DI_TCW_R4(14),
          DI_TCW_R4(15)
        : "l"(da), "l"(db), "r"(1)
        : "memory");
#else
    (void)d; (void)da; (void)db;
    __trap();
#endif
}
#undef DI_TCW_R4

}  // namespace deepinfer::cuda::kernels::tcw
