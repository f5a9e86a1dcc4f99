// SPDX-License-Identifier: Apache-2.0
// CudaModel: composes the CUDA ops into the V4 forward, mirroring CpuModel (src/model/forward.cpp,
// attention_block.cpp, compressor.cpp, moe_block.cpp) step by step, with the same rounding points.
#include "backends/cuda/model/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <mutex>
#include <vector>

#include "backends/cpu/primitives.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_weights.h"
#include "deepinfer/check.h"
#include "deepinfer/checkpoint.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer::cuda {
namespace {

// ---- Per-sequence device state ------------------------------------------------------------------

struct LayerBuffers {
    std::unique_ptr<DeviceBuffer> window, comp_kv, comp_gate, comp_entries, idx_kv, idx_gate, idx_entries;
};

// One sequence's state of every layer in device memory (sizes fixed at creation: no allocation
// while the sequence runs). Position-keyed like the CPU state, so truncate() needs no device work:
// entries past the new length are simply no longer visible, ring rows are overwritten before use.
class DeviceSequenceState final : public SequenceState {
public:
    std::vector<LayerBuffers> layers;
    size_t nbytes = 0;
    int64_t length = 0;  // tokens consumed

    int64_t num_tokens() const override { return length; }
    void truncate(int64_t n) override {
        DI_CHECK(n >= 0 && n <= length, "truncate to ", n, " tokens of a sequence of ", length);
        length = n;
    }
    size_t unshared_bytes() const override { return nbytes; }  // copies are deep (no shared pages)
    std::unique_ptr<SequenceState> clone() const override {
        auto c = std::make_unique<DeviceSequenceState>();
        auto dup = [&](const std::unique_ptr<DeviceBuffer>& b) -> std::unique_ptr<DeviceBuffer> {
            if (!b) return nullptr;
            auto n = std::make_unique<DeviceBuffer>(b->nbytes());
            copy_on_device(n->data(), b->data(), b->nbytes(), Stream{});
            return n;
        };
        for (const LayerBuffers& l : layers)
            c->layers.push_back({dup(l.window), dup(l.comp_kv), dup(l.comp_gate), dup(l.comp_entries), dup(l.idx_kv),
                                 dup(l.idx_gate), dup(l.idx_entries)});
        c->nbytes = nbytes;
        c->length = length;
        synchronize();
        return c;
    }
    size_t bytes() const override { return nbytes; }
};

float* fptr(const std::unique_ptr<DeviceBuffer>& b) { return b ? static_cast<float*>(b->data()) : nullptr; }

bool quantized(const DeviceLinear& w) { return w.kind == WeightKind::kFp8Block || w.kind == WeightKind::kFp4; }

ScoringFunc scoring_of(const std::string& name) {
    if (name == "sqrtsoftplus") return ScoringFunc::kSqrtSoftplus;
    if (name == "sigmoid") return ScoringFunc::kSigmoid;
    if (name == "softmax") return ScoringFunc::kSoftmax;
    DI_THROW("unsupported scoring_func '", name, "'");
}

// [positions, rope_dim/2, 2] cos/sin with the CPU RopeTable's angles and std::cos/std::sin.
std::vector<float> rope_cos_sin(const cpu::RopeTable& t, int64_t positions) {
    const int64_t half = t.rope_dim() / 2;
    std::vector<float> cs(static_cast<size_t>(positions * half * 2));
    for (int64_t p = 0; p < positions; ++p)
        for (int64_t i = 0; i < half; ++i) {
            const float angle = static_cast<float>(p) * t.inv_freq()[size_t(i)];
            cs[size_t((p * half + i) * 2)] = std::cos(angle);
            cs[size_t((p * half + i) * 2 + 1)] = std::sin(angle);
        }
    return cs;
}

// ---- The model ----------------------------------------------------------------------------------

class CudaModel final : public Model {
public:
    CudaModel(std::unique_ptr<Checkpoint> ckpt, Numerics numerics, const CudaModelOptions& o)
        : checkpoint_(std::move(ckpt)),
          config_(checkpoint_->config()),
          info_{"deepseek_v4", config_.vocab_size, config_.eos_token_ids, config_.max_position_embeddings},
          numerics_(numerics),
          max_len_(o.max_model_len > 0 ? o.max_model_len : std::min<int64_t>(config_.max_position_embeddings, 65536)),
          fast_(o.gemm == GemmMode::kFast),
          workspace_(o.workspace_bytes) {
        DI_CHECK(!fast_ || fast_fp8_available(), "fast GEMM mode needs FP8 tensor cores (compute capability 8.9+)");
        DI_CHECK(o.device >= 0 && o.device < device_count(), "CUDA device ", o.device, " not available (",
                 device_count(), " devices)");
        const ModelWeights host = load_model_weights(*checkpoint_, config_);
        weights_ = upload_weights(host, config_);
        cpu::RopeTable main(config_.rope_main, config_.qk_rope_head_dim), comp(config_.rope_compress, config_.qk_rope_head_dim);
        rope_main_ = upload_floats(rope_cos_sin(main, max_len_));
        rope_comp_ = upload_floats(rope_cos_sin(comp, max_len_));
        state_bytes_ = new_sequence().state_bytes();
        // The CPU weights view the checkpoint mapping; the device has its own copies now.
    }

