// SPDX-License-Identifier: Apache-2.0
// The variants of the tensor-core sparse attention (kernels/attention_tc.cuh) beyond what
// sparse_attention (ops.h) picks: sparse_attention runs the pipelined kernel (rows in flight through a
// ring in shared memory) where the device's shared memory holds it, else the one-buffer kernel; both
// give the same bits.
#pragma once

#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

// The one-buffer kernel on p (official numerics; p.tensor_cores is not read), for tests that compare it
// with sparse_attention's pick bit for bit. False (nothing launched) where the kernel does not apply:
// no rows, exact numerics, q or kv not 16-byte aligned, head_dim not in {64, 128, 256, 512}, or too
// little shared memory.
bool sparse_attention_tc_one_buffer(const SparseAttentionParams& p, Stream s);

}  // namespace deepinfer::cuda
