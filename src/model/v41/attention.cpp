// SPDX-License-Identifier: Apache-2.0
// V4.1 attention over the rows of a batch, in transformers' order of operations: Q and window KV, the
// compressor (Full layers), index keys, the indexer with its visibility / candidate / top-k rules,
// the compressed entries, then sink attention over the window plus the selected entries, inverse
// RoPE and the grouped output projection. Per-position rows (window K=V, the open group's compressor
// projections) are written to position-keyed rings; a query reads the rows of its own pass from the
// pass and older ones from the rings.
#include "model/v41/attention.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backends/cpu/linear.h"
#include "deepinfer/check.h"
#include "model/v41/numerics.h"
#include "model/v41/qat.h"

namespace deepinfer::v41 {
namespace {

// Weighted RMSNorm of each row (fp32, one rounding to bf16 in official numerics).
void norm_rows(Numerics numerics, float* x, const Vec& weight, float eps, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) cpu::rms_norm(x + r * n, weight.data(), eps, n, x + r * n);
    round_activations(numerics, x, rows * n);
}

// RoPE at `position` (inverse: the output's de-rotation), the result rounded to bf16 in official
// numerics (it is rounded before every FP4/FP8 quantization, spec §3.6).
void rope_row(const Context& ctx, const cpu::RopeTable& rope, float* x, int64_t n, int64_t position,
              bool inverse = false) {
    rope.apply(x, n, position, inverse);
    round_activations(ctx.numerics, x + n - ctx.config.qk_rope_head_dim, ctx.config.qk_rope_head_dim);
}

// Compressor of a Full layer on one segment's rows (kv, gate: that segment's projections): returns
// the pre-RoPE latents of every group the rows complete [groups, head_dim] and the first's index.
std::vector<float> pool_groups(const Context& ctx, const AttentionWeights& w, int64_t ratio, const Segment& seg,
                               LayerState& st, const float* kv, const float* gate, int64_t& first) {
    const V41TextConfig& c = ctx.config;
    const int64_t hd = c.head_dim, n = seg.num_rows, P0 = seg.first_position;
    std::vector<float> latent;
    if (ratio == 1) {
        first = P0;
        latent.assign(kv, kv + n * hd);
    } else {
        first = P0 / ratio;  // the first group ending inside the segment
        for (int64_t t = 0; t < n; ++t) {
            const int64_t pos = P0 + t, slot = pos % st.pending_rows;
            std::copy_n(kv + t * hd, hd, st.pending_kv.mutable_row(slot));
            std::copy_n(gate + t * hd, hd, st.pending_gate.mutable_row(slot));
            if ((pos + 1) % ratio != 0) continue;
            // Group g = positions g*ratio .. pos, read by position (all written by now).
            const int64_t g0 = pos + 1 - ratio;
            const size_t at = latent.size();
            latent.resize(at + size_t(hd));
            for (int64_t ch = 0; ch < hd; ++ch) {
                float mx = -INFINITY;
                for (int64_t r = 0; r < ratio; ++r) mx = std::max(mx, st.pending_gate.row((g0 + r) % st.pending_rows)[ch]);
                float sum = 0.0f;
                for (int64_t r = 0; r < ratio; ++r) sum += cpu::exp_f32(st.pending_gate.row((g0 + r) % st.pending_rows)[ch] - mx);
                float acc = 0.0f;
                for (int64_t r = 0; r < ratio; ++r) {
                    const int64_t slot_r = (g0 + r) % st.pending_rows;
                    acc += st.pending_kv.row(slot_r)[ch] * (cpu::exp_f32(st.pending_gate.row(slot_r)[ch] - mx) / sum);
                }
                latent[at + size_t(ch)] = acc;
            }
        }
    }
    // The pooled ratio-2 value is rounded to bf16 before the norm (the ratio-1 projection already is).
    round_activations(ctx.numerics, latent.data(), int64_t(latent.size()));
    norm_rows(ctx.numerics, latent.data(), w.compressor_norm, float(c.rms_norm_eps), int64_t(latent.size()) / hd, hd);
    return latent;
}

// The compressor stage of a Full layer for every segment: projections over all rows, then per
// segment the completed groups -> index keys (RoPE, MXFP4 QAT) and entries (RoPE, FP4 QAT), appended.
void compress_all(const Context& ctx, const AttentionParams& p) {
    const V41TextConfig& c = ctx.config;
    const AttentionWeights& w = *p.weights;
    const int64_t S = p.num_rows, hd = c.head_dim, ratio = c.compress_ratio(p.layer), ID = c.index_head_dim;
    const float eps = float(c.rms_norm_eps);
    std::vector<float> kv(static_cast<size_t>(S * hd)), gate;
    // Ratio 2: fp32 weights and input, fp32 output (spec §3.4); ratio 1: a bf16 linear with a bf16 output.
    if (ratio > 1) cpu::linear_rows(w.compressor_wkv, p.x, S, kv.data());
    else project_bf16(ctx.numerics, w.compressor_wkv, p.x, S, kv.data());
    if (ratio > 1) {
        gate.resize(static_cast<size_t>(S * hd));
        cpu::linear_rows(w.compressor_wgate, p.x, S, gate.data());
    }
    for (size_t i = 0; i < p.segments.size(); ++i) {
        const Segment& seg = p.segments[i];
        LayerState& st = seg.state->layers[size_t(p.layer)];
        int64_t first = 0;
        std::vector<float> latent = pool_groups(ctx, w, ratio, seg, st, kv.data() + seg.row_begin * hd,
                                                ratio > 1 ? gate.data() + seg.row_begin * hd : nullptr, first);
        const int64_t groups = int64_t(latent.size()) / hd;
        DI_ICHECK(groups == 0 || st.num_entries() == first);
        if (w.has_index_keys && groups > 0) {
            std::vector<float> keys(static_cast<size_t>(groups * ID));
            project_bf16(ctx.numerics, w.indexer_wk, latent.data(), groups, keys.data());
            norm_rows(ctx.numerics, keys.data(), w.indexer_k_norm, eps, groups, ID);
            for (int64_t g = 0; g < groups; ++g) {
                rope_row(ctx, ctx.rope_compress, keys.data() + g * ID, ID, (first + g) * ratio);
                fake_quant_fp4(keys.data() + g * ID, ID, 32, false);
                st.index_keys.append(keys.data() + g * ID);
            }
        }
        for (int64_t g = 0; g < groups; ++g) {
            float* e = latent.data() + g * hd;
            rope_row(ctx, ctx.rope_compress, e, hd, (first + g) * ratio);
            fake_quant_fp4(e, hd, 16, true);
            st.compressed.append(e);
        }
        p.shared[i].kv_source = &st;
    }
}

// Top-k (ties: lowest index first) of `scores`, kept as an ascending set without -inf entries.
void topk_ascending(const std::vector<float>& scores, int64_t k, std::vector<int64_t>& order, int32_t* out) {
    const int64_t n = int64_t(scores.size());
    order.resize(size_t(n));
    std::iota(order.begin(), order.end(), 0);
    k = std::min(k, n);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
        return scores[size_t(a)] > scores[size_t(b)] || (scores[size_t(a)] == scores[size_t(b)] && a < b);
    });
    std::vector<int32_t> picked;
    for (int64_t i = 0; i < k; ++i)
        if (scores[size_t(order[size_t(i)])] > -INFINITY) picked.push_back(int32_t(order[size_t(i)]));
    std::sort(picked.begin(), picked.end());
    std::copy(picked.begin(), picked.end(), out);
}

