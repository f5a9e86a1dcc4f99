// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/bf16_weights.h"

#include <cmath>

#include "deepinfer/check.h"
#include "deepinfer/dequant.h"

namespace deepinfer::cuda {

bool fp8_exact_in_bf16(const cpu::LinearWeight& w) {
    if (w.empty() || w.format != cpu::WeightFormat::kFp8Block) return false;
    const TensorView& s = w.scale;
    if (s.dtype() == DType::kF8E8M0) return true;
    if (s.dtype() != DType::kF32 || !s.is_contiguous()) return false;
    const auto* v = static_cast<const float*>(s.data());
    for (int64_t i = 0; i < s.numel(); ++i) {
        int e = 0;
        if (!(v[i] > 0) || std::frexp(v[i], &e) != 0.5f) return false;
    }
    return true;
}

DeviceLinear upload_fp8_as_bf16(const cpu::LinearWeight& w, std::vector<std::unique_ptr<DeviceBuffer>>& storage) {
    DI_CHECK(fp8_exact_in_bf16(w), "weight ", w.weight.describe(), " is not FP8 with power-of-two block scales");
    DI_CHECK(w.weight.is_contiguous() && w.scale.is_contiguous(), "weight ", w.weight.describe(), " is not contiguous");
    DeviceBuffer q(w.weight.nbytes()), sc(w.scale.nbytes());
    q.copy_from_host(w.weight.data(), w.weight.nbytes());
    sc.copy_from_host(w.scale.data(), w.scale.nbytes());
    const Shape shape{w.out_features, w.in_features};
    auto buf = std::make_unique<DeviceBuffer>(size_t(w.out_features * w.in_features * 2));
    dequant_fp8_block({.weight = TensorView(q.data(), DType::kF8E4M3, shape, Device::kCuda),
                       .scale = TensorView(sc.data(), w.scale.dtype(), w.scale.shape(), Device::kCuda),
                       .out = TensorView(buf->data(), DType::kBF16, shape, Device::kCuda),
                       .block_rows = w.block_rows,
                       .block_cols = w.block_cols});
    synchronize();  // before the temporary buffers go
    DeviceLinear d;
    d.weight = buf->data();
    d.kind = WeightKind::kBF16;
    d.scale_kind = ScaleKind::kNone;
    d.out_features = w.out_features;
    d.in_features = w.in_features;
    storage.push_back(std::move(buf));
    return d;
}

}  // namespace deepinfer::cuda
