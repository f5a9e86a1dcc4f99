// SPDX-License-Identifier: Apache-2.0
// The forward pass, layer by layer over a chunk of one sequence.
#include "model/forward.h"

#include <algorithm>

#include "backends/cpu/hyper_connection.h"
#include "backends/cpu/linear.h"
#include "deepinfer/check.h"
#include "model/attention_block.h"
#include "model/v4_block.h"

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
int64_t Sequence::num_tokens() const { return state_->num_tokens(); }
size_t Sequence::state_bytes() const { return state_->bytes(); }
Sequence Sequence::fork() const { return Sequence(state_->clone()); }
void Sequence::truncate(int64_t n) { state_->truncate(n); }

ForwardOutputs Model::forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t>,
                                      std::span<const DeviceDraw> draws) const {
    DI_CHECK(draws.empty(), "this model cannot sample on a device");
    return {.logits = forward_batch(chunks), .tokens = {}, .accepted = {}, .draw_logits = {}, .draw_probs = {}};
}

std::unique_ptr<Model> load_v4_model(const std::string& dir, const ModelOptions& options) {
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
      info_{"deepseek_v4", config_.vocab_size, config_.eos_token_ids, config_.max_position_embeddings},
      numerics_(numerics),
      weights_(load_model_weights(*checkpoint_, config_)),
      rope_main_(config_.rope_main, config_.qk_rope_head_dim),
      rope_compress_(config_.rope_compress, config_.qk_rope_head_dim) {
    if (!weights_.mtp.empty()) mtp_drafter_ = std::make_unique<MtpDrafter>(*this);
    if (weights_.dspark)
        dspark_drafter_ = std::make_unique<V4DSparkDrafter>(
            make_v4_dspark_model(config_, weights_, rope_main_, rope_compress_, numerics_));
}

uint64_t CpuModel::estimate_state_bytes(int64_t num_tokens, uint64_t page_bytes) const {
    return deepinfer::estimate_state_bytes(config_, num_tokens, page_bytes, static_cast<int64_t>(weights_.mtp.size()));
}

V4SequenceState& CpuModel::state_of(Sequence& sequence) {
    auto* s = dynamic_cast<V4SequenceState*>(&sequence.state());
    DI_CHECK(s != nullptr, "a sequence of another model was passed to the DeepSeek-V4 model");
    return *s;
}

Sequence CpuModel::new_sequence() const { return new_sequence(nullptr); }

Sequence CpuModel::new_sequence(std::shared_ptr<StatePool> pool) const {
    return Sequence(std::make_unique<V4SequenceState>(
        make_sequence_state(config_, static_cast<int64_t>(weights_.mtp.size()), std::move(pool))));
}

void CpuModel::run_layer(const LayerWeights& lw, std::span<const Segment> segments, std::vector<float>& x,
                         std::span<const int32_t> tokens) const {
    const BlockContext ctx = context();
    const int64_t S = static_cast<int64_t>(tokens.size());
    run_v4_block(ctx, ctx, lw, x, tokens, [&](const float* a, float* out) {
        attention_block(ctx, {.layer = &lw, .segments = segments, .a = a, .num_tokens = S, .out = out});
    });
}

std::vector<float> CpuModel::forward_streams(V4SequenceState& st, std::span<const int32_t> tokens) const {
    V4SequenceState* states[] = {&st};
    std::span<const int32_t> toks[] = {tokens};
    return forward_streams_batch(states, toks);
}

std::vector<float> CpuModel::forward_streams_batch(std::span<V4SequenceState* const> states,
                                                   std::span<const std::span<const int32_t>> tokens) const {
    DI_ICHECK(states.size() == tokens.size());
    const int64_t D = config_.hidden_size, hc = config_.hc_mult;
    std::vector<int32_t> all;
    std::vector<Segment> segments;
    for (size_t i = 0; i < states.size(); ++i) {
        const int64_t n = static_cast<int64_t>(tokens[i].size());
        DI_CHECK(n > 0, "forward: chunk ", i, " has no tokens");
        const int64_t P0 = states[i]->length;
        DI_CHECK(P0 + n <= config_.max_position_embeddings, "sequence of ", P0 + n,
                 " tokens exceeds max_position_embeddings ", config_.max_position_embeddings);
        for (size_t j = 0; j < i; ++j) DI_CHECK(states[j] != states[i], "forward: a sequence appears twice in a batch");
        segments.push_back({nullptr, static_cast<int64_t>(all.size()), n, P0});
        all.insert(all.end(), tokens[i].begin(), tokens[i].end());
    }
    const int64_t S = static_cast<int64_t>(all.size());
    std::vector<float> x(static_cast<size_t>(S * hc * D));
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t t = 0; t < S; ++t) {
        const int32_t tok = all[size_t(t)];
        DI_CHECK(tok >= 0 && tok < config_.vocab_size, "token id ", tok, " at index ", t, " is outside [0, ",
                 config_.vocab_size, ")");
        cpu::dequantize_rows(weights_.embed, tok, tok + 1, row.data());
        if (numerics_ == Numerics::kOfficial) cpu::round_bf16_inplace(row.data(), D);
        for (int64_t j = 0; j < hc; ++j) std::copy(row.begin(), row.end(), x.begin() + (t * hc + j) * D);
    }
    // DSpark taps: the streams leaving the tapped layers, for the attached sequences.
    V4DSparkTaps taps(dspark_drafter_ ? &dspark_drafter_->model() : nullptr, states, segments);
    for (size_t l = 0; l < weights_.layers.size(); ++l) {
        for (size_t i = 0; i < states.size(); ++i) segments[i].state = &states[i]->layers[l];
        run_layer(weights_.layers[l], segments, x, all);
        taps.after_layer(static_cast<int64_t>(l), x.data());
    }
    taps.write_context();
    for (size_t i = 0; i < states.size(); ++i) states[i]->length += static_cast<int64_t>(tokens[i].size());
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
    SequenceChunk chunk{&seq, tokens, all_logits, {}};
    return std::move(forward_batch(std::span<const SequenceChunk>(&chunk, 1))[0]);
}

