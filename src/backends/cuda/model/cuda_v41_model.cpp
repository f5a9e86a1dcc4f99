// SPDX-License-Identifier: Apache-2.0
// CudaV41Model: loading, the projections and the MoE, mirroring src/model/v41/forward.cpp and ffn.cpp
// step by step with the same rounding points (the forward's steps: cuda_v41_forward.cpp).
#include "backends/cuda/model/rope_tables.h"
#include "backends/cuda/model/cuda_v41_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>

#include "backends/cpu/primitives.h"
#include "backends/cuda/model/cuda_v41_impl.h"
#include "backends/cuda/model/expert_exchange.h"
#include "backends/cuda/model/routed_experts.h"
#include "deepinfer/check.h"
#include "model/state.h"
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

namespace {
int64_t resolve_max_len(const V41TextConfig& c, const CudaModelOptions& o) {
    return o.max_model_len > 0 ? std::min(o.max_model_len, c.max_position_embeddings)
                               : std::min<int64_t>(c.max_position_embeddings, 65536);
}
}  // namespace

CudaV41Model::CudaV41Model(const std::string& dir, const ModelOptions& options, const CudaModelOptions& o)
    : device_(select_cuda_model_device(o)),
      ep_(o.expert_exchange),
      ep_rank_(o.expert_rank),
      config_(load_v41_model_config(dir + "/config.json")),
      max_len_(resolve_max_len(config_.text, o)),
      limits_(ForwardLimits::of(options)),
      formats_(V41CacheFormats::of(config_.text)),
      fast_(o.gemm == GemmMode::kFast),
      bf16_attention_io_(o.v41_bf16_attention_io),
      attention_split_rows_(o.v41_attention_split_rows),
      bf16_key_rows_(o.v41_bf16_key_rows),
      shared_expert_stream_(o.v41_shared_expert_stream),
      attention_side_stream_(o.v41_attention_side_stream),
      hc_side_stream_(o.v41_hc_side_stream),
      host_(std::make_unique<const v41::Weights>(dir, config_.text)),
      // The DSpark drafter runs on one GPU only (no expert parallelism), like V4's MTP.
      dspark_stages_(o.expert_exchange == nullptr && host_->dspark ? int64_t(host_->dspark->stages.size()) : 0),
      layout_(std::make_shared<const V41StateLayout>(V41StateLayout::plan(config_.text, options.device_page_tokens,
                                                                          dspark_stages_, dspark_ring_rows()))),
      draws_(limits_.max_seqs),
      // The given size, else the largest forward the limits allow (every row a logits row, every
      // sequence at max_model_len, a full group of device draws), or a draft of every sequence.
      workspace_(o.workspace_bytes ? o.workspace_bytes
                                   : std::max(workspace_need(limits_.max_rows, limits_.max_rows, limits_.max_rows, max_len_,
                                                             limits_.max_seqs),
                                              dspark_workspace_need(limits_.max_seqs))),
      graphs_(options.cuda_graphs && o.expert_exchange == nullptr),
      draft_graphs_(options.cuda_graphs && o.expert_exchange == nullptr),
      verify_graphs_(options.cuda_verify_graphs),
      bench_routing_(o.expert_load_stats, o.even_routing) {
    replay_layer_ = replay_layer(config_.text, options, dir);
    stream_.set_pdl(options.cuda_pdl);
    side_stream_.set_pdl(options.cuda_pdl);
    shared_stream_.set_pdl(options.cuda_pdl);
    hc_stream_.set_pdl(options.cuda_pdl);
    DI_CHECK(!fast_ || fast_fp8_available(), "fast GEMM mode needs FP8 tensor cores (compute capability 8.9+)");
    const V41TextConfig& c = config_.text;
    info_ = {"deepseek_v41", c.vocab_size, config_.eos_token_ids, c.max_position_embeddings};
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
    const DenseFp8 dense_fp8 = !fast_ ? DenseFp8::kAsStored : o.v41_fp8_native ? DenseFp8::kNative : DenseFp8::kBf16;
    weights_ = upload_v41_weights(host, c, /*share_engram=*/true, experts, dense_fp8,
                                  /*with_dspark=*/dspark_stages_ > 0, o.v41_fp8_twins);
    auto table = [&](const std::vector<float>& v) {
        auto buf = std::make_unique<DeviceBuffer>(v.size() * sizeof(float));
        buf->copy_from_host(v.data(), buf->nbytes());
        tables_.push_back(std::move(buf));
        return static_cast<const float*>(tables_.back()->data());
    };
    // (the drafter's blocks reach dspark_block_size - 1 positions past the last one)
    rope_main_ = table(rope_cos_sin(cpu::RopeTable(c.rope_main, c.qk_rope_head_dim),
                                    max_len_ + std::max<int64_t>(c.dspark_block_size, 0)));
    rope_comp_ = table(rope_cos_sin(cpu::RopeTable(c.rope_compress, c.qk_rope_head_dim), max_len_));
    if (dspark_stages_ > 0) {
        dspark_drafter_ = make_cuda_v41_dspark_drafter(*this);
        // The sampled drafts' distributions of the largest call (DraftGraphs::device_probs), before the state
        // pool takes what is free: drafting allocates nothing.
        draft_graphs_.device_probs(size_t(c.dspark_block_size * limits_.max_seqs * c.vocab_size) * sizeof(float));
    }
    make_state_pool(options.device_state_bytes);
    // The padding rows of graph steps write here (position 0: its rings and, at ratio 1, entry 0).
    pad_ = new_sequence();
    {
        auto& pad = static_cast<V41DeviceState&>(pad_.state());
        std::vector<float*> fresh;
        std::vector<PageCopy> none;
        pad.entries.make_writable(0, layout_->entry_pages(1), fresh, none);
        enqueue_page_writes(none, fresh, layout_->page_bytes, stream_.get());
    }
    if (weights_.registered.empty()) host_.reset();  // nothing points into the mapping
}

