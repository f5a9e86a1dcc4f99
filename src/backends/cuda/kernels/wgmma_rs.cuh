// SPDX-License-Identifier: Apache-2.0
// wgmma.mma_async in its register-source form (sm_90a), shared by the weight-streaming kernels that put
// the WEIGHT in registers as the A operand (64 weight rows per warpgroup) and TN token rows in shared
// memory as the B operand (by descriptor), so the result tile is yᵀ: the FP4 experts' kernels
// (gemm_wgmma_fp4rs.cuh, gemm_wgmma_fp4dec.cuh: e4m3, k32 steps) and FastLinearParams::fp8_as_bf16
// (gemm_wgmma_fp8bf16dec.cuh: bf16, k16 steps). d (+)= A · Bᵀ for one step; scale_d = 0 overwrites d.
#pragma once

#include <cstdint>

#include "backends/cuda/kernels/gemm_wgmma.cuh"  // DI_WGMMA_ENABLED

namespace deepinfer::cuda::kernels::wgrs {

#define DI_R4(i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3])
#define DI_R8(i) "+f"(d[i + 0]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), "+f"(d[i + 7])
#define DI_RS_A "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d)
// One step of wgmma width TN: KIND the instruction's K and operand types, TAIL its immediates after scale-a
// and scale-b (bf16's B transpose flag; none for e4m3).
#define DI_WGMMA_RS(KIND, TAIL)                                                                                     \
    if constexpr (TN == 8) {                                                                                        \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %9, 0;\nwgmma.mma_async.sync.aligned.m64n8" KIND               \
                     " {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, p, 1, 1" TAIL ";\n}\n"                                        \
                     : DI_R4(0)                                                                                     \
                     : DI_RS_A);                                                                                    \
    } else if constexpr (TN == 16) {                                                                                \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %13, 0;\nwgmma.mma_async.sync.aligned.m64n16" KIND             \
                     " {%0,%1,%2,%3,%4,%5,%6,%7}, {%8,%9,%10,%11}, %12, p, 1, 1" TAIL ";\n}\n"                          \
                     : DI_R8(0)                                                                                     \
                     : DI_RS_A);                                                                                    \
    } else if constexpr (TN == 32) {                                                                                \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\nwgmma.mma_async.sync.aligned.m64n32" KIND             \
                     " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15}, {%16,%17,%18,%19}, %20, p, 1, 1" TAIL   \
                     ";\n}\n"                                                                                       \
                     : DI_R8(0), DI_R8(8)                                                                           \
                     : DI_RS_A);                                                                                    \
    } else if constexpr (TN == 64) {                                                                                \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\nwgmma.mma_async.sync.aligned.m64n64" KIND             \
                     " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"        \
                     "%24,%25,%26,%27,%28,%29,%30,%31}, {%32,%33,%34,%35}, %36, p, 1, 1" TAIL ";\n}\n"                 \
                     : DI_R8(0), DI_R8(8), DI_R8(16), DI_R8(24)                                                     \
                     : DI_RS_A);                                                                                    \
    } else {                                                                                                        \
        static_assert(TN == 128, "wgmma width TN: 8, 16, 32, 64 or 128");                                           \
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\nwgmma.mma_async.sync.aligned.m64n128" KIND            \
                     " {%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,"        \
                     "%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47," \
                     "%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63}, {%64,%65,%66,%67}, %68, p, 1, 1" \
                     TAIL ";\n}\n"                                                                                  \
                     : DI_R8(0), DI_R8(8), DI_R8(16), DI_R8(24), DI_R8(32), DI_R8(40), DI_R8(48), DI_R8(56)         \
                     : DI_RS_A);                                                                                    \
    }

// e4m3 (kBf16 false): A 64 x 32 e4m3 (four registers), B TN x 32 e4m3. bf16: A 64 x 16 bf16 (four registers),
// B TN x 16 bf16 (K-major).
template <int TN, bool kBf16 = false>
__device__ __forceinline__ void wgmma_rs_step(float (&d)[TN / 2], const uint32_t (&a)[4], uint64_t db, int scale_d) {
#ifdef DI_WGMMA_ENABLED
    if constexpr (kBf16) {
        DI_WGMMA_RS("k16.f32.bf16.bf16", ", 0")
    } else {
        DI_WGMMA_RS("k32.f32.e4m3.e4m3", "")
    }
#else
    (void)d; (void)a; (void)db; (void)scale_d;
    __trap();  // the launchers select these kernels only on sm_90 devices (built for sm_90a)
#endif
}
#undef DI_WGMMA_RS
#undef DI_RS_A
#undef DI_R4
#undef DI_R8

// wgmma.fence with the A fragment as an operand: every instruction producing it stays before the
// fence (else the compiler sinks conversion instructions between the MMAs and ptxas injects further
// fences there, C7519).
__device__ __forceinline__ void wgmma_fence_a(uint32_t (&a)[4][4]) {
#ifdef DI_WGMMA_ENABLED
    asm volatile("wgmma.fence.sync.aligned;\n"
                 : "+r"(a[0][0]), "+r"(a[0][1]), "+r"(a[0][2]), "+r"(a[0][3]), "+r"(a[1][0]), "+r"(a[1][1]), "+r"(a[1][2]),
                   "+r"(a[1][3]), "+r"(a[2][0]), "+r"(a[2][1]), "+r"(a[2][2]), "+r"(a[2][3]), "+r"(a[3][0]), "+r"(a[3][1]),
                   "+r"(a[3][2]), "+r"(a[3][3])
                 :
                 : "memory");
#else
    (void)a;
#endif
}

}  // namespace deepinfer::cuda::kernels::wgrs