    const ModelInfo& info() const override { return info_; }
    const ModelConfig& config() const { return config_; }
    Numerics numerics() const override { return numerics_; }
    // Device state is allocated whole when a sequence is created (capacity max_model_len).
    uint64_t estimate_state_bytes(int64_t, uint64_t) const override { return state_bytes_; }
    Sequence new_sequence() const override { return new_sequence(nullptr); }
    Sequence new_sequence(std::shared_ptr<StatePool>) const override;
    std::vector<float> forward(Sequence& seq, std::span<const int32_t> tokens, bool all_logits) const override {
        SequenceChunk chunk{&seq, tokens, all_logits};
        return std::move(forward_batch(std::span<const SequenceChunk>(&chunk, 1))[0]);
    }
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override;

private:
    struct Batch;
    const float* upload_floats(const std::vector<float>& v) {
        auto buf = std::make_unique<DeviceBuffer>(v.size() * sizeof(float));
        buf->copy_from_host(v.data(), buf->nbytes());
        const float* p = static_cast<const float*>(buf->data());
        tables_.push_back(std::move(buf));
        return p;
    }
    bool official() const { return numerics_ == Numerics::kOfficial; }
    // y[rows, out] = x · Wᵀ with the numerics' rounding points (official: act_quant before FP8/FP4).
    void project(const DeviceLinear& w, const float* x, int64_t rows, float* y) const;
    // The fast (tensor-core) form of project() for a supported weight; returns false otherwise.
    bool project_fast(const DeviceLinear& w, const float* x, int64_t rows, float* y, bool round_bf16) const;
    void run_layer(const DeviceLayer& lw, const Batch& b, float*& x, float*& y) const;
    void attention(const DeviceLayer& lw, const Batch& b, const float* a, float* out) const;
    void moe(const DeviceLayer& lw, const Batch& b, const float* a, float* out) const;

    std::unique_ptr<Checkpoint> checkpoint_;
    ModelConfig config_;
    ModelInfo info_;
    Numerics numerics_;
    int64_t max_len_;
    bool fast_ = false;  // CudaModelOptions::gemm == kFast
    uint64_t state_bytes_ = 0;
    DeviceWeights weights_;
    std::vector<std::unique_ptr<DeviceBuffer>> tables_;
    const float* rope_main_ = nullptr;
    const float* rope_comp_ = nullptr;
    OwnedStream stream_;
    mutable DeviceArena workspace_;
    mutable std::mutex mutex_;  // one forward at a time (the workspace and stream are shared)
};

struct CudaModel::Batch {
    int64_t rows = 0, num_segments = 0, max_rows = 0;
    const int32_t* tokens = nullptr;       // [rows] device
    const int32_t* positions = nullptr;    // [rows] device
    const int32_t* row_segment = nullptr;  // [rows] device
    const DeviceSegment* segments = nullptr;  // [num_segments] of the current layer (device)
    std::vector<int64_t> first_position, num_rows;  // host copies per segment
    int64_t max_position = 0;                       // largest position in the batch
};

Sequence CudaModel::new_sequence(std::shared_ptr<StatePool>) const {
    auto dev = std::make_unique<DeviceSequenceState>();
    auto make = [&](int64_t rows, int64_t width) {
        auto b = std::make_unique<DeviceBuffer>(static_cast<size_t>(rows * width) * sizeof(float));
        fill_zero(b->data(), b->nbytes(), Stream{});
        dev->nbytes += b->nbytes();
        return b;
    };
    const ModelConfig& c = config_;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        LayerBuffers lb;
        lb.window = make(c.sliding_window + kRingHeadroom, c.head_dim);
        const AttentionType t = c.layer_types[size_t(l)];
        if (t != AttentionType::kSliding) {
            const int64_t m = c.compress_ratio(l);
            const bool csa = t == AttentionType::kCsa;
            const int64_t ring = (csa ? 2 : 1) * m + kRingHeadroom;
            lb.comp_kv = make(ring, (csa ? 2 : 1) * c.head_dim);
            lb.comp_gate = make(ring, (csa ? 2 : 1) * c.head_dim);
            lb.comp_entries = make(max_len_ / m + 1, c.head_dim);
            if (csa) {
                lb.idx_kv = make(ring, 2 * c.index_head_dim);
                lb.idx_gate = make(ring, 2 * c.index_head_dim);
                lb.idx_entries = make(max_len_ / m + 1, c.index_head_dim);
            }
        }
        dev->layers.push_back(std::move(lb));
    }
    synchronize();
    return Sequence(std::move(dev));
}

