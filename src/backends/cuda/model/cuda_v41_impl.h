// SPDX-License-Identifier: Apache-2.0
// CudaV41Model's declaration, shared by its translation units (cuda_v41_model.cpp: load and the
// forward's steps; cuda_v41_plan.cpp: the host tables of a forward; cuda_v41_compute.cpp: embedding,
// mHC, Engram, MoE and head on the device; cuda_v41_attention.cpp: the CSA2 attention of one layer;
// cuda_v41_workspace.cpp: the workspace bound; cuda_v41_dspark.cpp / cuda_v41_dspark_draft.cpp: the
// DSpark drafter's taps, context rows and drafting).
//
// A forward runs in two phases. The plan (host) walks the batch's segments through the layers the
// way the CPU's SharedState does (what KV / index / candidate sources publish per segment) and packs
// every per-row table the kernels read (row pointers, destinations, index rows, Engram rows) into one
// input block, copied to the workspace with one transfer. compute() (device) then only enqueues
// kernels reading that block: no host work, no allocation outside the arena, no synchronization, so
// a decode step's compute() can be captured into a CUDA graph and replayed with the next step's block.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/model/cuda_model.h"
#include "backends/cuda/model/cuda_v41_state.h"
#include "backends/cuda/model/cuda_v41_weights.h"
#include "backends/cuda/model/bench_routing.h"
#include "backends/cuda/model/decode_graphs.h"
#include "backends/cuda/model/draft_graphs.h"
#include "backends/cuda/model/device_draws.h"
#include "backends/cuda/model/step_timer.h"
#include "deepinfer/check.h"
#include "deepinfer/drafter.h"
#include "deepinfer/engram.h"
#include "deepinfer/model.h"
#include "deepinfer/model_config_v41.h"

namespace deepinfer::cuda {

// Forwards of at most this many rows run a site's mHC mixes on their own stream (CudaModelOptions::v41_hc_side_stream):
// decode batches, whose sites are chains of short launches; at prefill sizes each launch fills the GPU alone.
constexpr int64_t kHcSideRows = 512;

// The host side of a forward's input block: tables appended at 256-byte aligned offsets.
class InputBlock {
public:
    void clear() { bytes_.clear(); }
    template <class T>
    size_t add(const T* data, size_t n) {
        const size_t at = (bytes_.size() + 255) & ~size_t(255);
        bytes_.resize(at + std::max<size_t>(n * sizeof(T), 1));
        if (n > 0) std::memcpy(bytes_.data() + at, data, n * sizeof(T));
        return at;
    }
    template <class T>
    size_t add(const std::vector<T>& v) {
        return add(v.data(), v.size());
    }
    size_t size() const { return bytes_.size(); }
    const uint8_t* data() const { return bytes_.data(); }

private:
    std::vector<uint8_t> bytes_;
};

class CudaV41Model;
// The Drafter of a CudaV41Model with a DSpark drafter (cuda_v41_dspark.cpp).
std::unique_ptr<Drafter> make_cuda_v41_dspark_drafter(const CudaV41Model& model);

class CudaV41Model final : public Model, public CudaModelRuntime {
public:
    CudaV41Model(const std::string& dir, const ModelOptions& options, const CudaModelOptions& cuda_options);

    const ModelInfo& info() const override { return info_; }
    Numerics numerics() const override { return numerics_; }
    // Pages of the device pool: the ring pages and one entry page per page_tokens positions.
    uint64_t estimate_state_bytes(int64_t tokens, uint64_t) const override { return layout_->sequence_bytes(tokens); }
    uint64_t state_capacity_bytes() const override { return state_capacity_; }
    const V41StateLayout& state_layout() const { return *layout_; }
    Sequence new_sequence() const override { return new_sequence(nullptr); }
    Sequence new_sequence(std::shared_ptr<StatePool>) const override;
    std::vector<float> forward(Sequence& seq, std::span<const int32_t> tokens, bool all_logits) const override;
    std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const override {
        return forward_sampled(chunks, {}, {}).logits;
    }
    bool can_sample_on_device(const DeviceDraw& d) const override { return device_draw_supported(d); }
    // The DSpark drafter on the device (cuda_v41_dspark.cpp) when the checkpoint has one (one GPU only).
    const Drafter* drafter() const override { return dspark_drafter_.get(); }
    ForwardOutputs forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want_logits,
                                   std::span<const DeviceDraw> draws) const override;

