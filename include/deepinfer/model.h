// SPDX-License-Identifier: Apache-2.0
// A model of the DeepSeek-V4 family on the CPU backend, behind one interface: load a checkpoint
// directory (DeepSeek-V4 or DeepSeek-V4.1; Model::load recognizes the family from config.json), open
// sequences, run chunks of tokens (prefill of any chunk size, then decode token by token) and read
// logits. A Model is immutable after load and may serve many sequences; a Sequence is used by one
// thread at a time. The engine (engine.h) and `deepinfer run` see only this interface.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "deepinfer/tensor.h"

namespace deepinfer {

enum class Numerics : uint8_t {
    kExact,     // fp32 everywhere, no quantization simulation (matches transformers)
    kOfficial,  // the rounding points of DeepSeek's official inference code (spec §5)
};
Numerics parse_numerics(std::string_view name);  // "exact" | "official"
std::string_view numerics_name(Numerics numerics);

// Every switch of model loading (style.md §7).
struct ModelOptions {
    // nullopt-like default: official for FP8/FP4 checkpoints, exact otherwise.
    bool numerics_from_checkpoint = true;
    Numerics numerics = Numerics::kExact;
    // DeepSeek-V4.1: the tokenizer.json its Engram token map is derived from. Empty: the checkpoint's
    // own tokenizer.json, else the bundled DeepSeek tokenizer (assets/tokenizer/deepseek-v4).
    std::string tokenizer_json;
    // DeepSeek-V4.1, approximate and off by default: "SWA bounded replay" prefill (spec
    // deepseek-v41-model.md §2.3). A chunk of more than sliding_window tokens whose logits are wanted
    // for its last token only runs the decoder half (from the first ratio-1 layer on) on its last
    // sliding_window tokens, with their window attention truncated to those tokens; the earlier rows
    // run the encoder and the first decoder layer's compressor and index keys only. Results then
    // depend on how a prompt is chunked (docs/v41-bounded-replay.md gives the measured error).
    bool v41_bounded_replay = false;
    // Where the forward runs (--device): the CPU reference, or one CUDA GPU (DeepSeek-V4 only so far;
    // builds without nvcc reject it).
    Device device = Device::kCpu;
    int64_t max_model_len = 0;  // CUDA: longest sequence held on the GPU (0: min(max_position_embeddings, 65536))
    // CUDA: scratch of one forward, allocated at load. 0: sized from the limits below (the largest
    // batch the engine can form at the longest sequence), so no forward ever allocates.
    uint64_t device_workspace_bytes = 0;
    // CUDA: the device page pool every sequence's and prefix snapshot's state lives in, allocated at
    // load (--device-state-gib). 0: room for max_num_seqs sequences of max_model_len tokens, within
    // 90% of the device memory left after the weights and the workspace (less 1 GiB).
    uint64_t device_state_bytes = 0;
    // CUDA: positions per page of compressed entries / indexer keys (a multiple of every compression
    // ratio; 0: the smallest such multiple >= 256). The copy-on-write granularity of prefix snapshots.
    int64_t device_page_tokens = 0;
    int64_t max_batch_tokens = 2048;  // CUDA, workspace sizing: rows of one forward (EngineConfig::max_num_batched_tokens)
    int64_t max_num_seqs = 256;       // CUDA, workspace sizing: sequences of one forward (EngineConfig::max_num_seqs)
    // CUDA: replay a captured CUDA graph for pure decode steps (one graph per padded batch-size and
    // context bucket, captured on first use); off: every step launches its kernels one by one.
    // Both paths give bit-identical results.
    bool cuda_graphs = true;
    // CUDA (V4 and V4.1), with cuda_graphs: steps of short chunks (at most kGraphChunkRows rows each:
    // speculative verify rows, decode rows, prompt tails) replay the graph of their rows' bucket too.
    bool cuda_verify_graphs = true;
    // CUDA, Hopper and newer: kernels start while the kernel before them finishes (programmatic
    // dependent launch; each waits for its inputs inside). Off: plain stream order. Same results.
    bool cuda_pdl = true;
    // CUDA: tensor-core GEMMs (--gemm fast; equal to the CPU within tolerances, batch-invariant) instead
    // of the bit-exact reference kernels (--gemm reference).
    bool device_fast_gemm = false;
    // CUDA, fast GEMMs, V4.1 (--gemm fast-fp8): the dense FP8 linears stay FP8 on Hopper (native 32x32-block
    // kernel: half their bytes; slower than their bf16 form from 128 rows today) instead of exact bf16.
    bool device_fp8_native = false;
    // CUDA: GPUs of one replica (--gpus-per-replica): > 1 shards the routed experts across the first
    // `gpus` visible GPUs (expert parallelism over NCCL, one host thread per GPU).
    int64_t gpus = 1;
};
Device parse_device(std::string_view name);  // "cpu" | "cuda"

// What the engine and the CLI need to know about any model of the family.
struct ModelInfo {
    std::string family;  // "deepseek_v4" | "deepseek_v41"
    int64_t vocab_size = 0;
    std::vector<int64_t> eos_token_ids;
    int64_t max_position_embeddings = 0;
};

class StatePool;
class Drafter;

// One token drawn on the model's device (GPU backends) from a logits row of chunk `chunk`, with the
// engine's sampling rules (src/engine/sampler.cpp) and its counter-based random stream (seed, stream,
// counter): greedy, temperature, top-k/top-p/min-p (a draw the device cannot finish comes back as token
// -1 with its logits row: ForwardOutputs::draw_logits; a verify row also with its draft's distribution,
// ForwardOutputs::draw_probs, and the engine decides it with verify_row). Several draws may read the same
// row (n > 1 siblings). Requests with logit bias, penalties, logprobs or a grammar mask are sampled by the
// engine from host logits instead.
// Speculative verification (engine/speculative/verify.h's verify_row) on the device: with `draft` >= 0
// the draw is the token a verify row commits: greedy, the argmax (accepted when it is the draft); else
// the draft when counter_uniform(seed, accept_stream, counter) * q(draft) < p(draft) (accepted), else a
// draw from the residual max(p - q, 0). q: `draft_probs` (device memory of the model's device, [vocab]
// f32: Draft::device_probs), or null: one-hot on the draft.
struct DeviceDraw {
    int32_t chunk = 0;
    int32_t row = -1;  // the chunk's row (index into its tokens) whose logits it reads; -1: the last
    uint64_t seed = 0, stream = 0, counter = 0;  // counter: tokens the completion has generated
    double temperature = 1.0;
    int64_t top_k = 0;
    double top_p = 1.0, min_p = 0.0;
    int32_t draft = -1;               // the draft this row verifies; -1: an ordinary draw
    uint64_t accept_stream = 0;       // stream of the acceptance uniform (same seed and counter)
    const float* draft_probs = nullptr;
};

// What forward_sampled returns: logits of the chunks that asked for them (empty for the others) and
// one token per draw.
struct ForwardOutputs {
    std::vector<std::vector<float>> logits;
    std::vector<int32_t> tokens;    // per draw; -1: the device could not draw it (see draw_logits)
    std::vector<uint8_t> accepted;  // per draw: 1 when it verified its draft and accepted it
    // Per draw: empty, or for a draw the device could not make (top-p / min-p keeping more ids than the
    // device sampler sorts) its logits row [vocab], for the host sampler (verify rows: verify_row).
    std::vector<std::vector<float>> draw_logits;
    // Per draw: empty, or for a verify draw the device could not make whose draft has a distribution
    // (DeviceDraw::draft_probs) that distribution [vocab], for verify_row on the host.
    std::vector<std::vector<float>> draw_probs;
};

// The decode state of one sequence; each family derives its own. Its growing parts live in pages of
// a StatePool (model/paged_rows.h) that copies share, copy-on-write.
class SequenceState {
public:
    virtual ~SequenceState() = default;
    virtual int64_t num_tokens() const = 0;  // tokens consumed; the next token's position
    // A copy that shares every page with this state (copy-on-write): prefix snapshots and forks.
    virtual std::unique_ptr<SequenceState> clone() const = 0;
    // Forgets every token from position `num_tokens` on (rejected speculative rows): no undo of ring
    // contents, because later passes overwrite those slots before any query reads them.
    virtual void truncate(int64_t num_tokens) = 0;
    virtual size_t bytes() const = 0;           // memory referenced (shared pages counted in full)
    virtual size_t unshared_bytes() const = 0;  // memory held by this state alone
};

// The decode state of one sequence (opaque to callers).
class Sequence {
public:
    explicit Sequence(std::unique_ptr<SequenceState> state);
    ~Sequence();
    Sequence(Sequence&&) noexcept;
    Sequence& operator=(Sequence&&) noexcept;
    int64_t num_tokens() const;  // tokens consumed so far (the next position)
    size_t state_bytes() const;
    // A copy sharing the state's pages (copy-on-write): continues independently of this one.
    Sequence fork() const;
    // Forgets every token from position `num_tokens` on (speculative rollback).
    void truncate(int64_t num_tokens);
    SequenceState& state() { return *state_; }
    const SequenceState& state() const { return *state_; }

private:
    std::unique_ptr<SequenceState> state_;
};

// One sequence's part of a batched forward: `tokens` continue `sequence` at its next position.
struct SequenceChunk {
    Sequence* sequence = nullptr;
    std::span<const int32_t> tokens;
    bool all_logits = false;  // logits for every token, else for the last one only
    // The seam for a vision tower (DeepSeek-V4.1): empty for text, else one flag per token, 1 for a
    // position inside an image span (its Engram n-gram history entry is DEAD, its Engram gate 0 and its
    // router selects with bias_vl; spec deepseek-v41-model.md §5, §6.2, §9). Models without vision
    // reject a non-empty span.
    std::span<const uint8_t> image_span = {};
    // Speculative decoding, for a sequence attached to a drafter: false lets the model keep nothing
    // for the drafter from this pass (no taps, no drafter rows), so the step can run as a plain one (a
    // GPU model replays its CUDA graph). Until a later pass with taps covers the sequence's last
    // position, the engine does not draft for it; drafter rows of the skipped positions stay stale (drafts
    // stay valid, only less likely to be accepted). Models may ignore it (they tap anyway).
    bool drafter_taps = true;
};

class Model {
public:
    // A DeepSeek-V4 or DeepSeek-V4.1 checkpoint directory (recognized from config.json).
    static std::unique_ptr<Model> load(const std::string& checkpoint_dir, const ModelOptions& options = {});
    virtual ~Model() = default;

