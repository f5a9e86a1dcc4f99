// SPDX-License-Identifier: Apache-2.0
// CudaV41Model: loading, the batch, single-pass mHC, Engram, MoE and the head, mirroring
// src/model/v41/forward.cpp and ffn.cpp step by step with the same rounding points.
#include "backends/cuda/model/rope_tables.h"
#include "backends/cuda/model/cuda_v41_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include "backends/cpu/primitives.h"
#include "backends/cuda/model/cuda_v41_impl.h"
#include "backends/cuda/model/expert_exchange.h"
#include "backends/cuda/model/routed_experts.h"
#include "deepinfer/check.h"
#include "model/v41/weights.h"

namespace deepinfer::cuda {
namespace {

bool quantized(const DeviceLinear& w) { return w.kind == WeightKind::kFp8Block || w.kind == WeightKind::kFp4; }

constexpr int64_t kActivationBlock = 32;  // V4.1's act_quant block (model/v41/numerics.h)

ScoringFunc scoring_of(const std::string& name) {
    if (name == "sqrtsoftplus") return ScoringFunc::kSqrtSoftplus;
    if (name == "sigmoid") return ScoringFunc::kSigmoid;
    DI_THROW("scoring_func ", name, " is not supported by the V4.1 forward");
}

}  // namespace

CudaV41Model::CudaV41Model(const std::string& dir, const ModelOptions& options, const CudaModelOptions& o)
    // workspace_bytes 0 ("size from the engine's limits", done by the V4 CudaModel): 1 GiB here so far.
    : device_(select_cuda_model_device(o)),
      ep_(o.expert_exchange),
      ep_rank_(o.expert_rank),
      workspace_(o.workspace_bytes ? o.workspace_bytes : size_t(1) << 30),
      staging_(size_t(64) << 20) {
    DI_CHECK(!options.v41_bounded_replay, dir, ": bounded replay runs on the CPU only so far (--device cpu)");
    DI_CHECK(o.gemm == GemmMode::kReference, dir,
             ": the fast (tensor-core) GEMM mode is not available for DeepSeek-V4.1 yet (use --gemm reference)");
    config_ = load_v41_model_config(dir + "/config.json");
    const V41TextConfig& c = config_.text;
    info_ = {"deepseek_v41", c.vocab_size, config_.eos_token_ids, c.max_position_embeddings};
    max_len_ = o.max_model_len > 0 ? std::min(o.max_model_len, c.max_position_embeddings)
                                   : std::min<int64_t>(c.max_position_embeddings, 65536);
    host_ = std::make_unique<const v41::Weights>(dir, c);
    const v41::Weights& host = *host_;
    const cpu::WeightFormat f = host.layers.at(0).attn.wq_a.format;
    const bool q = f == cpu::WeightFormat::kFp8Block || f == cpu::WeightFormat::kFp4;
    numerics_ = options.numerics_from_checkpoint ? (q ? Numerics::kOfficial : Numerics::kExact) : options.numerics;
    if (!c.engram_layer_ids.empty()) {
        const std::string& tok = options.tokenizer_json;
        DI_CHECK(!tok.empty(), dir, ": the Engram token map needs a tokenizer.json");
        token_map_ = load_engram_token_map(tok);
        const bool published = token_map_.compressed_ids.size() == 129280 &&
                               c.engram_compressed_vocab_size == kV41EngramCompressedVocabSize;
        verify_engram_token_map(token_map_, c.engram_compressed_vocab_size,
                                published ? kV41EngramTokenMapSha256 : std::string_view(), tok);
        DI_CHECK(int64_t(token_map_.compressed_ids.size()) >= c.vocab_size, tok, ": the tokenizer has ",
                 token_map_.compressed_ids.size(), " ids, fewer than the model's vocab_size ", c.vocab_size);
        engram_layout_ = EngramLayout::build(c.engram_layer_ids, c.engram_vocab_size, c.engram_max_ngram_size,
                                             c.engram_n_heads, c.engram_compressed_vocab_size);
        engram_layout_.check_num_embeddings(c.engram_num_embeddings, dir + "/config.json");
        engram_pad_ = token_map_.compressed_ids.at(size_t(c.engram_pad_id));
    }
    ExpertRange experts;
    if (ep_) {
        const int64_t G = ep_->ranks(), E = c.n_routed_experts;
        DI_CHECK(E % G == 0, "expert parallelism over ", G, " GPUs: the model's ", E,
                 " routed experts do not divide evenly (use a GPU count that divides ", E, ")");
        experts = {ep_rank_ * (E / G), (ep_rank_ + 1) * (E / G)};
    }
    weights_ = upload_v41_weights(host, c, /*share_engram=*/true, experts);
    formats_ = V41CacheFormats::of(c);
    auto table = [&](const std::vector<float>& v) {
        auto buf = std::make_unique<DeviceBuffer>(v.size() * sizeof(float));
        buf->copy_from_host(v.data(), buf->nbytes());
        tables_.push_back(std::move(buf));
        return static_cast<const float*>(tables_.back()->data());
    };
    rope_main_ = table(rope_cos_sin(cpu::RopeTable(c.rope_main, c.qk_rope_head_dim), max_len_));
    rope_comp_ = table(rope_cos_sin(cpu::RopeTable(c.rope_compress, c.qk_rope_head_dim), max_len_));
    state_bytes_ = make_v41_device_state(c, max_len_)->bytes();
    if (weights_.registered.empty()) host_.reset();  // nothing points into the mapping
}

Sequence CudaV41Model::new_sequence(std::shared_ptr<StatePool>) const {
    set_current_device(device_);
    return Sequence(make_v41_device_state(config_.text, max_len_));
}

std::vector<float> CudaV41Model::forward(Sequence& seq, std::span<const int32_t> tokens, bool all_logits) const {
    SequenceChunk chunk{&seq, tokens, all_logits, {}};
    return std::move(forward_batch(std::span<const SequenceChunk>(&chunk, 1))[0]);
}

void CudaV41Model::project(const DeviceLinear& w, const float* x, int64_t rows, float* y, Stream s, bool keep) const {
    if (!s.handle) s = stream_.get();
    if (official() && quantized(w)) {
        const size_t mark = workspace_.mark();
        float* xq = workspace_.alloc_n<float>(rows * w.in_features);
        act_quant_dequant({.x = x, .out = xq, .rows = rows, .cols = w.in_features, .block = kActivationBlock}, s);
        linear({.x = xq, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows,
                .round_output_bf16 = true},
               s);
        if (!keep) workspace_.reset(mark);  // stream-ordered: later work on this stream may reuse it
        return;
    }
    linear({.x = x, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows,
            .round_output_bf16 = official()},
           s);
}

void CudaV41Model::project_bf16(const DeviceLinear& w, const float* x, int64_t rows, float* y) const {
    linear({.x = x, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows,
            .round_output_bf16 = official()},
           stream_.get());
}

std::vector<int64_t> CudaV41Model::engram_rows(std::span<const SequenceChunk> chunks, const Batch& b) const {
    const V41TextConfig& c = config_.text;
    const int64_t N = c.engram_max_ngram_size, n_engram = engram_layout_.num_layers(), cols = engram_layout_.num_cols();
    const int64_t S = b.rows;
    std::vector<int64_t> rows(static_cast<size_t>(n_engram * S * cols));
    std::vector<int64_t> tokens(static_cast<size_t>(N)), r(static_cast<size_t>(cols)), history;
    for (size_t i = 0; i < chunks.size(); ++i) {
        V41DeviceState& st = *b.states[i];
        const int64_t n = b.num_rows[i], P0 = b.first_position[i], row0 = b.row_begin[i];
        const int64_t ring = static_cast<int64_t>(st.engram_history.size());
        const int64_t base = std::max<int64_t>(0, P0 - (N - 1));
        history.clear();
        for (int64_t q = base; q < P0; ++q) history.push_back(st.engram_history[size_t(q % ring)]);
        for (int64_t t = 0; t < n; ++t) history.push_back(token_map_.compressed_ids[size_t(chunks[i].tokens[size_t(t)])]);
        for (int64_t t = 0; t < n; ++t) {
            engram_lookback(history, P0 + t - base, engram_pad_, tokens);
            for (int64_t l = 0; l < n_engram; ++l) {
                engram_layout_.rows(l, tokens, r);
                for (int64_t col = 0; col < cols; ++col) {
                    DI_CHECK(r[size_t(col)] >= 0 && r[size_t(col)] < engram_layout_.num_rows(l), "engram row ",
                             r[size_t(col)], " out of range");
                    rows[size_t((l * S + row0 + t) * cols + col)] = r[size_t(col)];
                }
            }
        }
        for (int64_t t = std::max<int64_t>(0, n - ring); t < n; ++t)
            st.engram_history[size_t((P0 + t) % ring)] = history[size_t(P0 + t - base)];
    }
    return rows;
}

void CudaV41Model::moe(int64_t layer, const Batch& b, const float* a, float* out) const {
    const V41TextConfig& c = config_.text;
    const V41DeviceLayer& lw = weights_.layers[size_t(layer)];
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, D = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok;
    const float L = static_cast<float>(c.swiglu_limit);
    float* logits = workspace_.alloc_n<float>(S * E);
    float* biased = workspace_.alloc_n<float>(S * E);
    int32_t* ids = workspace_.alloc_n<int32_t>(S * K);
    float* wts = workspace_.alloc_n<float>(S * K);
    linear({.x = a, .x_ld = D, .weight = lw.gate, .y = logits, .y_ld = E, .rows = S}, s);  // fp32 router
    route({.logits = logits, .bias = lw.bias, .rows = S, .experts = E, .top_k = K, .scoring = scoring_of(c.scoring_func),
           .norm_topk_prob = c.norm_topk_prob && K > 1, .routed_scaling_factor = static_cast<float>(c.routed_scaling_factor),
           .official = false,  // V4.1 normalizes with + 1e-20 in both numerics
           .temperature = static_cast<float>(c.gate_temp), .sum_in_selection_order = true, .biased = biased, .ids = ids,
           .weights = wts},
          s);
    // The routing weight multiplies the activation before w2 in both numerics (spec §6).
    const float* y_slot = routed_experts({.experts = &lw.experts, .x = a, .ids = ids, .weights = wts, .rows = S,
                                          .hidden = D, .top_k = K, .experts_total = E, .swiglu_limit = L,
                                          .official = off, .act_block = kActivationBlock, .weight_before_w2 = true,
                                          .exchange = ep_, .rank = static_cast<int>(ep_rank_)},
                                         workspace_, s);
    const int64_t SI = lw.shared_w1.out_features;
    float* sg = workspace_.alloc_n<float>(S * SI);
    float* su = workspace_.alloc_n<float>(S * SI);
    float* ys = workspace_.alloc_n<float>(S * D);
    project(lw.shared_w1, a, S, sg);
    project(lw.shared_w3, a, S, su);
    swiglu({.g = sg, .u = su, .rows = S, .width = SI, .limit = L, .round_bf16 = off}, s);
    project(lw.shared_w2, sg, S, ys);
    moe_combine({.expert_out = y_slot, .ids = ids, .weights = wts, .shared = ys, .out = out, .rows = S, .top_k = K,
                 .hidden = D, .scale_outputs = false, .round_bf16 = off},
                s);
}

std::vector<std::vector<float>> CudaV41Model::forward_batch(std::span<const SequenceChunk> chunks) const {
    std::lock_guard<std::mutex> lock(mutex_);
    set_current_device(device_);
    const V41TextConfig& c = config_.text;
    const Stream s = stream_.get(), side = side_stream_.get();
    const int64_t D = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, L = c.num_hidden_layers;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const bool off = official();
    Batch b;
    std::vector<int32_t> tokens, positions, row_segment;
    for (size_t i = 0; i < chunks.size(); ++i) {
        const SequenceChunk& ch = chunks[i];
        DI_CHECK(ch.sequence != nullptr, "forward_batch: chunk without a sequence");
        DI_CHECK(ch.image_span.empty(), "image spans are not supported on the CUDA backend yet (--device cpu)");
        const int64_t n = static_cast<int64_t>(ch.tokens.size());
        DI_CHECK(n > 0, "forward: chunk ", i, " has no tokens");
        auto* st = dynamic_cast<V41DeviceState*>(&ch.sequence->state());
        DI_CHECK(st != nullptr, "forward: the sequence was not created by this CUDA DeepSeek-V4.1 model");
        for (V41DeviceState* o : b.states) DI_CHECK(o != st, "forward: a sequence appears twice in a batch");
        const int64_t P0 = st->length;
        DI_CHECK(P0 + n <= max_len_, "sequence of ", P0 + n, " tokens exceeds the CUDA model's max_model_len ", max_len_);
        b.row_begin.push_back(static_cast<int64_t>(tokens.size()));
        for (int64_t t = 0; t < n; ++t) {
            const int32_t tok = ch.tokens[size_t(t)];
            DI_CHECK(tok >= 0 && tok < V, "token id ", tok, " at index ", t, " is outside [0, ", V, ")");
            tokens.push_back(tok);
            positions.push_back(static_cast<int32_t>(P0 + t));
            row_segment.push_back(static_cast<int32_t>(i));
        }
        b.num_rows.push_back(n);
        b.first_position.push_back(P0);
        b.max_position = std::max(b.max_position, P0 + n - 1);
        b.max_rows = std::max(b.max_rows, n);
        b.states.push_back(st);
    }
    const int64_t S = static_cast<int64_t>(tokens.size());
    b.rows = S;
    b.shared.assign(chunks.size(), Shared{});
    staging_.reset();
    const size_t mark = workspace_.mark();
    // On an exception the streams are drained and the scratch returned, so the next forward starts clean.
    struct Release {
        const CudaV41Model& m;
        size_t mark;
        bool armed = true;
        ~Release() {
            if (!armed) return;
            try {
                m.stream_.synchronize();
                m.side_stream_.synchronize();
            } catch (...) {
            }
            m.workspace_.reset(mark);
        }
    } release{*this, mark};

    // Engram first, on the side stream: gather the table rows (mapped host memory) and project them,
    // overlapped with the layers before the first Engram layer.
    const int64_t n_engram = engram_layout_.num_layers(), cols = engram_layout_.num_cols();
    std::vector<float*> engram_kv(static_cast<size_t>(n_engram), nullptr);
    if (n_engram > 0) {
        const std::vector<int64_t> erows = engram_rows(chunks, b);
        const int64_t* d_rows = upload(erows, side);
        for (int64_t l = 0; l < L; ++l) {
            const V41DeviceLayer& lw = weights_.layers[size_t(l)];
            if (!lw.has_engram) continue;
            const int64_t e = c.engram_index(l), in = cols * c.engram_head_dim;
            float* emb = workspace_.alloc_n<float>(S * in);
            engram_gather({.table = lw.engram.table, .rows = d_rows + e * S * cols, .tokens = S, .cols = cols, .out = emb},
                          side);
            engram_kv[size_t(e)] = workspace_.alloc_n<float>(S * (hc + 1) * D);
            project(lw.engram.wkv, emb, S, engram_kv[size_t(e)], side, /*keep_scratch=*/true);
        }
        engram_ready_.record(side);
    }

    b.positions = upload(positions);
    b.row_segment = upload(row_segment);
    const int32_t* d_tokens = upload(tokens);
    b.topk = workspace_.alloc_n<int32_t>(S * c.index_topk);
    b.mask_ld = b.max_position + 1;
    b.mask = workspace_.alloc_n<uint8_t>(S * b.mask_ld);

    float* x = workspace_.alloc_n<float>(S * hc * D);
    float* x2 = workspace_.alloc_n<float>(S * hc * D);
    embed({.table = weights_.embed, .tokens = d_tokens, .x = x, .rows = S, .hc = hc, .round_bf16 = off}, s);
    std::vector<float> one_hot(static_cast<size_t>(S * hc), 0.0f);
    for (int64_t t = 0; t < S; ++t) one_hot[size_t(t * hc)] = 1.0f;  // the first collapse reads stream 0
    float* pre_mix = upload(one_hot);
    float* pre_a = workspace_.alloc_n<float>(S * hc);
    float* pre_f = workspace_.alloc_n<float>(S * hc);
    float* post = workspace_.alloc_n<float>(S * hc);
    float* comb = workspace_.alloc_n<float>(S * hc * hc);
    float* a = workspace_.alloc_n<float>(S * D);
    float* o = workspace_.alloc_n<float>(S * D);
    bool waited = false;
    for (int64_t l = 0; l < L; ++l) {
        const V41DeviceLayer& lw = weights_.layers[size_t(l)];
        if (lw.has_engram) {
            if (!waited) engram_ready_.wait(s);
            waited = true;
            engram_fuse({.kv = engram_kv[size_t(c.engram_index(l))], .gate_weight = lw.engram.gate_weight, .streams = x,
                         .tokens = S, .hc = hc, .hidden = D, .eps = eps, .round_bf16 = off},
                        s);
        }
        for (int site = 0; site < 2; ++site) {
            const DeviceHc& hw = site == 0 ? lw.hc_attn : lw.hc_ffn;
            hc_mixes({.x = x, .fn = hw.fn, .base = hw.base, .scale = hw.scale, .rows = S, .hc = hc, .hidden = D,
                      .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = eps, .hc_eps = static_cast<float>(c.hc_eps),
                      .pre = site == 0 ? pre_a : pre_f, .post = post, .comb = comb,
                      .collapse_pre = site == 0 ? pre_mix : pre_a, .collapsed = a, .round_bf16 = off},
                     s);
            rms_norm({.x = a, .weight = site == 0 ? lw.attn_norm : lw.ffn_norm, .out = a, .rows = S, .n = D, .eps = eps,
                      .round_bf16 = off},
                     s);
            const size_t inner = workspace_.mark();
            if (site == 0) attention(l, b, a, o);
            else moe(l, b, a, o);
            workspace_.reset(inner);
            hc_post({.out = o, .x = x, .post = post, .comb = comb, .y = x2, .rows = S, .hc = hc, .hidden = D,
                     .round_bf16 = off, .mix_first = true},
                    s);
            std::swap(x, x2);
        }
        std::swap(pre_mix, pre_f);
    }

    // Final collapse with the last FFN site's pre, norm and head for the rows whose logits are wanted.
    std::vector<int32_t> picked;
    std::vector<int64_t> counts;
    for (size_t i = 0; i < chunks.size(); ++i) {
        const int64_t n = b.num_rows[i];
        for (int64_t r = chunks[i].all_logits ? 0 : n - 1; r < n; ++r) picked.push_back(static_cast<int32_t>(b.row_begin[i] + r));
        counts.push_back(chunks[i].all_logits ? n : 1);
    }
    const int64_t R = static_cast<int64_t>(picked.size());
    const int32_t* d_picked = upload(picked);
    float* xs = workspace_.alloc_n<float>(R * hc * D);
    float* ps = workspace_.alloc_n<float>(R * hc);
    gather_rows({.src = x, .index = d_picked, .dst = xs, .n = R, .width = hc * D}, s);
    gather_rows({.src = pre_mix, .index = d_picked, .dst = ps, .n = R, .width = hc}, s);
    float* y = workspace_.alloc_n<float>(R * D);
    hc_collapse({.x = xs, .pre = ps, .out = y, .rows = R, .hc = hc, .hidden = D, .round_bf16 = off}, s);
    rms_norm({.x = y, .weight = weights_.norm, .out = y, .rows = R, .n = D, .eps = eps, .round_bf16 = off}, s);
    float* logits = workspace_.alloc_n<float>(R * V);
    linear({.x = y, .x_ld = D, .weight = weights_.head, .y = logits, .y_ld = V, .rows = R}, s);
    std::vector<float> host(static_cast<size_t>(R * V));
    copy_to_host(host.data(), logits, host.size() * sizeof(float), s);
    stream_.synchronize();
    side_stream_.synchronize();
    release.armed = false;
    workspace_.reset(mark);
    for (size_t i = 0; i < chunks.size(); ++i) b.states[i]->length += b.num_rows[i];
    std::vector<std::vector<float>> out;
    int64_t r = 0;
    for (int64_t n : counts) {
        out.emplace_back(host.begin() + r * V, host.begin() + (r + n) * V);
        r += n;
    }
    return out;
}

int64_t cuda_v41_model_max_len(const Model& model) {
    const auto* m = dynamic_cast<const CudaV41Model*>(&model);
    DI_CHECK(m != nullptr, "not a CUDA DeepSeek-V4.1 model");
    return m->max_len();
}

std::unique_ptr<Model> load_cuda_v41_model(const std::string& dir, const ModelOptions& options,
                                           const CudaModelOptions& cuda_options) {
    DI_CHECK(device_count() > 0, "--device cuda: no CUDA device is available");
    return std::make_unique<CudaV41Model>(dir, options, cuda_options);
}

}  // namespace deepinfer::cuda