bool CudaModel::project_fast(const DeviceLinear& w, const float* x, int64_t rows, float* y, bool round_bf16) const {
    if (!fast_ || !fast_linear_supported(w)) return false;
    const Stream s = stream_.get();
    const size_t mark = workspace_.mark();
    const int64_t K = w.in_features;
    FastLinearParams f{.weight = w, .y = y, .y_ld = w.out_features, .rows = rows, .round_output_bf16 = round_bf16};
    if (w.kind == WeightKind::kBF16) {
        uint16_t* xb = workspace_.alloc_n<uint16_t>(rows * K);
        to_bf16({.x = x, .x_ld = K, .rows = rows, .cols = K, .out = xb}, s);
        f.a = xb;
    } else {
        uint8_t* q = workspace_.alloc_n<uint8_t>(rows * K);
        float* qs = workspace_.alloc_n<float>(rows * (K / 128));
        act_quant_fp8({.x = x, .x_ld = K, .rows = rows, .cols = K, .q = q, .scale = qs}, s);
        f.a = q;
        f.a_scale = qs;
    }
    fast_linear(f, s);
    workspace_.reset(mark);  // stream-ordered
    return true;
}

void CudaModel::project(const DeviceLinear& w, const float* x, int64_t rows, float* y) const {
    const Stream s = stream_.get();
    if (project_fast(w, x, rows, y, official())) return;
    if (official() && quantized(w)) {
        const size_t mark = workspace_.mark();
        float* xq = workspace_.alloc_n<float>(rows * w.in_features);
        act_quant_dequant({.x = x, .out = xq, .rows = rows, .cols = w.in_features}, s);
        linear({.x = xq, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows,
                .round_output_bf16 = true},
               s);
        workspace_.reset(mark);  // stream-ordered: later work on this stream may reuse the scratch
        return;
    }
    linear({.x = x, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows,
            .round_output_bf16 = official()},
           s);
}

