// SPDX-License-Identifier: Apache-2.0
// CudaModel's declaration, shared by its translation units: cuda_model.cpp (load, the batch, the
// layers, the head, sampling) and cuda_mtp.cpp (the MTP block: its rows in every target pass of an
// attached sequence, and drafting, cuda_mtp_drafter.h).
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_weights.h"
#include "backends/cuda/model/bench_routing.h"
#include "backends/cuda/model/decode_graphs.h"
#include "backends/cuda/model/draft_graphs.h"
#include "backends/cuda/model/device_page_pool.h"
#include "backends/cuda/model/device_sequence_state.h"
#include "backends/cuda/model/device_state_layout.h"
#include "backends/cuda/model/device_draws.h"
#include "backends/cuda/model/step_timer.h"
#include "backends/cuda/model/expert_exchange.h"
#include "backends/cuda/model/rope_tables.h"
#include "backends/cpu/primitives.h"
#include "deepinfer/check.h"
#include "deepinfer/checkpoint.h"
#include "deepinfer/drafter.h"
#include "model/state.h"
#include "model/weights.h"

namespace deepinfer::cuda::v4 {

// ---- Per-sequence device state (device_sequence_state.h) -----------------------------------------

// Rows of the target's final HC streams an MTP-attached sequence keeps (a position-keyed ring): a
// verify pass commits at least its first row and at most 17 rows are ever rolled back to, so the row
// of the last committed position is always among the last 32 written.
inline constexpr int64_t kMtpTapRows = 32;
// Drafts per request and draft call (as the CPU MtpDrafter: a verify pass of at most 17 rows).
inline constexpr int64_t kMtpMaxDrafts = 16;
static_assert(kMtpMaxDrafts + 1 <= kMtpTapRows);

inline float* fptr(const std::unique_ptr<DeviceBuffer>& b) { return b ? static_cast<float*>(b->data()) : nullptr; }

inline bool quantized(const DeviceLinear& w) { return w.kind == WeightKind::kFp8Block || w.kind == WeightKind::kFp4; }

inline ScoringFunc scoring_of(const std::string& name) {
    if (name == "sqrtsoftplus") return ScoringFunc::kSqrtSoftplus;
    if (name == "sigmoid") return ScoringFunc::kSigmoid;
    if (name == "softmax") return ScoringFunc::kSoftmax;
    DI_THROW("unsupported scoring_func '", name, "'");
}

// ---- The model ----------------------------------------------------------------------------------

// Decode steps replay CUDA graphs per (rows, context) bucket: graph_bucket, context_bucket (decode_graphs.h).

inline size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

class CudaModel final : public Model, public CudaModelRuntime {
public:
    CudaModel(std::unique_ptr<Checkpoint> ckpt, Numerics numerics, const ModelOptions& mo, const CudaModelOptions& o)
        : device_(select_device(o)),
          checkpoint_(std::move(ckpt)),
          config_(checkpoint_->config()),
          info_{"deepseek_v4", config_.vocab_size, config_.eos_token_ids, config_.max_position_embeddings},
          numerics_(numerics),
          max_len_(o.max_model_len > 0 ? o.max_model_len : std::min<int64_t>(config_.max_position_embeddings, 65536)),
          fast_(o.gemm == GemmMode::kFast),
          max_seqs_(ForwardLimits::of(mo).max_seqs),
          max_rows_(ForwardLimits::of(mo).max_rows),
          ep_(o.expert_exchange),
          ep_rank_(o.expert_rank),
          bench_routing_(o.expert_load_stats, o.even_routing),
          graphs_(mo.cuda_graphs && o.expert_exchange == nullptr),
          draft_graphs_(mo.cuda_graphs && o.expert_exchange == nullptr),
          verify_graphs_(mo.cuda_verify_graphs),
          draws_(max_seqs_) {
        DI_CHECK(!fast_ || fast_fp8_available(), "fast GEMM mode needs FP8 tensor cores (compute capability 8.9+)");
        stream_.set_pdl(mo.cuda_pdl);
        UploadOptions upload;
        upload.wo_a_bf16 = fast_;  // the tensor-core wo_a takes bf16 weights
        upload.with_mtp = ep_ == nullptr;  // the MTP and DSpark drafters run on one GPU only
        upload.with_dspark = ep_ == nullptr;
        ExpertRange& experts = upload.experts;
        if (ep_) {
            const int64_t G = ep_->ranks(), E = config_.n_routed_experts;
            DI_CHECK(E % G == 0, "expert parallelism over ", G, " GPUs: the model's ", E,
                     " routed experts do not divide evenly (use a GPU count that divides ", E, ")");
            experts = {ep_rank_ * (E / G), (ep_rank_ + 1) * (E / G)};
        }
        const ModelWeights host = load_model_weights(*checkpoint_, config_);
        weights_ = upload_weights(host, config_, upload);
        if (weights_.mtp) mtp_drafter_ = make_mtp_drafter();
        if (weights_.dspark) mtp_drafter_ = make_dspark_drafter();  // (a checkpoint stores one of the two)
        cpu::RopeTable main(config_.rope_main, config_.qk_rope_head_dim), comp(config_.rope_compress, config_.qk_rope_head_dim);
        // (a DSpark block reaches dspark_block_size - 1 positions past the last one)
        rope_main_ = upload_floats(rope_cos_sin(main, max_len_ + std::max<int64_t>(config_.dspark_block_size, 0)));
        rope_comp_ = upload_floats(rope_cos_sin(comp, max_len_));
        // The workspace: the given size, else the largest forward the limits allow (every row a
        // logits row, every sequence at max_model_len, a full group of device draws).
        layout_ = std::make_shared<const DeviceStateLayout>(
            DeviceStateLayout::plan(config_, mo.device_page_tokens, kRingHeadroom, weights_.mtp ? kMtpTapRows : 0,
                                    weights_.dspark ? int64_t(weights_.dspark->stages.size()) : 0, dspark_ring_rows()));
        workspace_ = std::make_unique<DeviceArena>(
            o.workspace_bytes ? o.workspace_bytes : workspace_need(max_rows_, max_rows_, max_rows_, max_len_, max_seqs_));
        // The sampled drafts' distributions of the largest DSpark call (DraftGraphs::device_probs), before the
        // state pool takes what is free: drafting allocates nothing.
        if (weights_.dspark)
            draft_graphs_.device_probs(size_t(config_.dspark_block_size * max_seqs_ * config_.vocab_size) * sizeof(float));
        make_state_pool(mo.device_state_bytes);
        pad_ = new_sequence();  // the padding rows of graph steps write here (pages outside the capacity)
        if (weights_.mtp) mtp_attach(pad_);  // and their MTP rows (graph steps and draft calls, cuda_mtp*.cpp)
        // The CPU weights view the checkpoint mapping; the device has its own copies now.
    }

