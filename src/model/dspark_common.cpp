// SPDX-License-Identifier: Apache-2.0
// The DSpark parts shared by the V4-Flash-0731 and V4.1-Flash drafters (model/dspark_common.h).
#include "model/dspark_common.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/primitives.h"
#include "deepinfer/check.h"
#include "model/draft_sampling.h"
#include "model/state.h"

namespace deepinfer {

int64_t dspark_tap_index(std::span<const int64_t> ids, int64_t layer) {
    const auto it = std::find(ids.begin(), ids.end(), layer);
    return it == ids.end() ? -1 : int64_t(it - ids.begin());
}

void dspark_stream_mean(const float* x, int64_t hc, int64_t D, float* out) {
    for (int64_t d = 0; d < D; ++d) {
        float s = 0.0f;
        for (int64_t j = 0; j < hc; ++j) s += x[j * D + d];
        out[d] = s / float(hc);
    }
}

void attach_dspark_rings(DSparkRings& rings, int64_t stages, int64_t window, int64_t head_dim,
                         const std::shared_ptr<StatePool>& pool) {
    rings.attached = true;
    rings.rows = window + kRingHeadroom;
    rings.stages.clear();
    for (int64_t s = 0; s < stages; ++s) rings.stages.emplace_back(rings.rows, head_dim, pool);
}

uint64_t dspark_ring_bytes(int64_t stages, int64_t window, int64_t head_dim, uint64_t page_bytes) {
    return uint64_t(stages) * paged_bytes(window + kRingHeadroom, head_dim, page_bytes);
}

void write_dspark_ring_rows(DSparkRings& rings, int64_t stage, int64_t first_position, int64_t num_rows,
                            const float* kv, int64_t head_dim) {
    PagedRing& ring = rings.stages[size_t(stage)];
    for (int64_t t = 0; t < num_rows; ++t)
        std::copy_n(kv + t * head_dim, head_dim, ring.mutable_row((first_position + t) % rings.rows));
}

void dspark_attention_core(const DSparkAttentionCoreParams& p) {
    const int64_t G = p.block, H = p.heads, hd = p.head_dim, W = p.window;
    const int64_t S = int64_t(p.rings.size()) * G;
    DI_ICHECK(p.anchor_positions.size() == p.rings.size());
    const float scale = 1.0f / std::sqrt(float(hd));
#pragma omp parallel for schedule(dynamic) if (S * H * hd * (W + G) > (1 << 18))
    for (int64_t t = 0; t < S; ++t) {
        const size_t i = size_t(t / G);
        const DSparkRings& rings = *p.rings[i];
        const PagedRing& ring = rings.stages[size_t(p.stage)];
        const int64_t P = p.anchor_positions[i];
        std::vector<const float*> keys;
        for (int64_t pos = std::max<int64_t>(0, P - W); pos < P; ++pos) keys.push_back(ring.row(pos % rings.rows));
        for (int64_t k = 0; k < G; ++k) keys.push_back(p.block_kv + (int64_t(i) * G + k) * hd);
        std::vector<float> logits(keys.size());
        for (int64_t h = 0; h < H; ++h) {
            const float* qh = p.q + (t * H + h) * hd;
            const float sink = p.sink[size_t(h)];
            float mx = sink;
            for (size_t k = 0; k < keys.size(); ++k) {
                logits[k] = cpu::dot(qh, keys[k], hd) * scale;
                mx = std::max(mx, logits[k]);
            }
            float den = cpu::exp_f32(sink - mx);
            for (size_t k = 0; k < keys.size(); ++k) den += (logits[k] = cpu::exp_f32(logits[k] - mx));
            float* oh = p.o + (t * H + h) * hd;
            std::fill(oh, oh + hd, 0.0f);
            if (p.form == DSparkSoftmaxForm::kProbsThenSum) {
                for (size_t k = 0; k < keys.size(); ++k) {
                    const float pr = p.round_bf16 ? cpu::round_bf16(logits[k] / den) : logits[k] / den;
                    for (int64_t d = 0; d < hd; ++d) oh[d] += pr * keys[k][d];
                }
            } else {
                for (size_t k = 0; k < keys.size(); ++k) {
                    const float e = p.round_bf16 ? cpu::round_bf16(logits[k]) : logits[k];
                    for (int64_t d = 0; d < hd; ++d) oh[d] += e * keys[k][d];
                }
                for (int64_t d = 0; d < hd; ++d) oh[d] /= den;
            }
        }
    }
}

void check_dspark_requests(std::span<const DraftRequest> requests, int64_t block, int64_t vocab) {
    for (const DraftRequest& q : requests) {
        DI_CHECK(q.sequence != nullptr && q.num_drafts >= 1 && q.num_drafts <= block, "DSpark drafting: bad request (",
                 q.num_drafts, " drafts, the block holds ", block, ")");
        DI_CHECK(q.uniforms.empty() || int64_t(q.uniforms.size()) == q.num_drafts, "DSpark drafting: ",
                 q.uniforms.size(), " uniforms for ", q.num_drafts, " drafts");
        DI_CHECK(q.anchor >= 0 && q.anchor < vocab, "DSpark drafting: anchor ", q.anchor, " out of range");
    }
}

std::vector<Draft> dspark_markov_draft(const DSparkHeads& h, std::span<const DraftRequest> requests,
                                       const DSparkBlockOutput& block) {
    const int64_t G = h.block, D = h.hidden, V = h.vocab, r = h.rank;
    std::vector<Draft> out(requests.size());
    std::vector<size_t> active(requests.size());
    std::vector<int32_t> prev(requests.size());
    for (size_t i = 0; i < active.size(); ++i) {
        active[i] = i;
        prev[i] = requests[i].anchor;
    }
    std::vector<float> cat(static_cast<size_t>(D + r)), logits(static_cast<size_t>(V));
    for (int64_t k = 0; k < G && !active.empty(); ++k) {
        const int64_t A = int64_t(active.size());
        std::vector<float> e(static_cast<size_t>(A * r)), bias(static_cast<size_t>(A * V));
        for (int64_t a = 0; a < A; ++a) {
            const int32_t tok = prev[active[size_t(a)]];
            cpu::dequantize_rows(*h.markov_embed, tok, tok + 1, e.data() + a * r);
        }
        cpu::linear_rows(*h.markov_head, e.data(), A, bias.data());  // β = W1[x] · W2ᵀ, fp32
        std::vector<size_t> still;
        for (int64_t a = 0; a < A; ++a) {
            const size_t i = active[size_t(a)];
            const DraftRequest& q = requests[i];
            Draft& dr = out[i];
            const int64_t row = int64_t(i) * G + k;
            const float* U = block.U.data() + row * V;
            const float* b = bias.data() + a * V;
            for (int64_t v = 0; v < V; ++v) logits[size_t(v)] = U[v] + b[v];
            // Confidence logit over [y_k; e] (pre-norm collapsed row of the same block row, Markov embedding).
            std::copy_n(block.y.data() + row * D, D, cat.data());
            std::copy_n(e.data() + a * r, r, cat.data() + D);
            dr.confidence.push_back(cpu::sigmoid(cpu::dot(h.confidence, cat.data(), D + r)));
            const bool sampled = !q.uniforms.empty() && q.temperature > 0;
            const int32_t pick =
                draw_draft(logits.data(), V, q.temperature, sampled ? &q.uniforms[size_t(k)] : nullptr, dr.probs);
            dr.tokens.push_back(pick);
            prev[i] = pick;
            if (k + 1 < q.num_drafts) still.push_back(i);
        }
        active.swap(still);
    }
    return out;
}

}  // namespace deepinfer
