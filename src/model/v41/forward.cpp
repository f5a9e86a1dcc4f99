// SPDX-License-Identifier: Apache-2.0
// The V4.1 forward over a batch of chunks (exact or official numerics, model/v41/numerics.h). Per layer: Engram (at its layers), the
// attention site (mixes from the streams, collapse with the carried pre-mix, attn_norm, CSA2
// attention, expansion), the FFN site (mixes, collapse with the attention site's pre, ffn_norm, MoE,
// expansion); the FFN site's pre is carried to the next layer (spec §4). Rows of all chunks go
// through every linear together; everything that mixes rows (attention, compressor, indexer, Engram
// history) works per chunk, so a chunk's results do not depend on the batch.
#include "model/v41/forward.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "deepinfer/check.h"
#include "deepinfer/engram.h"
#include "model/v41/attention.h"
#include "model/v41/dspark.h"
#include "model/v41/ffn.h"
#include "model/v41/mhc.h"
#include "model/v41/numerics.h"
#include "model/v41/state.h"
#include "model/v41/weights.h"

namespace deepinfer {

struct V41Model::Impl {
    V41ModelConfig config;
    ModelInfo info;
    Numerics numerics = Numerics::kExact;
    bool bounded_replay = false;
    int64_t decoder_begin = -1;  // first ratio-1 layer (the decoder's KV source), -1: none
    std::unique_ptr<v41::Weights> weights;
    cpu::RopeTable rope_main, rope_compress;
    EngramTokenMap token_map;
    EngramLayout engram_layout;
    int64_t engram_pad = 0;  // compressed id of engram_pad_id
    std::unique_ptr<v41::DSparkDrafter> drafter;  // when the checkpoint has a DSpark drafter

