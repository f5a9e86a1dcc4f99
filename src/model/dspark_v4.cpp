// SPDX-License-Identifier: Apache-2.0
// The DSpark drafter of DeepSeek-V4-Flash-0731 (model/dspark_v4.h). Every shared piece (projections,
// norms, RoPE, cache QAT, mHC, MoE, attention prologue and epilogue, HC head) is the target's, at the
// same rounding points.
#include "model/dspark_v4.h"

#include <algorithm>

#include "backends/cpu/hyper_connection.h"
#include "backends/cpu/linear.h"
#include "deepinfer/check.h"
#include "model/v4_block.h"

namespace deepinfer {
namespace {

V4SequenceState& v4_state(Sequence& sequence) {
    auto* st = dynamic_cast<V4SequenceState*>(&sequence.state());
    DI_CHECK(st != nullptr, "DSpark drafting: a sequence of another model was passed to the DeepSeek-V4 drafter");
    return *st;
}

// RMSNorm of each row with `weight` (official: rounded to bf16).
void norm_rows(const BlockContext& ctx, float* x, const Vec& weight, int64_t rows, int64_t n) {
    const float eps = static_cast<float>(ctx.config.rms_norm_eps);
    for (int64_t r = 0; r < rows; ++r) {
        cpu::rms_norm(x + r * n, weight.ptr(), eps, n, x + r * n);
        if (ctx.official()) cpu::round_bf16_inplace(x + r * n, n);
    }
}

// DSparkAttention of stage `stage` over the blocks of several sequences (a: [n * γ, D] attn_norm
// output; block i at positions anchor_pos[i] ..). out: [n * γ, D].
void dspark_attention(const V4DSparkModel& m, int64_t stage, const AttentionWeights& w, const float* a,
                      std::span<V4SequenceState* const> states, std::span<const int64_t> anchor_pos, float* out) {
    const BlockContext ctx = m.context();
    const ModelConfig& c = *m.config;
    const int64_t G = m.block_size(), S = int64_t(states.size()) * G, H = c.num_attention_heads, hd = c.head_dim;
    std::vector<int64_t> position(static_cast<size_t>(S));
    for (size_t i = 0; i < states.size(); ++i)
        for (int64_t k = 0; k < G; ++k) position[i * size_t(G) + size_t(k)] = anchor_pos[i] + k;
    std::vector<float> qr(static_cast<size_t>(S * c.q_lora_rank)), q(static_cast<size_t>(S * H * hd)),
        kv(static_cast<size_t>(S * hd)), o(static_cast<size_t>(S * H * hd));
    attention_queries(ctx, w, *m.rope_main, a, S, position.data(), qr.data(), q.data());
    attention_kv_rows(ctx, w, *m.rope_main, a, S, position.data(), kv.data());
    std::vector<const DSparkRings*> rings;
    for (V4SequenceState* st : states) rings.push_back(&st->dspark);
    dspark_attention_core({.q = q.data(), .block_kv = kv.data(), .rings = rings, .anchor_positions = anchor_pos,
                           .stage = stage, .block = G, .heads = H, .head_dim = hd, .window = c.sliding_window,
                           .sink = w.sink.ptr(), .form = DSparkSoftmaxForm::kSumThenDivide,
                           .round_bf16 = ctx.official(), .o = o.data()});
    for (int64_t i = 0; i < S * H; ++i) attention_head_epilogue(ctx, *m.rope_main, o.data() + i * hd, position[size_t(i / H)]);
    attention_output(ctx, w, o.data(), S, out);
}

}  // namespace

int64_t V4DSparkModel::tap_index(int64_t layer) const { return dspark_tap_index(config->dspark_target_layer_ids, layer); }

V4DSparkModel make_v4_dspark_model(const ModelConfig& config, const ModelWeights& weights,
                                   const cpu::RopeTable& rope_main, const cpu::RopeTable& rope_compress,
                                   Numerics numerics) {
    DI_CHECK(weights.dspark.has_value(), "make_v4_dspark_model: the checkpoint has no DSpark drafter");
    V4DSparkModel m;
    m.config = &config;
    m.stage_config = config;
    m.stage_config.n_routed_experts = config.dspark_n_routed_experts;
    m.stage_config.num_experts_per_tok = config.dspark_num_experts_per_tok;
    m.weights = &weights;
    m.rope_main = &rope_main;
    m.rope_compress = &rope_compress;
    m.numerics = numerics;
    return m;
}

void v4_tap_mean(const V4DSparkModel& m, const float* x, float* out) {
    const int64_t D = m.config->hidden_size;
    dspark_stream_mean(x, m.config->hc_mult, D, out);
    if (m.numerics == Numerics::kOfficial) cpu::round_bf16_inplace(out, D);
}

V4DSparkTaps::V4DSparkTaps(const V4DSparkModel* model, std::span<V4SequenceState* const> states,
                           std::span<const Segment> segments)
    : m_(model) {
    if (!m_) return;
    DI_ICHECK(states.size() == segments.size());
    const int64_t width = m_->num_taps() * m_->config->hidden_size;
    for (size_t i = 0; i < states.size(); ++i) {
        if (!states[i]->dspark.attached) continue;
        // Only the last ring-many rows can still be read by a draft.
        const Segment& seg = segments[i];
        const int64_t n = std::min(seg.num_rows, states[i]->dspark.rows), skip = seg.num_rows - n;
        rows_.push_back({states[i], seg.row_begin + skip, seg.first_position + skip, n,
                         std::vector<float>(static_cast<size_t>(n * width))});
    }
}

void V4DSparkTaps::after_layer(int64_t layer, const float* streams) {
    if (rows_.empty()) return;
    const int64_t j = m_->tap_index(layer);
    if (j < 0) return;
    const int64_t D = m_->config->hidden_size, hc = m_->config->hc_mult, T = m_->num_taps();
    for (Rows& r : rows_)
        for (int64_t t = 0; t < r.num_rows; ++t)
            v4_tap_mean(*m_, streams + (r.row_begin + t) * hc * D, r.taps.data() + (t * T + j) * D);
}

void V4DSparkTaps::write_context() const {
    for (const Rows& r : rows_) v4_write_context(*m_, *r.state, r.first_position, r.num_rows, r.taps.data());
}

void v4_write_context(const V4DSparkModel& m, V4SequenceState& state, int64_t first_position, int64_t num_rows,
                      const float* taps) {
    if (num_rows == 0) return;
    const BlockContext ctx = m.context();
    const DSparkV4Weights& d = m.dspark();
    const int64_t D = m.config->hidden_size, hd = m.config->head_dim;
    std::vector<int64_t> position(static_cast<size_t>(num_rows));
    for (int64_t t = 0; t < num_rows; ++t) position[size_t(t)] = first_position + t;
    // main_x = main_norm(main_proj(taps)), shared by the stages.
    std::vector<float> main(static_cast<size_t>(num_rows * D)), kv(static_cast<size_t>(num_rows * hd));
    project(ctx, d.main_proj, taps, num_rows, main.data());
    norm_rows(ctx, main.data(), d.main_norm, num_rows, D);
    for (size_t s = 0; s < d.stages.size(); ++s) {
        attention_kv_rows(ctx, d.stages[s].attn, *m.rope_main, main.data(), num_rows, position.data(), kv.data());
        write_dspark_ring_rows(state.dspark, int64_t(s), first_position, num_rows, kv.data(), hd);
    }
}

DSparkBlockOutput v4_dspark_block_forward(const V4DSparkModel& m, std::span<V4SequenceState* const> states,
                                          std::span<const int32_t> anchors) {
    const ModelConfig& c = *m.config;
    const DSparkV4Weights& d = m.dspark();
    const BlockContext ctx = m.context(), stage_ctx = m.stage_context();
    const int64_t G = m.block_size(), S = int64_t(states.size()) * G, D = c.hidden_size, hc = c.hc_mult;
    const int64_t V = c.vocab_size;
    DI_ICHECK(states.size() == anchors.size());
    std::vector<int64_t> anchor_pos;
    for (V4SequenceState* st : states) anchor_pos.push_back(st->length);

    // Block embedding: [anchor, noise, ..., noise] into every stream.
    std::vector<int32_t> ids(static_cast<size_t>(S));
    std::vector<float> X(static_cast<size_t>(S * hc * D)), row(static_cast<size_t>(D));
    for (int64_t t = 0; t < S; ++t) {
        const int32_t id = t % G == 0 ? anchors[size_t(t / G)] : int32_t(c.dspark_noise_token_id);
        ids[size_t(t)] = id;
        cpu::dequantize_rows(m.weights->embed, id, id + 1, row.data());
        if (ctx.official()) cpu::round_bf16_inplace(row.data(), D);
        for (int64_t j = 0; j < hc; ++j) std::copy(row.begin(), row.end(), X.begin() + (t * hc + j) * D);
    }
    for (size_t s = 0; s < d.stages.size(); ++s) {
        const LayerWeights& lw = d.stages[s];
        run_v4_block(ctx, stage_ctx, lw, X, ids, [&](const float* a, float* out) {
            dspark_attention(m, int64_t(s), lw.attn, a, states, anchor_pos, out);
        });
    }

    // Collapse with the last stage's HC head, norm, the target's head (fp32 logits).
    DSparkBlockOutput out;
    out.y.resize(static_cast<size_t>(S * D));
    cpu::hc_head({.x = X.data(), .fn = d.hc_head.fn.ptr(), .base = d.hc_head.base.ptr(),
                  .scale = d.hc_head.scale.ptr(), .num_tokens = S, .hc = hc, .hidden = D,
                  .norm_eps = static_cast<float>(c.rms_norm_eps), .hc_eps = static_cast<float>(c.hc_eps),
                  .y = out.y.data(), .round_bf16 = ctx.official()});
    std::vector<float> yn(out.y);
    norm_rows(ctx, yn.data(), d.norm, S, D);
    out.U.resize(static_cast<size_t>(S * V));
    cpu::linear({.x = TensorView(yn.data(), DType::kF32, {S, D}), .weight = &m.weights->head,
                 .y = TensorView(out.U.data(), DType::kF32, {S, V})});
    return out;
}

void V4DSparkDrafter::attach(Sequence& sequence) const {
    V4SequenceState& st = v4_state(sequence);
    DI_CHECK(st.length == 0, "V4DSparkDrafter::attach: attach a sequence before its first forward");
    DI_CHECK(!st.layers.empty(), "V4DSparkDrafter::attach: the sequence has no state");
    const ModelConfig& c = *m_.config;
    attach_dspark_rings(st.dspark, int64_t(m_.dspark().stages.size()), c.sliding_window, c.head_dim, st.pool);
}

uint64_t V4DSparkDrafter::state_bytes(uint64_t page_bytes) const {
    const ModelConfig& c = *m_.config;
    return dspark_ring_bytes(int64_t(m_.dspark().stages.size()), c.sliding_window, c.head_dim, page_bytes);
}

std::vector<Draft> V4DSparkDrafter::draft(std::span<const DraftRequest> requests) const {
    const ModelConfig& c = *m_.config;
    const DSparkV4Weights& d = m_.dspark();
    check_dspark_requests(requests, m_.block_size(), c.vocab_size);
    std::vector<V4SequenceState*> states;
    std::vector<int32_t> anchors;
    for (const DraftRequest& q : requests) {
        V4SequenceState& st = v4_state(*q.sequence);
        DI_CHECK(st.dspark.attached, "DSpark drafting: the sequence is not attached to the drafter");
        DI_CHECK(st.length > 0, "DSpark drafting: the sequence has not run its prompt");
        states.push_back(&st);
        anchors.push_back(q.anchor);
    }
    if (requests.empty()) return {};
    const DSparkHeads heads{.markov_embed = &d.markov_w1, .markov_head = &d.markov_w2, .confidence = d.confidence.ptr(),
                            .hidden = c.hidden_size, .rank = c.dspark_markov_rank, .vocab = c.vocab_size,
                            .block = m_.block_size()};
    return dspark_markov_draft(heads, requests, v4_dspark_block_forward(m_, states, anchors));
}

}  // namespace deepinfer
