// SPDX-License-Identifier: Apache-2.0
// CudaModel: composes the CUDA ops into the V4 forward, mirroring CpuModel (src/model/forward.cpp,
// attention_block.cpp, compressor.cpp, moe_block.cpp) step by step, with the same rounding points.
#include "backends/cuda/model/rope_tables.h"
#include "backends/cuda/model/cuda_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "backends/cpu/primitives.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_weights.h"
#include "backends/cuda/model/expert_exchange.h"
#include "backends/cuda/model/routed_experts.h"
#include "deepinfer/check.h"
#include "deepinfer/checkpoint.h"
#include "deepinfer/log.h"
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
    int device = 0;      // where the buffers live

    int64_t num_tokens() const override { return length; }
    void truncate(int64_t n) override {
        DI_CHECK(n >= 0 && n <= length, "truncate to ", n, " tokens of a sequence of ", length);
        length = n;
    }
    size_t unshared_bytes() const override { return nbytes; }  // copies are deep (no shared pages)
    std::unique_ptr<SequenceState> clone() const override {
        set_current_device(device);
        auto c = std::make_unique<DeviceSequenceState>();
        c->device = device;
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
        synchronize_stream(Stream{});  // the legacy stream only: a forward in flight on the model stream goes on
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

// ---- The model ----------------------------------------------------------------------------------

// Padded batch sizes of decode steps that replay a CUDA graph (a step of S sequences runs the graph
// of the smallest bucket >= S; padding rows decode token 0 at position 0 of a scratch sequence).
constexpr int64_t kGraphBuckets[] = {1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 224, 256, 320, 384, 448, 512};
int64_t graph_bucket(int64_t rows) {
    for (int64_t b : kGraphBuckets)
        if (b >= rows) return b;
    return 0;
}
// Context bucket of a graph: the sizes that depend on the longest sequence (indexer scores,
// attention candidates) are taken for the next power of two of (largest position + 1), at least 256.
int64_t context_bucket(int64_t positions, int64_t max_len) {
    int64_t b = 256;
    while (b < positions) b *= 2;
    return std::min(b, max_len);
}

size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

class CudaModel final : public Model {
public:
    CudaModel(std::unique_ptr<Checkpoint> ckpt, Numerics numerics, const ModelOptions& mo, const CudaModelOptions& o)
        : device_(select_device(o)),
          checkpoint_(std::move(ckpt)),
          config_(checkpoint_->config()),
          info_{"deepseek_v4", config_.vocab_size, config_.eos_token_ids, config_.max_position_embeddings},
          numerics_(numerics),
          max_len_(o.max_model_len > 0 ? o.max_model_len : std::min<int64_t>(config_.max_position_embeddings, 65536)),
          fast_(o.gemm == GemmMode::kFast),
          max_seqs_(std::max<int64_t>(1, mo.max_num_seqs)),
          max_rows_(std::max({int64_t{1}, mo.max_batch_tokens, graph_bucket(max_seqs_)})),
          ep_(o.expert_exchange),
          ep_rank_(o.expert_rank),
          graphs_enabled_(mo.cuda_graphs && o.expert_exchange == nullptr) {
        DI_CHECK(!fast_ || fast_fp8_available(), "fast GEMM mode needs FP8 tensor cores (compute capability 8.9+)");
        UploadOptions upload;
        upload.wo_a_bf16 = fast_;  // the tensor-core wo_a takes bf16 weights
        ExpertRange& experts = upload.experts;
        if (ep_) {
            const int64_t G = ep_->ranks(), E = config_.n_routed_experts;
            DI_CHECK(E % G == 0, "expert parallelism over ", G, " GPUs: the model's ", E,
                     " routed experts do not divide evenly (use a GPU count that divides ", E, ")");
            experts = {ep_rank_ * (E / G), (ep_rank_ + 1) * (E / G)};
        }
        const ModelWeights host = load_model_weights(*checkpoint_, config_);
        weights_ = upload_weights(host, config_, upload);
        cpu::RopeTable main(config_.rope_main, config_.qk_rope_head_dim), comp(config_.rope_compress, config_.qk_rope_head_dim);
        rope_main_ = upload_floats(rope_cos_sin(main, max_len_));
        rope_comp_ = upload_floats(rope_cos_sin(comp, max_len_));
        // The workspace: the given size, else the largest forward the limits allow (every row a
        // logits row, every sequence at max_model_len, a full group of device draws).
        workspace_ = std::make_unique<DeviceArena>(
            o.workspace_bytes ? o.workspace_bytes : workspace_need(max_rows_, max_rows_, max_rows_, max_len_, max_seqs_));
        pad_ = new_sequence();  // the padding rows of graph steps write here
        state_bytes_ = pad_.state_bytes();
        // The CPU weights view the checkpoint mapping; the device has its own copies now.
    }

    const ModelInfo& info() const override { return info_; }
    const ModelConfig& config() const { return config_; }
    int64_t max_len() const { return max_len_; }
    Numerics numerics() const override { return numerics_; }
    // Device state is allocated whole when a sequence is created (capacity max_model_len).
    uint64_t estimate_state_bytes(int64_t, uint64_t) const override { return state_bytes_; }
    Sequence new_sequence() const override { return new_sequence(nullptr); }
    Sequence new_sequence(std::shared_ptr<StatePool>) const override;
    std::vector<float> forward(Sequence& seq, std::span<const int32_t> tokens, bool all_logits) const override {
        SequenceChunk chunk{&seq, tokens, all_logits};
        return std::move(forward_batch(std::span<const SequenceChunk>(&chunk, 1))[0]);
    }
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override {
        return forward_sampled(chunks, {}, {}).logits;
    }
    bool can_sample_on_device(const DeviceDraw& d) const override { return sample_supported(sample_row(d)); }
    ForwardOutputs forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want_logits,
                                   std::span<const DeviceDraw> draws) const override;

    CudaModelStats stats() const {
        std::lock_guard<std::mutex> lock(mutex_);
        CudaModelStats st = stats_;
        st.workspace_bytes = workspace_->capacity();
        st.workspace_high_water = workspace_->high_water();
        st.workspace_need_max = workspace_need(max_rows_, max_rows_, max_rows_, max_len_, max_seqs_);
        return st;
    }
    void reset_stats() const {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_ = {};
        have_prev_end_ = false;
    }
    size_t workspace_bound(int64_t rows, int64_t segments, int64_t logit_rows, int64_t positions, int64_t draws) const {
        return workspace_need(rows, segments, logit_rows, positions, draws);
    }

private:
    struct Batch;
    struct GraphEntry {
        std::unique_ptr<CudaGraph> graph;
        float* logits = nullptr;  // where the replay leaves the logits
        size_t start = 0, end = 0;  // the arena range the captured work uses
    };
    static SampleRow sample_row(const DeviceDraw& d) {
        return {.seed = d.seed, .stream = d.stream, .counter = d.counter, .temperature = d.temperature,
                .top_k = static_cast<int32_t>(std::min<int64_t>(d.top_k, int64_t{1} << 30)), .top_p = d.top_p,
                .min_p = d.min_p};
    }
    const float* upload_floats(const std::vector<float>& v) {
        auto buf = std::make_unique<DeviceBuffer>(v.size() * sizeof(float));
        buf->copy_from_host(v.data(), buf->nbytes());
        const float* p = static_cast<const float*>(buf->data());
        tables_.push_back(std::move(buf));
        return p;
    }
    bool official() const { return numerics_ == Numerics::kOfficial; }
    // Upper bound of the workspace one forward takes: S rows in N sequences, R rows of logits,
    // positions below P, D device draws per sampling launch.
    size_t workspace_need(int64_t S, int64_t N, int64_t R, int64_t P, int64_t D) const;
    // y[rows, out] = x · Wᵀ with the numerics' rounding points (official: act_quant before FP8/FP4).
    void project(const DeviceLinear& w, const float* x, int64_t rows, float* y) const;
    // The fast (tensor-core) form of project() for a supported weight; returns false otherwise.
    bool project_fast(const DeviceLinear& w, const float* x, int64_t rows, float* y, bool round_bf16) const;
    void run_layer(const DeviceLayer& lw, const Batch& b, float*& x, float*& y) const;
    void attention(const DeviceLayer& lw, const Batch& b, const float* a, float* out) const;
    void moe(const DeviceLayer& lw, const Batch& b, const float* a, float* out) const;
    // Embedding -> layers -> head over a batch whose inputs are on the device; returns the logits
    // [b.num_picked, vocab] (arena memory, valid until the forward resets the arena; null without
    // picked rows). Enqueues only: no allocation, no host synchronization, so a graph can capture it.
    float* compute(const Batch& b) const;

    // The CUDA device, made the current device first (the stream, events, weights and buffers below
    // are created there) and again by every forward (for its calling thread).
    static int select_device(const CudaModelOptions& o) { return select_cuda_model_device(o); }
    int device_;
    std::unique_ptr<Checkpoint> checkpoint_;
    ModelConfig config_;
    ModelInfo info_;
    Numerics numerics_;
    int64_t max_len_;
    bool fast_ = false;  // CudaModelOptions::gemm == kFast
    int64_t max_seqs_, max_rows_;  // the limits the workspace is sized for
    ExpertExchange* ep_ = nullptr;  // expert parallelism: the exchange (not owned), else null
    int64_t ep_rank_ = 0;
    uint64_t state_bytes_ = 0;
    DeviceWeights weights_;
    std::vector<std::unique_ptr<DeviceBuffer>> tables_;
    const float* rope_main_ = nullptr;
    const float* rope_comp_ = nullptr;
    OwnedStream stream_;
    std::unique_ptr<DeviceArena> workspace_;
    mutable std::mutex mutex_;  // one forward at a time (the workspace and stream are shared)
    // Guarded by mutex_:
    mutable bool graphs_enabled_;  // turned off for good if a capture fails
    mutable Sequence pad_{nullptr};  // the scratch sequence of padding rows
    mutable std::map<std::pair<int64_t, int64_t>, GraphEntry> graphs_;  // by (rows, context) bucket
    mutable std::unique_ptr<PinnedBuffer> pinned_in_, pinned_out_;
    mutable DeviceEvent ev_start_, ev_end_[2];
    mutable int ev_which_ = 0;
    mutable bool have_prev_end_ = false;
    mutable CudaModelStats stats_;
};