    const ModelInfo& info() const override { return info_; }
    const ModelConfig& config() const { return config_; }
    int64_t max_len() const override { return max_len_; }
    Numerics numerics() const override { return numerics_; }
    // Pages of the device pool: the ring pages and one entry page per page_tokens positions.
    uint64_t estimate_state_bytes(int64_t tokens, uint64_t) const override { return layout_->sequence_bytes(tokens); }
    uint64_t state_capacity_bytes() const override { return state_capacity_; }
    const DevicePagePool& state_pool() const { return *pool_; }
    const DeviceStateLayout& state_layout() const { return *layout_; }
    Sequence new_sequence() const override { return new_sequence(nullptr); }
    Sequence new_sequence(std::shared_ptr<StatePool>) const override;
    std::vector<float> forward(Sequence& seq, std::span<const int32_t> tokens, bool all_logits) const override {
        SequenceChunk chunk{&seq, tokens, all_logits};
        return std::move(forward_batch(std::span<const SequenceChunk>(&chunk, 1))[0]);
    }
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override {
        return forward_sampled(chunks, {}, {}).logits;
    }
    bool can_sample_on_device(const DeviceDraw& d) const override { return device_draw_supported(d); }
    // The MTP drafter (cuda_mtp.cpp) when the checkpoint has an MTP block, the DSpark drafter
    // (cuda_dspark_v4.cpp) when it has 0731's; one GPU only.
    const Drafter* drafter() const override { return mtp_drafter_.get(); }
    // MTP drafting (cuda_mtp.cpp): attaches a new sequence; the device bytes that adds; k drafts per request.
    void mtp_attach(Sequence& sequence) const;
    uint64_t mtp_state_bytes() const;
    std::vector<Draft> mtp_draft(std::span<const DraftRequest> requests) const;
    ForwardOutputs forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want_logits,
                                   std::span<const DeviceDraw> draws) const override;

