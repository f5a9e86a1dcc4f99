// SPDX-License-Identifier: Apache-2.0
// CudaModel: the DeepSeek-V4 forward (spec §2) on one CUDA GPU behind the backend-agnostic Model
// interface. Weights live on the device in their stored formats, every sequence's state (sliding
// window ring, compressor rows, compressed entries, indexer keys) lives in device memory owned by
// the sequence, and each forward runs on the model's stream with scratch from a workspace arena
// sized at load. Results equal the CPU reference's rounding points and per-element reduction order.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "backends/cuda/gemm_fast.h"
#include "backends/cuda/model/expert_exchange.h"
#include "deepinfer/model.h"

namespace deepinfer::cuda {

struct CudaModelOptions {
    int device = 0;
    // Longest sequence (prompt + generated) a sequence can hold: sizes each sequence's compressed
    // entries and the RoPE tables. 0: min(max_position_embeddings, 65536).
    int64_t max_model_len = 0;
    // Device scratch for one forward (activations of all rows of a batch); allocated once at load.
    // 0: sized from ModelOptions::max_batch_tokens / max_num_seqs and max_model_len (the largest
    // forward those limits allow), so no forward ever needs more.
    size_t workspace_bytes = 0;
    // GEMM kernels: kReference (CUDA cores, bit-identical to the CPU) or kFast (tensor cores, gemm_fast.h):
    // FP8/FP4 linears with act_quant'ed activations (in every numerics mode), the routed experts as one
    // grouped launch per matrix, the BF16 LM head and the BF16 grouped wo_a (bf16 activations, as the
    // reference's bf16 einsum). Router and compressors (f32 in the reference) stay on the reference
    // kernels. Batch-invariant either way; kFast matches the CPU within tolerances, not bit for bit.
    GemmMode gemm = GemmMode::kReference;
    // kFast, V4.1: true: its dense FP8 linears (32x32 blocks) stay FP8 on devices whose fast GEMM runs
    // them natively (Hopper; gemm_wgmma_fp8b32.cuh): half the weight bytes, but on an H200 today as fast
    // as the bf16 form up to 32 rows and 1.2-1.4x slower from 128 rows (per-k32 promotion;
    // bench/results/cuda-v41-fp8b32-h200-*). false (default), or other devices: uploaded as exact bf16
    // and run on the bf16 tensor-core kernel.
    bool v41_fp8_native = false;
    // kFast, V4.1, the bf16 form (v41_fp8_native false), Hopper: the large dense linears (fp8_twin_supported:
    // wq_b, wo_b, Engram's wkv) also kept in their FP8 form, which launches of up to kFp8TwinRows rows read
    // instead (gemm_fast.h FastLinearParams::fp8_twin: the same bits, half the weight bytes; +50% of those
    // weights' device bytes, ~1% of a layer's).
    bool v41_fp8_twins = true;
    // kFast, V4.1, forwards of kWoADenseRows (2048) rows or more where the 64-head tensor-core attention runs
    // (sink_attention_bf16_io): q read in bf16 from the RoPE launch and the attention's output written in bf16
    // straight into wo_a's groups (no f32 output, no conversion launches before wo_a). The same bits as false
    // (the f32 form), which tests compare it with.
    bool v41_bf16_attention_io = true;
    // kFast, V4.1: attention launches of up to this many rows run the split form (ops.h
    // SinkAttentionParams::tc_split_rows: a launch of score CTAs per 64 keys, then one of softmax + P·V CTAs
    // per 64 output columns, instead of one CTA (pair) per 16 heads; the same bits); 0: never.
    int64_t v41_attention_split_rows = 16;
    // kFast, V4.1, eager forwards, where the 64-head attention's pipelined form fits the device: the keys of a
    // segment with many rows in the forward (bf16_key_plan.h: at least 16, and paying) are decoded to bf16 rows once
    // per attention layer (its window ring's older rows and its KV source's entries, up to this many rows per layer in
    // all, 64 MiB at head_dim 512: a segment of 256K positions at ratio 4; the forward's own rows too), and the
    // 64-head kernel copies them (cp.async, the next key block during this one's MMAs) instead of decoding them once
    // per query row and pass: the same values, so the same bits. 0: never.
    int64_t v41_bf16_key_rows = 65536;
    // kFast, V4.1, one GPU: the shared expert runs on its own stream, beside the router's rows' routed experts (a fork
    // after the router, a join before the combine; inside a graph capture a branch of the graph): the same bits,
    // its launches in the routed experts' shadow where those leave SMs idle (decode batches). false: after them on
    // the model's stream.
    bool v41_shared_expert_stream = true;
    // kFast, V4.1, one GPU: the attention site's window K=V path (wkv, norm, RoPE, QAT) and its compressor (pooling,
    // index keys, entries) run on a second stream, forked after wq_a and joined before the indexer's scores read the
    // index keys (or before the attention): beside the query path (q_norm, wq_b, RoPE) and the indexer's queries
    // instead of after them. The same bits (independent launches reordered); false: all on the model's stream.
    bool v41_attention_side_stream = true;
    // kFast, V4.1: a site's mHC mixes (the mixing logits' split-K launch and hc_pre: pre, post, comb) on a stream of
    // their own where the site's input is already collapsed (the delayed pre-mix: everywhere but the first site, an
    // Engram layer's and a replay cut's) and the forward has at most 512 rows, forked after the previous site's hc_post
    // and joined before this site's: beside the site's norm and block instead of before them. The same bits; false:
    // on the model's stream.
    bool v41_hc_side_stream = true;
    // Expert parallelism (cuda_ep_model.h): this model is rank `expert_rank` of the exchange's ranks,
    // on the exchange's device of that rank, holding that rank's slice of the routed experts; its
    // forwards must run in step with the other ranks' (one host thread per rank), with the row counts
    // set on the exchange first. No CUDA graphs (the exchange's sizes change every step). Null: one GPU.
    ExpertExchange* expert_exchange = nullptr;
    int expert_rank = 0;
    // The MoE layers' dispatch under expert parallelism (expert_exchange.h; read by load_cuda_ep_model):
    // rows to every rank, or only to the ranks of their experts (a host round trip per layer for the
    // sizes, paid back from this many rows per forward under kAuto).
    EpDispatch ep_dispatch = EpDispatch::kAuto;
    int64_t ep_routed_min_rows = 64;
    // Benchmarks: count how evenly each MoE layer's pairs spread over the experts held here
    // (CudaModelStats::moe_layer_forwards ..; one single-block kernel per MoE layer; bench_routing.h).
    bool expert_load_stats = false;
    // Benchmarks only: every MoE layer sends its rows to experts chosen evenly (ops.h: even_routing)
    // instead of by its router, as a trained model's balanced routing spreads them; a random-weight
    // model's router may send most rows to a few experts. The outputs are not the model's.
    bool even_routing = false;
};

// What a CUDA model measured since load (or the last reset): device time from CUDA events.
struct CudaModelStats {
    int64_t forwards = 0, graph_captures = 0, graph_replays = 0, device_draws = 0;
    int64_t draft_graph_captures = 0, draft_graph_replays = 0;  // MTP and DSpark draft calls (draft_graphs.h)
    double gpu_seconds = 0;  // from each forward's first device operation to its last (its span on the stream)
    double gap_seconds = 0;  // from one forward's last device operation to the next one's first: GPU idle
    size_t workspace_bytes = 0, workspace_high_water = 0;
    size_t workspace_need_max = 0;  // the bound for the limits the model was loaded with
    size_t weight_device_bytes = 0;  // weights in device memory (CudaV41Model; 0 for CudaModel)
    // The device page pool of sequence state (CudaModel and CudaV41Model):
    // page size, positions per entry page, ring pages per sequence, pages in all / in use now / at most.
    uint64_t state_page_bytes = 0;
    int64_t state_page_tokens = 0, state_ring_pages = 0;
    int64_t state_pages = 0, state_pages_in_use = 0, state_pages_peak = 0;
    // CudaModelOptions::expert_load_stats (else 0): MoE layer forwards counted and, summed over them,
    // the experts held here with at least one pair, the most pairs of one expert, and all pairs (graph
    // steps count their padding rows too); experts_here: routed experts per layer on this GPU.
    int64_t moe_layer_forwards = 0, experts_touched = 0, expert_pairs_max = 0, expert_pairs = 0, experts_here = 0;
    // CudaV41Model: attention layers run with bf16 I/O (CudaModelOptions::v41_bf16_attention_io).
    int64_t attention_bf16_io_layers = 0;
    // CudaV41Model: attention layers run with pre-decoded bf16 keys (CudaModelOptions::v41_bf16_key_rows).
    int64_t attention_bf16_key_layers = 0;
    // CudaV41Model: attention sites whose window K=V path and compressor ran on the side stream
    // (CudaModelOptions::v41_attention_side_stream; counted when enqueued, so graph replays do not count).
    int64_t attention_side_stream_sites = 0;
    // CudaV41Model: mHC sites whose mixes ran on the mHC stream (CudaModelOptions::v41_hc_side_stream; as above).
    int64_t hc_side_stream_sites = 0;
};

// The engine-facing measurements and limits of a one-GPU CUDA model (the V4 CudaModel and the V4.1
// CudaV41Model implement it; the functions below take either).
class CudaModelRuntime {
public:
    virtual ~CudaModelRuntime() = default;
    virtual CudaModelStats stats() const = 0;
    virtual void reset_stats() const = 0;
    virtual int64_t max_len() const = 0;
    // CudaModelOptions::even_routing for the next forwards (benchmarks; drops the captured graphs).
    virtual void set_even_routing(bool on) const = 0;
    // The workspace bound of one forward of `rows` rows in `sequences` sequences with `logit_rows`
    // rows of logits, positions below `positions` and `draws` device draws.
    virtual size_t workspace_bound(int64_t rows, int64_t sequences, int64_t logit_rows, int64_t positions,
                                   int64_t draws) const = 0;
    // The rows a forward of these chunks and draws runs from V4.1's bounded-replay cut on (the decoder's layers;
    // every chunk's rows without a cut): host arithmetic, for the expert-parallel driver's exchange counts.
    virtual int64_t replay_tail_rows(std::span<const SequenceChunk> chunks, std::span<const DeviceDraw> draws) const = 0;
};

// The device a model built with `o` runs on (the exchange's device of the expert rank, else o.device),
// checked and made the calling thread's current device.
int select_cuda_model_device(const CudaModelOptions& o);

// Benchmarks only: turns CudaModelOptions::even_routing on or off for the next forwards (a one-GPU
// model or one rank of an expert-parallel one; the captured decode graphs are dropped when it changes).
void set_cuda_even_routing(const Model& model, bool on);

// Loads a checkpoint directory onto the GPU. Numerics as Model::load (from the checkpoint unless set).
std::unique_ptr<Model> load_cuda_model(const std::string& checkpoint_dir, const ModelOptions& options = {},
                                       const CudaModelOptions& cuda_options = {});

// Measurements of a model made by load_cuda_model or load_cuda_v41_model (throws for other models).
CudaModelStats cuda_model_stats(const Model& model);
// The longest sequence (prompt + generated) the model holds (CudaModelOptions::max_model_len as resolved).
int64_t cuda_model_max_len(const Model& model);
void reset_cuda_model_stats(const Model& model);
// The workspace bound of one forward of `rows` rows in `sequences` sequences with `logit_rows` rows
// of logits, positions below `positions` and `draws` device draws (tests of the sizing).
size_t cuda_workspace_bound(const Model& model, int64_t rows, int64_t sequences, int64_t logit_rows,
                            int64_t positions, int64_t draws);

}  // namespace deepinfer::cuda