void CudaV41Model::make_state_pool(uint64_t bytes) {
    const V41StateLayout& L = *layout_;
    const uint64_t P = L.page_bytes;
    // Every sequence the engine may run at max_model_len (DSpark-attached when the checkpoint drafts).
    const uint64_t per_seq = L.sequence_bytes(max_len_) + uint64_t(L.dspark_pages) * P;
    const int64_t least = L.ring_pages + L.dspark_pages + L.entry_pages(1);
    const int64_t pages = state_pool_pages(bytes, per_seq, limits_.max_seqs, P, least, max_len_);
    // + the padding sequence's ring pages and entry page
    pool_ = std::make_shared<DevicePagePool>(pages + L.ring_pages + L.entry_pages(1), P);
    state_capacity_ = uint64_t(pages) * P;
}

Sequence CudaV41Model::new_sequence(std::shared_ptr<StatePool>) const {
    set_current_device(device_);
    const V41TextConfig& c = config_.text;
    auto st = std::make_unique<V41DeviceState>(layout_, pool_);
    st->device = device_;
    if (!c.engram_layer_ids.empty())
        st->engram_history.assign(static_cast<size_t>(c.engram_max_ngram_size - 1 + kRingHeadroom), 0);
    std::vector<float*> fresh;
    std::vector<PageCopy> none;
    st->rings.make_writable(0, layout_->ring_pages, fresh, none);
    // Zeroed on the model's stream after any forward in flight (which may still write pages that a
    // finished sequence returned to the pool) and before the next one.
    std::lock_guard<std::mutex> lock(mutex_);
    enqueue_page_writes(none, fresh, layout_->page_bytes, stream_.get());
    return Sequence(std::move(st));
}

void CudaV41Model::prepare_writes(std::span<V41DeviceState* const> states, std::span<const int64_t> rows) const {
    std::vector<float*> fresh;
    std::vector<PageCopy> copies;
    std::exception_ptr failed;
    for (size_t i = 0; i < states.size() && !failed; ++i) {
        try {
            states[i]->prepare_writes(rows[i], fresh, copies);
        } catch (...) {
            failed = std::current_exception();
        }
    }
    // The copies of the states already prepared run even when a later one failed: their page lists
    // name the new pages now.
    enqueue_page_writes(copies, fresh, layout_->page_bytes, stream_.get());
    if (failed) std::rethrow_exception(failed);
}

