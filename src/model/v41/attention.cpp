// SPDX-License-Identifier: Apache-2.0
// V4.1 attention for a chunk of tokens, in transformers' order of operations: Q and window KV, the
// compressor (Full layers), index keys, the indexer with its visibility / candidate / top-k rules,
// the compressed entries, then sink attention over the window plus the selected entries, inverse
// RoPE and the grouped output projection.
#include "model/v41/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cpu/linear.h"
#include "deepinfer/check.h"
#include "model/v41/qat.h"

namespace deepinfer::v41 {
namespace {


void norm_rows(float* x, const Vec& weight, float eps, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) cpu::rms_norm(x + r * n, weight.data(), eps, n, x + r * n);
}

// Compressor of a Full layer on this call's tokens: appends every group completed by them (pre-RoPE
// latents) to `latent` and returns the entry index of the first; ratio > 1 keeps the rows of the
// incomplete group in the state.
int64_t compress(const Context& ctx, const AttentionWeights& w, int64_t ratio, const float* x, int64_t S,
                 LayerState& st, std::vector<float>& latent) {
    const V41TextConfig& c = ctx.config;
    const int64_t hd = c.head_dim, first = st.num_entries;
    const float eps = float(c.rms_norm_eps);
    int64_t groups = 0;
    if (ratio == 1) {
        groups = S;
        latent.resize(static_cast<size_t>(S * hd));
        cpu::linear_rows(w.compressor_wkv, x, S, latent.data());
    } else {
        std::vector<float> kv(static_cast<size_t>(S * hd)), gate(static_cast<size_t>(S * hd));
        cpu::linear_rows(w.compressor_wkv, x, S, kv.data());
        cpu::linear_rows(w.compressor_wgate, x, S, gate.data());
        st.pending_kv.insert(st.pending_kv.end(), kv.begin(), kv.end());
        st.pending_gate.insert(st.pending_gate.end(), gate.begin(), gate.end());
        st.num_pending += S;
        groups = st.num_pending / ratio;
        latent.resize(static_cast<size_t>(groups * hd));
        const float* pk = st.pending_kv.data();
        const float* pg = st.pending_gate.data();
        for (int64_t g = 0; g < groups; ++g) {
            for (int64_t ch = 0; ch < hd; ++ch) {
                float mx = -INFINITY;
                for (int64_t r = 0; r < ratio; ++r) mx = std::max(mx, pg[(g * ratio + r) * hd + ch]);
                float sum = 0.0f;
                for (int64_t r = 0; r < ratio; ++r) sum += std::exp(pg[(g * ratio + r) * hd + ch] - mx);
                float acc = 0.0f;
                for (int64_t r = 0; r < ratio; ++r) {
                    const int64_t t = g * ratio + r;
                    acc += pk[t * hd + ch] * (std::exp(pg[t * hd + ch] - mx) / sum);
                }
                latent[size_t(g * hd + ch)] = acc;
            }
        }
        const int64_t used = groups * ratio;
        st.pending_kv.erase(st.pending_kv.begin(), st.pending_kv.begin() + used * hd);
        st.pending_gate.erase(st.pending_gate.begin(), st.pending_gate.begin() + used * hd);
        st.num_pending -= used;
    }
    norm_rows(latent.data(), w.compressor_norm, eps, groups, hd);
    return first;
}

// The indexer of an index source: scores of this call's queries against the KV source's index keys,
// candidate stage, top-k into `shared`.
void index(const Context& ctx, const AttentionParams& p, int64_t ratio, const float* qr, SharedState& shared) {
    const V41TextConfig& c = ctx.config;
    const AttentionWeights& w = *p.weights;
    const LayerState* src = shared.kv_source;
    if (src == nullptr || src->num_entries == 0) return;  // transformers publishes nothing then
    const int64_t S = p.num_tokens, n = src->num_entries, IH = c.index_n_heads, ID = c.index_head_dim;
    std::vector<float> q(static_cast<size_t>(S * IH * ID)), hw(static_cast<size_t>(S * IH));
    cpu::linear_rows(w.indexer_wq_b, qr, S, q.data());
    cpu::linear_rows(w.indexer_weights_proj, p.x, S, hw.data());
    const float softmax_scale = 1.0f / std::sqrt(float(ID)), heads_scale = 1.0f / std::sqrt(float(IH));
    for (int64_t t = 0; t < S; ++t)
        for (int64_t h = 0; h < IH; ++h) {
            float* qh = q.data() + (t * IH + h) * ID;
            ctx.rope_compress.apply(qh, ID, p.position_begin + t);
            fake_quant_fp4(qh, ID, 32, false);
        }
    const bool candidate_source = p.layer == c.candidate_source_layer_id;
    const bool uses_candidates = c.candidate_source_layer_id >= 0 && c.candidate_source_layer_id < p.layer &&
                                 shared.has_candidates && !candidate_source;
    if (candidate_source) {
        shared.candidates.assign(static_cast<size_t>(S * n), 0);
        shared.has_candidates = true;
    }
    const int64_t topk_width = c.index_topk;
    shared.topk.assign(static_cast<size_t>(S * topk_width), -1);
    std::vector<float> scores(static_cast<size_t>(n));
    std::vector<int64_t> order(static_cast<size_t>(n));
    for (int64_t t = 0; t < S; ++t) {
        const int64_t visible = std::min(n, (p.position_begin + t + 1) / ratio);
        for (int64_t j = 0; j < n; ++j) {
            if (j >= visible) {
                scores[size_t(j)] = -INFINITY;
                continue;
            }
            float acc = 0.0f;
            for (int64_t h = 0; h < IH; ++h) {
                const float d = cpu::dot(q.data() + (t * IH + h) * ID, src->index_keys.data() + j * ID, ID);
                acc += (std::max(d, 0.0f) * softmax_scale) * (hw[size_t(t * IH + h)] * heads_scale);
            }
            scores[size_t(j)] = acc;
        }
        if (candidate_source) {
            // Blocks of candidate_block_size: max score; the block of the newest visible entry is pinned.
            const int64_t bs = c.candidate_block_size, num_blocks = (n + bs - 1) / bs;
            std::vector<float> block(static_cast<size_t>(num_blocks), -INFINITY);
            for (int64_t j = 0; j < n; ++j) block[size_t(j / bs)] = std::max(block[size_t(j / bs)], scores[size_t(j)]);
            if (visible > 0) block[size_t((visible - 1) / bs)] = INFINITY;
            std::vector<int64_t> border(static_cast<size_t>(num_blocks));
            std::iota(border.begin(), border.end(), 0);
            std::stable_sort(border.begin(), border.end(),
                             [&](int64_t a, int64_t b) { return block[size_t(a)] > block[size_t(b)]; });
            const int64_t keep = std::min(c.candidate_topk_blocks, num_blocks);
            for (int64_t k = 0; k < keep; ++k) {
                const int64_t b = border[size_t(k)];
                if (!(block[size_t(b)] > -INFINITY)) continue;
                for (int64_t j = b * bs; j < std::min(n, (b + 1) * bs); ++j) shared.candidates[size_t(t * n + j)] = 1;
            }
        } else if (uses_candidates) {
            for (int64_t j = 0; j < n; ++j)
                if (!shared.candidates[size_t(t * n + j)]) scores[size_t(j)] = -INFINITY;
        }
        // Top-k (ties: lowest index first), kept as an ascending set.
        std::iota(order.begin(), order.end(), 0);
        const int64_t k = std::min(topk_width, n);
        std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
            return scores[size_t(a)] > scores[size_t(b)] || (scores[size_t(a)] == scores[size_t(b)] && a < b);
        });
        std::vector<int32_t> picked;
        for (int64_t i = 0; i < k; ++i)
            if (scores[size_t(order[size_t(i)])] > -INFINITY) picked.push_back(int32_t(order[size_t(i)]));
        std::sort(picked.begin(), picked.end());
        std::copy(picked.begin(), picked.end(), shared.topk.begin() + t * topk_width);
    }
    shared.has_topk = true;
}

}  // namespace