void CudaModel::attention(const DeviceLayer& lw, const Batch& b, const float* a, float* out) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, H = c.num_attention_heads, Dh = c.head_dim, QL = c.q_lora_rank;
    const int64_t R = c.qk_rope_head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const bool compressed = lw.attention_type != AttentionType::kSliding;
    const float* rope = compressed ? rope_comp_ : rope_main_;

    // Q path: qr = q_norm(wq_a a); q = head_norm(wq_b qr); RoPE.
    float* qr = workspace_.alloc_n<float>(S * QL);
    float* q = workspace_.alloc_n<float>(S * H * Dh);
    project(lw.wq_a, a, S, qr);
    rms_norm({.x = qr, .weight = lw.q_norm, .out = qr, .rows = S, .n = QL, .eps = eps, .round_bf16 = off}, s);
    project(lw.wq_b, qr, S, q);
    rope_rows({.x = q, .rows = S, .heads = H, .dim = Dh, .positions = b.positions, .cos_sin = rope, .rope_dim = R,
               .head_norm = off ? HeadNorm::kBf16Arith : HeadNorm::kF32, .eps = eps, .round_rope_dims = off},
              s);
    // KV path: kv = kv_norm(wkv a); RoPE; FP8 simulation of the nope dims.
    float* kv = workspace_.alloc_n<float>(S * Dh);
    project(lw.wkv, a, S, kv);
    rms_norm({.x = kv, .weight = lw.kv_norm, .out = kv, .rows = S, .n = Dh, .eps = eps, .round_bf16 = off}, s);
    rope_rows({.x = kv, .rows = S, .heads = 1, .dim = Dh, .positions = b.positions, .cos_sin = rope, .rope_dim = R,
               .round_rope_dims = off, .qat = off ? Qat::kFp8Nope : Qat::kNone},
              s);

    // Compressors: project, add ape, pool completed windows, then keep the chunk's rows in the rings.
    auto run_compressor = [&](const DeviceCompressor& cw, bool indexer, Qat qat) {
        const int64_t width = cw.overlap ? 2 * cw.head_dim : cw.head_dim;
        const int64_t ring = (cw.overlap ? 2 : 1) * cw.ratio + kRingHeadroom;
        float* ckv = workspace_.alloc_n<float>(S * width);
        float* cg = workspace_.alloc_n<float>(S * width);
        linear({.x = a, .x_ld = c.hidden_size, .weight = cw.wkv, .y = ckv, .y_ld = width, .rows = S}, s);
        linear({.x = a, .x_ld = c.hidden_size, .weight = cw.wgate, .y = cg, .y_ld = width, .rows = S}, s);
        add_ape({.gate = cg, .ape = cw.ape, .positions = b.positions, .rows = S, .width = width, .ratio = cw.ratio}, s);
        int64_t max_windows = 0;
        for (int64_t i = 0; i < b.num_segments; ++i) {
            const int64_t P0 = b.first_position[size_t(i)], n = b.num_rows[size_t(i)];
            max_windows = std::max(max_windows, (P0 + n) / cw.ratio - (P0 + cw.ratio) / cw.ratio + 1);
        }
        compressor({.segments = b.segments, .num_segments = b.num_segments, .max_windows = max_windows,
                    .indexer = indexer, .kv = ckv, .gate = cg, .ratio = cw.ratio, .head_dim = cw.head_dim,
                    .ring_rows = ring, .overlap = cw.overlap, .norm = cw.norm, .eps = eps, .cos_sin = rope_comp_,
                    .rope_dim = R, .official = off, .qat = qat},
                   s);
        ring_write({.segments = b.segments, .num_segments = b.num_segments, .max_rows = b.max_rows,
                    .ring = indexer ? RingKind::kIdxKv : RingKind::kCompKv, .src = ckv, .width = width, .ring_rows = ring},
                   s);
        ring_write({.segments = b.segments, .num_segments = b.num_segments, .max_rows = b.max_rows,
                    .ring = indexer ? RingKind::kIdxGate : RingKind::kCompGate, .src = cg, .width = width,
                    .ring_rows = ring},
                   s);
    };
    if (lw.compressor) run_compressor(*lw.compressor, false, Qat::kFp8Nope);

    // Lightning indexer (CSA): queries, head weights, scores over visible keys, top-k.
    int32_t* selected = nullptr;
    const int64_t m = lw.compress_ratio;
    if (lw.indexer_compressor) {
        run_compressor(*lw.indexer_compressor, true, Qat::kHadamardFp4);
        const int64_t IH = c.index_n_heads, ID = c.index_head_dim;
        float* qi = workspace_.alloc_n<float>(S * IH * ID);
        float* hw = workspace_.alloc_n<float>(S * IH);
        project(lw.indexer_wq_b, qr, S, qi);
        project(lw.indexer_weights_proj, a, S, hw);
        rope_rows({.x = qi, .rows = S, .heads = IH, .dim = ID, .positions = b.positions, .cos_sin = rope_comp_,
                   .rope_dim = R, .qat = off ? Qat::kHadamardFp4 : Qat::kNone},
                  s);
        const int64_t max_visible = (b.max_position + 1) / m;
        float* scores = workspace_.alloc_n<float>(S * std::max<int64_t>(max_visible, 1));
        selected = workspace_.alloc_n<int32_t>(S * c.index_topk);
        int32_t* counts = workspace_.alloc_n<int32_t>(S);
        indexer_topk({.segments = b.segments, .row_segment = b.row_segment, .positions = b.positions, .rows = S,
                      .q = qi, .weights = hw, .heads = IH, .head_dim = ID, .ratio = m, .topk = c.index_topk,
                      .max_visible = max_visible, .scores = scores, .selected = selected, .num_selected = counts,
                      .official = off},
                     s);
    }

    // Sparse sink attention over window + compressed candidates, inverse RoPE.
    int64_t max_cand = std::min<int64_t>(c.sliding_window, b.max_position + 1);
    if (lw.attention_type == AttentionType::kHca) max_cand += (b.max_position + 1) / m;
    if (lw.attention_type == AttentionType::kCsa) max_cand += std::min<int64_t>(c.index_topk, (b.max_position + 1) / m);
    float* attn_scratch = workspace_.alloc_n<float>(S * H * max_cand);
    float* o = workspace_.alloc_n<float>(S * H * Dh);
    const AttentionKind kind = lw.attention_type == AttentionType::kCsa   ? AttentionKind::kCsa
                               : lw.attention_type == AttentionType::kHca ? AttentionKind::kHca
                                                                           : AttentionKind::kSliding;
    sparse_attention({.segments = b.segments, .row_segment = b.row_segment, .positions = b.positions, .rows = S,
                      .heads = H, .head_dim = Dh, .q = q, .kv = kv, .sink = lw.sink, .window = c.sliding_window,
                      .window_rows = c.sliding_window + kRingHeadroom, .kind = kind, .ratio = m, .selected = selected,
                      .topk = c.index_topk, .max_candidates = max_cand, .scratch = attn_scratch, .cos_sin = rope,
                      .rope_dim = R, .softmax_scale = 1.0f / std::sqrt(static_cast<float>(Dh)), .official = off,
                      .out = o},
                     s);
    ring_write({.segments = b.segments, .num_segments = b.num_segments, .max_rows = b.max_rows,
                .ring = RingKind::kWindow, .src = kv, .width = Dh, .ring_rows = c.sliding_window + kRingHeadroom},
               s);

    // Grouped output projection: wo_a per group of the flattened heads (bf16 GEMM), then wo_b.
    const int64_t G = c.o_groups, OL = c.o_lora_rank, GW = H * Dh / G;
    float* u = workspace_.alloc_n<float>(S * G * OL);
    for (int64_t g = 0; g < G; ++g)
        linear({.x = o + g * GW, .x_ld = H * Dh, .weight = lw.wo_a.rows(g * OL, (g + 1) * OL), .y = u + g * OL,
                .y_ld = G * OL, .rows = S, .round_output_bf16 = off},
               s);
    project(lw.wo_b, u, S, out);
}