struct CudaModel::Batch {
    int64_t rows = 0, num_segments = 0, max_rows = 0;
    const int32_t* tokens = nullptr;       // [rows] device
    const int32_t* positions = nullptr;    // [rows] device
    const int32_t* row_segment = nullptr;  // [rows] device
    const DeviceSegment* all_segments = nullptr;  // [layers, num_segments] (device)
    const DeviceSegment* segments = nullptr;      // [num_segments] of the current layer (device)
    const int32_t* picked = nullptr;  // [num_picked] rows whose logits are computed (device)
    int64_t num_picked = 0;
    std::vector<int64_t> first_position, num_rows;  // host copies per segment
    int64_t max_position = 0;                       // largest position in the batch (graphs: of the bucket)
    bool graph = false;  // sizes from the buckets, so the captured work serves every step of its bucket
};

Sequence CudaModel::new_sequence(std::shared_ptr<StatePool>) const {
    set_current_device(device_);
    auto dev = std::make_unique<DeviceSequenceState>();
    dev->device = device_;
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
    synchronize_stream(Stream{});
    return Sequence(std::move(dev));
}

bool CudaModel::project_fast(const DeviceLinear& w, const float* x, int64_t rows, float* y, bool round_bf16) const {
    if (!fast_ || !fast_linear_supported(w)) return false;
    const Stream s = stream_.get();
    const size_t mark = workspace_->mark();
    const int64_t K = w.in_features;
    FastLinearParams f{.weight = w, .y = y, .y_ld = w.out_features, .rows = rows, .round_output_bf16 = round_bf16};
    if (w.kind == WeightKind::kBF16) {
        uint16_t* xb = workspace_->alloc_n<uint16_t>(rows * K);
        to_bf16({.x = x, .x_ld = K, .rows = rows, .cols = K, .out = xb}, s);
        f.a = xb;
    } else {
        uint8_t* q = workspace_->alloc_n<uint8_t>(rows * K);
        float* qs = workspace_->alloc_n<float>(rows * (K / 128));
        act_quant_fp8({.x = x, .x_ld = K, .rows = rows, .cols = K, .q = q, .scale = qs}, s);
        f.a = q;
        f.a_scale = qs;
    }
    fast_linear(f, s);
    workspace_->reset(mark);  // stream-ordered
    return true;
}