    CudaModelStats stats() const override {
        std::lock_guard<std::mutex> lock(mutex_);
        CudaModelStats st = stats_;
        st.workspace_bytes = workspace_->capacity();
        st.workspace_high_water = workspace_->high_water();
        st.workspace_need_max = workspace_need(max_rows_, max_rows_, max_rows_, max_len_, max_seqs_);
        st.state_page_bytes = layout_->page_bytes;
        st.state_page_tokens = layout_->page_tokens;
        st.state_ring_pages = layout_->ring_pages;
        st.state_pages = pool_->capacity_pages();
        st.state_pages_in_use = pool_->pages_in_use();
        st.state_pages_peak = pool_->peak_pages();
        bench_routing_.read(st, config_.n_routed_experts / (ep_ ? ep_->ranks() : 1), stream_.get());
        return st;
    }
    void set_even_routing(bool on) const override {
        std::lock_guard<std::mutex> lock(mutex_);
        if (bench_routing_.set_even(on)) {  // they captured the other routing
            graphs_.clear();
            draft_graphs_.clear();
        }
    }
    void reset_stats() const override {
        std::lock_guard<std::mutex> lock(mutex_);
        stats_ = {};
        timer_.reset();
        bench_routing_.reset(stream_.get());
    }
    size_t workspace_bound(int64_t rows, int64_t segments, int64_t logit_rows, int64_t positions, int64_t draws) const override {
        return workspace_need(rows, segments, logit_rows, positions, draws);
    }
    int64_t replay_tail_rows(std::span<const SequenceChunk> chunks, std::span<const DeviceDraw>) const override {
        int64_t n = 0;  // (no bounded replay in V4)
        for (const SequenceChunk& c : chunks) n += static_cast<int64_t>(c.tokens.size());
        return n;
    }

private:
    struct Batch;
    struct MtpPassPlan;
    const float* upload_floats(const std::vector<float>& v) {
        auto buf = std::make_unique<DeviceBuffer>(v.size() * sizeof(float));
        buf->copy_from_host(v.data(), buf->nbytes());
        const float* p = static_cast<const float*>(buf->data());
        tables_.push_back(std::move(buf));
        return p;
    }
    bool official() const { return numerics_ == Numerics::kOfficial; }
    // The device page pool (device_sequence_state.cpp): `bytes`, else sized from the limits.
    void make_state_pool(uint64_t bytes);
    // The per-layer segment table [L, num_segments] and per-segment page tables [num_segments, table]
    // of a batch into pinned memory; `d_tables`: where the page tables will lie on the device.
    void pack_segments(std::span<DeviceSequenceState* const> states, const Batch& b, int64_t table,
                       const uint8_t* d_tables, DeviceSegment* segs, float** tables) const;
    // Makes every page the chunks' forward writes its sequence's own, enqueueing the copies of shared
    // pages and the zeroing of new ones on the stream (all or nothing per page list when the pool runs
    // out); prepare_mtp_writes: the MTP pages drafting writes.
    void prepare_state_writes(std::span<DeviceSequenceState* const> states, std::span<const SequenceChunk> chunks) const {
        prepare_writes(states.first(chunks.size()), chunks);
    }
    void prepare_mtp_writes(std::span<DeviceSequenceState* const> states) const { prepare_writes(states, {}); }
    void prepare_writes(std::span<DeviceSequenceState* const> states, std::span<const SequenceChunk> chunks) const;
    // Upper bound of the workspace one forward takes: S rows in N sequences, R rows of logits,
    // positions below P, D device draws per sampling launch.
    size_t workspace_need(int64_t S, int64_t N, int64_t R, int64_t P, int64_t D) const;
    // An activation [rows, cols] f32 and the fast GEMMs' forms of it (bf16; FP8 + scales per `block`
    // columns), each made by its conversion kernel at the first projection that needs it and reused by
    // the later projections of the same rows: the same kernel on the same input, so the same bits, and
    // one launch instead of one per projection. The copies live in the workspace of the scope that
    // declared the struct (allocated before the projection's own scratch mark).
    struct ConvertedInput {
        const float* x = nullptr;
        int64_t rows = 0, cols = 0;
        uint16_t* bf16 = nullptr;
        uint8_t* q = nullptr;
        float* qs = nullptr;
        int64_t block = 0;
    };
    // `in`'s FP8 form per `block` columns (made now if missing).
    void fp8_input(ConvertedInput& in, int64_t block) const;
    // x [rows, n] RMS-normalized in place (the numerics' bf16 rounding), the norm kernel writing into `in`
    // (which describes x) its FP8 form per `block` columns (0: none) and its bf16 form (`bf16`) in the same
    // pass, where the kernel can (n % 128 == 0, n <= 8192): the bits act_quant_fp8 and to_bf16 give, without
    // their launches. A form it cannot make stays unmade (the first projection that needs it makes it).
    void rms_norm_forms(const float* weight, float* x, int64_t rows, int64_t n, ConvertedInput& in, int64_t block,
                        bool bf16) const;
    // The FP8 block of project()'s tensor-core form of w, 0 where project() would not quantize its input
    // (not the fast mode, a bf16 weight, or a weight the fast GEMMs do not take).
    int64_t fast_fp8_block(const DeviceLinear& w) const;
    // y[rows, out] = x · Wᵀ with the numerics' rounding points (official: act_quant before FP8/FP4);
    // `in` (optional, when it describes x): its converted forms are taken or kept there.
    void project(const DeviceLinear& w, const float* x, int64_t rows, float* y, ConvertedInput* in = nullptr) const;
    // The fast (tensor-core) form of project() for a supported weight; returns false otherwise.
    // k_chunks > 0: that many split-K chunks instead of the weight's own (a joined weight computing each
    // part's bits: the part's fast_linear_k_chunks).
    bool project_fast(const DeviceLinear& w, const float* x, int64_t rows, float* y, bool round_bf16,
                      ConvertedInput* in = nullptr, int k_chunks = 0) const;
    // The reference's FP32 linear of a bf16 weight (compressor wkv/wgate, router gate): f32 output, no
    // act_quant. In the fast GEMM mode with official numerics the activations hold bf16 values, so the
    // bf16 tensor-core GEMM computes the same products exactly (bf16 x bf16 fits f32) and differs only
    // in the order of the f32 sums; otherwise the reference kernel.
    void project_f32(const DeviceLinear& w, const float* x, int64_t rows, float* y, ConvertedInput* in = nullptr) const;
    // The fast mode's mHC mixing logits (and dot(x, x)) into mix [rows, outputs + 1] by the split-K
    // kernel (hc_mix_splitk); false when the mode is off.
    bool hc_mix_fast(const DeviceHc& w, const float* x, int64_t rows, int64_t outputs, float* mix) const;
    // The same kernel's partial planes only (no reduce launch), for hc_pre / hc_head to sum themselves
    // (HcPreParams::mix_partial: the same additions); {null, 0} when the mode is off. The planes stay in
    // the workspace past its mark: the consumer must be the next launch.
    struct MixPartials {
        const float* partial = nullptr;
        int64_t splits = 0;
    };
    MixPartials hc_mix_partials(const DeviceHc& w, const float* x, int64_t rows, int64_t outputs) const;
    void run_layer(const DeviceLayer& lw, const Batch& b, float*& x, float*& y) const;
    // `made` (optional): a's forms made by its norm (rms_norm_forms), taken instead of converting a again.
    void attention(const DeviceLayer& lw, const Batch& b, const float* a, float* out, const ConvertedInput* made = nullptr) const;
    void moe(const DeviceLayer& lw, const Batch& b, const float* a, float* out, const ConvertedInput* made = nullptr) const;
    // Embedding -> layers -> head over a batch whose inputs are on the device; returns the logits
    // [b.num_picked, vocab] (arena memory, valid until the forward resets the arena; null without
    // picked rows). Enqueues only: no allocation, no host synchronization, so a graph can capture it.
    float* compute(const Batch& b) const;
    // Logits [rows, vocab] (arena) of final streams xs [rows, hc, D] through `hc` head, `norm` and the LM head.
    float* head_logits(const float* xs, int64_t rows, const DeviceHc& hc, const float* norm) const;

