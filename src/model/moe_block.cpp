// SPDX-License-Identifier: Apache-2.0
// MoE: tokens are grouped by expert; each expert runs its SwiGLU on its tokens as one batch (the
// per-row results do not depend on the batch). Outputs are combined per token in ascending expert
// order, then the shared expert is added (the official loop order).
#include "model/moe_block.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "deepinfer/check.h"
#include "model/attention_block.h"

namespace deepinfer {
namespace {


// SwiGLU expert on `rows` tokens: y = w2(silu(min(g, L)) * clamp(u, -L, L) [* weight]).
// `row_weight` (may be null) multiplies the activation before w2 (official) or the output after (exact,
// as transformers does).
void expert_forward(const BlockContext& ctx, const ExpertWeights& e, const float* x, int64_t rows,
                    const float* row_weight, float* y) {
    const int64_t I = e.w1.out_features, D = e.w2.out_features;
    const bool off = ctx.official();
    std::vector<float> g(static_cast<size_t>(rows * I)), u(static_cast<size_t>(rows * I));
    project(ctx, e.w1, x, rows, g.data());
    project(ctx, e.w3, x, rows, u.data());
    const float L = static_cast<float>(ctx.config.swiglu_limit);
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t i = 0; i < I; ++i) {
            float gv = g[size_t(r * I + i)], uv = u[size_t(r * I + i)];
            if (L > 0) {
                gv = std::min(gv, L);
                uv = std::clamp(uv, -L, L);
            }
            float h = cpu::silu(gv) * uv;
            if (off && row_weight) h *= row_weight[r];
            g[size_t(r * I + i)] = off ? cpu::round_bf16(h) : h;
        }
    }
    project(ctx, e.w2, g.data(), rows, y);
    if (!off && row_weight)
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t d = 0; d < D; ++d) y[r * D + d] *= row_weight[r];
}

}  // namespace

void route(const BlockContext& ctx, const MoeBlockParams& p, int32_t* ids, float* weights) {
    const ModelConfig& c = ctx.config;
    const MoeWeights& w = *p.weights;
    const int64_t S = p.num_tokens, E = c.n_routed_experts, K = c.num_experts_per_tok;
    std::vector<float> logits(static_cast<size_t>(S * E));
    cpu::linear_rows(w.gate, p.x, S, logits.data());
    for (int64_t t = 0; t < S; ++t) {
        float* s = logits.data() + t * E;
        if (c.scoring_func == "sqrtsoftplus") {
            for (int64_t e = 0; e < E; ++e) s[e] = std::sqrt(cpu::softplus(s[e]));
        } else if (c.scoring_func == "sigmoid") {
            for (int64_t e = 0; e < E; ++e) s[e] = cpu::sigmoid(s[e]);
        } else {  // softmax
            const float mx = *std::max_element(s, s + E);
            float den = 0;
            for (int64_t e = 0; e < E; ++e) den += (s[e] = cpu::exp_f32(s[e] - mx));
            for (int64_t e = 0; e < E; ++e) s[e] /= den;
        }
        int32_t* id = ids + t * K;
        if (p.hash_routing) {
            DI_CHECK(p.token_ids[t] >= 0 && p.token_ids[t] < c.vocab_size, "token id ", p.token_ids[t],
                     " outside the vocabulary of ", c.vocab_size);
            std::copy_n(w.tid2eid.begin() + int64_t(p.token_ids[t]) * K, K, id);
        } else {
            std::vector<float> biased(s, s + E);
            if (w.bias)
                for (int64_t e = 0; e < E; ++e) biased[size_t(e)] += w.bias->ptr()[e];
            std::vector<int32_t> top = topk_lowest_index(biased.data(), E, K);
            std::copy(top.begin(), top.end(), id);
        }
        float sum = 0;
        for (int64_t k = 0; k < K; ++k) sum += s[id[k]];
        if (!ctx.official()) sum += 1e-20f;  // transformers' epsilon (exact mode); official has none
        for (int64_t k = 0; k < K; ++k)
            weights[t * K + k] =
                c.norm_topk_prob ? s[id[k]] / sum * static_cast<float>(c.routed_scaling_factor)
                                 : s[id[k]] * static_cast<float>(c.routed_scaling_factor);
    }
}

void moe_block(const BlockContext& ctx, const MoeBlockParams& p) {
    const ModelConfig& c = ctx.config;
    const MoeWeights& w = *p.weights;
    const int64_t S = p.num_tokens, D = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok;
    std::vector<int32_t> ids(static_cast<size_t>(S * K));
    std::vector<float> wts(static_cast<size_t>(S * K));
    route(ctx, p, ids.data(), wts.data());

    std::vector<float> acc(static_cast<size_t>(S * D), 0.0f);
    std::vector<float> xs, ys, rw;
    std::vector<int64_t> rows_of;
    for (int64_t e = 0; e < E; ++e) {
        rows_of.clear();
        rw.clear();
        for (int64_t t = 0; t < S; ++t)
            for (int64_t k = 0; k < K; ++k)
                if (ids[size_t(t * K + k)] == e) {
                    rows_of.push_back(t);
                    rw.push_back(wts[size_t(t * K + k)]);
                }
        if (rows_of.empty()) continue;
        const int64_t n = static_cast<int64_t>(rows_of.size());
        xs.resize(static_cast<size_t>(n * D));
        ys.resize(static_cast<size_t>(n * D));
        for (int64_t r = 0; r < n; ++r) std::copy_n(p.x + rows_of[size_t(r)] * D, D, xs.begin() + r * D);
        expert_forward(ctx, w.experts[size_t(e)], xs.data(), n, rw.data(), ys.data());
        for (int64_t r = 0; r < n; ++r) {
            float* a = acc.data() + rows_of[size_t(r)] * D;
            for (int64_t d = 0; d < D; ++d) a[d] += ys[size_t(r * D + d)];
        }
    }
    std::vector<float> shared(static_cast<size_t>(S * D));
    expert_forward(ctx, w.shared, p.x, S, nullptr, shared.data());
    for (int64_t i = 0; i < S * D; ++i) {
        const float v = acc[size_t(i)] + shared[size_t(i)];
        p.out[i] = ctx.official() ? cpu::round_bf16(v) : v;
    }
}

}  // namespace deepinfer
