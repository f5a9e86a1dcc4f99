// SPDX-License-Identifier: Apache-2.0
// The V4.1 forward over a whole sequence (exact numerics). Per layer: Engram (at its layers), the
// attention site (mixes from the streams, collapse with the carried pre-mix, attn_norm, CSA2
// attention, expansion), the FFN site (mixes, collapse with the attention site's pre, ffn_norm, MoE,
// expansion); the FFN site's pre is carried to the next layer (spec §4).
#include "model/v41/forward.h"

#include <cmath>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "deepinfer/check.h"
#include "deepinfer/engram.h"
#include "model/v41/attention.h"
#include "model/v41/ffn.h"
#include "model/v41/mhc.h"
#include "model/v41/state.h"
#include "model/v41/weights.h"

namespace deepinfer {

struct V41Model::Impl {
    V41ModelConfig config;
    std::unique_ptr<v41::Weights> weights;
    cpu::RopeTable rope_main, rope_compress;
    EngramTokenMap token_map;
    EngramLayout engram_layout;
    int64_t engram_pad = 0;  // compressed id of engram_pad_id
};

V41Sequence::V41Sequence() : state_(std::make_unique<v41::SequenceState>()) {}
V41Sequence::~V41Sequence() = default;
V41Sequence::V41Sequence(V41Sequence&&) noexcept = default;
V41Sequence& V41Sequence::operator=(V41Sequence&&) noexcept = default;
int64_t V41Sequence::num_tokens() const { return state_->num_tokens; }

V41Model::V41Model() : impl_(std::make_unique<Impl>()) {}
V41Model::~V41Model() = default;

std::unique_ptr<V41Model> V41Model::load(const std::string& dir, const std::string& tokenizer_json) {
    std::unique_ptr<V41Model> model(new V41Model());
    Impl& m = *model->impl_;
    m.config = load_v41_model_config(dir + "/config.json");
    const V41TextConfig& c = m.config.text;
    m.weights = std::make_unique<v41::Weights>(dir, c);
    m.rope_main = cpu::RopeTable(c.rope_main, c.qk_rope_head_dim);
    m.rope_compress = cpu::RopeTable(c.rope_compress, c.qk_rope_head_dim);
    if (!c.engram_layer_ids.empty()) {
        m.token_map = load_engram_token_map(tokenizer_json);
        const bool published = m.token_map.compressed_ids.size() == 129280 &&
                               c.engram_compressed_vocab_size == kV41EngramCompressedVocabSize;
        verify_engram_token_map(m.token_map, c.engram_compressed_vocab_size,
                                published ? kV41EngramTokenMapSha256 : std::string_view(), tokenizer_json);
        DI_CHECK(int64_t(m.token_map.compressed_ids.size()) >= c.vocab_size, tokenizer_json, ": the tokenizer has ",
                 m.token_map.compressed_ids.size(), " ids, fewer than the model's vocab_size ", c.vocab_size);
        m.engram_layout = EngramLayout::build(c.engram_layer_ids, c.engram_vocab_size, c.engram_max_ngram_size,
                                              c.engram_n_heads, c.engram_compressed_vocab_size);
        m.engram_layout.check_num_embeddings(c.engram_num_embeddings, dir + "/config.json");
        m.engram_pad = m.token_map.compressed_ids.at(size_t(c.engram_pad_id));
    }
    return model;
}

const V41ModelConfig& V41Model::config() const { return impl_->config; }

std::vector<float> V41Model::forward(std::span<const int32_t> ids, V41ForwardTrace* trace) const {
    V41Sequence sequence;
    return forward(ids, sequence, trace);
}

std::vector<float> V41Model::forward(std::span<const int32_t> ids, V41Sequence& sequence, V41ForwardTrace* trace,
                                     std::span<const uint8_t> image_span) const {
    const Impl& m = *impl_;
    v41::SequenceState& st = *sequence.state_;
    const V41TextConfig& c = m.config.text;
    const v41::Weights& w = *m.weights;
    const int64_t S = int64_t(ids.size()), D = c.hidden_size, hc = c.hc_mult, V = c.vocab_size;
    DI_CHECK(S > 0, "V41Model::forward: empty input");
    for (int32_t id : ids) DI_CHECK(id >= 0 && id < V, "token id ", id, " out of range [0, ", V, ")");
    DI_CHECK(image_span.empty() || image_span.size() == ids.size(), "image_span has ", image_span.size(),
             " flags for ", ids.size(), " tokens");
    const uint8_t* image = image_span.empty() ? nullptr : image_span.data();
    const float eps = float(c.rms_norm_eps);
    const int64_t P0 = st.num_tokens;
    if (st.layers.empty()) st.layers.resize(static_cast<size_t>(c.num_hidden_layers));

    // Embedding, copied into every stream.
    std::vector<float> X(size_t(S * hc * D)), X2(size_t(S * hc * D));
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t t = 0; t < S; ++t) {
        cpu::dequantize_rows(w.embed, ids[size_t(t)], ids[size_t(t)] + 1, row.data());
        for (int64_t j = 0; j < hc; ++j) std::copy(row.begin(), row.end(), X.begin() + (t * hc + j) * D);
    }

