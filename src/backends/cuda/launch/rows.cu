// SPDX-License-Identifier: Apache-2.0
// Launchers of the per-row ops (RMS norm, per-head RoPE/QAT, embedding) and of mHC.
#include <type_traits>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/launch/column_blocks.h"
#include "backends/cuda/kernels/hc_mix_mma.cuh"
#include "backends/cuda/kernels/hc_mix_splitk.cuh"
#include "backends/cuda/kernels/hyper_connection.cuh"
#include "backends/cuda/kernels/rows.cuh"

namespace deepinfer::cuda {

void rms_norm(const RmsNormParams& p, Stream s) {
    if (p.rows == 0) return;
    if (p.q || p.out_bf16 || p.out_bf16_qat) {
        auto aligned = [](const void* a) { return reinterpret_cast<uintptr_t>(a) % 16 == 0; };
        DI_CHECK(p.n % 128 == 0 && p.n <= 8192 && aligned(p.x) && aligned(p.out) && aligned(p.weight) && aligned(p.q) &&
                     aligned(p.out_bf16) && aligned(p.out_bf16_qat) && (!p.q || (p.q_scale && (p.q_block == 128 || p.q_block == 32))),
                 "rms_norm: the FP8 / bf16 forms need n % 128 == 0 and n <= 8192 (n = ", p.n, "), 16-byte aligned rows, ",
                 "and a scale array with q_block 32 or 128 (", p.q_block, ")");
    }
    if (p.n <= 8192)  // the row staged in shared memory (out may alias x: each block reads its row first)
        launch_pdl(kernels::rms_norm_kernel<true>, static_cast<unsigned>(p.rows), 256, static_cast<size_t>(p.n) * 4, s, p);
    else
        launch_pdl(kernels::rms_norm_kernel<false>, static_cast<unsigned>(p.rows), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void rope_rows(const RopeRowsParams& p, Stream s) {
    if (p.rows == 0 || p.heads == 0) return;
    DI_CHECK(p.dim <= 8192 && p.rope_dim <= p.dim && p.rope_dim % 2 == 0, "rope_rows: dim ", p.dim, ", rope_dim ", p.rope_dim);
    DI_CHECK(p.rope_dim == 0 || p.cos_sin, "rope_rows: no cos/sin table");
    DI_CHECK(p.qat != Qat::kHadamardFp4 || (p.dim & (p.dim - 1)) == 0, "rope_rows: Hadamard needs a power-of-two dim");
    // A bf16 result must be exact: every value bf16-rounded by the head norm and the RoPE rounding (or round_all).
    DI_CHECK(!p.out_bf16 || (p.qat == Qat::kNone && (p.round_all || (p.head_norm == HeadNorm::kBf16Arith &&
                                                                     (p.rope_dim == 0 || p.round_rope_dims)))),
             "rope_rows: a bf16 result needs bf16-rounded values (kBf16Arith head norm and rounded RoPE dims, or round_all) "
             "and no QAT");
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>((p.heads + kernels::kRopeWarps - 1) / kernels::kRopeWarps));
    const size_t smem = static_cast<size_t>(kernels::kRopeWarps * p.dim) * sizeof(float);
    if (smem > 48 * 1024)
        DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::rope_rows_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    launch_pdl(kernels::rope_rows_kernel, grid, 32 * kernels::kRopeWarps, smem, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void embed(const EmbedParams& p, Stream s) {
    if (p.rows == 0) return;
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(column_blocks(p.rows, p.table.in_features, 256)));
    launch_pdl(kernels::embed_kernel, grid, 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

namespace {
// mix [rows, outputs + 1] = x · fnᵀ and dot(x, x), by the staged GEMM (bit-identical to hc_mix_dots).
void hc_mix_logits(const float* x, const float* fn, int64_t rows, int64_t outputs, int64_t flat, float* mix, Stream s) {
    DeviceLinear w;
    w.weight = fn;
    w.kind = WeightKind::kF32;
    w.out_features = outputs;
    w.in_features = flat;
    DI_CHECK(staged_linear_supported(x, flat, w), "hc mix: unaligned streams or hc*hidden % 8 != 0");
    staged_linear({.x = x, .x_ld = flat, .weight = w, .self_dot = true, .y = mix, .y_ld = outputs + 1, .rows = rows}, s);
}
}  // namespace

void hc_pre(const HcPreParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.hc >= 1 && p.hc <= kernels::kHcMax, "hc_pre: hc_mult ", p.hc, " > ", kernels::kHcMax);
    if (p.mix && !p.mix_given) hc_mix_logits(p.x, p.fn, p.rows, (2 + p.hc) * p.hc, p.hc * p.hidden, p.mix, s);
    // Column blocks only with staged mixing logits (else each block would redo the token's dot products), and
    // only to collapse.
    const int64_t blocks = p.mix && p.collapsed ? column_blocks(p.rows, p.hidden, 256) : 1;
    // Without the collapse (and with the logits' partial planes) only warp 0 works: one warp per block, so
    // that four times as many tokens' blocks are resident (ncu: 137 us per 8192-token launch with 256 threads).
    const unsigned threads = p.collapsed || !p.mix_partial ? 256 : 32;
    launch_pdl(kernels::hc_pre_kernel, dim3(static_cast<unsigned>(p.rows), static_cast<unsigned>(blocks)), threads, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

int64_t hc_mix_splits(int64_t flat) { return (flat + kernels::kHcChunk - 1) / kernels::kHcChunk; }

bool hc_mix_uses_tensor_cores(int64_t flat, int64_t outputs) { return kernels::hc_mix_mma_shape(flat, outputs); }

namespace {
// hc_mix_splitk's partial planes for the shapes the tensor-core kernel does not take (more than 32
// outputs, or K not in 16-wide blocks): lane-strided f32 FMAs and a butterfly per chunk (hc_mix_splitk.cuh).
void hc_mix_partials_fma(const HcMixSplitKParams& p, int64_t splits, Stream s) {
    // Output groups of 8 (one per warp) over more blocks when the rows alone leave the GPU idle; one
    // row per block below 8 rows (no FMAs on zero rows).
    const int64_t per_block = p.rows >= 256 ? 16 : p.rows >= 8 ? 8 : 1;
    const int64_t row_blocks = (p.rows + per_block - 1) / per_block;
    const int64_t groups = row_blocks * splits >= 2 * multiprocessor_count() ? 1 : (p.outputs + 1 + 7) / 8;
    const dim3 grid(static_cast<unsigned>(row_blocks), static_cast<unsigned>(splits), static_cast<unsigned>(groups));
    if (per_block == 16)
        launch_pdl(kernels::hc_mix_partial_kernel<16>, grid, kernels::kHcSplitThreads, 0, s, p);
    else if (per_block == 8)
        launch_pdl(kernels::hc_mix_partial_kernel<8>, grid, kernels::kHcSplitThreads, 0, s, p);
    else
        launch_pdl(kernels::hc_mix_partial_kernel<1>, grid, kernels::kHcSplitThreads, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}
}  // namespace

void hc_mix_splitk(const HcMixSplitKParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.outputs >= 1 && p.outputs < kernels::kHcMaxOutputs, "hc_mix_splitk: ", p.outputs, " outputs");
    const int64_t splits = hc_mix_splits(p.flat);
    if (hc_mix_uses_tensor_cores(p.flat, p.outputs)) {
        // Up to 32 outputs, K in whole 16-wide blocks (every fast-mode shape of V4: 24 mixing logits, 4 head
        // logits): the tensor-core kernel (hc_mix_mma.cuh). The shape alone picks it, never the rows.
        DI_CHECK(reinterpret_cast<uintptr_t>(p.x) % 16 == 0 && reinterpret_cast<uintptr_t>(p.fn) % 16 == 0,
                 "hc_mix_splitk: x and fn must be 16-byte aligned");
        // 32 rows per block (two m16 tiles), or one tile of 16 at <= 16 rows (decode): a row's sums are the same.
        const bool one = p.rows <= 16;
        const int64_t per_block = one ? 16 : kernels::kHcMmaRows;
        const dim3 grid(static_cast<unsigned>((p.rows + per_block - 1) / per_block), static_cast<unsigned>(splits));
        // kernel<groups of 8 outputs, m16 tiles>: one switch over the groups, the tile count as a constant.
        auto go = [&](auto tiles) {
            constexpr int kT = decltype(tiles)::value;
            switch ((p.outputs + 7) / 8) {
                case 1: launch_pdl(kernels::hc_mix_mma_kernel<1, kT>, grid, kernels::kHcMmaThreads, 0, s, p); break;
                case 2: launch_pdl(kernels::hc_mix_mma_kernel<2, kT>, grid, kernels::kHcMmaThreads, 0, s, p); break;
                case 3: launch_pdl(kernels::hc_mix_mma_kernel<3, kT>, grid, kernels::kHcMmaThreads, 0, s, p); break;
                default: launch_pdl(kernels::hc_mix_mma_kernel<4, kT>, grid, kernels::kHcMmaThreads, 0, s, p); break;
            }
        };
        if (one) go(std::integral_constant<int, 1>{});
        else go(std::integral_constant<int, 2>{});
        DI_CUDA_CHECK(cudaGetLastError());
    } else {
        hc_mix_partials_fma(p, splits, s);
    }
    if (p.partials_only) return;
    const int64_t n = p.rows * (p.outputs + 1);
    launch_pdl(kernels::hc_mix_reduce_kernel, static_cast<unsigned>((n + 255) / 256), 256, 0, s, p, splits);
    DI_CUDA_CHECK(cudaGetLastError());
}

void hc_post(const HcPostParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.hc >= 1 && p.hc <= kernels::kHcMax, "hc_post: hc_mult ", p.hc);
    const auto a16 = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
    DI_CHECK(p.hidden % 4 == 0 && a16(p.out) && a16(p.x) && a16(p.y), "hc_post: hidden ", p.hidden,
             " not a multiple of 4 or rows not 16-byte aligned");
    DI_CHECK(!p.collapse_pre || (p.collapsed && a16(p.collapsed)), "hc_post: collapse_pre needs 16-byte aligned collapsed rows");
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>((p.hidden / 4 + 255) / 256));
    launch_pdl(kernels::hc_post_vec4_kernel, grid, 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void hc_head(const HcHeadParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.hc >= 1 && p.hc <= kernels::kHcMax, "hc_head: hc_mult ", p.hc);
    if (p.mix && !p.mix_given) hc_mix_logits(p.x, p.fn, p.rows, p.hc, p.hc * p.hidden, p.mix, s);
    // Column blocks only with staged mixing logits (else each block would redo the token's dot products).
    const int64_t blocks = p.mix ? column_blocks(p.rows, p.hidden, 256) : 1;
    launch_pdl(kernels::hc_head_kernel, dim3(static_cast<unsigned>(p.rows), static_cast<unsigned>(blocks)), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