void attention_forward(const Context& ctx, const AttentionParams& p, SharedState& shared) {
    const V41TextConfig& c = ctx.config;
    const AttentionWeights& w = *p.weights;
    LayerState& st = *p.state;
    const int64_t S = p.num_tokens, H = c.num_attention_heads, hd = c.head_dim, P0 = p.position_begin;
    const int64_t ratio = c.compress_ratio(p.layer), W = c.sliding_window;
    const cpu::RopeTable& rope = ratio > 0 ? ctx.rope_compress : ctx.rope_main;
    const float eps = float(c.rms_norm_eps);

    std::vector<float> qr(static_cast<size_t>(S * c.q_lora_rank)), q(static_cast<size_t>(S * H * hd));
    cpu::linear_rows(w.wq_a, p.x, S, qr.data());
    norm_rows(qr.data(), w.q_norm, eps, S, c.q_lora_rank);
    cpu::linear_rows(w.wq_b, qr.data(), S, q.data());
    // Window K=V of this call appended after the cached ones: kv rows [num_window + S, hd], row r holds
    // position P0 - num_window + r.
    const int64_t cached = st.num_window;
    std::vector<float> kv(static_cast<size_t>((cached + S) * hd));
    std::copy(st.window.begin(), st.window.end(), kv.begin());
    float* kv_new = kv.data() + cached * hd;
    cpu::linear_rows(w.wkv, p.x, S, kv_new);
    norm_rows(kv_new, w.kv_norm, eps, S, hd);
    for (int64_t t = 0; t < S; ++t) {
        for (int64_t h = 0; h < H; ++h) rope.apply(q.data() + (t * H + h) * hd, hd, P0 + t);
        rope.apply(kv_new + t * hd, hd, P0 + t);
        fake_quant_fp8(kv_new + t * hd, hd, 32);
    }

    bool use_compressed = false;
    if (ratio > 0) {
        if (w.has_compressor) {
            std::vector<float> latent;
            const int64_t first = compress(ctx, w, ratio, p.x, S, st, latent);
            const int64_t groups = int64_t(latent.size()) / hd;
            if (w.has_index_keys) {
                const int64_t ID = c.index_head_dim;
                std::vector<float> keys(static_cast<size_t>(groups * ID));
                cpu::linear_rows(w.indexer_wk, latent.data(), groups, keys.data());
                norm_rows(keys.data(), w.indexer_k_norm, eps, groups, ID);
                for (int64_t g = 0; g < groups; ++g) {
                    ctx.rope_compress.apply(keys.data() + g * ID, ID, (first + g) * ratio);
                    fake_quant_fp4(keys.data() + g * ID, ID, 32, false);
                }
                st.index_keys.insert(st.index_keys.end(), keys.begin(), keys.end());
            }
            for (int64_t g = 0; g < groups; ++g) {
                ctx.rope_compress.apply(latent.data() + g * hd, hd, (first + g) * ratio);
                fake_quant_fp4(latent.data() + g * hd, hd, 16, true);
            }
            st.compressed.insert(st.compressed.end(), latent.begin(), latent.end());
            st.num_entries += groups;
            shared.kv_source = &st;
        }
        if (w.has_indexer) index(ctx, p, ratio, qr.data(), shared);
        use_compressed = shared.kv_source != nullptr && shared.kv_source->num_entries > 0 && shared.has_topk;
    }

    // Sink attention over the window [P-W+1, P] (oldest first) and the selected compressed entries.
    std::vector<float> o(static_cast<size_t>(S * H * hd), 0.0f);
    const float scale = 1.0f / std::sqrt(float(hd));
    std::vector<const float*> keys;
    std::vector<float> logits;
    for (int64_t t = 0; t < S; ++t) {
        const int64_t P = P0 + t;
        keys.clear();
        for (int64_t s = std::max<int64_t>(0, P - W + 1); s <= P; ++s) keys.push_back(kv.data() + (s - (P0 - cached)) * hd);
        if (use_compressed) {
            for (int64_t k = 0; k < c.index_topk; ++k) {
                const int32_t j = shared.topk[size_t(t * c.index_topk + k)];
                if (j >= 0) keys.push_back(shared.kv_source->compressed.data() + int64_t(j) * hd);
            }
        }
        logits.resize(keys.size());
        for (int64_t h = 0; h < H; ++h) {
            const float* qh = q.data() + (t * H + h) * hd;
            const float sink = w.sink[size_t(h)];
            float mx = sink;
            for (size_t i = 0; i < keys.size(); ++i) {
                logits[i] = cpu::dot(qh, keys[i], hd) * scale;
                mx = std::max(mx, logits[i]);
            }
            float den = std::exp(sink - mx);
            for (size_t i = 0; i < keys.size(); ++i) den += (logits[i] = std::exp(logits[i] - mx));
            float* oh = o.data() + (t * H + h) * hd;
            for (size_t i = 0; i < keys.size(); ++i) {
                const float pr = logits[i] / den;
                for (int64_t d = 0; d < hd; ++d) oh[d] += pr * keys[i][d];
            }
            rope.apply(oh, hd, P, /*inverse=*/true);
        }
    }
    // Keep the last W window rows.
    const int64_t keep = std::min<int64_t>(W, cached + S);
    st.window.assign(kv.end() - keep * hd, kv.end());
    st.num_window = keep;

    // Grouped wo_a, then wo_b.
    const int64_t G = c.o_groups, gin = H * hd / G, R = c.o_lora_rank;
    std::vector<float> group_in(static_cast<size_t>(S * gin)), group_out(static_cast<size_t>(S * R)),
        u(static_cast<size_t>(S * G * R));
    for (int64_t g = 0; g < G; ++g) {
        for (int64_t t = 0; t < S; ++t) std::copy_n(o.data() + t * H * hd + g * gin, gin, group_in.data() + t * gin);
        const LinearWeight wg = w.wo_a.rows(g * R, (g + 1) * R);
        cpu::linear_rows(wg, group_in.data(), S, group_out.data());
        for (int64_t t = 0; t < S; ++t) std::copy_n(group_out.data() + t * R, R, u.data() + t * G * R + g * R);
    }
    cpu::linear_rows(w.wo_b, u.data(), S, p.out);
}

}  // namespace deepinfer::v41
