// SPDX-License-Identifier: Apache-2.0
// Launchers of the GEMM (plain and grouped) and of act_quant: shape checks, grid, launch check.
#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/kernels/linear.cuh"

namespace deepinfer::cuda {

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
        const dim3 grid(static_cast<unsigned>((p.rows + kernels::kLinearRows - 1) / kernels::kLinearRows),
                        static_cast<unsigned>((p.weight.out_features + kernels::kLinearGroups - 1) / kernels::kLinearGroups));
        kernels::linear_kernel<kernels::kLinearRows><<<grid, kernels::kLinearThreads, 0, stream>>>(p);
    }
    DI_CUDA_CHECK(cudaGetLastError());
}

void act_quant_dequant(const ActQuantParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.block >= 1 && p.block <= 128 && (p.block & (p.block - 1)) == 0, "act_quant: block ", p.block,
             " is not a power of two <= 128");
    DI_CHECK(p.cols % p.block == 0, "act_quant: cols = ", p.cols, " is not a multiple of ", p.block);
    const dim3 grid(static_cast<unsigned>(p.rows), static_cast<unsigned>(p.cols / p.block));
    kernels::act_quant_kernel<<<grid, static_cast<unsigned>(p.block), 0, static_cast<cudaStream_t>(s.handle)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