    // ---- DSpark of V4-Flash-0731 (cuda_dspark_v4.cpp, cuda_dspark_v4_draft.cpp) ----
    friend class CudaDSparkV4Drafter;
    std::unique_ptr<Drafter> make_dspark_drafter() const;
    void dspark_attach(Sequence& sequence) const;
    uint64_t dspark_state_bytes() const;
    std::vector<Draft> dspark_draft(std::span<const DraftRequest> requests) const;
    int64_t dspark_ring_rows() const { return config_.sliding_window + kRingHeadroom; }
    // The taps of a forward: every attached sequence's last ring-many rows (host tables).
    struct TapPlan {
        std::vector<int32_t> src, pos;  // [M] pass rows and positions
        std::vector<float*> dst;        // [stages, M] ring rows
    };
    // Chunks without drafter taps (SequenceChunk::drafter_taps) keep nothing for the drafter.
    TapPlan dspark_tap_plan(std::span<DeviceSequenceState* const> states, std::span<const SequenceChunk> chunks,
                            const Batch& b) const;
    // A graph step's taps (decode rows, one per segment): every one of its `rows` taps, the size the
    // captured work has; rows whose pass skips the drafter, and padding rows, write their context rows
    // to the sink row (never read).
    TapPlan pad_tap_plan(const TapPlan& plan, int64_t rows) const;
    // After target layer `layer` (streams x): the stream means of the tapped rows; after the layers the
    // context rows into the rings.
    void dspark_tap_layer(int64_t layer, const Batch& b, const float* x, float* taps) const;
    void dspark_write_context(const Batch& b, const float* taps) const;
    // The MoE of one block over S rows with E experts, top K (a target layer or a DSpark stage).
    void moe_rows(const DeviceLayer& lw, int64_t S, const int32_t* tokens, int64_t E, int64_t K, const float* a,
                  float* out, ExpertExchange* exchange, const ConvertedInput* made = nullptr) const;
    size_t dspark_workspace_need(int64_t R) const;