void CudaModel::moe(const DeviceLayer& lw, const Batch& b, const float* a, float* out) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, D = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok;
    const float L = static_cast<float>(c.swiglu_limit);
    float* logits = workspace_.alloc_n<float>(S * E);
    float* biased = workspace_.alloc_n<float>(S * E);
    int32_t* ids = workspace_.alloc_n<int32_t>(S * K);
    float* wts = workspace_.alloc_n<float>(S * K);
    linear({.x = a, .x_ld = D, .weight = lw.gate, .y = logits, .y_ld = E, .rows = S}, s);
    route({.logits = logits, .bias = lw.gate_bias, .tid2eid = lw.mlp_type == MlpType::kHashMoe ? lw.tid2eid : nullptr,
           .tokens = b.tokens, .rows = S, .experts = E, .top_k = K, .scoring = scoring_of(c.scoring_func),
           .norm_topk_prob = c.norm_topk_prob, .routed_scaling_factor = static_cast<float>(c.routed_scaling_factor),
           .official = off, .biased = biased, .ids = ids, .weights = wts},
          s);
    DI_CHECK(lw.mlp_type != MlpType::kHashMoe || lw.tid2eid, "hash-routed layer without tid2eid");
    // Permutation: pairs grouped by expert (stable), then grouped GEMMs over all experts at once.
    const int64_t NP = S * K;
    int32_t* perm_src = workspace_.alloc_n<int32_t>(NP);
    int32_t* perm_slot = workspace_.alloc_n<int32_t>(NP);
    int32_t* perm_expert = workspace_.alloc_n<int32_t>(NP);
    int32_t* offsets = workspace_.alloc_n<int32_t>(E + 1);
    permute({.ids = ids, .rows = S, .top_k = K, .experts = E, .perm_src = perm_src, .perm_slot = perm_slot,
             .perm_expert = perm_expert, .expert_offsets = offsets},
            s);
    const DeviceExperts& ex = lw.experts;
    const int64_t I = ex.shape_w1.out_features;
    float* y_slot = workspace_.alloc_n<float>(NP * D);
    if (fast_ && fast_linear_supported(ex.shape_w1) && fast_linear_supported(ex.shape_w2) &&
        ex.shape_w1.kind != WeightKind::kBF16 && ex.shape_w2.kind != WeightKind::kBF16) {
        // Tensor-core grouped GEMMs, one launch per matrix over all experts: the tokens quantized once
        // (the GEMM gathers their rows), w2 writing each pair's row straight into slot order.
        uint8_t* xq = workspace_.alloc_n<uint8_t>(S * D);
        float* xs = workspace_.alloc_n<float>(S * (D / 128));
        act_quant_fp8({.x = a, .x_ld = D, .rows = S, .cols = D, .q = xq, .scale = xs}, s);
        int32_t* tiles = workspace_.alloc_n<int32_t>(E + 1);
        float* g = workspace_.alloc_n<float>(NP * I);
        float* up = workspace_.alloc_n<float>(NP * I);
        FastLinearParams f{.a = xq, .a_scale = xs, .a_row_src = perm_src, .weight = ex.shape_w1, .experts = ex.w1,
                           .expert_offsets = offsets, .num_experts = E, .tile_scratch = tiles, .y = g, .y_ld = I,
                           .rows = NP, .round_output_bf16 = off};
        fast_linear(f, s);
        f.experts = ex.w3;
        f.y = up;
        fast_linear(f, s);
        swiglu({.g = g, .u = up, .row_weight = off ? wts : nullptr, .row_weight_index = perm_slot, .rows = NP,
                .width = I, .limit = L, .round_bf16 = off},
               s);
        uint8_t* gq = workspace_.alloc_n<uint8_t>(NP * I);
        float* gs = workspace_.alloc_n<float>(NP * (I / 128));
        act_quant_fp8({.x = g, .x_ld = I, .rows = NP, .cols = I, .q = gq, .scale = gs}, s);
        fast_linear({.a = gq, .a_scale = gs, .weight = ex.shape_w2, .experts = ex.w2, .expert_offsets = offsets,
                     .num_experts = E, .tile_scratch = tiles, .y_row = perm_slot, .y = y_slot, .y_ld = D, .rows = NP,
                     .round_output_bf16 = off},
                    s);
    } else {
        const bool q_in = off && quantized(ex.shape_w1), q_mid = off && quantized(ex.shape_w2);
        const float* xin = a;
        if (q_in) {
            float* xq = workspace_.alloc_n<float>(S * D);
            act_quant_dequant({.x = a, .out = xq, .rows = S, .cols = D}, s);
            xin = xq;
        }
        float* g = workspace_.alloc_n<float>(NP * I);
        float* up = workspace_.alloc_n<float>(NP * I);
        linear({.x = xin, .x_ld = D, .row_src = perm_src, .weight = ex.shape_w1, .experts = ex.w1, .row_expert = perm_expert,
                .y = g, .y_ld = I, .rows = NP, .round_output_bf16 = off},
               s);
        linear({.x = xin, .x_ld = D, .row_src = perm_src, .weight = ex.shape_w1, .experts = ex.w3, .row_expert = perm_expert,
                .y = up, .y_ld = I, .rows = NP, .round_output_bf16 = off},
               s);
        swiglu({.g = g, .u = up, .row_weight = off ? wts : nullptr, .row_weight_index = perm_slot, .rows = NP, .width = I,
                .limit = L, .round_bf16 = off},
               s);
        if (q_mid) act_quant_dequant({.x = g, .out = g, .rows = NP, .cols = I}, s);
        float* y_perm = workspace_.alloc_n<float>(NP * D);
        linear({.x = g, .x_ld = I, .weight = ex.shape_w2, .experts = ex.w2, .row_expert = perm_expert, .y = y_perm, .y_ld = D,
                .rows = NP, .round_output_bf16 = off},
               s);
        scatter_rows({.src = y_perm, .index = perm_slot, .dst = y_slot, .n = NP, .width = D}, s);
    }
    // Shared expert (no routing weight).
    const int64_t SI = lw.shared_w1.out_features;
    float* sg = workspace_.alloc_n<float>(S * SI);
    float* su = workspace_.alloc_n<float>(S * SI);
    float* ys = workspace_.alloc_n<float>(S * D);
    project(lw.shared_w1, a, S, sg);
    project(lw.shared_w3, a, S, su);
    swiglu({.g = sg, .u = su, .rows = S, .width = SI, .limit = L, .round_bf16 = off}, s);
    project(lw.shared_w2, sg, S, ys);
    moe_combine({.expert_out = y_slot, .ids = ids, .weights = wts, .shared = ys, .out = out, .rows = S, .top_k = K,
                 .hidden = D, .scale_outputs = !off, .round_bf16 = off},
                s);
}

