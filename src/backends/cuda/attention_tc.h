// SPDX-License-Identifier: Apache-2.0
// The variants of the tensor-core sparse attention (kernels/attention_tc.cuh) beyond what
// sparse_attention (ops.h) picks: sparse_attention runs the wgmma kernel on sm_90 at head_dim 512, else
// the pipelined kernel (rows in flight through a ring in shared memory) where the device's shared
// memory holds it, else the one-buffer kernel; all give the same bits.
#pragma once

#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

// Which tensor-core kernel: sparse_attention's pick (kAuto), the one-buffer kernel, the pipelined
// (ring) kernel, the wgmma kernel (sm_90, head_dim 512: kWg = 3), or for comparison its other forms:
// scores on one warpgroup (kWg = 4), on all four (kWg = 2), and also the shared-memory epilogue without
// the q prefetch (kWg = 1).
enum class TcaVariant { kAuto, kOneBuffer, kRing, kWgmma, kWgmmaScores1, kWgmmaScores4, kWgmmaShared };

// That kernel on p (official numerics; p.tensor_cores is not read), for tests and benchmarks that
// compare the kernels bit for bit and time them. False (nothing launched) where it does not apply: no
// rows, exact numerics, q or kv not 16-byte aligned, head_dim not in {64, 128, 256, 512}, too little
// shared memory, or (kRing, kWgmma) a device or head_dim without that kernel.
bool sparse_attention_tc_variant(const SparseAttentionParams& p, Stream s, TcaVariant variant);

// The one-buffer kernel on p (official numerics; p.tensor_cores is not read), for tests that compare it
// with sparse_attention's pick bit for bit. False (nothing launched) where the kernel does not apply:
// no rows, exact numerics, q or kv not 16-byte aligned, head_dim not in {64, 128, 256, 512}, or too
// little shared memory.
bool sparse_attention_tc_one_buffer(const SparseAttentionParams& p, Stream s);

}  // namespace deepinfer::cuda
