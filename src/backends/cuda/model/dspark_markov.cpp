// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/dspark_markov.h"

#include <algorithm>

#include "backends/cuda/gemm_fast.h"

namespace deepinfer::cuda {

bool dspark_markov_fast_bias(const DeviceLinear& head, bool fast) {
    return fast && head.kind == WeightKind::kBF16 && fast_linear_supported(head);
}

size_t dspark_markov_workspace(int64_t requests, int64_t block, int64_t vocab, int64_t rank, bool fast_bias) {
    const int64_t R = std::max<int64_t>(requests, 1);
    auto bytes = [](int64_t n) { return ((static_cast<size_t>(std::max<int64_t>(n, 0)) + 255) / 256) * 256 + 256; };
    size_t total = 2 * bytes(block * R * 4) + bytes(R * rank * 4) + 3 * bytes(R * vocab * 4) +
                   bytes(draft_sample_parts(R, vocab) * 8);
    if (fast_bias) total += bytes(R * rank * 2) + bytes(fast_linear_split_floats_bound(R) * 4);
    return total;
}

void dspark_markov_draft(const DSparkMarkovParams& p, DeviceArena& arena, Stream s) {
    const int64_t G = p.block, R = p.requests, V = p.vocab, rank = p.rank;
    int32_t* d_drafts = arena.alloc_n<int32_t>(G * R);
    float* d_conf = arena.alloc_n<float>(G * R);
    float* e = arena.alloc_n<float>(R * rank);
    float* bias = arena.alloc_n<float>(R * V);
    float* logits = arena.alloc_n<float>(R * V);
    double* parts = arena.alloc_n<double>(draft_sample_parts(R, V));
    float* scratch_probs = p.device_probs ? nullptr : arena.alloc_n<float>(R * V);  // (argmax only: not read)
    const bool fast_bias = dspark_markov_fast_bias(*p.head, p.fast);
    uint16_t* e16 = fast_bias ? arena.alloc_n<uint16_t>(R * rank) : nullptr;
    const int64_t split_floats = fast_bias ? fast_linear_split_floats(*p.head, R) : 0;
    float* split = split_floats > 0 ? arena.alloc_n<float>(split_floats) : nullptr;
    for (int64_t k = 0; k < G; ++k) {
        const int64_t n = p.active[size_t(k)];
        if (n == 0) break;
        const int32_t* prev = k == 0 ? p.anchors : d_drafts + (k - 1) * R;
        embed({.table = *p.embed, .tokens = prev, .x = e, .rows = n, .hc = 1, .round_bf16 = false}, s);
        if (fast_bias) {  // β = W1[x] · W2ᵀ: bf16 operands (W1's rows exactly), f32 accumulation
            to_bf16({.x = e, .x_ld = rank, .rows = n, .cols = rank, .out = e16}, s);
            fast_linear({.a = e16, .weight = *p.head, .y = bias, .y_ld = V, .rows = n,
                         .split_scratch = split_floats > 0 && fast_linear_split_floats(*p.head, n) <= split_floats ? split : nullptr},
                        s);
        } else {
            linear({.x = e, .x_ld = rank, .weight = *p.head, .y = bias, .y_ld = V, .rows = n}, s);  // fp32, CPU's order
        }
        dspark_markov_step({.U = p.U, .y = p.y, .bias = bias, .e = e, .weight = p.confidence, .rows = n, .block = G,
                            .step = k, .vocab = V, .hidden = p.hidden, .rank = rank, .logits = logits,
                            .confidence = d_conf + k * R},
                           s);
        float* probs = p.device_probs ? p.device_probs + k * R * V : scratch_probs;
        draft_sample({.logits = logits, .rows = n, .vocab = V, .temperature = p.temperature, .sampled = p.sampled,
                      .uniform = p.uniforms + k, .uniform_stride = G, .parts = parts, .probs = probs,
                      .tokens = d_drafts + k * R, .confidence = nullptr},  // (no MTP proxy)
                     s);
        if (p.host_probs)  // the step's distributions in one copy (rows of argmax drafts are copied, not read)
            copy_to_host(p.host_probs + k * R * V, probs, size_t(n * V) * 4, s);
    }
    copy_to_host(p.host_out, d_drafts, size_t(G * R) * 4, s);
    copy_to_host(p.host_out + size_t(G * R) * 4, d_conf, size_t(G * R) * 4, s);
}

}  // namespace deepinfer::cuda