std::vector<float> CudaV41Model::forward(Sequence& seq, std::span<const int32_t> tokens, bool all_logits) const {
    SequenceChunk chunk{&seq, tokens, all_logits, {}};
    return std::move(forward_batch(std::span<const SequenceChunk>(&chunk, 1))[0]);
}

// x's bf16 form for a bf16 weight into xb. The reference's act_quant per 32 (official numerics, FP8 weights) gives
// values bf16 holds exactly, and so do the FP8 weights dequantized at load: only the f32 summation order differs.
// act_quant: one pass (to_bf16's quant_block) where K allows it, the same bits as the two (the two passes' f32
// scratch taken from the arena and left to the caller's mark).
void CudaV41Model::bf16_form(const float* x, int64_t x_ld, int64_t rows, int64_t K, bool act_quant, uint16_t* xb, Stream s) const {
    const float* xin = x;
    int64_t ld = x_ld;
    const bool fused = act_quant && K % 128 == 0;
    if (act_quant && !fused) {
        DI_ICHECK(x_ld == K);
        float* xq = workspace_.alloc_n<float>(rows * K);
        act_quant_dequant({.x = x, .out = xq, .rows = rows, .cols = K, .block = kActivationBlock}, s);
        xin = xq;
        ld = K;
    }
    to_bf16({.x = xin, .x_ld = ld, .rows = rows, .cols = K, .out = xb, .quant_block = fused ? kActivationBlock : 0}, s);
}

void CudaV41Model::make_form(InputForms& forms, bool act_quant, Stream s) const {
    uint16_t*& form = act_quant ? forms.quant : forms.plain;
    if (!fast_ || form) return;
    form = workspace_.alloc_n<uint16_t>(forms.rows * forms.cols);  // (before the mark: kept with the forms)
    const size_t mark = workspace_.mark();
    bf16_form(forms.x, forms.cols, forms.rows, forms.cols, act_quant, form, s);
    workspace_.reset(mark);  // stream-ordered: later work on s, or after an event recorded on s, may reuse it
}

bool CudaV41Model::project_fast(const DeviceLinear& w, const float* x, int64_t x_ld, int64_t rows, float* y, int64_t y_ld,
                                bool act_quant, bool round_bf16, Stream s, Scratch scratch, InputForms* forms) const {
    if (!fast_ || !fast_linear_supported(w)) return false;
    const int64_t K = w.in_features;
    const bool keep = scratch != Scratch::kRelease;
    // A bf16 form kept in `forms` (allocated before this call's scratch mark, so it outlives the call). Work on
    // another stream (kept scratch) only takes a form made before its fork, never makes one.
    const bool cached = w.kind == WeightKind::kBF16 && forms && forms->x == x && forms->rows == rows && forms->cols == K &&
                        x_ld == K && (!keep || (act_quant ? forms->quant : forms->plain) != nullptr);
    uint16_t** form = cached ? (act_quant ? &forms->quant : &forms->plain) : nullptr;
    uint16_t* made = nullptr;
    if (form && !*form) *form = made = workspace_.alloc_n<uint16_t>(rows * K);
    const size_t mark = workspace_.mark();
    FastLinearParams f{.weight = w, .y = y, .y_ld = y_ld, .rows = rows, .round_output_bf16 = round_bf16};
    if (const DeviceLinear* twin = w.kind == WeightKind::kBF16 ? weights_.fp8_twin(w) : nullptr) f.fp8_twin = *twin;
    if (form && !made) {
        f.a = *form;  // made by an earlier projection of x
    } else if (w.kind == WeightKind::kBF16) {
        uint16_t* xb = made ? made : workspace_.alloc_n<uint16_t>(rows * K);
        bf16_form(x, x_ld, rows, K, act_quant, xb, s);
        f.a = xb;
    } else if (w.kind == WeightKind::kFp8Block && w.block_cols == 32) {
        // FP8 with 32x32 blocks: e4m3 activations with a scale per 32, the reference's act_quant itself
        // (re-quantizing act_quant's output per 32 gives it back exactly), also without `act_quant`.
        uint8_t* q = workspace_.alloc_n<uint8_t>(rows * K);
        float* qs = workspace_.alloc_n<float>(rows * (K / 32));
        act_quant_fp8({.x = x, .x_ld = x_ld, .rows = rows, .cols = K, .q = q, .scale = qs, .block = 32}, s);
        f.a = q;
        f.a_scale = qs;
    } else {  // FP8 with 128x128 blocks or FP4: activations in the kernels' FP8 form per 128, after the
              // reference's act_quant per 32 where it quantizes (as routed_experts does)
        const float* xin = x;
        int64_t ld = x_ld;
        if (act_quant) {
            DI_ICHECK(x_ld == K);
            float* xq = workspace_.alloc_n<float>(rows * K);
            act_quant_dequant({.x = x, .out = xq, .rows = rows, .cols = K, .block = kActivationBlock}, s);
            xin = xq;
            ld = K;
        }
        uint8_t* q = workspace_.alloc_n<uint8_t>(rows * K);
        float* qs = workspace_.alloc_n<float>(rows * (K / 128));
        act_quant_fp8({.x = xin, .x_ld = ld, .rows = rows, .cols = K, .q = q, .scale = qs}, s);
        f.a = q;
        f.a_scale = qs;
    }
    // Split-K partials (not for kKeep's scratch kept for the whole forward: that GEMM runs unsplit, same bits).
    if (const int64_t n = scratch == Scratch::kKeep ? 0 : fast_linear_split_floats(w, rows)) f.split_scratch = workspace_.alloc_n<float>(n);
    fast_linear(f, s);
    if (!keep) workspace_.reset(mark);  // stream-ordered
    return true;
}