void CudaModel::project(const DeviceLinear& w, const float* x, int64_t rows, float* y) const {
    const Stream s = stream_.get();
    if (project_fast(w, x, rows, y, official())) return;
    if (official() && quantized(w)) {
        const size_t mark = workspace_->mark();
        float* xq = workspace_->alloc_n<float>(rows * w.in_features);
        act_quant_dequant({.x = x, .out = xq, .rows = rows, .cols = w.in_features}, s);
        linear({.x = xq, .x_ld = w.in_features, .weight = w, .y = y, .y_ld = w.out_features, .rows = rows,
                .round_output_bf16 = true},
               s);
        workspace_->reset(mark);  // stream-ordered: later work on this stream may reuse the scratch
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
    float* qr = workspace_->alloc_n<float>(S * QL);
    float* q = workspace_->alloc_n<float>(S * H * Dh);
    project(lw.wq_a, a, S, qr);
    rms_norm({.x = qr, .weight = lw.q_norm, .out = qr, .rows = S, .n = QL, .eps = eps, .round_bf16 = off}, s);
    project(lw.wq_b, qr, S, q);
    rope_rows({.x = q, .rows = S, .heads = H, .dim = Dh, .positions = b.positions, .cos_sin = rope, .rope_dim = R,
               .head_norm = off ? HeadNorm::kBf16Arith : HeadNorm::kF32, .eps = eps, .round_rope_dims = off},
              s);
    // KV path: kv = kv_norm(wkv a); RoPE; FP8 simulation of the nope dims.
    float* kv = workspace_->alloc_n<float>(S * Dh);
    project(lw.wkv, a, S, kv);
    rms_norm({.x = kv, .weight = lw.kv_norm, .out = kv, .rows = S, .n = Dh, .eps = eps, .round_bf16 = off}, s);
    rope_rows({.x = kv, .rows = S, .heads = 1, .dim = Dh, .positions = b.positions, .cos_sin = rope, .rope_dim = R,
               .round_rope_dims = off, .qat = off ? Qat::kFp8Nope : Qat::kNone},
              s);

    // Compressors: project, add ape, pool completed windows, then keep the chunk's rows in the rings.
    auto run_compressor = [&](const DeviceCompressor& cw, bool indexer, Qat qat) {
        const int64_t width = cw.overlap ? 2 * cw.head_dim : cw.head_dim;
        const int64_t ring = (cw.overlap ? 2 : 1) * cw.ratio + kRingHeadroom;
        float* ckv = workspace_->alloc_n<float>(S * width);
        float* cg = workspace_->alloc_n<float>(S * width);
        linear({.x = a, .x_ld = c.hidden_size, .weight = cw.wkv, .y = ckv, .y_ld = width, .rows = S}, s);
        linear({.x = a, .x_ld = c.hidden_size, .weight = cw.wgate, .y = cg, .y_ld = width, .rows = S}, s);
        add_ape({.gate = cg, .ape = cw.ape, .positions = b.positions, .rows = S, .width = width, .ratio = cw.ratio}, s);
        int64_t max_windows = b.graph ? 1 : 0;  // graphs: decode rows complete at most one window each
        for (int64_t i = 0; i < b.num_segments && !b.graph; ++i) {
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
        float* qi = workspace_->alloc_n<float>(S * IH * ID);
        float* hw = workspace_->alloc_n<float>(S * IH);
        project(lw.indexer_wq_b, qr, S, qi);
        project(lw.indexer_weights_proj, a, S, hw);
        rope_rows({.x = qi, .rows = S, .heads = IH, .dim = ID, .positions = b.positions, .cos_sin = rope_comp_,
                   .rope_dim = R, .qat = off ? Qat::kHadamardFp4 : Qat::kNone},
                  s);
        const int64_t max_visible = (b.max_position + 1) / m;
        float* scores = workspace_->alloc_n<float>(S * std::max<int64_t>(max_visible, 1));
        selected = workspace_->alloc_n<int32_t>(S * c.index_topk);
        int32_t* counts = workspace_->alloc_n<int32_t>(S);
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
    float* attn_scratch = workspace_->alloc_n<float>(S * H * max_cand);
    float* o = workspace_->alloc_n<float>(S * H * Dh);
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
    float* u = workspace_->alloc_n<float>(S * G * OL);
    if (fast_ && lw.wo_a_groups && fast_linear_supported(lw.wo_a.rows(0, OL))) {
        // Tensor cores, as the reference's bf16 einsum: o in bf16, viewed as [S·G, GW] rows; one grouped
        // launch over the G row slices of wo_a (row s of group g is view row s·G + g, in and out).
        uint16_t* ob = workspace_->alloc_n<uint16_t>(S * H * Dh);
        int32_t* offsets = workspace_->alloc_n<int32_t>(G + 1);
        int32_t* rows_of = workspace_->alloc_n<int32_t>(G * S);
        int32_t* tiles = workspace_->alloc_n<int32_t>(G + 1);
        to_bf16({.x = o, .x_ld = GW, .rows = S * G, .cols = GW, .out = ob}, s);
        group_row_tables({.groups = G, .rows = S, .offsets = offsets, .rows_of = rows_of}, s);
        fast_linear({.a = ob, .a_row_src = rows_of, .weight = lw.wo_a.rows(0, OL), .experts = lw.wo_a_groups,
                     .expert_offsets = offsets, .num_experts = G, .tile_scratch = tiles, .y_row = rows_of, .y = u,
                     .y_ld = OL, .rows = G * S, .round_output_bf16 = off},
                    s);
    } else {
        for (int64_t g = 0; g < G; ++g)
            linear({.x = o + g * GW, .x_ld = H * Dh, .weight = lw.wo_a.rows(g * OL, (g + 1) * OL), .y = u + g * OL,
                    .y_ld = G * OL, .rows = S, .round_output_bf16 = off},
                   s);
    }
    project(lw.wo_b, u, S, out);
}

void CudaModel::moe(const DeviceLayer& lw, const Batch& b, const float* a, float* out) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t S = b.rows, D = c.hidden_size, E = c.n_routed_experts, K = c.num_experts_per_tok;
    const float L = static_cast<float>(c.swiglu_limit);
    float* logits = workspace_->alloc_n<float>(S * E);
    float* biased = workspace_->alloc_n<float>(S * E);
    int32_t* ids = workspace_->alloc_n<int32_t>(S * K);
    float* wts = workspace_->alloc_n<float>(S * K);
    linear({.x = a, .x_ld = D, .weight = lw.gate, .y = logits, .y_ld = E, .rows = S}, s);
    route({.logits = logits, .bias = lw.gate_bias, .tid2eid = lw.mlp_type == MlpType::kHashMoe ? lw.tid2eid : nullptr,
           .tokens = b.tokens, .rows = S, .experts = E, .top_k = K, .scoring = scoring_of(c.scoring_func),
           .norm_topk_prob = c.norm_topk_prob, .routed_scaling_factor = static_cast<float>(c.routed_scaling_factor),
           .official = off, .biased = biased, .ids = ids, .weights = wts},
          s);
    DI_CHECK(lw.mlp_type != MlpType::kHashMoe || lw.tid2eid, "hash-routed layer without tid2eid");
    const float* y_slot = routed_experts({.experts = &lw.experts, .x = a, .ids = ids, .weights = wts, .rows = S,
                                          .hidden = D, .top_k = K, .experts_total = E, .swiglu_limit = L,
                                          .official = off, .weight_before_w2 = off, .fast = fast_,
                                          .exchange = ep_, .rank = static_cast<int>(ep_rank_)},
                                         *workspace_, s);
    // Shared expert (no routing weight).
    const int64_t SI = lw.shared_w1.out_features;
    float* sg = workspace_->alloc_n<float>(S * SI);
    float* su = workspace_->alloc_n<float>(S * SI);
    float* ys = workspace_->alloc_n<float>(S * D);
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
    const size_t mark = workspace_->mark();
    float* post = workspace_->alloc_n<float>(S * hc);
    float* comb = workspace_->alloc_n<float>(S * hc * hc);
    float* a = workspace_->alloc_n<float>(S * D);
    float* out = workspace_->alloc_n<float>(S * D);
    float* mix = workspace_->alloc_n<float>(S * ((2 + hc) * hc + 1));
    auto pre = [&](const DeviceHc& w, const float* norm) {
        hc_pre({.x = x, .fn = w.fn, .base = w.base, .scale = w.scale, .rows = S, .hc = hc, .hidden = D,
                .sinkhorn_iters = c.hc_sinkhorn_iters, .norm_eps = eps, .hc_eps = static_cast<float>(c.hc_eps),
                .post = post, .comb = comb, .collapsed = a, .round_bf16 = off, .mix = mix},
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
        const size_t inner = workspace_->mark();
        attention(lw, b, a, out);
        workspace_->reset(inner);
    }
    post_mix();
    pre(lw.hc_ffn, lw.ffn_norm);
    {
        const size_t inner = workspace_->mark();
        moe(lw, b, a, out);
        workspace_->reset(inner);
    }
    post_mix();
    workspace_->reset(mark);
}

size_t CudaModel::workspace_need(int64_t S, int64_t N, int64_t R, int64_t P, int64_t D) const {
    const ModelConfig& c = config_;
    const int64_t Dm = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, L = c.num_hidden_layers;
    const int64_t H = c.num_attention_heads, Dh = c.head_dim, QL = c.q_lora_rank, G = c.o_groups, OL = c.o_lora_rank;
    const int64_t E = c.n_routed_experts, K = c.num_experts_per_tok;
    // Each arena allocation is 256-aligned: count every one with a full extra 256 bytes.
    auto bytes = [](int64_t n) { return align256(static_cast<size_t>(std::max<int64_t>(n, 0))) + 256; };
    size_t total = bytes(S * 4) * 3 + bytes(L * N * int64_t(sizeof(DeviceSegment))) + bytes(R * 4);  // inputs
    total += 2 * bytes(S * hc * Dm * 4);                                                               // x, y
    size_t layer_peak = 0;
    for (const DeviceLayer& lw : weights_.layers) {
        const size_t fixed = bytes(S * hc * 4) + bytes(S * hc * hc * 4) + 2 * bytes(S * Dm * 4) +
                             bytes(S * ((2 + hc) * hc + 1) * 4);  // post, comb, a, out, mixing logits
        // Attention: everything it takes stays until its end, plus the largest act_quant scratch.
        size_t at = bytes(S * QL * 4) + bytes(S * H * Dh * 4) + bytes(S * Dh * 4);
        const int64_t m = std::max<int64_t>(lw.compress_ratio, 1);
        for (const auto* cw : {&lw.compressor, &lw.indexer_compressor})
            if (*cw) at += 2 * bytes(S * ((*cw)->overlap ? 2 : 1) * (*cw)->head_dim * 4);
        int64_t max_cand = std::min<int64_t>(c.sliding_window, P);
        if (lw.indexer_compressor) {
            at += bytes(S * c.index_n_heads * c.index_head_dim * 4) + bytes(S * c.index_n_heads * 4) +
                  bytes(S * std::max<int64_t>(P / m, 1) * 4) + bytes(S * c.index_topk * 4) + bytes(S * 4);
            max_cand += std::min<int64_t>(c.index_topk, P / m);
        } else if (lw.attention_type != AttentionType::kSliding) {
            max_cand += P / m;
        }
        at += bytes(S * H * max_cand * 4) + bytes(S * H * Dh * 4) + bytes(S * G * OL * 4);
        at += bytes(S * std::max({Dm, QL, G * OL}) * 4);
        if (fast_)  // wo_a on tensor cores: o in bf16, the group tables, the tile table
            at += bytes(S * H * Dh * 2) + 2 * bytes((G + 1) * 4) + bytes(G * S * 4);
        // MoE.
        const int64_t I = lw.experts.shape_w1.out_features, SI = lw.shared_w1.out_features;
        // Expert parallelism: the experts here run the pairs of every rank's rows (T: at most this
        // forward's rows plus one idle row of each other rank), and the outputs come back per rank.
        const int64_t ranks = ep_ ? ep_->ranks() : 1, T = ep_ ? S + ranks : S, NT = T * K;
        size_t mo = 2 * bytes(S * E * 4) + 2 * bytes(S * K * 4) + 3 * bytes(NT * 4) + bytes((E + 2) * 4) +
                    bytes(S * Dm * 4) + 2 * bytes(NT * I * 4) + 2 * bytes(NT * Dm * 4) + 2 * bytes(S * SI * 4) +
                    bytes(S * Dm * 4) + bytes(S * std::max(Dm, SI) * 4);
        if (fast_)  // tensor-core experts: FP8 copies of the inputs and of the SwiGLU output, tile table
            mo += bytes(NT * I) + bytes(NT * (I / 128) * 4) + bytes(S * Dm) + bytes(S * (Dm / 128) * 4) + bytes((E + 1) * 4);
        if (ep_)  // gathered inputs (f32 or FP8 + scales), ids, weights, local ids; returned blocks, index, slots
            mo += bytes(T * Dm * 4) + bytes(T * Dm) + bytes(T * (Dm / 128) * 4) + 3 * bytes(T * K * 4) +
                  bytes(ranks * S * K * Dm * 4) + bytes(S * K * 4) + bytes(S * K * Dm * 4);
        // (fast GEMMs split act_quant's scratch in two allocations: one more alignment each)
        layer_peak = std::max(layer_peak, fixed + std::max(at, mo) + 1024);
    }
    total += layer_peak;
    total += bytes(R * hc * Dm * 4) + bytes(R * Dm * 4) + bytes(R * (hc + 1) * 4) + bytes(R * V * 4) + bytes(R * Dm * 4) +
             256;  // head (+ fast GEMM scratch)
    total += bytes(D * int64_t(sizeof(SampleRow))) + bytes(D * 4) + bytes(D * V * 8) + bytes(D * kMaxSampleTopK * 4) +
             bytes(D * 4);  // sampling
    return total;
}

float* CudaModel::compute(const Batch& batch) const {
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const int64_t D = c.hidden_size, hc = c.hc_mult, V = c.vocab_size, L = c.num_hidden_layers;
    Batch b = batch;
    const int64_t S = b.rows;
    float* x = workspace_->alloc_n<float>(S * hc * D);
    float* y = workspace_->alloc_n<float>(S * hc * D);
    embed({.table = weights_.embed, .tokens = b.tokens, .x = x, .rows = S, .hc = hc, .round_bf16 = official()}, s);
    for (int64_t l = 0; l < L; ++l) {
        b.segments = b.all_segments + l * b.num_segments;
        run_layer(weights_.layers[size_t(l)], b, x, y);
    }
    if (b.num_picked == 0) return nullptr;
    // Rows whose logits are wanted, gathered so the head runs once for the whole batch.
    const int64_t R = b.num_picked;
    float* xs = workspace_->alloc_n<float>(R * hc * D);
    gather_rows({.src = x, .index = b.picked, .dst = xs, .n = R, .width = hc * D}, s);
    float* hy = workspace_->alloc_n<float>(R * D);
    float* mix = workspace_->alloc_n<float>(R * (hc + 1));
    const float eps = static_cast<float>(c.rms_norm_eps);
    hc_head({.x = xs, .fn = weights_.hc_head.fn, .base = weights_.hc_head.base, .scale = weights_.hc_head.scale,
             .rows = R, .hc = hc, .hidden = D, .norm_eps = eps, .hc_eps = static_cast<float>(c.hc_eps), .y = hy,
             .round_bf16 = official(), .mix = mix},
            s);
    rms_norm({.x = hy, .weight = weights_.norm, .out = hy, .rows = R, .n = D, .eps = eps, .round_bf16 = official()}, s);
    float* logits = workspace_->alloc_n<float>(R * V);
    if (!project_fast(weights_.head, hy, R, logits, false))
        linear({.x = hy, .x_ld = D, .weight = weights_.head, .y = logits, .y_ld = V, .rows = R}, s);
    return logits;
}

ForwardOutputs CudaModel::forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want_logits,
                                          std::span<const DeviceDraw> draws) const {
    std::lock_guard<std::mutex> lock(mutex_);
    set_current_device(device_);
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const int64_t V = c.vocab_size, L = c.num_hidden_layers;
    DI_CHECK(want_logits.empty() || want_logits.size() == chunks.size(), "forward_sampled: ", want_logits.size(),
             " logits flags for ", chunks.size(), " chunks");
    auto wants = [&](size_t i) { return want_logits.empty() || want_logits[i] != 0; };
    std::vector<uint8_t> drawn(chunks.size(), 0);
    for (const DeviceDraw& d : draws) {
        DI_CHECK(d.chunk >= 0 && size_t(d.chunk) < chunks.size(), "forward_sampled: draw of chunk ", d.chunk, " of ",
                 chunks.size());
        DI_CHECK(sample_supported(sample_row(d)), "forward_sampled: the device sampler cannot draw temperature ",
                 d.temperature, ", top_k ", d.top_k, ", top_p ", d.top_p, ", min_p ", d.min_p);
        drawn[size_t(d.chunk)] = 1;
    }
    Batch b;
    std::vector<int32_t> tokens, positions, row_segment;
    std::vector<DeviceSequenceState*> states;
    bool decode = !chunks.empty();
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
        decode = decode && n == 1 && !(ch.all_logits && wants(i));
    }
    const int64_t real_rows = static_cast<int64_t>(tokens.size());
    // A pure decode step replays the CUDA graph of its (rows, context) bucket; padding rows decode
    // token 0 at position 0 of the scratch sequence (batch invariance: they change no other row).
    const int64_t bucket = graphs_enabled_ && decode ? graph_bucket(real_rows) : 0;
    b.graph = bucket > 0 && bucket <= max_rows_;
    if (b.graph) {
        auto* pad = static_cast<DeviceSequenceState*>(&pad_.state());
        for (int64_t k = real_rows; k < bucket; ++k) {
            tokens.push_back(0);
            positions.push_back(0);
            row_segment.push_back(static_cast<int32_t>(k));
            b.first_position.push_back(0);
            b.num_rows.push_back(1);
            states.push_back(pad);
        }
        b.max_position = context_bucket(b.max_position + 1, max_len_) - 1;
    }
    b.rows = static_cast<int64_t>(tokens.size());
    b.num_segments = static_cast<int64_t>(states.size());
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
    // Rows of logits: every row of a graph step; else the rows a chunk wants (all or its last) and the
    // last row of a chunk with draws. Chunks that want neither (mid-prefill) skip the head.
    std::vector<int32_t> picked;
    std::vector<int64_t> first_pick(chunks.size(), -1), num_pick(chunks.size(), 0);
    {
        int64_t offset = 0;
        for (size_t i = 0; i < chunks.size(); ++i) {
            const int64_t n = static_cast<int64_t>(chunks[i].tokens.size());
            if (b.graph || wants(i) || drawn[i]) {
                const int64_t from = wants(i) && chunks[i].all_logits ? 0 : n - 1;
                first_pick[i] = static_cast<int64_t>(picked.size());
                num_pick[i] = n - from;
                for (int64_t r = from; r < n; ++r) picked.push_back(static_cast<int32_t>(offset + r));
            }
            offset += n;
        }
        if (b.graph)
            for (int64_t r = real_rows; r < b.rows; ++r) picked.push_back(static_cast<int32_t>(r));
    }
    b.num_picked = static_cast<int64_t>(picked.size());

    // Inputs: packed into pinned memory and copied with one transfer into one arena block.
    const int64_t S = b.rows, D = static_cast<int64_t>(draws.size());
    size_t in_bytes = 0;
    auto place = [&](size_t n) {
        const size_t at = in_bytes;
        in_bytes = align256(in_bytes + n);
        return at;
    };
    const size_t o_tok = place(size_t(S) * 4), o_pos = place(size_t(S) * 4), o_rs = place(size_t(S) * 4);
    const size_t o_segs = place(segs.size() * sizeof(DeviceSegment)), o_pick = place(picked.size() * 4);
    const size_t graph_inputs = in_bytes;  // a graph's inputs end here; the draw table follows
    const size_t o_rows = place(size_t(D) * sizeof(SampleRow)), o_lrow = place(size_t(D) * 4);
    if (!pinned_in_ || pinned_in_->nbytes() < in_bytes) pinned_in_ = std::make_unique<PinnedBuffer>(in_bytes * 2);
    if (!pinned_out_ || pinned_out_->nbytes() < size_t(D) * 4 + 4)
        pinned_out_ = std::make_unique<PinnedBuffer>(size_t(std::max<int64_t>(D, max_seqs_)) * 8 + 64);
    auto* pin = static_cast<uint8_t*>(pinned_in_->host());
    std::memcpy(pin + o_tok, tokens.data(), size_t(S) * 4);
    std::memcpy(pin + o_pos, positions.data(), size_t(S) * 4);
    std::memcpy(pin + o_rs, row_segment.data(), size_t(S) * 4);
    std::memcpy(pin + o_segs, segs.data(), segs.size() * sizeof(DeviceSegment));
    if (!picked.empty()) std::memcpy(pin + o_pick, picked.data(), picked.size() * 4);
    auto* rows_h = reinterpret_cast<SampleRow*>(pin + o_rows);
    auto* lrow_h = reinterpret_cast<int32_t*>(pin + o_lrow);
    for (int64_t k = 0; k < D; ++k) {
        const DeviceDraw& d = draws[size_t(k)];
        rows_h[k] = sample_row(d);
        lrow_h[k] = static_cast<int32_t>(first_pick[size_t(d.chunk)] + num_pick[size_t(d.chunk)] - 1);
    }

    const size_t mark = workspace_->mark();
    ev_start_.record(s);
    auto* d_in = static_cast<uint8_t*>(workspace_->alloc(graph_inputs));
    copy_to_device(d_in, pin, graph_inputs, s);
    b.tokens = reinterpret_cast<const int32_t*>(d_in + o_tok);
    b.positions = reinterpret_cast<const int32_t*>(d_in + o_pos);
    b.row_segment = reinterpret_cast<const int32_t*>(d_in + o_rs);
    b.all_segments = reinterpret_cast<const DeviceSegment*>(d_in + o_segs);
    b.picked = reinterpret_cast<const int32_t*>(d_in + o_pick);

    float* logits = nullptr;
    if (b.graph) {
        // The captured work reads its inputs from the block above, at the same arena offset in every
        // step of the bucket, and allocates the same arena ranges: replaying it is the eager path.
        const auto key = std::make_pair(b.rows, b.max_position + 1);
        auto it = graphs_.find(key);
        if (it == graphs_.end()) {
            const size_t start = workspace_->mark();
            auto graph = std::make_unique<CudaGraph>();
            CudaGraph::begin_capture(s);
            try {
                logits = compute(b);
                graph->end_capture(s);
            } catch (const std::exception& e) {
                CudaGraph::abort_capture(s);
                DI_LOG_WARN("CUDA graph capture failed ({}); decode steps launch their kernels directly from now on", e.what());
                graphs_enabled_ = false;
                workspace_->reset(start);
                graph.reset();
            }
            if (graph) {
                const size_t end = workspace_->mark();
                workspace_->reset(start);  // the capture ran nothing: the replay below computes
                it = graphs_.emplace(key, GraphEntry{std::move(graph), logits, start, end}).first;
                ++stats_.graph_captures;
            } else {
                logits = compute(b);
            }
        }
        if (it != graphs_.end()) {
            const GraphEntry& g = it->second;
            DI_ICHECK(workspace_->mark() == g.start);  // the inputs of a bucket sit at one arena offset
            g.graph->launch(s);
            workspace_->reset(g.end);
            logits = g.logits;
            ++stats_.graph_replays;
        }
    } else {
        logits = compute(b);
    }

    // Device draws (groups of at most max_seqs_ draws share one scratch), then the small copies back.
    std::vector<int32_t> drawn_tokens(static_cast<size_t>(D));
    if (D > 0) {
        auto* d_tab = static_cast<uint8_t*>(workspace_->alloc(in_bytes - graph_inputs));
        copy_to_device(d_tab, pin + graph_inputs, in_bytes - graph_inputs, s);
        const auto* d_rows = reinterpret_cast<const SampleRow*>(d_tab + (o_rows - graph_inputs));
        const auto* d_lrow = reinterpret_cast<const int32_t*>(d_tab + (o_lrow - graph_inputs));
        const int64_t group = std::min(D, max_seqs_);
        double* scratch = workspace_->alloc_n<double>(group * V);
        int32_t* index_scratch = workspace_->alloc_n<int32_t>(group * kMaxSampleTopK);
        int32_t* d_tokens = workspace_->alloc_n<int32_t>(D);
        for (int64_t g0 = 0; g0 < D; g0 += group)
            sample({.logits = logits, .rows = std::min(group, D - g0), .vocab = V, .logit_row = d_lrow + g0,
                    .row = d_rows + g0, .scratch = scratch, .index_scratch = index_scratch, .tokens = d_tokens + g0},
                   s);
        copy_to_host(pinned_out_->host(), d_tokens, size_t(D) * 4, s);
        stats_.device_draws += D;
    }
    ForwardOutputs out;
    out.logits.resize(chunks.size());
    for (size_t i = 0; i < chunks.size(); ++i) {
        if (!wants(i)) continue;
        out.logits[i].resize(static_cast<size_t>(num_pick[i] * V));
        copy_to_host(out.logits[i].data(), logits + first_pick[i] * V, out.logits[i].size() * sizeof(float), s);
    }
    DeviceEvent& end = ev_end_[ev_which_];
    end.record(s);
    stream_.synchronize();
    if (D > 0) std::memcpy(drawn_tokens.data(), pinned_out_->host(), size_t(D) * 4);
    // Device time: this forward's span, and the idle gap since the previous forward ended.
    stats_.gpu_seconds += DeviceEvent::elapsed_ms(ev_start_, end) * 1e-3;
    if (have_prev_end_) stats_.gap_seconds += DeviceEvent::elapsed_ms(ev_end_[ev_which_ ^ 1], ev_start_) * 1e-3;
    have_prev_end_ = true;
    ev_which_ ^= 1;
    ++stats_.forwards;
    workspace_->reset(mark);
    for (size_t i = 0; i < chunks.size(); ++i) states[i]->length += static_cast<int64_t>(chunks[i].tokens.size());
    out.tokens = std::move(drawn_tokens);
    return out;
}

}  // namespace