void CudaModel::run_layer(const DeviceLayer& lw, const Batch& b, float*& x, float*& y) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, D = c.hidden_size, hc = c.hc_mult;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const size_t mark = workspace_.mark();
    float* post = workspace_.alloc_n<float>(S * hc);
    float* comb = workspace_.alloc_n<float>(S * hc * hc);
    float* a = workspace_.alloc_n<float>(S * D);
    float* out = workspace_.alloc_n<float>(S * D);
    auto pre = [&](const DeviceHc& w, const float* norm) {
        hc_pre({.x = x, .fn = w.fn, .base = w.base, .scale = w.scale, .rows = S, .hc = hc, .hidden = D,
                .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = eps, .hc_eps = static_cast<float>(c.hc_eps),
                .post = post, .comb = comb, .collapsed = a, .round_bf16 = off},
               s);
        rms_norm({.x = a, .weight = norm, .out = a, .rows = S, .n = D, .eps = eps, .round_bf16 = off}, s);
    };
    auto post_mix = [&] {
        hc_post({.out = out, .x = x, .post = post, .comb = comb, .y = y, .rows = S, .hc = hc, .hidden = D,
                 .round_bf16 = off},
                s);
        std::swap(x, y);
    };
    pre(lw.hc_attn, lw.attn_norm);
    {
        const size_t inner = workspace_.mark();
        attention(lw, b, a, out);
        workspace_.reset(inner);
    }
    post_mix();
    pre(lw.hc_ffn, lw.ffn_norm);
    {
        const size_t inner = workspace_.mark();
        moe(lw, b, a, out);
        workspace_.reset(inner);
    }
    post_mix();
    workspace_.reset(mark);
}