    // CudaModelRuntime.
    CudaModelStats stats() const override;
    void reset_stats() const override;
    void set_even_routing(bool on) const override;
    int64_t max_len() const override { return max_len_; }
    size_t workspace_bound(int64_t rows, int64_t sequences, int64_t logit_rows, int64_t positions,
                           int64_t draws) const override {
        return workspace_need(rows, sequences, logit_rows, positions, draws);
    }
    int64_t replay_tail_rows(std::span<const SequenceChunk> chunks, std::span<const DeviceDraw> draws) const override;

    // Engram table bytes read in place from the checkpoint's mapping (shared by every process on the
    // host) and bytes copied into this process's pinned buffers (devices without read-only mapping).
    size_t engram_shared_bytes() const { return weights_.shared_host_bytes; }
    size_t engram_copied_bytes() const { return weights_.host_bytes; }

    // What source layers publish within one forward for one segment (model/v41/attention.h SharedState).
    struct Shared {
        int64_t kv_source = -1;  // layer of the latest KV source
        bool has_topk = false;
        bool has_candidates = false;
        int64_t candidate_entries = 0;
    };
    // Offsets in the input block (b.in) of one layer's tables, and their sizes.
    struct CompressPlan {
        int64_t groups = 0;  // groups the forward completes (graph steps: one slot per row, unused ones discarded)
        size_t kv_rows = 0, gate_rows = 0, group_pos = 0, entry_dst = 0, key_dst = 0, ring_kv = 0, ring_gate = 0;
    };
    struct IndexPlan {
        int64_t rows = 0, max_entries = 0;  // IndexRows (graph steps: one per row) and the scores' width
        bool candidates = false;            // run the candidate stage (build or mask)
        size_t index_rows = 0, lengths = 0;
        int64_t source = -1;  // the KV source whose keys it scores (the same for every segment)
    };
    struct LayerPlan {
        CompressPlan compress;
        IndexPlan index;
        size_t sink_segments = 0, ring_dst = 0;
        int64_t kv_source = -1;  // the layer whose entries the attention reads (the same for every segment)
        // Keys pre-decoded to bf16 rows (bf16_key_plan.h; key_rows 0: none): the segments' SinkBf16Keys in the
        // input block, the key buffer's rows and key_rows_bf16's largest segment.
        size_t bf16_keys = 0;
        int64_t bf16_key_rows = 0, bf16_max_rows = 0;
        bool bf16_all = false;  // every segment's keys are pre-decoded
    };
    struct Replay;
    struct Batch {
        int64_t rows = 0, max_position = 0, max_rows = 0;
        bool graph = false;  // sizes from the buckets: one captured graph serves every step of its bucket
        std::vector<V41DeviceState*> states;                        // per segment (graph steps: padding too)
        std::vector<int64_t> row_begin, num_rows, first_position;  // per segment
        std::vector<uint8_t> drafter_taps;  // per real segment: its rows tap for the DSpark drafter
        std::vector<int32_t> tokens;                                // [rows] host
        // Image spans (SequenceChunk::image_span): 1 for a row inside one, [rows] host. A step with
        // any runs eagerly (graph steps never carry image rows: their kernels read no flags).
        std::vector<uint8_t> image;
        bool any_image = false;
        size_t image_rows = 0;  // offset of `image` in the input block (when any_image)
        std::vector<Shared> shared;                                 // per segment, while planning
        std::vector<LayerPlan> layers;
        int64_t num_picked = 0;  // rows of logits
        size_t positions = 0, row_segment = 0, token_ids = 0, pre_mix = 0, picked = 0, code_rows = 0, engram_rows = 0;
        // Scratch every layer reuses, taken before the plan (their addresses are in its tables).
        float* ckv = nullptr;    // [rows, head_dim] compressor kv projection
        float* cg = nullptr;     // [rows, head_dim] compressor gate projection
        uint8_t* codes = nullptr;  // [rows, window row bytes] compact window K=V rows
        const uint8_t* in = nullptr;  // the input block on the device
        // Per segment a page table of its entry pages: [segments, table_len] (graph steps: the length
        // from the context bucket, so every step of a bucket has the same layout).
        size_t entry_tables = 0;
        int64_t table_len = 0;
        template <class T>
        const T* at(size_t offset) const {
            return reinterpret_cast<const T*>(in + offset);
        }
        // DSpark taps (cuda_v41_dspark.cpp): rows of attached segments whose context rows this pass writes.
        int64_t num_taps = 0;
        size_t tap_src = 0, tap_pos = 0, tap_dst = 0;  // [num_taps] rows, positions; [stages, num_taps] ring rows
        int32_t* topk = nullptr;  // [rows + 1, index_topk] published top-k (device; row `rows`: discarded)
        uint8_t* mask = nullptr;  // [rows + 1, mask_ld] candidate mask (device)
        int64_t mask_ld = 0;
        // Bounded replay (cuda_v41_replay.cpp): per segment the first position its window keys may have
        // (empty: 0, the full window), and the batch's cut at the decoder (null: none).
        std::vector<int64_t> window_begin;
        int64_t window_begin_of(size_t i) const { return i < window_begin.size() ? window_begin[i] : 0; }
        std::shared_ptr<Replay> replay;
    };
    // Bounded replay's cut (docs/v41-bounded-replay.md): at `layer` (the decoder's first) the rows before
    // each replayed segment's last W run that layer's compressor and index keys only (`head`: one segment
    // per replayed one); the layers from there on run `tail` (the last W rows of replayed segments, every
    // row of the others, window keys of replayed segments from their first kept position).
    struct Replay {
        int64_t layer = -1;
        std::vector<uint8_t> replayed;  // per segment of the batch
        std::vector<int32_t> row_map;   // batch row -> tail row (-1: dropped)
        Batch head, tail;
    };

private:
    bool official() const { return numerics_ == Numerics::kOfficial; }
    // The fast mode's bf16 forms of one projection input x [rows, cols], made once for all the projections
    // that read it (the attention's a and qr, the MoE's a): `quant` = act_quant per 32 then bf16 (for the
    // FP8-origin weights uploaded as bf16), `plain` = bf16 (bf16 weights). Null until the first projection that
    // needs it makes it (in the workspace, kept until the caller's mark is reset); the same bf16 values as
    // converting for each projection.
    struct InputForms {
        const float* x = nullptr;
        int64_t rows = 0, cols = 0;
        uint16_t* quant = nullptr;
        uint16_t* plain = nullptr;
    };
    // What a projection does with its scratch (act_quant / bf16 conversions, split-K partials). kRelease: returned to
    // the arena after the launch (stream-ordered: later work on the same stream reuses it). kKeep: left allocated
    // for the caller's mark, the launch unsplit (Engram's projection on the side stream, kept for the whole
    // forward). kKeepSplit: left allocated, split-K partials included (the shared expert on its stream: released
    // after the join).
    enum class Scratch : uint8_t { kRelease, kKeep, kKeepSplit };
    // y = x · Wᵀ with V4.1's rounding points: official = act_quant per 32 before FP8/FP4 weights, bf16 output.
    // `scratch`: see Scratch (anything but kRelease for work on another stream). `forms`: x's converted forms,
    // taken or kept there (when they describe x; with kept scratch only taken, never made).
    void project(const DeviceLinear& w, const float* x, int64_t rows, float* y, Stream s = {}, Scratch scratch = Scratch::kRelease,
                 InputForms* forms = nullptr) const;
    // A linear the reference runs in bf16 (no activation quantization; bf16 output in official numerics).
    void project_bf16(const DeviceLinear& w, const float* x, int64_t rows, float* y, InputForms* forms = nullptr, Stream s = {},
                      Scratch scratch = Scratch::kRelease) const;
    // The reference's fp32 linear of a bf16 weight (ratio-2 compressor projections, router): f32 output.
    // Fast GEMM mode with official numerics: bf16 tensor cores (the activations hold bf16 values, so
    // the products are exact in f32; only the order of the sums differs); otherwise the reference kernel.
    void project_f32(const DeviceLinear& w, const float* x, int64_t rows, float* y, InputForms* forms = nullptr, Stream s = {},
                     Scratch scratch = Scratch::kRelease) const;
    // The form of forms.x that project_fast converts for a bf16 weight (act_quant: the QAT form, else the plain bf16
    // values) into forms, where the fast mode has none yet: made on stream s before work on another stream takes it.
    void make_form(InputForms& forms, bool act_quant, Stream s) const;
    void bf16_form(const float* x, int64_t x_ld, int64_t rows, int64_t K, bool act_quant, uint16_t* xb, Stream s) const;
    // The fast GEMM mode's form of a linear (tensor cores, gemm_fast.h): y[rows, y_ld] = x[rows, x_ld] · Wᵀ.
    // BF16 weights (also the FP8 ones dequantized at load) take bf16 activations, act_quant'ed per 32
    // first with `act_quant`; FP8 (128x128 blocks) / FP4 weights take FP8 activations quantized per 128,
    // FP8 with 32x32 blocks (kept FP8 on Hopper) per 32.
    // False (nothing enqueued) when the mode is off or the weight is not supported.
    bool project_fast(const DeviceLinear& w, const float* x, int64_t x_ld, int64_t rows, float* y, int64_t y_ld,
                      bool act_quant, bool round_bf16, Stream s, Scratch scratch, InputForms* forms = nullptr) const;

