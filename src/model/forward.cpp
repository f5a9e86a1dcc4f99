// SPDX-License-Identifier: Apache-2.0
// The forward pass, layer by layer over a chunk of one sequence.
#include "model/forward.h"

#include <algorithm>

#include "backends/cpu/hyper_connection.h"
#include "backends/cpu/linear.h"
#include "deepinfer/check.h"
#include "model/attention_block.h"
#include "model/moe_block.h"

namespace deepinfer {

Numerics parse_numerics(std::string_view name) {
    if (name == "exact") return Numerics::kExact;
    if (name == "official") return Numerics::kOfficial;
    DI_THROW("unknown numerics '", name, "' (expected exact or official)");
}
std::string_view numerics_name(Numerics n) { return n == Numerics::kExact ? "exact" : "official"; }

Sequence::Sequence(std::unique_ptr<SequenceState> state) : state_(std::move(state)) {}
Sequence::~Sequence() = default;
Sequence::Sequence(Sequence&&) noexcept = default;
Sequence& Sequence::operator=(Sequence&&) noexcept = default;
int64_t Sequence::num_tokens() const { return state_->num_tokens; }
size_t Sequence::state_bytes() const { return state_->bytes(); }

std::unique_ptr<Model> Model::load(const std::string& dir, const ModelOptions& options) {
    auto ckpt = std::make_unique<Checkpoint>(dir);
    Numerics n = options.numerics;
    if (options.numerics_from_checkpoint) {
        bool quantized = false;
        for (const CheckpointTensor& t : ckpt->tensors())
            quantized |= t.info->dtype == DType::kF8E4M3 || t.name.find(".scale") != std::string::npos;
        n = quantized ? Numerics::kOfficial : Numerics::kExact;
    }
    return std::make_unique<CpuModel>(std::move(ckpt), n);
}

CpuModel::CpuModel(std::unique_ptr<Checkpoint> checkpoint, Numerics numerics)
    : checkpoint_(std::move(checkpoint)),
      config_(checkpoint_->config()),
      numerics_(numerics),
      weights_(load_model_weights(*checkpoint_, config_)),
      rope_main_(config_.rope_main, config_.qk_rope_head_dim),
      rope_compress_(config_.rope_compress, config_.qk_rope_head_dim) {}

Sequence CpuModel::new_sequence() const {
    return Sequence(std::make_unique<SequenceState>(
        make_sequence_state(config_, static_cast<int64_t>(weights_.mtp.size()))));
}

void CpuModel::run_layer(const LayerWeights& lw, LayerState& st, std::vector<float>& x,
                         std::span<const int32_t> tokens, int64_t P0) const {
    const BlockContext ctx = context();
    const int64_t S = static_cast<int64_t>(tokens.size()), D = config_.hidden_size, hc = config_.hc_mult;
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const bool off = ctx.official();
    std::vector<float> post(size_t(S * hc)), comb(size_t(S * hc * hc)), a(size_t(S * D)), out(size_t(S * D)),
        y(size_t(S * hc * D));
    auto pre = [&](const HcWeights& w) {
        cpu::hc_pre({.x = x.data(), .fn = w.fn.ptr(), .base = w.base.ptr(), .scale = w.scale.ptr(), .num_tokens = S,
                     .hc = hc, .hidden = D, .sinkhorn_iters = config_.hc_sinkhorn_iters, .norm_eps = eps,
                     .hc_eps = static_cast<float>(config_.hc_eps), .post = post.data(), .comb = comb.data(),
                     .collapsed = a.data(), .round_bf16 = off});
    };
    auto norm = [&](const Vec& w) {
        for (int64_t t = 0; t < S; ++t) {
            cpu::rms_norm(a.data() + t * D, w.ptr(), eps, D, a.data() + t * D);
            if (off) cpu::round_bf16_inplace(a.data() + t * D, D);
        }
    };
    auto post_mix = [&] {
        cpu::hc_post({.out = out.data(), .x = x.data(), .post = post.data(), .comb = comb.data(), .num_tokens = S,
                      .hc = hc, .hidden = D, .y = y.data(), .round_bf16 = off});
        x.swap(y);
    };
    pre(lw.hc_attn);
    norm(lw.attn_norm);
    attention_block(ctx, {.layer = &lw, .state = &st, .a = a.data(), .num_tokens = S, .first_position = P0,
                          .out = out.data()});
    post_mix();
    pre(lw.hc_ffn);
    norm(lw.ffn_norm);
    moe_block(ctx, {.weights = &lw.ffn, .hash_routing = lw.mlp_type == MlpType::kHashMoe, .x = a.data(),
                    .token_ids = tokens.data(), .num_tokens = S, .out = out.data()});
    post_mix();
}

std::vector<float> CpuModel::forward_streams(SequenceState& st, std::span<const int32_t> tokens) const {
    const int64_t S = static_cast<int64_t>(tokens.size()), D = config_.hidden_size, hc = config_.hc_mult;
    DI_CHECK(S > 0, "forward: no tokens");
    const int64_t P0 = st.num_tokens;
    DI_CHECK(P0 + S <= config_.max_position_embeddings, "sequence of ", P0 + S, " tokens exceeds max_position_embeddings ",
             config_.max_position_embeddings);
    std::vector<float> x(static_cast<size_t>(S * hc * D));
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t t = 0; t < S; ++t) {
        const int32_t tok = tokens[size_t(t)];
        DI_CHECK(tok >= 0 && tok < config_.vocab_size, "token id ", tok, " at index ", t, " is outside [0, ",
                 config_.vocab_size, ")");
        cpu::dequantize_rows(weights_.embed, tok, tok + 1, row.data());
        if (numerics_ == Numerics::kOfficial) cpu::round_bf16_inplace(row.data(), D);
        for (int64_t j = 0; j < hc; ++j) std::copy(row.begin(), row.end(), x.begin() + (t * hc + j) * D);
    }
    for (size_t l = 0; l < weights_.layers.size(); ++l) run_layer(weights_.layers[l], st.layers[l], x, tokens, P0);
    st.num_tokens += S;
    return x;
}