std::vector<std::vector<float>> CudaModel::forward_batch(std::span<const SequenceChunk> chunks) const {
    std::lock_guard<std::mutex> lock(mutex_);
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const int64_t D = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, L = c.num_hidden_layers;
    Batch b;
    std::vector<int32_t> tokens, positions, row_segment;
    std::vector<DeviceSequenceState*> states;
    for (size_t i = 0; i < chunks.size(); ++i) {
        const SequenceChunk& ch = chunks[i];
        DI_CHECK(ch.sequence != nullptr, "forward_batch: chunk without a sequence");
        DI_CHECK(ch.image_span.empty(), "DeepSeek-V4 has no vision tower: image spans are not accepted");
        const int64_t n = static_cast<int64_t>(ch.tokens.size());
        DI_CHECK(n > 0, "forward: chunk ", i, " has no tokens");
        auto* dev = dynamic_cast<DeviceSequenceState*>(&ch.sequence->state());
        DI_CHECK(dev != nullptr, "forward: the sequence was not created by this CUDA model");
        for (DeviceSequenceState* o : states) DI_CHECK(o != dev, "forward: a sequence appears twice in a batch");
        const int64_t P0 = dev->length;
        DI_CHECK(P0 + n <= max_len_, "sequence of ", P0 + n, " tokens exceeds the CUDA model's max_model_len ", max_len_);
        for (int64_t t = 0; t < n; ++t) {
            const int32_t tok = ch.tokens[size_t(t)];
            DI_CHECK(tok >= 0 && tok < V, "token id ", tok, " at index ", t, " is outside [0, ", V, ")");
            tokens.push_back(tok);
            positions.push_back(static_cast<int32_t>(P0 + t));
            row_segment.push_back(static_cast<int32_t>(i));
        }
        b.first_position.push_back(P0);
        b.num_rows.push_back(n);
        b.max_rows = std::max(b.max_rows, n);
        b.max_position = std::max(b.max_position, P0 + n - 1);
        states.push_back(dev);
    }
    b.rows = static_cast<int64_t>(tokens.size());
    b.num_segments = static_cast<int64_t>(chunks.size());
    std::vector<DeviceSegment> segs(static_cast<size_t>(L * b.num_segments));
    for (int64_t l = 0; l < L; ++l) {
        int64_t row = 0;
        for (int64_t i = 0; i < b.num_segments; ++i) {
            const LayerBuffers& lb = states[size_t(i)]->layers[size_t(l)];
            segs[size_t(l * b.num_segments + i)] = {row, b.num_rows[size_t(i)], b.first_position[size_t(i)],
                                                    fptr(lb.window), fptr(lb.comp_kv), fptr(lb.comp_gate),
                                                    fptr(lb.comp_entries), fptr(lb.idx_kv), fptr(lb.idx_gate),
                                                    fptr(lb.idx_entries)};
            row += b.num_rows[size_t(i)];
        }
    }
    const size_t mark = workspace_.mark();
    const int64_t S = b.rows;
    int32_t* d_tokens = workspace_.alloc_n<int32_t>(S);
    int32_t* d_pos = workspace_.alloc_n<int32_t>(S);
    int32_t* d_rowseg = workspace_.alloc_n<int32_t>(S);
    auto* d_segs = static_cast<DeviceSegment*>(workspace_.alloc(segs.size() * sizeof(DeviceSegment)));
    copy_to_device(d_tokens, tokens.data(), size_t(S) * 4, s);
    copy_to_device(d_pos, positions.data(), size_t(S) * 4, s);
    copy_to_device(d_rowseg, row_segment.data(), size_t(S) * 4, s);
    copy_to_device(d_segs, segs.data(), segs.size() * sizeof(DeviceSegment), s);
    b.tokens = d_tokens;
    b.positions = d_pos;
    b.row_segment = d_rowseg;

    float* x = workspace_.alloc_n<float>(S * hc * D);
    float* y = workspace_.alloc_n<float>(S * hc * D);
    embed({.table = weights_.embed, .tokens = d_tokens, .x = x, .rows = S, .hc = hc, .round_bf16 = official()}, s);
    for (int64_t l = 0; l < L; ++l) {
        b.segments = d_segs + l * b.num_segments;
        run_layer(weights_.layers[size_t(l)], b, x, y);
    }
    // Rows whose logits are wanted, gathered so the head runs once for the whole batch.
    std::vector<int32_t> picked;
    std::vector<int64_t> counts;
    int64_t offset = 0;
    for (const SequenceChunk& ch : chunks) {
        const int64_t n = static_cast<int64_t>(ch.tokens.size());
        for (int64_t r = ch.all_logits ? 0 : n - 1; r < n; ++r) picked.push_back(static_cast<int32_t>(offset + r));
        counts.push_back(ch.all_logits ? n : 1);
        offset += n;
    }
    const int64_t R = static_cast<int64_t>(picked.size());
    int32_t* d_picked = workspace_.alloc_n<int32_t>(R);
    copy_to_device(d_picked, picked.data(), size_t(R) * 4, s);
    float* xs = workspace_.alloc_n<float>(R * hc * D);
    gather_rows({.src = x, .index = d_picked, .dst = xs, .n = R, .width = hc * D}, s);
    float* hy = workspace_.alloc_n<float>(R * D);
    const float eps = static_cast<float>(c.rms_norm_eps);
    hc_head({.x = xs, .fn = weights_.hc_head.fn, .base = weights_.hc_head.base, .scale = weights_.hc_head.scale,
             .rows = R, .hc = hc, .hidden = D, .norm_eps = eps, .hc_eps = static_cast<float>(c.hc_eps), .y = hy,
             .round_bf16 = official()},
            s);
    rms_norm({.x = hy, .weight = weights_.norm, .out = hy, .rows = R, .n = D, .eps = eps, .round_bf16 = official()}, s);
    float* logits = workspace_.alloc_n<float>(R * V);
    if (!project_fast(weights_.head, hy, R, logits, false))
        linear({.x = hy, .x_ld = D, .weight = weights_.head, .y = logits, .y_ld = V, .rows = R}, s);
    std::vector<float> host(static_cast<size_t>(R * V));
    copy_to_host(host.data(), logits, host.size() * sizeof(float), s);
    stream_.synchronize();
    workspace_.reset(mark);
    for (size_t i = 0; i < chunks.size(); ++i) states[i]->length += static_cast<int64_t>(chunks[i].tokens.size());
    std::vector<std::vector<float>> out;
    int64_t r = 0;
    for (int64_t n : counts) {
        out.emplace_back(host.begin() + r * V, host.begin() + (r + n) * V);
        r += n;
    }
    return out;
}

}  // namespace

std::unique_ptr<Model> load_cuda_model(const std::string& dir, const ModelOptions& options,
                                       const CudaModelOptions& cuda_options) {
    DI_CHECK(device_count() > 0, "--device cuda: no CUDA device is available");
    auto ckpt = std::make_unique<Checkpoint>(dir);
    Numerics n = options.numerics;
    if (options.numerics_from_checkpoint) {
        bool q = false;
        for (const CheckpointTensor& t : ckpt->tensors())
            q |= t.info->dtype == DType::kF8E4M3 || t.name.find(".scale") != std::string::npos;
        n = q ? Numerics::kOfficial : Numerics::kExact;
    }
    return std::make_unique<CudaModel>(std::move(ckpt), n, cuda_options);
}

}  // namespace deepinfer::cuda
