// SPDX-License-Identifier: Apache-2.0
// What the DSpark drafters of DeepSeek-V4-Flash-0731 (model/dspark_v4.h) and DeepSeek-V4.1-Flash
// (model/v41/dspark.h) share (speculative-decoding.md §1.4-§1.7, §1.9): the per-stage context rings,
// the DSparkAttention core (block queries against the ring's last window plus all block rows,
// non-causal, sink softmax), and the Markov head's sequential drafting with the confidence head. What
// differs between the two (taps, mHC form, collapse, tensor names, the attention prologue's
// normalizations and cache QAT) stays in the variant files.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backends/cpu/linear.h"
#include "deepinfer/drafter.h"
#include "model/paged_rows.h"

namespace deepinfer {

// The drafter's context rings of one sequence (§1.4 step 2, §1.9), present once the sequence is
// attached: per stage the context K=V row of position p (from the target's taps at p) in slot
// p % rows, rows = sliding_window + kRingHeadroom. Every target pass writes the rows of its positions
// (a verify pass also its rejected ones, which later passes overwrite before a draft reads them:
// drafting at anchor position P reads P - sliding_window .. P - 1 only), so rollback needs no undo.
struct DSparkRings {
    bool attached = false;
    int64_t rows = 0;
    std::vector<PagedRing> stages;  // [stages] of [rows, head_dim]
};

// The position of target layer `layer` in the drafter's tapped layers `ids`, -1 if it is not tapped.
int64_t dspark_tap_index(std::span<const int64_t> ids, int64_t layer);
// out[d] = the mean of x's hc streams (x: [hc, D]), summed in stream order then divided: a tap's value
// before the family's rounding.
void dspark_stream_mean(const float* x, int64_t hc, int64_t D, float* out);

// Attaches `rings`: `stages` rings of window + kRingHeadroom rows of `head_dim` floats from `pool`.
void attach_dspark_rings(DSparkRings& rings, int64_t stages, int64_t window, int64_t head_dim,
                         const std::shared_ptr<StatePool>& pool);
// The bytes attach_dspark_rings adds with pages of `page_bytes`.
uint64_t dspark_ring_bytes(int64_t stages, int64_t window, int64_t head_dim, uint64_t page_bytes);
// Writes stage `stage`'s rows kv [num_rows, head_dim] of positions first_position .. + num_rows - 1.
void write_dspark_ring_rows(DSparkRings& rings, int64_t stage, int64_t first_position, int64_t num_rows,
                            const float* kv, int64_t head_dim);

// How the sink softmax weights the values: V4.1's drafter forms p = e / den first (official: p
// rounded to bf16) and sums p·v; V4's attention kernel sums e·v (official: e rounded to bf16) and
// divides by den at the end.
enum class DSparkSoftmaxForm : uint8_t { kProbsThenSum, kSumThenDivide };

struct DSparkAttentionCoreParams {
    const float* q = nullptr;         // [n * block, heads, head_dim] block queries after RoPE
    const float* block_kv = nullptr;  // [n * block, head_dim] the block's own K=V rows
    std::span<const DSparkRings* const> rings;  // [n] each request's rings
    std::span<const int64_t> anchor_positions;  // [n] P: block rows at P .. P + block - 1
    int64_t stage = 0, block = 0, heads = 0, head_dim = 0, window = 0;
    const float* sink = nullptr;  // [heads]
    DSparkSoftmaxForm form = DSparkSoftmaxForm::kProbsThenSum;
    bool round_bf16 = false;  // official numerics: the weights multiplying V rounded to bf16
    float* o = nullptr;       // [n * block, heads, head_dim] out: before output rounding / inverse RoPE
};
// Every block row attends to the context rows of positions max(0, P - window) .. P - 1 (oldest
// first) and all `block` rows of its block, as the reference's get_dspark_topk_idxs; scale
// 1/sqrt(head_dim), exp rounded once from double like the targets' attention.
void dspark_attention_core(const DSparkAttentionCoreParams& p);

// The drafter's last-stage outputs for a batch of blocks: the collapsed rows y (pre-norm) and the base
// logits U = head(norm(y)), row k of request i at i * block + k.
struct DSparkBlockOutput {
    std::vector<float> y;  // [requests * block, D]
    std::vector<float> U;  // [requests * block, V]
};

// The Markov and confidence heads (§1.6-§1.7).
struct DSparkHeads {
    const cpu::LinearWeight* markov_embed = nullptr;  // W1 [V, rank] (rows looked up)
    const cpu::LinearWeight* markov_head = nullptr;   // W2 [V, rank] (bias = e · W2ᵀ)
    const float* confidence = nullptr;                // [D + rank] (no bias)
    int64_t hidden = 0, rank = 0, vocab = 0, block = 0;
};

// Checks what the drafters require of every request (draft count within the block, uniforms, anchor).
void check_dspark_requests(std::span<const DraftRequest> requests, int64_t block, int64_t vocab);

// Left-to-right drafting over `out` (block rows of every request): ℓ_k = U_{k-1} + W1[x_{k-1}]·W2ᵀ
// (fp32), d_k = argmax or a draw from softmax(ℓ_k / T) (draw_draft), confidence
// c_k = sigmoid(w · [y_{k-1}; W1[x_{k-1}]]), x_0 = the anchor. Batched over the requests still drafting.
std::vector<Draft> dspark_markov_draft(const DSparkHeads& heads, std::span<const DraftRequest> requests,
                                       const DSparkBlockOutput& out);

}  // namespace deepinfer