int select_cuda_model_device(const CudaModelOptions& o) {
    const ExpertExchange* ep = o.expert_exchange;
    if (ep) DI_CHECK(o.expert_rank >= 0 && o.expert_rank < ep->ranks(), "expert rank ", o.expert_rank, " of ", ep->ranks());
    const int device = ep ? ep->device(o.expert_rank) : o.device;
    DI_CHECK(device >= 0 && device < device_count(), "CUDA device ", device, " not available (", device_count(),
             " devices)");
    set_current_device(device);
    return device;
}

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
    return std::make_unique<CudaModel>(std::move(ckpt), n, options, cuda_options);
}

namespace {
const CudaModel& as_cuda(const Model& model) {
    const auto* m = dynamic_cast<const CudaModel*>(&model);
    DI_CHECK(m != nullptr, "not a CUDA model");
    return *m;
}
}  // namespace

CudaModelStats cuda_model_stats(const Model& model) { return as_cuda(model).stats(); }
int64_t cuda_model_max_len(const Model& model) { return as_cuda(model).max_len(); }
void reset_cuda_model_stats(const Model& model) { as_cuda(model).reset_stats(); }
size_t cuda_workspace_bound(const Model& model, int64_t rows, int64_t sequences, int64_t logit_rows,
                            int64_t positions, int64_t draws) {
    return as_cuda(model).workspace_bound(rows, sequences, logit_rows, positions, draws);
}

}  // namespace deepinfer::cuda