    // The plan (cuda_v41_plan.cpp): every layer's tables in `in`, the segments' SharedState walked.
    void plan(Batch& b, InputBlock& in) const;
    void plan_compress(int64_t layer, Batch& b, InputBlock& in) const;
    void plan_index(int64_t layer, Batch& b, InputBlock& in) const;
    void plan_attention(int64_t layer, Batch& b, InputBlock& in) const;
    // Bounded replay (cuda_v41_replay.cpp): which chunks replay (their cut set in b.replay), the head's and
    // tail's tables, their device pointers after the input copy, and at the cut the head's compressor and
    // the kept rows compacted (returns the batch the decoder runs).
    static int64_t replay_layer(const V41TextConfig& c, const ModelOptions& options, const std::string& dir);
    void mark_replay(Batch& b, std::span<const SequenceChunk> chunks, std::span<const uint8_t> drawn) const;
    void plan_replay(Batch& b, InputBlock& in) const;
    void bind_replay(Batch& b) const;
    const Batch& replay_cut(const Batch& b, float* x, float* pre_mix, std::span<float* const> engram_kv,
                            bool& waited) const;
    // The paged rows of KV source `layer`'s entries or index keys in the batch's page tables.
    PagedCacheRows paged_rows(const Batch& b, int64_t layer, bool keys) const;

