// SPDX-License-Identifier: Apache-2.0
// Grid sizing of row-wise kernels whose elements do not depend on the grid (launch/rows.cu, moe.cu):
// small batches spread each row over several blocks so a decode step's one token fills the GPU.
#pragma once

#include <algorithm>
#include <cstdint>

#include "backends/cuda/cuda_backend.h"

namespace deepinfer::cuda {

// Blocks per row: about two blocks per SM over `rows` rows, at most one per `columns_per_block` of the
// row's `width` columns, at least one.
inline int64_t column_blocks(int64_t rows, int64_t width, int64_t columns_per_block) {
    const int64_t most = std::max<int64_t>(1, (width + columns_per_block - 1) / columns_per_block);
    const int64_t r = std::max<int64_t>(rows, 1);
    return std::clamp<int64_t>((2 * multiprocessor_count() + r - 1) / r, 1, most);
}

}  // namespace deepinfer::cuda
