// SPDX-License-Identifier: Apache-2.0
// Launchers of the dequantization kernels: check shapes with the CPU op's rules, pick the
// variant, launch, check the launch.
#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/kernels/dequant.cuh"

namespace deepinfer::cuda {
namespace {
constexpr int kThreads = 256;

kernels::OutKind out_kind(const TensorView& out) {
    DI_CHECK(out.dtype() == DType::kF32 || out.dtype() == DType::kBF16, "cuda dequant: out must be f32|bf16, got ",
             out.describe());
    return out.dtype() == DType::kF32 ? kernels::OutKind::kF32 : kernels::OutKind::kBF16;
}

unsigned grid_for(int64_t n) { return static_cast<unsigned>((n + kThreads - 1) / kThreads); }
}  // namespace

void dequant_fp8_block(const DequantFp8BlockParams& p) {
    DI_CHECK(p.weight.dtype() == DType::kF8E4M3 && p.weight.ndim() == 2 && p.out.shape() == p.weight.shape(),
             "cuda dequant_fp8_block: weight ", p.weight.describe(), ", out ", p.out.describe());
    const int64_t rows = p.weight.dim(0), cols = p.weight.dim(1);
    const Shape want{(rows + p.block_rows - 1) / p.block_rows, (cols + p.block_cols - 1) / p.block_cols};
    DI_CHECK(p.scale.shape() == want, "cuda dequant_fp8_block: scale must be ", want.str(), ", got ", p.scale.describe());
    kernels::ScaleKind sk = p.scale.dtype() == DType::kF32     ? kernels::ScaleKind::kF32
                            : p.scale.dtype() == DType::kF8E8M0 ? kernels::ScaleKind::kE8M0
                                                                : kernels::ScaleKind::kBF16;
    DI_CHECK(p.scale.dtype() == DType::kF32 || p.scale.dtype() == DType::kF8E8M0 || p.scale.dtype() == DType::kBF16,
             "cuda dequant_fp8_block: scale dtype ", p.scale.describe());
    kernels::DequantFp8Args a{static_cast<const uint8_t*>(p.weight.data()), p.scale.data(), p.out.data(), rows, cols,
                              p.block_rows, p.block_cols, want[1], sk, out_kind(p.out)};
    if (rows * cols == 0) return;
    kernels::dequant_fp8_block_kernel<<<grid_for(rows * cols), kThreads>>>(a);
    DI_CUDA_CHECK(cudaGetLastError());
}

void dequant_fp4(const DequantFp4Params& p) {
    const int64_t rows = p.out.dim(0), cols = p.out.dim(1);
    DI_CHECK((p.weight.dtype() == DType::kI8 || p.weight.dtype() == DType::kU8) && p.weight.shape() == Shape({rows, cols / 2}) &&
                 cols % p.block == 0 && p.block % 2 == 0,
             "cuda dequant_fp4: weight ", p.weight.describe(), ", out ", p.out.describe());
    DI_CHECK(p.scale.dtype() == DType::kF8E8M0 && p.scale.shape() == Shape({rows, cols / p.block}),
             "cuda dequant_fp4: scale ", p.scale.describe());
    kernels::DequantFp4Args a{static_cast<const uint8_t*>(p.weight.data()), static_cast<const uint8_t*>(p.scale.data()),
                              p.out.data(), rows, cols, p.block, out_kind(p.out)};
    if (rows * cols == 0) return;
    kernels::dequant_fp4_kernel<<<grid_for(rows * cols / 2), kThreads>>>(a);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