    // The paged state (cuda_v41_state.cpp, device_page_pool.h): the pool, sized at load; before a
    // forward, the pages it writes made the states' own (copies of shared pages, fresh ones zeroed, on
    // the model stream). Throws when the pool is exhausted (states unchanged but their pages).
    void make_state_pool(uint64_t bytes);
    void prepare_writes(std::span<V41DeviceState* const> states, std::span<const int64_t> rows) const;
    // Engram rows of every segment's tokens (host), history rings updated: [n_engram, rows, cols]
    // (image-span rows enter the history as kEngramDead: no n-gram reaches across them).
    std::vector<int64_t> engram_rows(const Batch& b) const;

    // The device work of a planned batch (enqueue only): returns the logits [b.num_picked, vocab]
    // (arena memory; null without picked rows).
    float* compute(const Batch& b) const;
    // a_quant: a's QAT bf16 form made by the site's norm (qat_form), or null.
    void attention(int64_t layer, const Batch& b, const float* a, float* out, uint16_t* a_quant = nullptr) const;
    // compress: on stream s (the model's by default) with the projections' scratch as `scratch` says (work on the
    // attention's side stream keeps it until the join).
    void compress(int64_t layer, const Batch& b, const float* a, InputForms* fa = nullptr, Stream s = {},
                  Scratch scratch = Scratch::kRelease) const;
    // index: before_scores (when given) runs after the indexer's queries are made and before their scores read the
    // KV source's index keys (the join of the attention's side stream, which wrote them).
    void index(int64_t layer, const Batch& b, const float* a, const float* qr, InputForms* fa = nullptr,
               InputForms* fq = nullptr, const std::function<void()>* before_scores = nullptr) const;
    void moe(int64_t layer, const Batch& b, const float* a, float* out, uint16_t* a_quant = nullptr) const;
    // One mHC site's mixes of the streams x [rows, hc, D] (HcMixesParams): pre [rows, hc], post, comb, and
    // the collapse of x with collapse_pre into collapsed [rows, D]. The fast mode: the split-K tensor-core
    // mixing logits then hc_pre (f32-accurate, not the CPU's order); else the reference kernel (the CPU's
    // bits). Every site of the model, the bounded replay's head rows and the DSpark stages take this.
    // collapsed = null (fast mode only): no collapse (the previous site's hc_post wrote it, HcPostParams::collapse_pre).
    // keep: the mixing partials stay allocated (work on the mHC stream: the caller releases them after the join).
    void hc_site(const DeviceHc& hw, const float* x, int64_t rows, float* pre, float* post, float* comb,
                 const float* collapse_pre, float* collapsed, Stream s, bool keep = false) const;
    // The MoE of one block over S rows with E routed experts, top K (a target layer or a drafter stage).
    // `image_rows` ([S] device, or null): rows inside an image span select experts with bias_vl.
    // replay_tail: a layer from the bounded replay's cut on: the exchange's tail counts (every rank's from the same
    // layer, whether or not its own chunks replay: a rank without a replayed chunk has the same count in both).
    void moe_rows(const V41DeviceLayer& lw, int64_t E, int64_t K, int64_t S, const float* a, float* out,
                  ExpertExchange* exchange, const uint8_t* image_rows = nullptr, uint16_t* a_quant = nullptr,
                  bool replay_tail = false) const;
    // A [rows, cols] buffer (workspace) for the QAT bf16 form (InputForms::quant) of a norm's output x that
    // `w` will read, for the norm to write (RmsNormParams::out_bf16_qat); null where w's projection would not
    // take that form (not the fast mode's bf16 weights from FP8 under official numerics) or the norm cannot
    // write it (width, alignment).
    uint16_t* qat_form(const DeviceLinear& w, int64_t rows, int64_t cols, const float* norm_weight, const float* x) const;

