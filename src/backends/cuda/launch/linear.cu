// SPDX-License-Identifier: Apache-2.0
// Launchers of the GEMM (plain and grouped) and of act_quant: shape checks, grid, launch check.
#include <algorithm>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/linear.cuh"
#include "backends/cuda/kernels/linear_staged.cuh"

namespace deepinfer::cuda {
namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int kTR, int kTN>
void launch_staged_tile(const kernels::StagedLinearArgs& a, cudaStream_t stream) {
    constexpr int64_t kMaxBytes = kernels::kStagedStages * kernels::staged_stage_bytes(kTR, kTN, 4);
    const int64_t bytes = kernels::kStagedStages * kernels::staged_stage_bytes(kTR, kTN, a.elt_bytes);
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::staged_linear_kernel<kTR, kTN>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kMaxBytes)));
    const int64_t outputs = a.N + (a.self_dot ? 1 : 0);
    DI_CHECK((outputs + kTN - 1) / kTN < 65536, "cuda linear: ", outputs, " outputs exceed the grid");
    const dim3 grid(static_cast<unsigned>((a.rows + kTR - 1) / kTR), static_cast<unsigned>((outputs + kTN - 1) / kTN));
    kernels::staged_linear_kernel<kTR, kTN><<<grid, 8 * kTR * kTN, static_cast<size_t>(bytes), stream>>>(a);
    DI_CUDA_CHECK(cudaGetLastError());
}

template <int kTN>
void launch_staged_whole(const kernels::StagedLinearArgs& a, int64_t smem_limit, cudaStream_t stream) {
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernels::staged_linear_whole_kernel<kTN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem_limit)));
    const int64_t outputs = a.N + (a.self_dot ? 1 : 0);
    DI_CHECK((outputs + kTN - 1) / kTN < 65536, "cuda linear: ", outputs, " outputs exceed the grid");
    const dim3 grid(static_cast<unsigned>(a.rows), static_cast<unsigned>((outputs + kTN - 1) / kTN));
    const size_t bytes = static_cast<size_t>(kernels::staged_whole_bytes(kTN, a.K, a.elt_bytes));
    kernels::staged_linear_whole_kernel<kTN><<<grid, kernels::kStagedWholeThreads, bytes, stream>>>(a);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool staged_linear_supported(const float* x, int64_t x_ld, const DeviceLinear& w) {
    const bool kind = w.kind == WeightKind::kF32 || w.kind == WeightKind::kBF16 || w.kind == WeightKind::kF16;
    return kind && w.in_features >= 8 && w.in_features % 8 == 0 && x_ld % 4 == 0 && aligned16(x) && aligned16(w.weight);
}

void staged_linear(const StagedLinearParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(staged_linear_supported(p.x, p.x_ld, p.weight), "staged linear: unsupported weight or alignment");
    if (p.row_src == nullptr) DI_CHECK(p.x_ld >= p.weight.in_features, "staged linear: x_ld < in_features");
    kernels::StagedLinearArgs a;
    a.x = p.x;
    a.x_ld = p.x_ld;
    a.row_src = p.row_src;
    a.w = static_cast<const uint8_t*>(p.weight.weight);
    a.kind = p.weight.kind;
    a.elt_bytes = p.weight.kind == WeightKind::kF32 ? 4 : 2;
    a.N = p.weight.out_features;
    a.K = p.weight.in_features;
    a.self_dot = p.self_dot;
    a.y = p.y;
    a.y_ld = p.y_ld;
    a.rows = p.rows;
    a.round_bf16 = p.round_output_bf16;
    const auto stream = static_cast<cudaStream_t>(s.handle);
    // Decode-sized batches: one row per block and all of K in shared memory at once when it fits (4
    // outputs per block, or 1: mHC's 16384-wide f32 rows); else one row x 16 outputs (4 for narrow
    // outputs), chunked; larger batches 4 rows x 8 outputs (weights reused by 4 rows).
    const int64_t whole_limit = std::min(kernels::kStagedWholeMaxBytes, max_shared_memory_per_block());
    if (p.rows <= 2 && kernels::staged_whole_bytes(4, a.K, a.elt_bytes) <= whole_limit)
        launch_staged_whole<4>(a, whole_limit, stream);
    else if (p.rows <= 2 && kernels::staged_whole_bytes(1, a.K, a.elt_bytes) <= whole_limit)
        launch_staged_whole<1>(a, whole_limit, stream);
    else if (p.rows <= 2 && a.N < 128) launch_staged_tile<1, 4>(a, stream);
    else if (p.rows <= 2) launch_staged_tile<1, 16>(a, stream);
    else launch_staged_tile<4, 8>(a, stream);
}

