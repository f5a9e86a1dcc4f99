// SPDX-License-Identifier: Apache-2.0
// Packed e2m1 (FP4) codes to e4m3 bytes by byte permutes: the Hopper FP4 GEMM kernels' conversion (with a
// table per scale shift, gemm_tc.cuh's build_fp4_table) and the V4.1 caches' FP4 decoder (the shift-0 table,
// kE2m1E4m3Lo / kE2m1E4m3Hi: every e2m1 value is an e4m3 value exactly).
#pragma once

#include <cstdint>

namespace deepinfer::cuda::dev {

// The e4m3 bytes of the e2m1 magnitudes 0, 0.5, 1, 1.5 (lo) and 2, 3, 4, 6 (hi): byte i of (lo, hi) is
// magnitude code i's.
constexpr uint32_t kE2m1E4m3Lo = 0x3C383000u, kE2m1E4m3Hi = 0x4C484440u;

// 8 packed e2m1 codes (one word, low nibble first) -> 8 e4m3 bytes (two words) through the 8-byte
// magnitude table (lo, hi) of one shift: the bytes of gemm_tc.cuh's fp4x8_to_e4m3 in fewer instructions
// (the Hopper FP4 kernels' conversion).
// Magnitudes: one byte_perm per output word with the codes' low 3 bits as byte indices. Signs: byte k
// of w holds codes 2k (low nibble, sign at bit 3) and 2k + 1 (sign at bit 7), so output byte 2k takes
// bit 7 of (w << 4)'s byte k and output byte 2k + 1 bit 7 of w's byte k: one byte_perm of (w << 4, w)
// per output word.
__device__ __forceinline__ void fp4x8_to_e4m3_fast(uint32_t w, uint32_t lo, uint32_t hi, uint32_t& out0, uint32_t& out1) {
    // prmt reads the low 16 bits of its selector: one mask for both halves (the compiler's own
    // __byte_perm masks each half separately, one instruction more).
    const uint32_t m = w & 0x77777777u, mh = m >> 16;
    uint32_t m0, m1;
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(m0) : "r"(lo), "r"(hi), "r"(m));
    asm("prmt.b32 %0, %1, %2, %3;\n" : "=r"(m1) : "r"(lo), "r"(hi), "r"(mh));
    const uint32_t w4 = w << 4;
    out0 = m0 | (__byte_perm(w4, w, 0x5140u) & 0x80808080u);
    out1 = m1 | (__byte_perm(w4, w, 0x7362u) & 0x80808080u);
}

}  // namespace deepinfer::cuda::dev