// The indexer of an index source for one segment: scores of its queries (q: [rows, IH, ID] after
// RoPE and QAT; hw: [rows, IH]) against the KV source's index keys, candidate stage, top-k.
void index_segment(const Context& ctx, int64_t layer, int64_t ratio, const Segment& seg, const float* q,
                   const float* hw, SharedState& shared) {
    const V41TextConfig& c = ctx.config;
    const LayerState* src = shared.kv_source;
    if (src == nullptr || src->num_entries() == 0) return;  // transformers publishes nothing then
    const int64_t S = seg.num_rows, n = src->num_entries(), IH = c.index_n_heads, ID = c.index_head_dim;
    const float softmax_scale = 1.0f / std::sqrt(float(ID)), heads_scale = 1.0f / std::sqrt(float(IH));
    const bool candidate_source = layer == c.candidate_source_layer_id;
    const bool uses_candidates = c.candidate_source_layer_id >= 0 && c.candidate_source_layer_id < layer &&
                                 shared.has_candidates && !candidate_source;
    if (candidate_source) {
        shared.candidates.assign(static_cast<size_t>(S * n), 0);
        shared.candidate_entries = n;
        shared.has_candidates = true;
    }
    const int64_t topk_width = c.index_topk, cn = shared.candidate_entries;
    shared.topk.assign(static_cast<size_t>(S * topk_width), -1);
#pragma omp parallel for schedule(dynamic) if (S * n * IH * ID > (1 << 18))
    for (int64_t t = 0; t < S; ++t) {
        std::vector<float> scores(static_cast<size_t>(n));
        std::vector<int64_t> order;
        const int64_t visible = std::min(n, (seg.first_position + t + 1) / ratio);
        for (int64_t j = 0; j < n; ++j) {
            if (j >= visible) {
                scores[size_t(j)] = -INFINITY;
                continue;
            }
            float acc = 0.0f;
            for (int64_t h = 0; h < IH; ++h) {
                const float d = cpu::dot(q + (t * IH + h) * ID, src->index_keys.row(j), ID);
                if (ctx.official()) {
                    // The reference's bf16 einsum: bf16 dot, bf16 ReLU x weight, bf16 head sum (spec §3.5, §11 row 3).
                    const float wgt = cpu::round_bf16(hw[t * IH + h] * softmax_scale * heads_scale);
                    acc = cpu::round_bf16(acc + cpu::round_bf16(std::max(cpu::round_bf16(d), 0.0f) * wgt));
                } else {
                    acc += (std::max(d, 0.0f) * softmax_scale) * (hw[t * IH + h] * heads_scale);
                }
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
                if (j >= cn || !shared.candidates[size_t(t * cn + j)]) scores[size_t(j)] = -INFINITY;
        }
        topk_ascending(scores, topk_width, order, shared.topk.data() + t * topk_width);
    }
    shared.has_topk = true;
}

}  // namespace

