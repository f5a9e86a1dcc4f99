// SPDX-License-Identifier: Apache-2.0
// FP8 block-scaled weights uploaded dequantized to bf16, for the tensor-core bf16 GEMM (gemm_fast.h).
// Exact when every block scale is a power of two (ue8m0, or f32 powers of two): an e4m3 value times
// 2^k has 4 significant bits and an exponent bf16 holds. Used by the V4.1 fast GEMM mode, whose FP8
// linears have 32x32 blocks the FP8 tensor-core kernels (128x128 blocks) do not take.
#pragma once

#include <memory>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cuda/cuda_backend.h"

namespace deepinfer::cuda {

// Whether `w` is FP8 block-scaled with power-of-two scales (so bf16 holds it exactly).
bool fp8_exact_in_bf16(const cpu::LinearWeight& w);

// Uploads `w` (fp8_exact_in_bf16) dequantized on the device to a [out, in] bf16 buffer appended to
// `storage`; the FP8 bytes pass through temporary device buffers. Returns the bf16 DeviceLinear.
DeviceLinear upload_fp8_as_bf16(const cpu::LinearWeight& w, std::vector<std::unique_ptr<DeviceBuffer>>& storage);

}  // namespace deepinfer::cuda