DeviceLinear DeviceLinear::rows(int64_t begin, int64_t end) const {
    DI_CHECK(begin >= 0 && begin <= end && end <= out_features, "device linear row slice [", begin, ", ", end,
             ") of ", out_features);
    DeviceLinear w = *this;
    w.out_features = end - begin;
    const auto* base = static_cast<const uint8_t*>(weight);
    const auto* sbase = static_cast<const uint8_t*>(scale);
    const int64_t scale_bytes = scale_kind == ScaleKind::kF32 ? 4 : scale_kind == ScaleKind::kBF16 ? 2 : 1;
    switch (kind) {
        case WeightKind::kF32: w.weight = base + begin * in_features * 4; break;
        case WeightKind::kBF16:
        case WeightKind::kF16: w.weight = base + begin * in_features * 2; break;
        case WeightKind::kFp8Block: {
            DI_CHECK(begin % block_rows == 0, "fp8 weight row slice must start on a block boundary");
            w.weight = base + begin * in_features;
            const int64_t scale_cols = (in_features + block_cols - 1) / block_cols;
            w.scale = sbase + (begin / block_rows) * scale_cols * scale_bytes;
            break;
        }
        case WeightKind::kFp4:
            w.weight = base + begin * (in_features / 2);
            w.scale = sbase + begin * (in_features / 32);
            break;
    }
    return w;
}

void linear(const LinearParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.x && p.y, "cuda linear: null x or y");
    const auto stream = static_cast<cudaStream_t>(s.handle);
    DI_CHECK((p.weight.out_features + kernels::kLinearGroups - 1) / kernels::kLinearGroups < 65536,
             "cuda linear: ", p.weight.out_features, " outputs exceed the grid");
    if (p.experts) {
        DI_CHECK(p.row_expert && p.weight.out_features > 0, "cuda grouped linear: needs row_expert and the experts' shape in weight");
        const dim3 grid(static_cast<unsigned>(p.rows),
                        static_cast<unsigned>((p.weight.out_features + kernels::kLinearGroups - 1) / kernels::kLinearGroups));
        kernels::linear_kernel<1><<<grid, kernels::kLinearThreads, 0, stream>>>(p);
    } else {
        DI_CHECK(p.weight.weight && p.x_ld >= p.weight.in_features && p.y_ld >= p.weight.out_features,
                 "cuda linear: bad strides or weight");
        if (staged_linear_supported(p.x, p.x_ld, p.weight)) {  // same arithmetic, operands staged
            staged_linear({.x = p.x, .x_ld = p.x_ld, .row_src = p.row_src, .weight = p.weight, .y = p.y, .y_ld = p.y_ld,
                           .rows = p.rows, .round_output_bf16 = p.round_output_bf16},
                          s);
            return;
        }
        const dim3 grid(static_cast<unsigned>((p.rows + kernels::kLinearRows - 1) / kernels::kLinearRows),
                        static_cast<unsigned>((p.weight.out_features + kernels::kLinearGroups - 1) / kernels::kLinearGroups));
        kernels::linear_kernel<kernels::kLinearRows><<<grid, kernels::kLinearThreads, 0, stream>>>(p);
    }
    DI_CUDA_CHECK(cudaGetLastError());
}

void act_quant_dequant(const ActQuantParams& p, Stream s) {
    if (p.rows == 0 || p.cols == 0) return;
    DI_CHECK(p.block >= 1 && p.block <= 128 && (p.block & (p.block - 1)) == 0, "act_quant: block ", p.block,
             " is not a power of two <= 128");
    DI_CHECK(p.cols % p.block == 0, "act_quant: cols = ", p.cols, " is not a multiple of ", p.block);
    const auto stream = static_cast<cudaStream_t>(s.handle);
    const bool aligned = aligned16(p.x) && aligned16(p.out);
    if (p.block >= 4 && aligned) {  // the vector form: the same bits
        const int64_t per_block = 2 * kernels::kActQuantVecThreads * 4;  // elements per block of threads
        const auto grid = static_cast<unsigned>((p.rows * p.cols + per_block - 1) / per_block);
        const unsigned threads = kernels::kActQuantVecThreads;
        switch (p.block) {
            case 4: kernels::act_quant_vec4_kernel<4><<<grid, threads, 0, stream>>>(p); break;
            case 8: kernels::act_quant_vec4_kernel<8><<<grid, threads, 0, stream>>>(p); break;
            case 16: kernels::act_quant_vec4_kernel<16><<<grid, threads, 0, stream>>>(p); break;
            case 32: kernels::act_quant_vec4_kernel<32><<<grid, threads, 0, stream>>>(p); break;
            case 64: kernels::act_quant_vec4_kernel<64><<<grid, threads, 0, stream>>>(p); break;
            default: kernels::act_quant_vec4_kernel<128><<<grid, threads, 0, stream>>>(p); break;
        }
    } else {
        const int64_t groups = p.rows * (p.cols / p.block);
        const auto grid = static_cast<unsigned>((groups + kernels::kActQuantWarps - 1) / kernels::kActQuantWarps);
        kernels::act_quant_kernel<<<grid, 32 * kernels::kActQuantWarps, 0, stream>>>(p);
    }
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
