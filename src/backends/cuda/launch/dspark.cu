// SPDX-License-Identifier: Apache-2.0
// Launchers of the DSpark drafter's ops.
#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/kernels/dspark.cuh"

namespace deepinfer::cuda {
namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }
}  // namespace

void tap_mean(const TapMeanParams& p, Stream s) {
    if (p.num == 0) return;
    DI_CHECK(p.x && p.src_row && p.out && p.hc > 0 && p.hidden > 0 && p.ld >= p.hidden, "tap_mean: bad parameters");
    kernels::tap_mean_kernel<<<static_cast<unsigned>(p.num), 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void dspark_attention(const DSparkAttentionParams& p, Stream s) {
    if (p.requests == 0) return;
    DI_CHECK(p.q && p.block_kv && p.rings && p.anchor_positions && p.sink && p.scratch && p.cos_sin && p.out,
             "dspark_attention: missing buffers");
    DI_CHECK(p.block > 0 && p.heads > 0 && p.head_dim > 0 && p.window > 0 && p.window_rows >= p.window,
             "dspark_attention: bad shape");
    DI_CHECK(p.rope_dim % 2 == 0 && p.rope_dim <= p.head_dim, "dspark_attention: rope_dim ", p.rope_dim);
    const dim3 grid(static_cast<unsigned>(p.requests * p.block), static_cast<unsigned>(p.heads));
    kernels::dspark_attention_kernel<<<grid, 256, static_cast<size_t>(p.head_dim) * sizeof(float), raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void dspark_markov_step(const DSparkMarkovStepParams& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.U && p.y && p.bias && p.e && p.weight && p.logits && p.confidence, "dspark_markov_step: missing buffers");
    DI_CHECK(p.step >= 0 && p.step < p.block, "dspark_markov_step: step ", p.step, " of a block of ", p.block);
    const dim3 grid(static_cast<unsigned>((p.vocab + kernels::kMarkovIdsPerBlock - 1) / kernels::kMarkovIdsPerBlock),
                    static_cast<unsigned>(p.rows));
    kernels::dspark_markov_step_kernel<<<grid, 256, 0, raw(s)>>>(p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
