// SPDX-License-Identifier: Apache-2.0
// The block scale of a quantized weight (DeviceLinear::scale at flat index si, in its ScaleKind: f32, bf16
// or ue8m0) as f32; 1 for weights without scales. Shared by the reference and tensor-core GEMM kernels.
#pragma once

#include <cstdint>

#include "backends/cuda/common/device_math.cuh"
#include "backends/cuda/ops.h"

namespace deepinfer::cuda::dev {

__device__ __forceinline__ float weight_scale(const DeviceLinear& w, int64_t si) {
    switch (w.scale_kind) {
        case ScaleKind::kF32: return static_cast<const float*>(w.scale)[si];
        case ScaleKind::kBF16: return bf16_value(static_cast<const uint16_t*>(w.scale)[si]);
        case ScaleKind::kE8M0: return e8m0_value(static_cast<const uint8_t*>(w.scale)[si]);
        default: return 1.0f;
    }
}

}  // namespace deepinfer::cuda::dev