    // ---- MTP (cuda_mtp.cpp) ----
    std::unique_ptr<Drafter> make_mtp_drafter() const;
    // The MTP rows of a target pass over `states` (real chunks, in order): every attached sequence's
    // rows whose next token this pass learns, and its tap-ring writes.
    MtpPassPlan mtp_pass_plan(std::span<DeviceSequenceState* const> states, std::span<const SequenceChunk> chunks) const;
    // The plan of a graph step (b padded, the plan graphable): one MTP row per padding row too (token 0 at
    // position 0 of the padding sequence's window, from its own pass row), a segment per padding segment,
    // and the bucket's row and context sizes, so one graph serves every step of its bucket.
    MtpPassPlan pad_mtp_pass_plan(MtpPassPlan plan, const Batch& b, int64_t real_segments) const;
    static size_t mtp_pass_bytes(const MtpPassPlan& plan);                        // packed input size
    static void mtp_pass_pack(const MtpPassPlan& plan, uint8_t* host);             // into pinned memory
    static void mtp_pass_bind(const MtpPassPlan& plan, const uint8_t* device, Batch& b);  // the copy's device pointers
    // After the layers of compute(): the pass's MTP rows (from the streams x [b.rows, hc, D]) and tap writes.
    void run_mtp_pass(const Batch& b, const float* x) const;
    // Host bookkeeping of the tap rings once the pass has run (before lengths advance).
    static void mtp_pass_done(std::span<DeviceSequenceState* const> states, std::span<const SequenceChunk> chunks);
    // The MTP block over the rows of `mb` (one segment per run of a sequence's consecutive positions):
    // hidden streams h [rows, hc, D] of positions p and the tokens at p+1 (mb.tokens). Returns the
    // block's output streams [rows, hc, D] (arena).
    float* mtp_block(const Batch& mb, const float* h) const;

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
    mutable BenchRouting bench_routing_;  // CudaModelOptions::expert_load_stats, even_routing (guarded by mutex_)
    std::shared_ptr<const DeviceStateLayout> layout_;
    std::shared_ptr<DevicePagePool> pool_;  // every sequence's state (and the padding sequence's)
    uint64_t state_capacity_ = 0;           // pool bytes the engine may fill (the padding sequence's pages excluded)
    DeviceWeights weights_;
    std::vector<std::unique_ptr<DeviceBuffer>> tables_;
    const float* rope_main_ = nullptr;
    const float* rope_comp_ = nullptr;
    OwnedStream stream_;
    std::unique_ptr<DeviceArena> workspace_;
    mutable std::mutex mutex_;  // one forward at a time (the workspace and stream are shared)
    // Guarded by mutex_:
    mutable DecodeGraphs graphs_;  // by (rows, context) bucket; turned off for good if a capture fails
    mutable DraftGraphs draft_graphs_;  // draft calls, by request bucket and sampling; the drafts' device buffers
    bool verify_graphs_;                // ModelOptions::cuda_verify_graphs: steps of short chunks replay graphs too
    mutable DeviceDraws draws_;
    mutable Sequence pad_{nullptr};  // the scratch sequence of padding rows
    mutable std::unique_ptr<PinnedBuffer> pinned_in_;
    mutable std::unique_ptr<PinnedBuffer> pinned_out_;  // MTP drafting's copies back (cuda_mtp_draft.cpp)
    mutable std::unique_ptr<DeviceBuffer> tap_sink_;    // one ring row: see pad_tap_plan (made at the first attach)
    mutable StepTimer timer_;
    mutable CudaModelStats stats_;
    std::unique_ptr<Drafter> mtp_drafter_;  // set when weights_.mtp
    mutable std::unique_ptr<PinnedBuffer> pinned_probs_;  // (mutex_) sampled drafts' distributions, [K, R, vocab]
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
    // A graph step of short chunks (verify rows, a prompt's tail: at most kGraphChunkRows rows each): as
    // many segments as rows (the tail: zero-row segments), every segment sized for kGraphChunkRows rows.
    bool short_chunks = false;
    // The pass's MTP rows (device inputs bound by mtp_pass_bind; null: none).
    const MtpPassPlan* mtp = nullptr;
    const int32_t *mtp_tokens = nullptr, *mtp_positions = nullptr, *mtp_row_segment = nullptr, *mtp_src_row = nullptr;
    const float* const* mtp_src_ptr = nullptr;  // [mtp rows]
    float* const* mtp_tap_dst = nullptr;        // [rows]
    const DeviceSegment* mtp_segments = nullptr;
    // The pass's DSpark taps (cuda_dspark_v4.cpp; device inputs, num_taps 0: none).
    int64_t num_taps = 0;
    const int32_t *tap_src = nullptr, *tap_pos = nullptr;
    float* const* tap_dst = nullptr;  // [stages, num_taps]
};

// The MTP rows of one target pass, built on the host (cuda_mtp.cpp).
struct CudaModel::MtpPassPlan {
    bool any = false;  // some chunk's sequence is attached
    // Every chunk's sequence is attached and has run a position before the chunk: its MTP rows are then
    // the chunk's rows one for one, as a graph step needs (pad_mtp_pass_plan).
    bool graphable = true;
    std::vector<int32_t> tokens, positions, row_segment, src_row;  // [M]: the token at p+1, p, segment, pass row of h_p (-1: ring)
    std::vector<const float*> src_ptr;                              // [M]: the tap-ring row of h_p, or null
    std::vector<DeviceSegment> segments;                            // one per attached chunk with MTP rows
    std::vector<int64_t> first_position, num_rows;
    std::vector<float*> tap_dst;  // [pass rows]: the ring row each pass row's streams go to, or null
    int64_t max_rows = 0, max_position = 0;
};

}  // namespace deepinfer::cuda::v4