void compress_forward(const Context& ctx, const AttentionParams& p) {
    DI_ICHECK(p.weights->has_compressor);
    compress_all(ctx, p);
}

void attention_forward(const Context& ctx, const AttentionParams& p) {
    const V41TextConfig& c = ctx.config;
    const AttentionWeights& w = *p.weights;
    const int64_t S = p.num_rows, H = c.num_attention_heads, hd = c.head_dim;
    const int64_t ratio = c.compress_ratio(p.layer), W = c.sliding_window;
    const cpu::RopeTable& rope = ratio > 0 ? ctx.rope_compress : ctx.rope_main;
    const float eps = float(c.rms_norm_eps);
    std::vector<int64_t> position(static_cast<size_t>(S));
    for (const Segment& seg : p.segments)
        for (int64_t r = 0; r < seg.num_rows; ++r) position[size_t(seg.row_begin + r)] = seg.first_position + r;

    // Q and this pass's window K=V, all rows.
    std::vector<float> qr(static_cast<size_t>(S * c.q_lora_rank)), q(static_cast<size_t>(S * H * hd));
    const Numerics nm = ctx.numerics;
    project(nm, w.wq_a, p.x, S, qr.data());
    norm_rows(nm, qr.data(), w.q_norm, eps, S, c.q_lora_rank);
    project(nm, w.wq_b, qr.data(), S, q.data());
    std::vector<float> kv(static_cast<size_t>(S * hd));
    project(nm, w.wkv, p.x, S, kv.data());
    norm_rows(nm, kv.data(), w.kv_norm, eps, S, hd);
    for (int64_t t = 0; t < S; ++t) {
        for (int64_t h = 0; h < H; ++h) rope_row(ctx, rope, q.data() + (t * H + h) * hd, hd, position[size_t(t)]);
        rope_row(ctx, rope, kv.data() + t * hd, hd, position[size_t(t)]);
        fake_quant_fp8(kv.data() + t * hd, hd, 32);
    }

    if (ratio > 0) {
        if (w.has_compressor) compress_all(ctx, p);
        if (w.has_indexer) {
            const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
            std::vector<float> qi(static_cast<size_t>(S * IH * ID)), hw(static_cast<size_t>(S * IH));
            project(nm, w.indexer_wq_b, qr.data(), S, qi.data());
            project_bf16(nm, w.indexer_weights_proj, p.x, S, hw.data());
            for (int64_t t = 0; t < S; ++t)
                for (int64_t h = 0; h < IH; ++h) {
                    float* qh = qi.data() + (t * IH + h) * ID;
                    rope_row(ctx, ctx.rope_compress, qh, ID, position[size_t(t)]);
                    fake_quant_fp4(qh, ID, 32, false);
                }
            for (size_t i = 0; i < p.segments.size(); ++i) {
                const Segment& seg = p.segments[i];
                // Visibility i < (P+1)/r with this layer's ratio (transformers'; the source's in every
                // valid schedule, spec §1.3).
                index_segment(ctx, p.layer, ratio, seg, qi.data() + seg.row_begin * IH * ID,
                              hw.data() + seg.row_begin * IH, p.shared[i]);
            }
        }
    }

    // Sink attention over the window [P-W+1, P] (oldest first) and the selected compressed entries.
    std::vector<float> o(static_cast<size_t>(S * H * hd), 0.0f);
    const float scale = 1.0f / std::sqrt(float(hd));
    for (size_t i = 0; i < p.segments.size(); ++i) {
        const Segment& seg = p.segments[i];
        const SharedState& sh = p.shared[i];
        LayerState& st = seg.state->layers[size_t(p.layer)];
        const int64_t P0 = seg.first_position;
        const bool use_compressed =
            ratio > 0 && sh.kv_source != nullptr && sh.kv_source->num_entries() > 0 && sh.has_topk;
        // Rows are independent (each writes its own output row; the ring is written after the loop).
#pragma omp parallel for schedule(dynamic) if (seg.num_rows * H * hd * (W + c.index_topk) > (1 << 18))
        for (int64_t t = 0; t < seg.num_rows; ++t) {
            const int64_t P = P0 + t, row = seg.row_begin + t;
            std::vector<const float*> keys;
            std::vector<float> logits;
            for (int64_t s = std::max({int64_t{0}, P - W + 1, seg.window_begin}); s <= P; ++s)
                keys.push_back(s >= P0 ? kv.data() + (seg.row_begin + s - P0) * hd : st.window.row(s % st.window_rows));
            if (use_compressed) {
                for (int64_t k = 0; k < c.index_topk; ++k) {
                    const int32_t j = sh.topk[size_t(t * c.index_topk + k)];
                    if (j >= 0) keys.push_back(sh.kv_source->compressed.row(j));
                }
            }
            logits.resize(keys.size());
            for (int64_t h = 0; h < H; ++h) {
                const float* qh = q.data() + (row * H + h) * hd;
                const float sink = w.sink[size_t(h)];
                float mx = sink;
                for (size_t k = 0; k < keys.size(); ++k) {
                    logits[k] = cpu::dot(qh, keys[k], hd) * scale;
                    mx = std::max(mx, logits[k]);
                }
                float den = cpu::exp_f32(sink - mx);
                for (size_t k = 0; k < keys.size(); ++k) den += (logits[k] = cpu::exp_f32(logits[k] - mx));
                float* oh = o.data() + (row * H + h) * hd;
                for (size_t k = 0; k < keys.size(); ++k) {
                    // The reference kernel rounds the probabilities to bf16 before P·V (spec §3.1).
                    const float pr = ctx.official() ? cpu::round_bf16(logits[k] / den) : logits[k] / den;
                    for (int64_t d = 0; d < hd; ++d) oh[d] += pr * keys[k][d];
                }
                round_activations(nm, oh, hd);
                rope_row(ctx, rope, oh, hd, P, /*inverse=*/true);
            }
        }
        // The window ring keeps the last window_rows positions of the segment.
        for (int64_t t = std::max<int64_t>(0, seg.num_rows - st.window_rows); t < seg.num_rows; ++t)
            std::copy_n(kv.data() + (seg.row_begin + t) * hd, hd, st.window.mutable_row((P0 + t) % st.window_rows));
    }

    // Grouped wo_a, then wo_b.
    const int64_t G = c.o_groups, gin = H * hd / G, R = c.o_lora_rank;
    std::vector<float> group_in(static_cast<size_t>(S * gin)), group_out(static_cast<size_t>(S * R)),
        u(static_cast<size_t>(S * G * R));
    for (int64_t g = 0; g < G; ++g) {
        for (int64_t t = 0; t < S; ++t) std::copy_n(o.data() + t * H * hd + g * gin, gin, group_in.data() + t * gin);
        const LinearWeight wg = w.wo_a.rows(g * R, (g + 1) * R);
        project_bf16(nm, wg, group_in.data(), S, group_out.data());
        for (int64_t t = 0; t < S; ++t) std::copy_n(group_out.data() + t * R, R, u.data() + t * G * R + g * R);
    }
    project(nm, w.wo_b, u.data(), S, p.out);
}

}  // namespace deepinfer::v41
