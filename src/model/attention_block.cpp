// SPDX-License-Identifier: Apache-2.0
// Attention sub-block. Candidates of a query at position P: the sliding window (positions
// max(0, P-W+1)..P, oldest first), then compressed entries (HCA: every visible entry; CSA: the
// indexer's top-k, ascending index). Visible entries: i < (P+1)/ratio. Softmax with the sink in
// the denominator only. The arithmetic of a query does not depend on how the sequence was chunked.
#include "model/attention_block.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "backends/cpu/linear.h"
#include "deepinfer/check.h"
#include "model/compressor.h"

namespace deepinfer {
namespace {

using cpu::linear;

TensorView view2(float* p, int64_t rows, int64_t cols) { return TensorView(p, DType::kF32, {rows, cols}); }

// Per-head unweighted RMS normalization of q. Official: bf16 arithmetic throughout.
void head_rms_norm(const BlockContext& ctx, float* q, int64_t dim) {
    const float eps = static_cast<float>(ctx.config.rms_norm_eps);
    if (ctx.official()) cpu::rms_norm_bf16_arith(q, eps, dim);
    else cpu::rms_norm(q, nullptr, eps, dim, q);
}

}  // namespace

void attention_queries(const BlockContext& ctx, const AttentionWeights& w, const cpu::RopeTable& rope, const float* a,
                       int64_t S, const int64_t* position, float* qr, float* q) {
    const ModelConfig& c = ctx.config;
    const int64_t H = c.num_attention_heads, Dh = c.head_dim, QL = c.q_lora_rank, R = rope.rope_dim();
    const float eps = static_cast<float>(c.rms_norm_eps);
    project(ctx, w.wq_a, a, S, qr);
    for (int64_t t = 0; t < S; ++t) {
        cpu::rms_norm(qr + t * QL, w.q_norm.ptr(), eps, QL, qr + t * QL);
        if (ctx.official()) cpu::round_bf16_inplace(qr + t * QL, QL);
    }
    project(ctx, w.wq_b, qr, S, q);
#pragma omp parallel for schedule(static) if (S * H * Dh > (1 << 16))
    for (int64_t i = 0; i < S * H; ++i) {
        float* qh = q + i * Dh;
        head_rms_norm(ctx, qh, Dh);
        rope.apply(qh, Dh, position[i / H]);
        if (ctx.official()) cpu::round_bf16_inplace(qh + Dh - R, R);
    }
}

void attention_kv_rows(const BlockContext& ctx, const AttentionWeights& w, const cpu::RopeTable& rope, const float* a,
                       int64_t S, const int64_t* position, float* kv) {
    const ModelConfig& c = ctx.config;
    const int64_t Dh = c.head_dim, R = rope.rope_dim();
    const float eps = static_cast<float>(c.rms_norm_eps);
    project(ctx, w.wkv, a, S, kv);
    for (int64_t t = 0; t < S; ++t) {
        float* row = kv + t * Dh;
        cpu::rms_norm(row, w.kv_norm.ptr(), eps, Dh, row);
        if (ctx.official()) cpu::round_bf16_inplace(row, Dh);
        rope.apply(row, Dh, position[t]);
        if (ctx.official()) {
            cpu::round_bf16_inplace(row + Dh - R, R);
            fp8_simulate_nope(row, Dh - R);
        }
    }
}

void attention_head_epilogue(const BlockContext& ctx, const cpu::RopeTable& rope, float* oh, int64_t position) {
    const int64_t Dh = ctx.config.head_dim, R = rope.rope_dim();
    if (ctx.official()) cpu::round_bf16_inplace(oh, Dh);
    rope.apply(oh, Dh, position, /*inverse=*/true);
    if (ctx.official()) cpu::round_bf16_inplace(oh + Dh - R, R);
}

void attention_output(const BlockContext& ctx, const AttentionWeights& w, const float* o, int64_t S, float* out) {
    const ModelConfig& c = ctx.config;
    const int64_t H = c.num_attention_heads, Dh = c.head_dim;
    const int64_t G = c.o_groups, OL = c.o_lora_rank, GW = H * Dh / G;
    std::vector<float> grp(static_cast<size_t>(S * GW)), u(static_cast<size_t>(S * G * OL)),
        ug(static_cast<size_t>(S * OL));
    for (int64_t g = 0; g < G; ++g) {
        for (int64_t t = 0; t < S; ++t) std::copy_n(o + t * H * Dh + g * GW, GW, grp.begin() + t * GW);
        LinearWeight wg = w.wo_a.rows(g * OL, (g + 1) * OL);
        // Official: wo_a is a bf16 GEMM (dequantized at load), no activation quantization.
        linear({.x = view2(grp.data(), S, GW), .weight = &wg, .y = view2(ug.data(), S, OL),
                .round_output_bf16 = ctx.official()});
        for (int64_t t = 0; t < S; ++t) std::copy_n(ug.begin() + t * OL, OL, u.begin() + t * G * OL + g * OL);
    }
    project(ctx, w.wo_b, u.data(), S, out);
}

std::vector<int32_t> topk_lowest_index(const float* scores, int64_t n, int64_t k) {
    std::vector<int32_t> idx(static_cast<size_t>(n));
    std::iota(idx.begin(), idx.end(), 0);
    k = std::min(k, n);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
        return scores[a] != scores[b] ? scores[a] > scores[b] : a < b;
    });
    idx.resize(static_cast<size_t>(k));
    std::sort(idx.begin(), idx.end());
    return idx;
}