void CudaV41Model::project(const DeviceLinear& w, const float* x, int64_t rows, float* y, Stream s, Scratch scratch,
                           InputForms* forms) const {
    if (!s.handle) s = stream_.get();
    if (project_fast(w, x, w.in_features, rows, y, w.out_features, official() && (quantized(w) || weights_.from_fp8(w)),
                     official(), s, scratch, forms))
        return;
    const bool keep = scratch != Scratch::kRelease;
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

void CudaV41Model::project_bf16(const DeviceLinear& w, const float* x, int64_t rows, float* y, InputForms* forms, Stream s,
                                Scratch scratch) const {
    if (!s.handle) s = stream_.get();
    if (project_fast(w, x, w.in_features, rows, y, w.out_features, false, official(), s, scratch, forms)) return;
    linear({.x = x, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows,
            .round_output_bf16 = official()},
           s);
}

void CudaV41Model::project_f32(const DeviceLinear& w, const float* x, int64_t rows, float* y, InputForms* forms, Stream s,
                               Scratch scratch) const {
    if (!s.handle) s = stream_.get();
    if (official() && w.kind == WeightKind::kBF16 &&
        project_fast(w, x, w.in_features, rows, y, w.out_features, false, false, s, scratch, forms))
        return;
    linear({.x = x, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows}, s);
}

uint16_t* CudaV41Model::qat_form(const DeviceLinear& w, int64_t rows, int64_t cols, const float* norm_weight,
                                 const float* x) const {
    auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
    // (project_fast's cached quant form: fast, bf16 weights, act_quant = official numerics on FP8-origin weights)
    if (!fast_ || !official() || w.kind != WeightKind::kBF16 || !weights_.from_fp8(w) || !fast_linear_supported(w) ||
        w.in_features != cols)
        return nullptr;
    if (cols % 128 != 0 || cols > 8192 || !aligned(x) || !aligned(norm_weight)) return nullptr;
    return workspace_.alloc_n<uint16_t>(rows * cols);
}

void CudaV41Model::moe(int64_t layer, const Batch& b, const float* a, float* out, uint16_t* a_quant) const {
    const V41TextConfig& c = config_.text;
    moe_rows(weights_.layers[size_t(layer)], c.n_routed_experts, c.num_experts_per_tok, b.rows, a, out, ep_,
             b.any_image ? b.at<uint8_t>(b.image_rows) : nullptr, a_quant, replay_layer_ >= 0 && layer >= replay_layer_);
}

void CudaV41Model::moe_rows(const V41DeviceLayer& lw, int64_t E, int64_t K, int64_t S, const float* a, float* out,
                            ExpertExchange* exchange, const uint8_t* image_rows, uint16_t* a_quant, bool replay_tail) const {
    const V41TextConfig& c = config_.text;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t D = c.hidden_size;
    const float L = static_cast<float>(c.swiglu_limit);
    float* logits = workspace_.alloc_n<float>(S * E);
    float* biased = workspace_.alloc_n<float>(S * E);
    int32_t* ids = workspace_.alloc_n<int32_t>(S * K);
    float* wts = workspace_.alloc_n<float>(S * K);
    InputForms fa{.x = a, .rows = S, .cols = D, .quant = a_quant};  // a's bf16 forms for the router and the shared expert
    project_f32(lw.gate, a, S, logits, &fa);  // fp32 router
    route({.logits = logits, .bias = lw.bias, .bias_vl = lw.bias_vl, .vl_rows = image_rows, .rows = S, .experts = E, .top_k = K, .scoring = scoring_of(c.scoring_func),
           .norm_topk_prob = c.norm_topk_prob && K > 1, .routed_scaling_factor = static_cast<float>(c.routed_scaling_factor),
           .official = false,  // V4.1 normalizes with + 1e-20 in both numerics
           .temperature = static_cast<float>(c.gate_temp), .sum_in_selection_order = true, .biased = biased, .ids = ids,
           .weights = wts},
          s);
    bench_routing_.route(ids, S, K, E, exchange, static_cast<int>(ep_rank_), s, replay_tail);  // benchmarks only
    // Shared expert (no routing weight). One GPU (CudaModelOptions::v41_shared_expert_stream): on its own stream,
    // forked here (a and its forms are ready, the router is done with them) and joined before the combine; its
    // scratch stays allocated until the layer's mark is released, after the join (Scratch::kKeepSplit), so the
    // routed experts' scratch on this stream never overlaps it. Under expert parallelism: on this stream while the
    // routed experts' rows travel.
    const int64_t SI = lw.shared_w1.out_features;
    float* ys = workspace_.alloc_n<float>(S * D);
    const bool own_stream = fast_ && shared_expert_stream_ && exchange == nullptr;
    const Stream ss = own_stream ? shared_stream_.get() : s;
    const Scratch kept = own_stream ? Scratch::kKeepSplit : Scratch::kRelease;
    auto shared_expert = [&] {
        float* sg = workspace_.alloc_n<float>(S * SI);
        float* su = workspace_.alloc_n<float>(S * SI);
        project(lw.shared_w1, a, S, sg, ss, kept, &fa);
        project(lw.shared_w3, a, S, su, ss, kept, &fa);
        swiglu({.g = sg, .u = su, .rows = S, .width = SI, .limit = L, .round_bf16 = off}, ss);
        project(lw.shared_w2, sg, S, ys, ss, kept);
    };
    if (own_stream) {
        shared_fork_.record(s);
        shared_fork_.wait(ss);
        shared_expert();
        shared_done_.record(ss);
    }
    // The routing weight multiplies the activation before w2 in both numerics (spec §6).
    const float* y_slot = routed_experts({.experts = &lw.experts, .x = a, .ids = ids, .weights = wts, .rows = S,
                                          .hidden = D, .top_k = K, .experts_total = E, .swiglu_limit = L,
                                          .official = off, .act_block = kActivationBlock, .weight_before_w2 = true,
                                          .fast = fast_, .expert_load = bench_routing_.counters(), .exchange = exchange,
                                          .rank = static_cast<int>(ep_rank_), .replay_tail = replay_tail,
                                          .overlap = own_stream ? std::function<void()>() : std::function<void()>(shared_expert)},
                                         workspace_, s);
    if (own_stream) shared_done_.wait(s);  // (a capture must end joined)
    moe_combine({.expert_out = y_slot, .ids = ids, .weights = wts, .shared = ys, .out = out, .rows = S, .top_k = K,
                 .hidden = D, .scale_outputs = false, .round_bf16 = off},
                s);
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
