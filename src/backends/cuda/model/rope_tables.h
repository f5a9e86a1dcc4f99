// SPDX-License-Identifier: Apache-2.0
// Host-side RoPE tables the CUDA models upload once at load.
#pragma once

#include <cstdint>
#include <vector>

#include "backends/cpu/primitives.h"

namespace deepinfer::cuda {

// [positions, rope_dim/2, 2] f32 cos/sin with the CPU RopeTable's angles and std::cos/std::sin, so the
// device rotates exactly as the CPU reference does.
std::vector<float> rope_cos_sin(const cpu::RopeTable& t, int64_t positions);

}  // namespace deepinfer::cuda