    // DSpark (cuda_v41_dspark.cpp, cuda_v41_dspark_draft.cpp).
    friend class CudaV41DSparkDrafter;
    void dspark_attach(Sequence& sequence) const;
    uint64_t dspark_state_bytes() const;
    std::vector<Draft> dspark_draft(std::span<const DraftRequest> requests) const;
    // The plan's tap tables for the attached segments (their last ring-many rows); the device work:
    // the stream means entering a tapped layer, and after the layers the context rows into the rings.
    void plan_taps(Batch& b, InputBlock& in) const;
    void tap_layer(int64_t layer, const Batch& b, const float* x, float* taps) const;
    void write_context(const Batch& b, const float* taps) const;
    // One stage's DSparkAttention over S = requests * block rows (cuda_v41_dspark_draft.cpp).
    void dspark_stage_attention(const V41DeviceLayer& lw, int64_t requests, const int32_t* positions,
                                const int32_t* anchor_positions, const uint8_t* const* rings, const float* a,
                                float* out) const;
    int64_t dspark_ring_rows() const;
    // Upper bound of the workspace a draft of R requests takes.
    size_t dspark_workspace_need(int64_t R) const;
    // Upper bound of the workspace one forward takes (cuda_v41_workspace.cpp): S rows in N segments,
    // R rows of logits, positions below P, D device draws.
    size_t workspace_need(int64_t S, int64_t N, int64_t R, int64_t P, int64_t D) const;
    // The shared expert's scratch kept on its own stream through an MoE site of S rows (cuda_v41_workspace.cpp).
    size_t shared_expert_kept(int64_t S) const;
    // The attention site's side-stream scratch kept until its join, for S rows (cuda_v41_workspace.cpp).
    size_t attention_side_kept(int64_t S) const;