    // Engram row ids of every new position and Engram layer (look-back into the sequence's history).
    const int64_t n_engram = m.engram_layout.num_layers(), cols = m.engram_layout.num_cols();
    std::vector<int64_t> engram_rows(static_cast<size_t>(n_engram * S * cols));
    if (n_engram > 0) {
        std::vector<int64_t> tokens(static_cast<size_t>(c.engram_max_ngram_size)), r(static_cast<size_t>(cols));
        for (int64_t t = 0; t < S; ++t)
            st.engram_history.push_back(image && image[t] ? kEngramDead
                                                          : m.token_map.compressed_ids[size_t(ids[size_t(t)])]);
        for (int64_t t = 0; t < S; ++t) {
            engram_lookback(st.engram_history, P0 + t, m.engram_pad, tokens);
            for (int64_t l = 0; l < n_engram; ++l) {
                m.engram_layout.rows(l, tokens, r);
                std::copy(r.begin(), r.end(), engram_rows.begin() + (l * S + t) * cols);
            }
        }
    }

    const v41::Context ctx{c, m.rope_main, m.rope_compress};
    v41::SharedState shared;
    std::vector<float> pre_mix(size_t(S * hc), 0.0f), pre_a(size_t(S * hc)), pre_f(size_t(S * hc));
    for (int64_t t = 0; t < S; ++t) pre_mix[size_t(t * hc)] = 1.0f;  // one-hot: stream 0
    std::vector<float> post(size_t(S * hc)), comb(size_t(S * hc * hc));
    std::vector<float> x(size_t(S * D)), o(size_t(S * D));

    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const v41::LayerWeights& lw = w.layers[size_t(l)];
        if (lw.engram) {
            const int64_t ei = c.engram_index(l);
            v41::engram_forward(c, {.weights = &*lw.engram, .rows = engram_rows.data() + ei * S * cols, .gate_off = image,
                               .num_tokens = S, .streams = X.data()});
        }
        for (int site = 0; site < 2; ++site) {
            const v41::HcSiteWeights& hw = site == 0 ? lw.hc_attn : lw.hc_ffn;
            const v41::HcMixParams mp{hw.fn.data(), hw.base.data(), hw.scale.data(), hc, D, c.hc_sinkhorn_iters,
                                      eps, float(c.hc_eps)};
            std::vector<float>& site_pre = site == 0 ? pre_a : pre_f;
            const std::vector<float>& collapse_pre = site == 0 ? pre_mix : pre_a;
            for (int64_t t = 0; t < S; ++t) {
                const float* xt = X.data() + t * hc * D;
                v41::hc_mixes(mp, xt, site_pre.data() + t * hc, post.data() + t * hc, comb.data() + t * hc * hc);
                v41::hc_collapse(xt, collapse_pre.data() + t * hc, hc, D, x.data() + t * D);
                cpu::rms_norm(x.data() + t * D, (site == 0 ? lw.attn_norm : lw.ffn_norm).data(), eps, D,
                              x.data() + t * D);
            }
            if (site == 0) {
                v41::attention_forward(ctx, {.layer = l, .weights = &lw.attn, .x = x.data(), .num_tokens = S,
                                             .position_begin = P0, .state = &st.layers[size_t(l)], .out = o.data()},
                                       shared);
                if (trace) {
                    trace->attn_out[l] = o;
                    if (lw.attn.has_indexer && shared.has_topk) trace->indexer_topk[l] = shared.topk;
                    if (lw.attn.has_compressor) {
                        trace->compressed_kv[l] = st.layers[size_t(l)].compressed;
                        trace->index_keys[l] = st.layers[size_t(l)].index_keys;
                    }
                }
            } else {
                v41::moe_forward(c, {.weights = &lw.ffn, .x = x.data(), .image_mask = image, .num_tokens = S,
                                     .out = o.data()});
            }
            for (int64_t t = 0; t < S; ++t)
                v41::hc_expand(o.data() + t * D, X.data() + t * hc * D, post.data() + t * hc,
                               comb.data() + t * hc * hc, hc, D, X2.data() + t * hc * D);
            X.swap(X2);
        }
        pre_mix = pre_f;
        if (trace) trace->layer_out[l] = X;
    }

    // Final collapse with the last FFN site's pre, norm, head.
    for (int64_t t = 0; t < S; ++t) {
        v41::hc_collapse(X.data() + t * hc * D, pre_mix.data() + t * hc, hc, D, x.data() + t * D);
        cpu::rms_norm(x.data() + t * D, w.norm.data(), eps, D, x.data() + t * D);
    }
    st.num_tokens += S;
    std::vector<float> logits(size_t(S * V));
    cpu::linear_rows(w.head, x.data(), S, logits.data());
    return logits;
}

}  // namespace deepinfer