std::vector<float> CpuModel::logits_from_streams(const float* streams, int64_t rows, const HcWeights& hcw,
                                                 const Vec& norm) const {
    const int64_t D = config_.hidden_size, V = config_.vocab_size;
    const bool off = numerics_ == Numerics::kOfficial;
    const float eps = static_cast<float>(config_.rms_norm_eps);
    std::vector<float> y(size_t(rows * D)), logits(size_t(rows * V));
    cpu::hc_head({.x = streams, .fn = hcw.fn.ptr(), .base = hcw.base.ptr(), .scale = hcw.scale.ptr(), .num_tokens = rows,
                  .hc = config_.hc_mult, .hidden = D, .norm_eps = eps, .hc_eps = static_cast<float>(config_.hc_eps),
                  .y = y.data(), .round_bf16 = off});
    for (int64_t t = 0; t < rows; ++t) {
        cpu::rms_norm(y.data() + t * D, norm.ptr(), eps, D, y.data() + t * D);
        if (off) cpu::round_bf16_inplace(y.data() + t * D, D);
    }
    cpu::linear({.x = TensorView(y.data(), DType::kF32, {rows, D}), .weight = &weights_.head,
                 .y = TensorView(logits.data(), DType::kF32, {rows, V})});
    return logits;
}

std::vector<float> CpuModel::forward(Sequence& seq, std::span<const int32_t> tokens, bool all_logits) const {
    std::vector<float> x = forward_streams(seq.state(), tokens);
    const int64_t S = static_cast<int64_t>(tokens.size()), row = config_.hc_mult * config_.hidden_size;
    if (all_logits) return logits_from_streams(x.data(), S, weights_.hc_head, weights_.norm);
    return logits_from_streams(x.data() + (S - 1) * row, 1, weights_.hc_head, weights_.norm);
}

std::vector<float> CpuModel::forward_mtp(SequenceState& st, int64_t index, const float* streams,
                                         std::span<const int32_t> next_tokens, int64_t P0) const {
    DI_CHECK(index >= 0 && index < static_cast<int64_t>(weights_.mtp.size()), "MTP block ", index,
             " is not in the checkpoint");
    const MtpWeights& mw = weights_.mtp[size_t(index)];
    const int64_t S = static_cast<int64_t>(next_tokens.size()), D = config_.hidden_size, hc = config_.hc_mult;
    const float eps = static_cast<float>(config_.rms_norm_eps);
    const bool off = numerics_ == Numerics::kOfficial;
    const BlockContext ctx = context();
    std::vector<float> e(size_t(S * D)), hs(size_t(S * hc * D)), ep(size_t(S * D)), hp(size_t(S * hc * D));
    for (int64_t t = 0; t < S; ++t) {
        const int32_t tok = next_tokens[size_t(t)];
        DI_CHECK(tok >= 0 && tok < config_.vocab_size, "token id ", tok, " outside the vocabulary");
        cpu::dequantize_rows(weights_.embed, tok, tok + 1, e.data() + t * D);
        cpu::rms_norm(e.data() + t * D, mw.enorm.ptr(), eps, D, e.data() + t * D);
        for (int64_t j = 0; j < hc; ++j)
            cpu::rms_norm(streams + (t * hc + j) * D, mw.hnorm.ptr(), eps, D, hs.data() + (t * hc + j) * D);
    }
    if (off) {
        cpu::round_bf16_inplace(e.data(), S * D);
        cpu::round_bf16_inplace(hs.data(), S * hc * D);
    }
    auto proj = [&](const LinearWeight& w, const float* in, int64_t rows, float* out) {
        const bool q = w.format == cpu::WeightFormat::kFp8Block || w.format == cpu::WeightFormat::kFp4;
        cpu::linear({.x = TensorView(const_cast<float*>(in), DType::kF32, {rows, D}), .weight = &w,
                     .y = TensorView(out, DType::kF32, {rows, D}), .quantize_activations = off && q,
                     .round_output_bf16 = off});
    };
    proj(mw.e_proj, e.data(), S, ep.data());
    proj(mw.h_proj, hs.data(), S * hc, hp.data());
    std::vector<float> x(static_cast<size_t>(S * hc * D));
    for (int64_t t = 0; t < S; ++t)
        for (int64_t j = 0; j < hc; ++j)
            for (int64_t d = 0; d < D; ++d) {
                const float v = ep[size_t(t * D + d)] + hp[size_t((t * hc + j) * D + d)];
                x[size_t((t * hc + j) * D + d)] = off ? cpu::round_bf16(v) : v;
            }
    (void)ctx;
    run_layer(mw.block, st.mtp_layers[size_t(index)], x, next_tokens, P0);
    return logits_from_streams(x.data(), S, mw.hc_head, mw.norm);
}

}  // namespace deepinfer