    // One chunk of a batch.
    struct Chunk {
        v41::SequenceState* state = nullptr;
        std::span<const int32_t> ids;
        std::span<const uint8_t> image;  // empty or one flag per id
        bool all_logits = true;
    };
    std::vector<std::vector<float>> run(std::span<const Chunk> chunks, V41ForwardTrace* trace) const;
    void engram_rows(const Chunk& chunk, int64_t* rows, int64_t stride) const;
};

V41Sequence::V41Sequence() : state_(std::make_unique<v41::SequenceState>()) {}
V41Sequence::~V41Sequence() = default;
V41Sequence::V41Sequence(V41Sequence&&) noexcept = default;
V41Sequence& V41Sequence::operator=(V41Sequence&&) noexcept = default;
int64_t V41Sequence::num_tokens() const { return state_->length; }

V41Model::V41Model() : impl_(std::make_unique<Impl>()) {}
V41Model::~V41Model() = default;

std::unique_ptr<V41Model> V41Model::load(const std::string& dir, const std::string& tokenizer_json) {
    ModelOptions options;
    options.tokenizer_json = tokenizer_json;
    return load(dir, options);
}

std::unique_ptr<V41Model> V41Model::load(const std::string& dir, const ModelOptions& options) {
    const std::string& tokenizer_json = options.tokenizer_json;
    std::unique_ptr<V41Model> model(new V41Model());
    Impl& m = *model->impl_;
    m.config = load_v41_model_config(dir + "/config.json");
    const V41TextConfig& c = m.config.text;
    m.info = {"deepseek_v41", c.vocab_size, m.config.eos_token_ids, c.max_position_embeddings};
    m.bounded_replay = options.v41_bounded_replay;
    for (int64_t l = 0; l < c.num_hidden_layers && m.decoder_begin < 0; ++l)
        if (c.compress_ratio(l) == 1 && c.is_kv_source(l)) m.decoder_begin = l;
    DI_CHECK(!m.bounded_replay || (m.decoder_begin >= 0 && c.is_index_source(m.decoder_begin)), dir,
             ": bounded replay needs a decoder whose first layer is a ratio-1 KV and index source; this config has none");
    m.weights = std::make_unique<v41::Weights>(dir, c);
    // The checkpoint's formats pick the default: quantized weights run the reference's numerics.
    const cpu::WeightFormat f = m.weights->layers.at(0).attn.wq_a.format;
    const bool quantized = f == cpu::WeightFormat::kFp8Block || f == cpu::WeightFormat::kFp4;
    m.numerics = options.numerics_from_checkpoint ? (quantized ? Numerics::kOfficial : Numerics::kExact)
                                                  : options.numerics;
    m.rope_main = cpu::RopeTable(c.rope_main, c.qk_rope_head_dim);
    m.rope_compress = cpu::RopeTable(c.rope_compress, c.qk_rope_head_dim);
    if (!c.engram_layer_ids.empty()) {
        DI_CHECK(!tokenizer_json.empty(), dir, ": the Engram token map needs a tokenizer.json");
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
    if (m.weights->dspark)
        m.drafter = std::make_unique<v41::DSparkDrafter>(v41::make_dspark_model(c, *m.weights, m.rope_main, m.numerics));
    return model;
}

const V41ModelConfig& V41Model::config() const { return impl_->config; }

std::vector<std::span<const uint8_t>> V41Model::engram_table_bytes() const {
    std::vector<std::span<const uint8_t>> out;
    for (const v41::LayerWeights& l : impl_->weights->layers) {
        if (!l.engram) continue;
        for (const TensorView* t : {&l.engram->table.weight, &l.engram->table.scale})
            if (!t->empty()) out.emplace_back(static_cast<const uint8_t*>(t->data()), t->nbytes());
    }
    return out;
}
const ModelInfo& V41Model::info() const { return impl_->info; }
Numerics V41Model::numerics() const { return impl_->numerics; }
const Drafter* V41Model::drafter() const { return impl_->drafter.get(); }

uint64_t V41Model::estimate_state_bytes(int64_t num_tokens, uint64_t page_bytes) const {
    return v41::estimate_state_bytes(impl_->config.text, num_tokens, page_bytes);
}

Sequence V41Model::new_sequence() const { return new_sequence(nullptr); }

Sequence V41Model::new_sequence(std::shared_ptr<StatePool> pool) const {
    return Sequence(std::make_unique<v41::SequenceState>(v41::make_sequence_state(impl_->config.text, std::move(pool))));
}

std::vector<float> V41Model::forward(Sequence& sequence, std::span<const int32_t> tokens, bool all_logits) const {
    SequenceChunk chunk{&sequence, tokens, all_logits, {}};
    return std::move(forward_batch(std::span<const SequenceChunk>(&chunk, 1))[0]);
}

std::vector<std::vector<float>> V41Model::forward_batch(std::span<const SequenceChunk> chunks) const {
    std::vector<Impl::Chunk> in;
    for (const SequenceChunk& c : chunks) {
        DI_CHECK(c.sequence != nullptr, "forward_batch: chunk without a sequence");
        auto* st = dynamic_cast<v41::SequenceState*>(&c.sequence->state());
        DI_CHECK(st != nullptr, "a sequence of another model was passed to the DeepSeek-V4.1 model");
        in.push_back({st, c.tokens, c.image_span, c.all_logits});
    }
    return impl_->run(in, nullptr);
}

std::vector<float> V41Model::forward(std::span<const int32_t> ids, V41ForwardTrace* trace) const {
    V41Sequence sequence;
    return forward(ids, sequence, trace);
}

std::vector<float> V41Model::forward(std::span<const int32_t> ids, V41Sequence& sequence, V41ForwardTrace* trace,
                                     std::span<const uint8_t> image_span) const {
    const Impl::Chunk chunk{sequence.state_.get(), ids, image_span, true};
    return std::move(impl_->run(std::span<const Impl::Chunk>(&chunk, 1), trace)[0]);
}

// Engram table rows of every token of `chunk` and Engram layer: rows[(l * stride + t) * cols + col].
// Updates the sequence's history ring with the chunk's compressed ids.
void V41Model::Impl::engram_rows(const Chunk& ch, int64_t* rows, int64_t stride) const {
    const V41TextConfig& c = config.text;
    v41::SequenceState& st = *ch.state;
    const int64_t S = int64_t(ch.ids.size()), P0 = st.length, N = c.engram_max_ngram_size;
    const int64_t n_engram = engram_layout.num_layers(), cols = engram_layout.num_cols();
    const int64_t ring = int64_t(st.engram_history.size());
    // Local history: positions base .. P0 + S - 1 (the look-back reaches N - 1 positions back).
    const int64_t base = std::max<int64_t>(0, P0 - (N - 1));
    std::vector<int64_t> history;
    for (int64_t q = base; q < P0; ++q) history.push_back(st.engram_history[size_t(q % ring)]);
    for (int64_t t = 0; t < S; ++t)
        history.push_back(!ch.image.empty() && ch.image[size_t(t)] ? kEngramDead
                                                                   : token_map.compressed_ids[size_t(ch.ids[size_t(t)])]);
    std::vector<int64_t> tokens(static_cast<size_t>(N)), r(static_cast<size_t>(cols));
    for (int64_t t = 0; t < S; ++t) {
        // Positions before `base` are never reached: the look-back stops at position 0.
        engram_lookback(history, P0 + t - base, engram_pad, tokens);
        for (int64_t l = 0; l < n_engram; ++l) {
            engram_layout.rows(l, tokens, r);
            std::copy(r.begin(), r.end(), rows + (l * stride + t) * cols);
        }
    }
    for (int64_t t = std::max<int64_t>(0, S - ring); t < S; ++t)
        st.engram_history[size_t((P0 + t) % ring)] = history[size_t(P0 + t - base)];
}

std::vector<std::vector<float>> V41Model::Impl::run(std::span<const Chunk> chunks, V41ForwardTrace* trace) const {
    const V41TextConfig& c = config.text;
    const v41::Weights& w = *weights;
    const int64_t D = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, W = c.sliding_window;
    const float eps = float(c.rms_norm_eps);
    DI_CHECK(!trace || chunks.size() == 1, "V41Model: a trace needs a batch of one chunk");

    // Segments (row ranges) of the batch, each chunk's state ready.
    std::vector<v41::Segment> segments;
    std::vector<int32_t> ids;
    std::vector<uint8_t> image;
    bool any_image = false;
    for (size_t i = 0; i < chunks.size(); ++i) {
        const Chunk& ch = chunks[i];
        const int64_t n = int64_t(ch.ids.size());
        DI_CHECK(n > 0, "V41Model::forward: chunk ", i, " has no tokens");
        DI_CHECK(ch.image.empty() || ch.image.size() == ch.ids.size(), "image_span has ", ch.image.size(),
                 " flags for ", ch.ids.size(), " tokens");
        for (size_t j = 0; j < i; ++j)
            DI_CHECK(chunks[j].state != ch.state, "forward: a sequence appears twice in a batch");
        if (ch.state->layers.empty()) *ch.state = v41::make_sequence_state(c, nullptr);
        const int64_t P0 = ch.state->length;
        DI_CHECK(P0 + n <= c.max_position_embeddings, "sequence of ", P0 + n, " tokens exceeds max_position_embeddings ",
                 c.max_position_embeddings);
        for (int32_t id : ch.ids) DI_CHECK(id >= 0 && id < V, "token id ", id, " out of range [0, ", V, ")");
        segments.push_back({ch.state, int64_t(ids.size()), n, P0, 0});
        ids.insert(ids.end(), ch.ids.begin(), ch.ids.end());
        for (int64_t t = 0; t < n; ++t) image.push_back(ch.image.empty() ? 0 : ch.image[size_t(t)]);
        any_image |= !ch.image.empty();
    }
    int64_t S = int64_t(ids.size());

    // Embedding, copied into every stream.
    std::vector<float> X(size_t(S * hc * D)), X2(size_t(S * hc * D));
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t t = 0; t < S; ++t) {
        cpu::dequantize_rows(w.embed, ids[size_t(t)], ids[size_t(t)] + 1, row.data());
        v41::round_activations(numerics, row.data(), D);
        for (int64_t j = 0; j < hc; ++j) std::copy(row.begin(), row.end(), X.begin() + (t * hc + j) * D);
    }

    // Engram row ids of every row and Engram layer: erows[(l * S + t) * cols + col].
    const int64_t n_engram = engram_layout.num_layers(), cols = engram_layout.num_cols();
    std::vector<int64_t> erows(static_cast<size_t>(n_engram * S * cols));
    if (n_engram > 0)
        for (size_t i = 0; i < chunks.size(); ++i) engram_rows(chunks[i], erows.data() + segments[i].row_begin * cols, S);

    // Bounded replay: which segments run the decoder on their last W rows only.
    std::vector<uint8_t> replay(segments.size(), 0);
    bool any_replay = false;
    if (bounded_replay)
        for (size_t i = 0; i < chunks.size(); ++i)
            any_replay |= (replay[i] = !chunks[i].all_logits && segments[i].num_rows > W) != 0;

    const v41::Context ctx{c, rope_main, rope_compress, numerics};
    std::vector<v41::SharedState> shared(segments.size());
    std::vector<float> pre_mix(size_t(S * hc), 0.0f), pre_a(size_t(S * hc)), pre_f(size_t(S * hc));
    for (int64_t t = 0; t < S; ++t) pre_mix[size_t(t * hc)] = 1.0f;  // one-hot: stream 0
    std::vector<float> post(size_t(S * hc)), comb(size_t(S * hc * hc));
    std::vector<float> x(size_t(S * D)), o(size_t(S * D));
    const uint8_t* img = any_image ? image.data() : nullptr;

    // DSpark taps of the segments attached to the drafter: their last ring-many rows (earlier rows of
    // a long chunk would be overwritten in the drafter's rings by later ones).
    std::vector<v41::TapRows> taps;
    std::vector<int64_t> tap_of(segments.size(), -1);
    const v41::DSparkModel* dm = drafter ? &drafter->model() : nullptr;
    if (dm) {
        for (size_t i = 0; i < segments.size(); ++i) {
            v41::SequenceState* st = segments[i].state;
            if (!st->dspark.attached) continue;
            const int64_t n = std::min(segments[i].num_rows, st->dspark.rows);
            tap_of[i] = int64_t(taps.size());
            taps.push_back({st, segments[i].first_position + segments[i].num_rows - n, n,
                            std::vector<float>(size_t(n * dm->num_taps() * D))});
        }
    }

    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        const auto layer_start = std::chrono::steady_clock::now();
        const v41::LayerWeights& lw = w.layers[size_t(l)];
        if (lw.engram) {
            const int64_t ei = c.engram_index(l);
            v41::engram_forward(c, {.weights = &*lw.engram, .rows = erows.data() + ei * S * cols, .gate_off = img,
                                    .num_tokens = S, .streams = X.data(), .numerics = numerics});
        }
        if (any_replay && l == decoder_begin) {
            // The rows before each replayed segment's last W: attn_norm(collapse(X, pre)) -> the
            // decoder KV source's compressor and index keys only; then the batch keeps the last W rows.
            std::vector<v41::Segment> head;
            std::vector<float> xh;
            for (size_t i = 0; i < segments.size(); ++i) {
                if (!replay[i]) continue;
                const v41::Segment& seg = segments[i];
                const int64_t n = seg.num_rows - W;
                head.push_back({seg.state, int64_t(xh.size()) / D, n, seg.first_position, 0});
                for (int64_t t = seg.row_begin; t < seg.row_begin + n; ++t) {
                    xh.resize(xh.size() + size_t(D));
                    float* xt = xh.data() + xh.size() - size_t(D);
                    v41::hc_collapse(X.data() + t * hc * D, pre_mix.data() + t * hc, hc, D, xt);
                    v41::round_activations(numerics, xt, D);
                    cpu::rms_norm(xt, lw.attn_norm.data(), eps, D, xt);
                    v41::round_activations(numerics, xt, D);
                }
            }
            std::vector<v41::SharedState> head_shared(head.size());
            v41::compress_forward(ctx, {.layer = l, .weights = &lw.attn, .x = xh.data(), .num_rows = int64_t(xh.size()) / D,
                                        .segments = head, .shared = head_shared, .out = nullptr});
            // Keep the tail rows of replayed segments, every row of the others.
            std::vector<int64_t> keep;
            for (size_t i = 0; i < segments.size(); ++i) {
                v41::Segment& seg = segments[i];
                const int64_t skip = replay[i] ? seg.num_rows - W : 0;
                const int64_t begin = int64_t(keep.size());
                for (int64_t t = seg.row_begin + skip; t < seg.row_begin + seg.num_rows; ++t) keep.push_back(t);
                seg.row_begin = begin;
                seg.first_position += skip;
                seg.num_rows -= skip;
                if (!replay[i]) continue;
                seg.window_begin = seg.first_position;
                // The encoder's top-k and candidate rows are for the dropped rows; the decoder's first
                // layer (a KV and index source) publishes new ones.
                shared[i].topk.clear();
                shared[i].has_topk = false;
                shared[i].candidates.clear();
                shared[i].has_candidates = false;
            }
            const int64_t S2 = int64_t(keep.size());
            auto compact = [&](std::vector<float>& v, int64_t width) {
                std::vector<float> out(size_t(S2 * width));
                for (int64_t r = 0; r < S2; ++r) std::copy_n(v.begin() + keep[size_t(r)] * width, width, out.begin() + r * width);
                v.swap(out);
            };
            compact(X, hc * D);
            compact(pre_mix, hc);
            std::vector<int64_t> erows2(static_cast<size_t>(n_engram * S2 * cols));
            for (int64_t e = 0; e < n_engram; ++e)
                for (int64_t r = 0; r < S2; ++r)
                    std::copy_n(erows.begin() + (e * S + keep[size_t(r)]) * cols, cols, erows2.begin() + (e * S2 + r) * cols);
            erows.swap(erows2);
            std::vector<uint8_t> image2(static_cast<size_t>(S2));
            for (int64_t r = 0; r < S2; ++r) image2[size_t(r)] = image[size_t(keep[size_t(r)])];
            image.swap(image2);
            img = any_image ? image.data() : nullptr;
            S = S2;
            X2.resize(size_t(S * hc * D));
            pre_a.resize(size_t(S * hc));
            pre_f.resize(size_t(S * hc));
            post.resize(size_t(S * hc));
            comb.resize(size_t(S * hc * hc));
            x.resize(size_t(S * D));
            o.resize(size_t(S * D));
        }
        // Taps: the stream entering a target layer (after its Engram, before its attention site), mean
        // over the hc copies (the reference's `h.mean(dim=2)`).
        if (const int64_t j = taps.empty() ? -1 : dm->tap_index(l); j >= 0) {
            const int64_t T = dm->num_taps();
            for (size_t i = 0; i < segments.size(); ++i) {
                if (tap_of[i] < 0) continue;
                v41::TapRows& tr = taps[size_t(tap_of[i])];
                const v41::Segment& seg = segments[i];
                for (int64_t t = 0; t < seg.num_rows; ++t) {
                    const int64_t k = seg.first_position + t - tr.first_position;
                    if (k < 0) continue;
                    v41::tap_mean(*dm, X.data() + (seg.row_begin + t) * hc * D, tr.taps.data() + (k * T + j) * D);
                }
            }
        }
        for (int site = 0; site < 2; ++site) {
            const v41::HcSiteWeights& hw = site == 0 ? lw.hc_attn : lw.hc_ffn;
            const v41::HcMixParams mp{hw.fn.data(), hw.base.data(), hw.scale.data(), hc, D, c.hc_sinkhorn_iters,
                                      eps, float(c.hc_eps)};
            std::vector<float>& site_pre = site == 0 ? pre_a : pre_f;
            const std::vector<float>& collapse_pre = site == 0 ? pre_mix : pre_a;
#pragma omp parallel for schedule(static) if (S * hc * D * (2 + hc) * hc > (1 << 18))
            for (int64_t t = 0; t < S; ++t) {
                const float* xt = X.data() + t * hc * D;
                v41::hc_mixes(mp, xt, site_pre.data() + t * hc, post.data() + t * hc, comb.data() + t * hc * hc);
                v41::hc_collapse(xt, collapse_pre.data() + t * hc, hc, D, x.data() + t * D);
                v41::round_activations(numerics, x.data() + t * D, D);
                cpu::rms_norm(x.data() + t * D, (site == 0 ? lw.attn_norm : lw.ffn_norm).data(), eps, D,
                              x.data() + t * D);
                v41::round_activations(numerics, x.data() + t * D, D);
            }
            if (site == 0) {
                v41::attention_forward(ctx, {.layer = l, .weights = &lw.attn, .x = x.data(), .num_rows = S,
                                             .segments = segments, .shared = shared, .out = o.data()});
                if (trace) {
                    const v41::LayerState& ls = segments[0].state->layers[size_t(l)];
                    trace->attn_out[l] = o;
                    if (lw.attn.has_indexer && shared[0].has_topk) trace->indexer_topk[l] = shared[0].topk;
                    if (lw.attn.has_compressor) {
                        auto rows_of = [](const PagedRows& r) {
                            std::vector<float> v;
                            for (int64_t i = 0; i < r.size(); ++i) v.insert(v.end(), r.row(i), r.row(i) + r.width());
                            return v;
                        };
                        trace->compressed_kv[l] = rows_of(ls.compressed);
                        trace->index_keys[l] = rows_of(ls.index_keys);
                    }
                }
            } else {
                v41::moe_forward(c, {.weights = &lw.ffn, .x = x.data(), .image_mask = img, .num_tokens = S,
                                     .out = o.data(), .numerics = numerics});
            }
#pragma omp parallel for schedule(static) if (S * hc * hc * D > (1 << 18))
            for (int64_t t = 0; t < S; ++t)
                v41::hc_expand(o.data() + t * D, X.data() + t * hc * D, post.data() + t * hc,
                               comb.data() + t * hc * hc, hc, D, X2.data() + t * hc * D);
            v41::round_activations(numerics, X2.data(), S * hc * D);  // the streams are bf16 (official)
            X.swap(X2);
        }
        pre_mix = pre_f;
        if (trace) {
            trace->layer_seconds[l] =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - layer_start).count();
            trace->layer_out[l] = X;
        }
    }

    // The drafter's context rows of the tapped positions (rows that bounded replay dropped have no taps
    // of the decoder's target layers; they are older than the drafter's window).
    if (!taps.empty()) {
        for (size_t i = 0; i < segments.size(); ++i) {
            if (tap_of[i] < 0) continue;
            v41::TapRows& tr = taps[size_t(tap_of[i])];
            const int64_t drop = std::max<int64_t>(0, segments[i].first_position - tr.first_position);
            const int64_t width = dm->num_taps() * D;
            tr.taps.erase(tr.taps.begin(), tr.taps.begin() + drop * width);
            tr.first_position += drop;
            tr.num_rows -= drop;
        }
        v41::write_context(*dm, taps);
    }

    // Final collapse with the last FFN site's pre, norm, head, for the rows whose logits are wanted.
    std::vector<int64_t> wanted;
    for (size_t i = 0; i < chunks.size(); ++i) {
        const v41::Segment& seg = segments[i];
        for (int64_t t = chunks[i].all_logits ? 0 : seg.num_rows - 1; t < seg.num_rows; ++t)
            wanted.push_back(seg.row_begin + t);
    }
    const int64_t R = int64_t(wanted.size());
    std::vector<float> y(size_t(R * D));
    for (int64_t r = 0; r < R; ++r) {
        const int64_t t = wanted[size_t(r)];
        v41::hc_collapse(X.data() + t * hc * D, pre_mix.data() + t * hc, hc, D, y.data() + r * D);
        v41::round_activations(numerics, y.data() + r * D, D);
        cpu::rms_norm(y.data() + r * D, w.norm.data(), eps, D, y.data() + r * D);
        v41::round_activations(numerics, y.data() + r * D, D);
    }
    std::vector<float> logits(size_t(R * V));
    cpu::linear_rows(w.head, y.data(), R, logits.data());
    std::vector<std::vector<float>> out;
    int64_t r = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
        chunks[i].state->length += int64_t(chunks[i].ids.size());
        const int64_t n = chunks[i].all_logits ? segments[i].num_rows : 1;
        out.emplace_back(logits.begin() + r * V, logits.begin() + (r + n) * V);
        r += n;
    }
    return out;
}

}  // namespace deepinfer