std::vector<std::vector<float>> CpuModel::forward_batch(std::span<const SequenceChunk> chunks) const {
    std::vector<V4SequenceState*> states;
    std::vector<std::span<const int32_t>> tokens;
    for (const SequenceChunk& c : chunks) {
        DI_CHECK(c.sequence != nullptr, "forward_batch: chunk without a sequence");
        DI_CHECK(c.image_span.empty(), "DeepSeek-V4 has no vision input: a chunk carries an image span");
        states.push_back(&state_of(*c.sequence));
        tokens.push_back(c.tokens);
    }
    std::vector<int64_t> first_positions;
    for (const V4SequenceState* st : states) first_positions.push_back(st->length);
    std::vector<float> x = forward_streams_batch(states, tokens);
    run_mtp_taps(*this, states, tokens, first_positions, x.data());
    const int64_t row = config_.hc_mult * config_.hidden_size;
    // Rows whose logits are wanted, gathered so the LM head runs once for the whole batch.
    std::vector<float> picked;
    std::vector<int64_t> counts;
    int64_t offset = 0;
    for (const SequenceChunk& c : chunks) {
        const int64_t n = static_cast<int64_t>(c.tokens.size());
        const int64_t first = c.all_logits ? offset : offset + n - 1;
        picked.insert(picked.end(), x.begin() + first * row, x.begin() + (offset + n) * row);
        counts.push_back(c.all_logits ? n : 1);
        offset += n;
    }
    const int64_t rows = static_cast<int64_t>(picked.size()) / row;
    std::vector<float> logits = logits_from_streams(picked.data(), rows, weights_.hc_head, weights_.norm);
    std::vector<std::vector<float>> out;
    const int64_t V = config_.vocab_size;
    int64_t r = 0;
    for (int64_t n : counts) {
        out.emplace_back(logits.begin() + r * V, logits.begin() + (r + n) * V);
        r += n;
    }
    return out;
}

std::vector<float> CpuModel::forward_mtp(V4SequenceState& st, int64_t index, const float* streams,
                                         std::span<const int32_t> next_tokens, int64_t P0) const {
    const MtpRows seg{&st, static_cast<int64_t>(next_tokens.size()), P0};
    return forward_mtp_batch(index, std::span<const MtpRows>(&seg, 1), streams, next_tokens, nullptr, true);
}

std::vector<float> CpuModel::forward_mtp_batch(int64_t index, std::span<const MtpRows> runs, const float* streams,
                                               std::span<const int32_t> next_tokens, std::vector<float>* out_streams,
                                               bool want_logits) const {
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
    project(ctx, mw.e_proj, e.data(), S, ep.data());
    project(ctx, mw.h_proj, hs.data(), S * hc, hp.data());
    std::vector<float> x(static_cast<size_t>(S * hc * D));
    for (int64_t t = 0; t < S; ++t)
        for (int64_t j = 0; j < hc; ++j)
            for (int64_t d = 0; d < D; ++d) {
                const float v = ep[size_t(t * D + d)] + hp[size_t((t * hc + j) * D + d)];
                x[size_t((t * hc + j) * D + d)] = off ? cpu::round_bf16(v) : v;
            }
    std::vector<Segment> segments;
    int64_t row = 0;
    for (const MtpRows& r : runs) {
        segments.push_back({&r.state->mtp_layers[size_t(index)], row, r.rows, r.first_position});
        row += r.rows;
    }
    DI_CHECK(row == S, "forward_mtp_batch: segments cover ", row, " rows of ", S);
    run_layer(mw.block, segments, x, next_tokens);
    std::vector<float> logits = want_logits ? logits_from_streams(x.data(), S, mw.hc_head, mw.norm) : std::vector<float>();
    if (out_streams) *out_streams = std::move(x);
    return logits;
}

}  // namespace deepinfer
