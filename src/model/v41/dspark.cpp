// SPDX-License-Identifier: Apache-2.0
// The DSpark drafter of DeepSeek-V4.1 (model/v41/dspark.h): context rows from the target's taps, the
// three-stage block forward, the Markov head and the confidence head. The arithmetic of every shared
// piece (projections, norms, RoPE, FP8 cache QAT, sink attention, mHC sites, MoE) is the target's, at
// the same rounding points (model/v41/numerics.h), in the reference's order of operations.
#include "model/v41/dspark.h"

#include <algorithm>
#include <cmath>

#include "backends/cpu/linear.h"
#include "deepinfer/check.h"
#include "model/v41/ffn.h"
#include "model/v41/mhc.h"
#include "model/v41/numerics.h"
#include "model/v41/qat.h"

namespace deepinfer::v41 {
namespace {

// Weighted RMSNorm of each row (fp32, one rounding to bf16 in official numerics).
void norm_rows(Numerics nm, float* x, const Vec& weight, float eps, int64_t rows, int64_t n) {
    for (int64_t r = 0; r < rows; ++r) cpu::rms_norm(x + r * n, weight.data(), eps, n, x + r * n);
    round_activations(nm, x, rows * n);
}

// RoPE of the main set (drafter layers are window-only: compress ratio 0) at `position`, the rotated
// slice rounded to bf16 in official numerics, as the target's attention does.
void rope_row(const DSparkModel& m, float* x, int64_t n, int64_t position, bool inverse = false) {
    const int64_t rd = m.config->qk_rope_head_dim;
    m.rope_main->apply(x, n, position, inverse);
    round_activations(m.numerics, x + n - rd, rd);
}

// K=V rows of a DSpark attention: kv_norm(wkv(x)), RoPE at each row's position, FP8 cache QAT.
void kv_rows(const DSparkModel& m, const AttentionWeights& w, const float* x, int64_t rows, const int64_t* positions,
             float* kv) {
    const int64_t hd = m.config->head_dim;
    project(m.numerics, w.wkv, x, rows, kv);
    norm_rows(m.numerics, kv, w.kv_norm, float(m.config->rms_norm_eps), rows, hd);
    for (int64_t t = 0; t < rows; ++t) {
        rope_row(m, kv + t * hd, hd, positions[t]);
        fake_quant_fp8(kv + t * hd, hd, 32);
    }
}

// DSparkAttention of one stage over the blocks of several sequences (x: [n * γ, D] attn_norm output;
// block i at positions anchor_pos[i] ..). out: [n * γ, D].
void dspark_attention(const DSparkModel& m, int64_t stage, const AttentionWeights& w, const float* x,
                      std::span<SequenceState* const> states, std::span<const int64_t> anchor_pos, float* out) {
    const V41TextConfig& c = *m.config;
    const Numerics nm = m.numerics;
    const int64_t G = m.block_size(), S = int64_t(states.size()) * G, H = c.num_attention_heads, hd = c.head_dim;
    const float eps = float(c.rms_norm_eps);
    std::vector<int64_t> position(static_cast<size_t>(S));
    for (size_t i = 0; i < states.size(); ++i)
        for (int64_t k = 0; k < G; ++k) position[i * size_t(G) + size_t(k)] = anchor_pos[i] + k;

    std::vector<float> qr(static_cast<size_t>(S * c.q_lora_rank)), q(static_cast<size_t>(S * H * hd));
    project(nm, w.wq_a, x, S, qr.data());
    norm_rows(nm, qr.data(), w.q_norm, eps, S, c.q_lora_rank);
    project(nm, w.wq_b, qr.data(), S, q.data());
    for (int64_t t = 0; t < S; ++t)
        for (int64_t h = 0; h < H; ++h) rope_row(m, q.data() + (t * H + h) * hd, hd, position[size_t(t)]);
    std::vector<float> kv(static_cast<size_t>(S * hd));
    kv_rows(m, w, x, S, position.data(), kv.data());

    // Sink attention over the stage's context window and the whole block (model/dspark_common.h).
    std::vector<const DSparkRings*> rings;
    for (SequenceState* st : states) rings.push_back(&st->dspark);
    std::vector<float> o(static_cast<size_t>(S * H * hd));
    dspark_attention_core({.q = q.data(), .block_kv = kv.data(), .rings = rings, .anchor_positions = anchor_pos,
                           .stage = stage, .block = G, .heads = H, .head_dim = hd, .window = c.sliding_window,
                           .sink = w.sink.data(), .form = DSparkSoftmaxForm::kProbsThenSum,
                           .round_bf16 = nm == Numerics::kOfficial, .o = o.data()});
    for (int64_t i = 0; i < S * H; ++i) {
        round_activations(nm, o.data() + i * hd, hd);
        rope_row(m, o.data() + i * hd, hd, position[size_t(i / H)], /*inverse=*/true);
    }

    // Grouped wo_a, then wo_b (the target's epilogue).
    const int64_t Gr = c.o_groups, gin = H * hd / Gr, R = c.o_lora_rank;
    std::vector<float> group_in(static_cast<size_t>(S * gin)), group_out(static_cast<size_t>(S * R)),
        u(static_cast<size_t>(S * Gr * R));
    for (int64_t g = 0; g < Gr; ++g) {
        for (int64_t t = 0; t < S; ++t) std::copy_n(o.data() + t * H * hd + g * gin, gin, group_in.data() + t * gin);
        const LinearWeight wg = w.wo_a.rows(g * R, (g + 1) * R);
        project_bf16(nm, wg, group_in.data(), S, group_out.data());
        for (int64_t t = 0; t < S; ++t) std::copy_n(group_out.data() + t * R, R, u.data() + t * Gr * R + g * R);
    }
    project(nm, w.wo_b, u.data(), S, out);
}

SequenceState& v41_state(Sequence& sequence) {
    auto* st = dynamic_cast<SequenceState*>(&sequence.state());
    DI_CHECK(st != nullptr, "DSpark drafting: a sequence of another model was passed to the DeepSeek-V4.1 drafter");
    return *st;
}

}  // namespace

int64_t DSparkModel::tap_index(int64_t layer) const { return dspark_tap_index(config->dspark_target_layer_ids, layer); }

DSparkModel make_dspark_model(const V41TextConfig& config, const Weights& weights, const cpu::RopeTable& rope_main,
                              Numerics numerics) {
    DI_CHECK(weights.dspark.has_value(), "make_dspark_model: the checkpoint has no DSpark drafter");
    DI_CHECK(config.dspark_block_size >= 1, "DSpark: dspark_block_size must be positive");
    DSparkModel m;
    m.config = &config;
    m.stage_config = config;
    m.stage_config.n_routed_experts = config.dspark_n_routed_experts;
    m.stage_config.num_experts_per_tok = config.dspark_num_experts_per_tok;
    m.weights = &weights;
    m.rope_main = &rope_main;
    m.numerics = numerics;
    return m;
}

void tap_mean(const DSparkModel& m, const float* x, float* out) {
    const int64_t D = m.config->hidden_size;
    dspark_stream_mean(x, m.config->hc_mult, D, out);
    round_activations(m.numerics, out, D);
}

void write_context(const DSparkModel& m, std::span<const TapRows> rows) {
    const V41TextConfig& c = *m.config;
    const DSparkWeights& d = *m.weights->dspark;
    const int64_t D = c.hidden_size, hd = c.head_dim, T = m.num_taps();
    std::vector<float> in;
    std::vector<int64_t> position;
    for (const TapRows& r : rows) {
        DI_ICHECK(int64_t(r.taps.size()) == r.num_rows * T * D);
        in.insert(in.end(), r.taps.begin(), r.taps.end());
        for (int64_t t = 0; t < r.num_rows; ++t) position.push_back(r.first_position + t);
    }
    const int64_t M = int64_t(position.size());
    if (M == 0) return;
    // main_x = main_norm(main_proj(taps)), shared by the stages.
    std::vector<float> main(static_cast<size_t>(M * D)), kv(static_cast<size_t>(M * hd));
    project(m.numerics, d.main_proj, in.data(), M, main.data());
    norm_rows(m.numerics, main.data(), d.main_norm, float(c.rms_norm_eps), M, D);
    for (size_t s = 0; s < d.stages.size(); ++s) {
        kv_rows(m, d.stages[s].attn, main.data(), M, position.data(), kv.data());
        int64_t at = 0;
        for (const TapRows& r : rows) {
            write_dspark_ring_rows(r.state->dspark, int64_t(s), r.first_position, r.num_rows, kv.data() + at * hd, hd);
            at += r.num_rows;
        }
    }
}

DSparkBlockOutput dspark_block_forward(const DSparkModel& m, std::span<SequenceState* const> states,
                                       std::span<const int32_t> anchors) {
    const V41TextConfig& c = *m.config;
    const Weights& w = *m.weights;
    const DSparkWeights& d = *w.dspark;
    const Numerics nm = m.numerics;
    const int64_t G = m.block_size(), S = int64_t(states.size()) * G, D = c.hidden_size, hc = c.hc_mult;
    const int64_t V = c.vocab_size;
    const float eps = float(c.rms_norm_eps);
    DI_ICHECK(states.size() == anchors.size());
    std::vector<int64_t> anchor_pos;
    for (SequenceState* st : states) anchor_pos.push_back(st->length);

    // Block embedding: [anchor, noise, ..., noise] into every stream.
    std::vector<float> X(static_cast<size_t>(S * hc * D)), X2(X.size()), row(static_cast<size_t>(D));
    for (int64_t t = 0; t < S; ++t) {
        const int64_t id = t % G == 0 ? anchors[size_t(t / G)] : c.dspark_noise_token_id;
        cpu::dequantize_rows(w.embed, id, id + 1, row.data());
        round_activations(nm, row.data(), D);
        for (int64_t j = 0; j < hc; ++j) std::copy(row.begin(), row.end(), X.begin() + (t * hc + j) * D);
    }
    std::vector<float> pre_mix(static_cast<size_t>(S * hc), 0.0f), pre_a(pre_mix.size()), pre_f(pre_mix.size());
    for (int64_t t = 0; t < S; ++t) pre_mix[size_t(t * hc)] = 1.0f;  // the identity pre-mix: stream 0
    std::vector<float> post(static_cast<size_t>(S * hc)), comb(static_cast<size_t>(S * hc * hc));
    std::vector<float> x(static_cast<size_t>(S * D)), o(static_cast<size_t>(S * D));

    for (size_t s = 0; s < d.stages.size(); ++s) {
        const LayerWeights& lw = d.stages[s];
        for (int site = 0; site < 2; ++site) {
            const HcSiteWeights& hw = site == 0 ? lw.hc_attn : lw.hc_ffn;
            const HcMixParams mp{hw.fn.data(), hw.base.data(), hw.scale.data(), hc, D, c.hc_sinkhorn_iters,
                                 eps, float(c.hc_eps)};
            std::vector<float>& site_pre = site == 0 ? pre_a : pre_f;
            const std::vector<float>& collapse_pre = site == 0 ? pre_mix : pre_a;
            for (int64_t t = 0; t < S; ++t) {
                const float* xt = X.data() + t * hc * D;
                hc_mixes(mp, xt, site_pre.data() + t * hc, post.data() + t * hc, comb.data() + t * hc * hc);
                hc_collapse(xt, collapse_pre.data() + t * hc, hc, D, x.data() + t * D);
                round_activations(nm, x.data() + t * D, D);
                cpu::rms_norm(x.data() + t * D, (site == 0 ? lw.attn_norm : lw.ffn_norm).data(), eps, D,
                              x.data() + t * D);
                round_activations(nm, x.data() + t * D, D);
            }
            if (site == 0)
                dspark_attention(m, int64_t(s), lw.attn, x.data(), states, anchor_pos, o.data());
            else  // drafts are text: no image mask, so bias_vl is unused
                moe_forward(m.stage_config, {.weights = &lw.ffn, .x = x.data(), .image_mask = nullptr, .num_tokens = S,
                                             .out = o.data(), .numerics = nm});
            for (int64_t t = 0; t < S; ++t)
                hc_expand(o.data() + t * D, X.data() + t * hc * D, post.data() + t * hc, comb.data() + t * hc * hc, hc,
                          D, X2.data() + t * hc * D);
            round_activations(nm, X2.data(), S * hc * D);
            X.swap(X2);
        }
        pre_mix = pre_f;
    }

    // Collapse with the last FFN site's pre (no HC head on V4.1's drafter), norm, the target's head.
    DSparkBlockOutput out;
    out.y.resize(static_cast<size_t>(S * D));
    std::vector<float> yn(static_cast<size_t>(S * D));
    for (int64_t t = 0; t < S; ++t) {
        hc_collapse(X.data() + t * hc * D, pre_mix.data() + t * hc, hc, D, out.y.data() + t * D);
        round_activations(nm, out.y.data() + t * D, D);
        cpu::rms_norm(out.y.data() + t * D, d.norm.data(), eps, D, yn.data() + t * D);
        round_activations(nm, yn.data() + t * D, D);
    }
    out.U.resize(static_cast<size_t>(S * V));
    cpu::linear_rows(w.head, yn.data(), S, out.U.data());
    return out;
}

void DSparkDrafter::attach(Sequence& sequence) const {
    SequenceState& st = v41_state(sequence);
    DI_CHECK(st.length == 0, "DSparkDrafter::attach: attach a sequence before its first forward");
    DI_CHECK(!st.layers.empty(), "DSparkDrafter::attach: the sequence has no state");
    const V41TextConfig& c = *m_.config;
    attach_dspark_rings(st.dspark, int64_t(m_.weights->dspark->stages.size()), c.sliding_window, c.head_dim, st.pool);
}

uint64_t DSparkDrafter::state_bytes(uint64_t page_bytes) const {
    const V41TextConfig& c = *m_.config;
    return dspark_ring_bytes(int64_t(m_.weights->dspark->stages.size()), c.sliding_window, c.head_dim, page_bytes);
}

std::vector<Draft> DSparkDrafter::draft(std::span<const DraftRequest> requests) const {
    const V41TextConfig& c = *m_.config;
    const DSparkWeights& d = *m_.weights->dspark;
    check_dspark_requests(requests, m_.block_size(), c.vocab_size);
    std::vector<SequenceState*> states;
    std::vector<int32_t> anchors;
    for (const DraftRequest& q : requests) {
        SequenceState& st = v41_state(*q.sequence);
        DI_CHECK(st.dspark.attached, "DSpark drafting: the sequence is not attached to the drafter");
        DI_CHECK(st.length > 0, "DSpark drafting: the sequence has not run its prompt");
        states.push_back(&st);
        anchors.push_back(q.anchor);
    }
    if (requests.empty()) return {};
    const DSparkHeads heads{.markov_embed = &d.markov_embed, .markov_head = &d.markov_head,
                            .confidence = d.confidence.data(), .hidden = c.hidden_size,
                            .rank = c.dspark_markov_rank, .vocab = c.vocab_size, .block = m_.block_size()};
    return dspark_markov_draft(heads, requests, dspark_block_forward(m_, states, anchors));
}

}  // namespace deepinfer::v41