    int device_;  // made current first (the streams, events, buffers below live there) and by every forward
    ExpertExchange* ep_ = nullptr;  // expert parallelism (cuda_model.h CudaModelOptions), else null
    int64_t ep_rank_ = 0;
    V41ModelConfig config_;
    ModelInfo info_;
    Numerics numerics_ = Numerics::kExact;
    int64_t max_len_ = 0;
    ForwardLimits limits_;  // the largest forward the workspace is sized for
    V41CacheFormats formats_;
    bool fast_ = false;  // CudaModelOptions::gemm == kFast
    bool bf16_attention_io_ = true;  // CudaModelOptions::v41_bf16_attention_io
    int64_t attention_split_rows_ = 0;  // CudaModelOptions::v41_attention_split_rows
    int64_t bf16_key_rows_ = 0;         // CudaModelOptions::v41_bf16_key_rows
    bool shared_expert_stream_ = true;  // CudaModelOptions::v41_shared_expert_stream
    bool attention_side_stream_ = true;  // CudaModelOptions::v41_attention_side_stream
    bool hc_side_stream_ = true;         // CudaModelOptions::v41_hc_side_stream
    EngramTokenMap token_map_;
    EngramLayout engram_layout_;
    int64_t engram_pad_ = 0;
    std::unique_ptr<const v41::Weights> host_;  // the checkpoint mapping the shared Engram tables live in
    int64_t dspark_stages_ = 0;  // the DSpark drafter's stages on the device (0: no drafter)
    int64_t replay_layer_ = -1;  // ModelOptions::v41_bounded_replay: the decoder's first layer, else -1
    // Where a sequence's state lies in the pool's pages (before the workspace: its bound counts the page tables).
    std::shared_ptr<const V41StateLayout> layout_;
    std::shared_ptr<DevicePagePool> pool_;  // every sequence's and snapshot's state (made at load)
    uint64_t state_capacity_ = 0;           // pool bytes the engine may fill (the padding sequence's pages excluded)
    V41DeviceWeights weights_;
    std::vector<std::unique_ptr<DeviceBuffer>> tables_;
    const float* rope_main_ = nullptr;
    const float* rope_comp_ = nullptr;
    OwnedStream stream_, side_stream_;
    mutable OwnedEvent engram_fork_, engram_ready_;
    // The shared expert's stream (CudaModelOptions::v41_shared_expert_stream): forked after the router, joined before
    // the combine.
    OwnedStream shared_stream_;
    mutable OwnedEvent shared_fork_, shared_done_;
    // The attention site's window K=V path and compressor on the same stream (CudaModelOptions::
    // v41_attention_side_stream): forked after wq_a, joined before the indexer's scores (or the attention).
    mutable OwnedEvent attn_fork_, attn_done_;
    // A site's mHC mixes (hc_site) on their own stream (CudaModelOptions::v41_hc_side_stream), beside its norm and
    // block, joined before its hc_post.
    OwnedStream hc_stream_;
    mutable OwnedEvent hc_fork_, hc_done_;
    mutable std::mutex mutex_;  // one forward at a time (workspace, pinned inputs, streams are shared)
    // Guarded by mutex_:
    mutable DeviceDraws draws_;
    // The workspace: sized at load (CudaModelOptions::workspace_bytes, else workspace_need() of the
    // largest forward the limits allow; initialized after the members that bound uses).
    mutable DeviceArena workspace_;
    mutable DecodeGraphs graphs_;  // by (rows, context) bucket
    mutable DraftGraphs draft_graphs_;  // DSpark draft calls, by request bucket and sampling; the drafts' device buffers
    bool verify_graphs_;  // ModelOptions::cuda_verify_graphs
    mutable BenchRouting bench_routing_;  // CudaModelOptions::expert_load_stats, even_routing
    mutable Sequence pad_{nullptr};  // the scratch sequence of graph steps' padding rows
    mutable InputBlock input_;
    mutable std::unique_ptr<PinnedBuffer> pinned_in_;
    mutable std::unique_ptr<PinnedBuffer> pinned_out_, pinned_probs_;  // drafting's results
    mutable std::unique_ptr<DeviceBuffer> tap_sink_;  // one ring row: see plan_taps (made at the first attach)
    std::unique_ptr<Drafter> dspark_drafter_;  // set when dspark_stages_ > 0
    mutable StepTimer timer_;
    mutable CudaModelStats stats_;
};

}  // namespace deepinfer::cuda
