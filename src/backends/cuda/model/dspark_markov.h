// SPDX-License-Identifier: Apache-2.0
// The DSpark Markov head on the device, shared by the GPU drafters of DeepSeek-V4-Flash-0731
// (cuda_dspark_v4_draft.cpp) and DeepSeek-V4.1 (cuda_v41_dspark_draft.cpp), mirroring
// src/model/dspark_common.cpp (dspark_markov_draft): left to right, bias = W1[x_{k-1}]·W2ᵀ, logits =
// U_{k-1} + bias and the confidence head (dspark_markov_step), the draft by draft_sample (argmax, or the
// inverse CDF of softmax(l / T) at the request's uniform); then each request's drafts from the pinned
// copies (and the sampled drafts' distributions, in the device buffer).
// With fast GEMMs and a BF16 W2 (the published format) the bias GEMM runs on tensor cores (fast_linear:
// bf16 operands, f32 accumulation; W1's rows are bf16, so e converts exactly and only the order of the
// sum differs from the CPU's); otherwise the exact f32 reference kernel (linear). Of a draft call at
// V = 129,280 and 64 requests the reference kernel was 44% of the GPU time (5 launches, ~2 ms each:
// bench/results/cuda-markov-bias-h200-*.md).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/ops.h"
#include "deepinfer/drafter.h"

namespace deepinfer::cuda {

// One draft call of R requests in slots sorted by draft count (descending): the slots still drafting at
// step k are the first active[k]. Device pointers unless said otherwise.
struct DSparkMarkovParams {
    const DeviceLinear* embed = nullptr;  // W1 [vocab, rank]
    const DeviceLinear* head = nullptr;   // W2 [vocab, rank]
    const float* confidence = nullptr;    // [hidden + rank] the confidence head
    const float* U = nullptr;             // [R * block, vocab] f32: the last stage's logits
    const float* y = nullptr;             // [R * block, hidden] f32: the collapsed hidden states
    const int32_t* anchors = nullptr;     // [R] the tokens before the block
    const double* temperature = nullptr;  // [R]
    const int32_t* sampled = nullptr;     // [R] 1: sample with the request's uniforms, 0: argmax
    const double* uniforms = nullptr;     // [R, block]
    std::span<const int64_t> active;      // [block] (host)
    int64_t requests = 0, block = 0, vocab = 0, hidden = 0, rank = 0;
    uint8_t* host_out = nullptr;  // pinned [block, R] int32 drafts, then [block, R] f32 confidences
    // [block, R, vocab] f32 (device, persistent: DraftGraphs::device_probs): the sampled rows' distributions;
    // null if none samples (the arena's scratch then).
    float* device_probs = nullptr;
    float* host_probs = nullptr;  // pinned [block, R, vocab]: their copy; null: none (DraftProbs::kHost only)
    bool fast = false;            // fast GEMMs (CudaModelOptions::gemm == kFast): the bias GEMM on tensor cores
};

// Whether the bias GEMM of `head` runs on tensor cores (fast GEMMs, a BF16 W2 the fast kernels take).
bool dspark_markov_fast_bias(const DeviceLinear& head, bool fast);
// Arena bytes dspark_markov_draft takes for `requests` requests (an upper bound, alignment included).
size_t dspark_markov_workspace(int64_t requests, int64_t block, int64_t vocab, int64_t rank, bool fast_bias);

// Enqueues the loop on `s`, its scratch from `arena` (the caller resets it after synchronizing), and the
// copies into the pinned host buffers. The caller synchronizes `s` before unpack_dspark_drafts.
void dspark_markov_draft(const DSparkMarkovParams& p, DeviceArena& arena, Stream s);

}  // namespace deepinfer::cuda