void attention_block(const BlockContext& ctx, const AttentionBlockParams& p) {
    const ModelConfig& c = ctx.config;
    const LayerWeights& lw = *p.layer;
    const AttentionWeights& w = lw.attn;
    const int64_t S = p.num_tokens, H = c.num_attention_heads, Dh = c.head_dim, D = c.hidden_size;
    const int64_t W = c.sliding_window, QL = c.q_lora_rank;
    const bool compressed = lw.attention_type != AttentionType::kSliding;
    const cpu::RopeTable& rope = compressed ? ctx.rope_compress : ctx.rope_main;
    // Position of every row (rows of a segment are consecutive positions of one sequence).
    std::vector<int64_t> position(static_cast<size_t>(S));
    for (const Segment& seg : p.segments)
        for (int64_t r = 0; r < seg.num_rows; ++r) position[size_t(seg.row_begin + r)] = seg.first_position + r;

    // ---- Q path (all rows) and KV path (all rows) ----
    std::vector<float> qr(static_cast<size_t>(S * QL)), q(static_cast<size_t>(S * H * Dh));
    attention_queries(ctx, w, rope, p.a, S, position.data(), qr.data(), q.data());
    std::vector<float> kv(static_cast<size_t>(S * Dh));
    attention_kv_rows(ctx, w, rope, p.a, S, position.data(), kv.data());

    // ---- Indexer queries and head weights (all rows) ----
    const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
    std::vector<float> qi, hw;
    if (w.indexer) {
        qi.resize(static_cast<size_t>(S * IH * ID));
        hw.resize(static_cast<size_t>(S * IH));
        project(ctx, w.indexer->wq_b, qr.data(), S, qi.data());
        project(ctx, w.indexer->weights_proj, p.a, S, hw.data());
#pragma omp parallel for schedule(static) if (S * IH * ID > (1 << 16))
        for (int64_t i = 0; i < S * IH; ++i) {
            float* qh = qi.data() + i * ID;
            ctx.rope_compress.apply(qh, ID, position[size_t(i / IH)]);
            if (ctx.official()) hadamard_fp4_simulate(qh, ID);
        }
    }

    std::vector<float> o(static_cast<size_t>(S * H * Dh));
    for (const Segment& seg : p.segments) {
        LayerState& st = *seg.state;
        const int64_t P0 = seg.first_position, n = seg.num_rows, r0 = seg.row_begin;
        const float* a_seg = p.a + r0 * D;
        // ---- Compressors: emit every entry completed inside this segment ----
        if (compressed) {
            compressor_update(ctx, {.weights = &*w.compressor, .state = &st.compressor, .a = a_seg, .num_tokens = n,
                                    .first_position = P0, .qat = CompressorQat::kFp8Kv});
        }
        std::vector<std::vector<int32_t>> selected(static_cast<size_t>(n));  // CSA picks per query
        if (w.indexer) {
            compressor_update(ctx, {.weights = &w.indexer->compressor, .state = &st.indexer, .a = a_seg,
                                    .num_tokens = n, .first_position = P0, .qat = CompressorQat::kHadamardFp4});
            const float softmax_scale = 1.0f / std::sqrt(static_cast<float>(ID));
            const float weights_scale = 1.0f / std::sqrt(static_cast<float>(IH));
            const int64_t m = lw.compress_ratio;
            const PagedRows& keys = st.indexer.entries;
#pragma omp parallel for schedule(dynamic) if (n * keys.size() * IH * ID > (1 << 18))
            for (int64_t t = 0; t < n; ++t) {
                const int64_t pos = P0 + t, row = r0 + t;
                const int64_t visible = std::min(keys.size(), (pos + 1) / m);
                std::vector<float> score(static_cast<size_t>(visible), 0.0f);
                for (int64_t i = 0; i < visible; ++i) {
                    float s = 0;
                    for (int64_t h = 0; h < IH; ++h) {
                        const float dp = cpu::dot(qi.data() + (row * IH + h) * ID, keys.row(i), ID);
                        if (ctx.official()) {
                            // bf16 einsum result, bf16 ReLU * weight, bf16 head sum.
                            const float wgt = cpu::round_bf16(hw[size_t(row * IH + h)] * softmax_scale * weights_scale);
                            s = cpu::round_bf16(s + cpu::round_bf16(std::max(cpu::round_bf16(dp), 0.0f) * wgt));
                        } else {
                            s += (std::max(dp, 0.0f) * softmax_scale) * (hw[size_t(row * IH + h)] * weights_scale);
                        }
                    }
                    score[size_t(i)] = s;
                }
                selected[size_t(t)] = topk_lowest_index(score.data(), visible, c.index_topk);
            }
        }

        // ---- Sparse attention with sink over window + compressed candidates ----
        const float scale = 1.0f / std::sqrt(static_cast<float>(Dh));
        const float* kv_seg = kv.data() + r0 * Dh;
#pragma omp parallel for schedule(dynamic) if (n * H * Dh * (W + st.compressor.num_entries()) > (1 << 18))
        for (int64_t t = 0; t < n; ++t) {
            const int64_t pos = P0 + t, row = r0 + t;
            std::vector<const float*> cand;
            for (int64_t q_pos = std::max<int64_t>(0, pos - W + 1); q_pos <= pos; ++q_pos)
                cand.push_back(q_pos >= P0 ? kv_seg + (q_pos - P0) * Dh : st.window.row(q_pos % st.window_rows));
            if (lw.attention_type == AttentionType::kHca) {
                const int64_t visible = std::min(st.compressor.num_entries(), (pos + 1) / lw.compress_ratio);
                for (int64_t i = 0; i < visible; ++i) cand.push_back(st.compressor.entries.row(i));
            } else if (lw.attention_type == AttentionType::kCsa) {
                for (int32_t i : selected[size_t(t)]) cand.push_back(st.compressor.entries.row(i));
            }
            std::vector<float> sc(cand.size());
            for (int64_t h = 0; h < H; ++h) {
                const float* qh = q.data() + (row * H + h) * Dh;
                float mx = -std::numeric_limits<float>::infinity();
                for (size_t j = 0; j < cand.size(); ++j) {
                    sc[j] = cpu::dot(qh, cand[j], Dh) * scale;
                    mx = std::max(mx, sc[j]);
                }
                const float sink = w.sink.ptr()[h];
                float den = cpu::exp_f32(sink - mx);
                for (size_t j = 0; j < cand.size(); ++j) den += (sc[j] = cpu::exp_f32(sc[j] - mx));
                float* oh = o.data() + (row * H + h) * Dh;
                std::fill(oh, oh + Dh, 0.0f);
                for (size_t j = 0; j < cand.size(); ++j) {
                    // Official: probabilities rounded to bf16 before P·V; the denominator keeps fp32.
                    const float pj = ctx.official() ? cpu::round_bf16(sc[j]) : sc[j];
                    const float* v = cand[j];
                    for (int64_t d = 0; d < Dh; ++d) oh[d] += pj * v[d];
                }
                for (int64_t d = 0; d < Dh; ++d) oh[d] /= den;
                attention_head_epilogue(ctx, rope, oh, pos);
            }
        }

        // ---- Sliding window ring (position-keyed): keep the last window_rows positions ----
        for (int64_t t = std::max<int64_t>(0, n - st.window_rows); t < n; ++t)
            std::copy_n(kv_seg + t * Dh, Dh, st.window.mutable_row((P0 + t) % st.window_rows));
    }

    attention_output(ctx, w, o.data(), S, p.out);
}

}  // namespace deepinfer