    virtual const ModelInfo& info() const = 0;
    virtual Numerics numerics() const = 0;
    // Bytes of the state of a sequence of `num_tokens` tokens with pool pages of `page_bytes` (for
    // admission before the sequence exists): what state_bytes() reports for such a sequence.
    virtual uint64_t estimate_state_bytes(int64_t num_tokens, uint64_t page_bytes) const = 0;
    // Bytes of state the model itself can hold (a GPU model's device page pool; the engine admits
    // within the smaller of this and its own budget). 0: no limit of its own (the engine's StatePool).
    virtual uint64_t state_capacity_bytes() const { return 0; }
    virtual Sequence new_sequence() const = 0;
    // A sequence whose growing state is paged in `pool` (shared with copies of it).
    virtual Sequence new_sequence(std::shared_ptr<StatePool> pool) const = 0;
    // Runs `tokens` at positions sequence.num_tokens().. and advances the sequence. Returns logits
    // [tokens.size(), vocab_size] row-major when `all_logits`, else the last row only [1, vocab_size].
    virtual std::vector<float> forward(Sequence& sequence, std::span<const int32_t> tokens,
                                       bool all_logits) const = 0;
    // Several sequences in one pass (linears and MoE run over all rows together). Each chunk's logits
    // are bit-identical to running it alone: every kernel's reduction order is independent of the
    // batch. Returns one logits block per chunk ([rows, vocab_size], rows = tokens or 1). The sequences
    // must be distinct and belong to this model.
    virtual std::vector<std::vector<float>> forward_batch(std::span<const SequenceChunk> chunks) const = 0;
    // Whether this model can run `draw` on its device (the engine asks per request; false: the engine
    // samples on the host from logits, as for every CPU model).
    virtual bool can_sample_on_device(const DeviceDraw& /*draw*/) const { return false; }
    // forward_batch, returning logits only for chunks with want_logits[i] != 0 (an empty span: all)
    // and the tokens of `draws` sampled on the device, so only token ids cross to the host. Every
    // draw must satisfy can_sample_on_device. Default: forward_batch (no draws).
    virtual ForwardOutputs forward_sampled(std::span<const SequenceChunk> chunks, std::span<const uint8_t> want_logits,
                                           std::span<const DeviceDraw> draws) const;
    // The checkpoint's speculative drafter (deepinfer/drafter.h), owned by the model; null if none.
    virtual const Drafter* drafter() const { return nullptr; }
    // Groups the model places its sequences in, each running its own sequences' attention (one GPU
    // each under expert parallelism): the engine gives each group an equal share of a step's token
    // budget, so one group's prefill does not leave the others idle. 1: no groups.
    virtual int placement_groups() const { return 1; }
    // The group `sequence` (one of this model's) lives in, in [0, placement_groups()).
    virtual int placement_group(const Sequence& /*sequence*/) const { return 0; }
};

}  // namespace deepinfer
