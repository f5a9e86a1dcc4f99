// SPDX-License-Identifier: Apache-2.0
// The CUDA backend's op contract: one params struct and one function per op of the DeepSeek-V4
// forward (no CUDA types; pointers are device memory, activations f32 rows that hold bf16 values
// wherever the official numerics round). Every op reproduces the CPU reference's arithmetic (same
// rounding points, same reduction order per output element, independent of the batch), so results
// are batch-invariant and equal to the CPU up to the last-ulp differences of exp/log (tests/ops).
#pragma once

#include <cstdint>

namespace deepinfer::cuda {

// A CUDA stream (cudaStream_t) as an opaque handle; null = the legacy default stream.
struct Stream {
    void* handle = nullptr;
    // Launches through launch_pdl (common/launch.cuh) may carry programmatic dependent launch (Hopper and
    // newer; ModelOptions::cuda_pdl). Off: plain stream order (a diagnostic for timing; same results).
    bool pdl = true;
};

enum class WeightKind : uint8_t { kF32, kBF16, kF16, kFp8Block, kFp4 };
enum class ScaleKind : uint8_t { kNone, kF32, kBF16, kE8M0 };

// A linear weight in device memory in its stored format (FP8 stays FP8, FP4 stays packed).
struct DeviceLinear {
    const void* weight = nullptr;  // [out, in] f32|bf16|f16|e4m3, or [out, in/2] packed e2m1 (low nibble first)
    const void* scale = nullptr;   // fp8: [ceil(out/block_rows), ceil(in/block_cols)]; fp4: [out, in/32] ue8m0
    WeightKind kind = WeightKind::kF32;
    ScaleKind scale_kind = ScaleKind::kNone;
    int64_t out_features = 0;
    int64_t in_features = 0;
    int64_t block_rows = 128;
    int64_t block_cols = 128;
    // Rows [begin, end) of the output dimension (fp8: begin on a block boundary).
    DeviceLinear rows(int64_t begin, int64_t end) const;
};

// ---- GEMM ------------------------------------------------------------------------------------

// y[r, n] = x[src(r), :] · W[n, :] (+ bf16 rounding): one 8-lane dot product per output element in
// cpu::dot's order, weights decoded on the fly (FP8 block scales, FP4 per-32 scales).
// Grouped form (MoE): `experts` (device array of DeviceLinear, all the same shape) and
// `row_expert` pick each row's weight; `row_src` gathers x rows (null: row r reads x row r).
struct LinearParams {
    const float* x = nullptr;  // [*, x_ld] f32
    int64_t x_ld = 0;
    const int32_t* row_src = nullptr;  // [rows] i32 or null
    DeviceLinear weight;                // used when experts == null
    const DeviceLinear* experts = nullptr;  // [num_experts] (device memory)
    const int32_t* row_expert = nullptr;    // [rows] i32
    // Grouped form: rows whose row_expert >= num_experts are skipped (y untouched); 0: no row skipped.
    int64_t num_experts = 0;
    float* y = nullptr;  // [rows, y_ld] f32
    int64_t y_ld = 0;
    int64_t rows = 0;
    bool round_output_bf16 = false;
};
void linear(const LinearParams& p, Stream s);

// The plain form of linear() for f32 / bf16 / f16 weights with its operands staged through shared
// memory (kernels/linear_staged.cuh): bit-identical to linear(), which uses it whenever it applies.
// `self_dot`: one more output column per row, y[r, N] = dot(x_r, x_r) in the same order (mHC).
struct StagedLinearParams {
    const float* x = nullptr;  // [*, x_ld] f32
    int64_t x_ld = 0;
    const int32_t* row_src = nullptr;  // [rows] i32 or null
    DeviceLinear weight;               // [N, K]
    bool self_dot = false;
    float* y = nullptr;  // [rows, y_ld] f32, y_ld >= N (+ 1 with self_dot)
    int64_t y_ld = 0;
    int64_t rows = 0;
    bool round_output_bf16 = false;
};
// Whether staged_linear takes these operands: f32/bf16/f16 weights, K % 8 == 0, 16-byte aligned rows.
bool staged_linear_supported(const float* x, int64_t x_ld, const DeviceLinear& w);
void staged_linear(const StagedLinearParams& p, Stream s);

// DeepSeek's act_quant followed by dequantization: out = e4m3(clamp(x / s, ±448)) · s with
// s = 2^ceil(log2(max(amax, 1e-4)/448)) per 128 consecutive elements of a row (exact in f32).
struct ActQuantParams {
    const float* x = nullptr;  // [rows, cols] f32
    float* out = nullptr;      // [rows, cols] f32 (may alias x)
    int64_t rows = 0, cols = 0;
    int64_t block = 128;       // elements per scale: 128 (V4) or 32 (V4.1); a power of two <= 128
};
void act_quant_dequant(const ActQuantParams& p, Stream s);

// ---- Norms, RoPE, QAT ------------------------------------------------------------------------

// out[r] = x[r] · rsqrt(mean(x[r]²) + eps) [· weight] [→ bf16].
struct RmsNormParams {
    const float* x = nullptr;       // [rows, n]
    const float* weight = nullptr;  // [n] or null
    float* out = nullptr;           // [rows, n] (may alias x)
    int64_t rows = 0, n = 0;
    float eps = 1e-6f;
    bool round_bf16 = false;
    // Optional forms of out written by the same pass (the fast GEMMs' inputs, without a launch and a
    // reread of out each): its FP8 form as act_quant_fp8 makes it with `q_block`-column scales (32 or 128;
    // the same codes and scales), and its bf16 bits as to_bf16 makes them. Either needs n % 128 == 0,
    // n <= 8192 and 16-byte aligned rows (x, out, weight).
    uint8_t* q = nullptr;          // [rows, n] e4m3
    float* q_scale = nullptr;      // [rows, n / q_block]
    int64_t q_block = 128;
    uint16_t* out_bf16 = nullptr;  // [rows, n] bf16
    // [rows, n] bf16: out's act_quant_dequant per 32 columns as to_bf16 writes it (V4.1's QAT form of a
    // projection input; the same conditions as the forms above).
    uint16_t* out_bf16_qat = nullptr;
    // Fast mode: the sum of squares as the block's threads' strided partial sums (thread t: elements t,
    // t + 256, .. in order), each warp's butterfly, then the warp sums in warp order — a fixed order (a row's
    // bits do not depend on the batch), not the CPU's 8-lane blocked one (one warp's 8 lanes over the row).
    bool tree_sum = false;
};
void rms_norm(const RmsNormParams& p, Stream s);

enum class HeadNorm : uint8_t { kNone, kF32, kBf16Arith };
enum class Qat : uint8_t { kNone, kFp8Nope, kHadamardFp4 };

// Per (row, head) of x [rows, heads, dim], in place: optional unweighted head RMS norm, RoPE
// (interleaved, trailing rope_dim dims) at positions[row] (or its inverse), optional bf16 rounding of
// the rope dims / of the whole head, then the QAT simulation.
struct RopeRowsParams {
    float* x = nullptr;                // [rows, heads, dim]
    int64_t rows = 0, heads = 0, dim = 0;
    const int32_t* positions = nullptr;  // [rows] (device); null: position_scale*row
    int64_t position_scale = 1;           // with positions == null: row r is at r * position_scale + position_offset
    int64_t position_offset = 0;
    const float* cos_sin = nullptr;       // [table_positions, rope_dim/2, 2]
    int64_t rope_dim = 0;
    HeadNorm head_norm = HeadNorm::kNone;
    float eps = 1e-6f;
    // The kF32 head norm weighted and rounded as rms_norm does (its `weight`, its `round_bf16`): the
    // weight[i]·(x[i]·r) of cpu::rms_norm, so the model's kv norm runs in this launch.
    const float* head_norm_weight = nullptr;  // [dim]
    bool head_norm_round_bf16 = false;
    bool inverse = false;
    bool round_rope_dims = false;  // after RoPE
    bool round_all = false;        // after RoPE (whole head)
    Qat qat = Qat::kNone;
    // Fast mode: the kBf16Arith head norm's f32 sum of squares as a warp tree (deterministic, per row)
    // instead of in element order; only the order of that sum differs.
    bool tree_sum = false;
    // Optional [rows, heads, dim] bf16 bits: the result goes here instead of into x (x is only read). Only
    // where every result is a bf16 value (the kBf16Arith head norm with rounded RoPE dims, or round_all; no
    // QAT), so the conversion is exact: the fast mode's q, read by the tensor-core attention.
    uint16_t* out_bf16 = nullptr;
};
void rope_rows(const RopeRowsParams& p, Stream s);

// ---- Embedding and hyper-connections ---------------------------------------------------------

// x[t, j, :] = dequant(embed[token[t]]) for every stream j (bf16-rounded when asked).
struct EmbedParams {
    DeviceLinear table;              // [vocab, D]
    const int32_t* tokens = nullptr;  // [rows]
    float* x = nullptr;               // [rows, hc, D]
    int64_t rows = 0, hc = 1;
    bool round_bf16 = false;
};
void embed(const EmbedParams& p, Stream s);

struct HcPreParams {
    const float* x = nullptr;      // [rows, hc, D]
    const float* fn = nullptr;     // [(2+hc)*hc, hc*D]
    const float* base = nullptr;   // [(2+hc)*hc]
    const float* scale = nullptr;  // [3]
    int64_t rows = 0, hc = 0, hidden = 0, sinkhorn_iters = 0;
    float norm_eps = 1e-6f, hc_eps = 1e-6f;
    float* post = nullptr;       // [rows, hc]
    float* comb = nullptr;       // [rows, hc, hc]
    float* collapsed = nullptr;  // [rows, D]; null: no collapse (hc_post's collapse_pre wrote it)
    bool round_bf16 = false;
    // [rows, (2+hc)*hc + 1] f32 scratch: the mixing logits and dot(x, x) computed by the staged GEMM
    // across many blocks (null: inside the one block per row, slowly).
    float* mix = nullptr;
    bool mix_given = false;  // `mix` already holds them (the fast mode's hc_mix_splitk)
    // Or (mix_given) hc_mix_splitk's partial planes [mix_splits, rows, (2+hc)*hc + 1], which the kernel sums
    // in plane order itself (the same additions as hc_mix_splitk's reduce; one launch fewer).
    const float* mix_partial = nullptr;
    int64_t mix_splits = 0;
    // V4.1's single-pass mHC (HcMixesParams): this site's pre also written to pre_out [rows, hc], and the
    // collapse taken with collapse_pre [rows, hc] (the previous site's) instead of this site's pre.
    float* pre_out = nullptr;
    const float* collapse_pre = nullptr;
};
void hc_pre(const HcPreParams& p, Stream s);

// The fast mode's mixing logits, split over K: mix[r, j] = x_r · fn_j for j < outputs and
// mix[r, outputs] = x_r · x_r, each as hc_mix_splits(flat) partial dot products over fixed 512-wide
// chunks of K summed in chunk order. Up to 32 outputs with flat % 16 == 0 (V4's 24 mixing and 4 head
// logits) the logits' partials are 3xTF32 tensor-core MMAs (hc_mix_mma.cuh; x and fn 16-byte aligned),
// other shapes f32 FMAs lane-strided then a butterfly (hc_mix_splitk.cuh); dot(x, x) is f32 FMAs in both.
// The kernel and every order are fixed by `flat` and `outputs` alone: deterministic and independent of
// the batch, f32-accurate (not the CPU's order), and parallel enough for decode batches.
struct HcMixSplitKParams {
    const float* x = nullptr;   // [rows, flat]
    const float* fn = nullptr;  // [outputs, flat]
    int64_t rows = 0, outputs = 0, flat = 0;  // outputs <= 63
    float* partial = nullptr;  // [hc_mix_splits(flat), rows, outputs + 1] scratch
    float* mix = nullptr;      // [rows, outputs + 1]
    bool partials_only = false;  // no sums into mix: the consumer adds the partials (HcPreParams::mix_partial)
};
int64_t hc_mix_splits(int64_t flat);
// Whether hc_mix_splitk takes the tensor-core kernel for this shape (tests: which order to expect).
bool hc_mix_uses_tensor_cores(int64_t flat, int64_t outputs);
void hc_mix_splitk(const HcMixSplitKParams& p, Stream s);

struct HcPostParams {
    const float* out = nullptr;   // [rows, D] sub-block output
    const float* x = nullptr;     // [rows, hc, D] input streams
    const float* post = nullptr;  // [rows, hc]
    const float* comb = nullptr;  // [rows, hc, hc]
    float* y = nullptr;           // [rows, hc, D]
    int64_t rows = 0, hc = 0, hidden = 0;
    bool round_bf16 = false;
    // V4.1's order: y = post·o + (Σ_j comb·x) (the mix summed from 0 first); V4: ((post·o) + comb·x) + ...
    bool mix_first = false;
    // V4.1, where the next site's collapse coefficients are known (the delayed pre-mix): also
    // collapsed = Σ_k collapse_pre_k · y_k in stream order, rounded like y: hc_pre's collapse of y with
    // that collapse_pre, bit for bit, without reading y again (that hc_pre then runs with collapsed = null).
    const float* collapse_pre = nullptr;  // [rows, hc] or null
    float* collapsed = nullptr;           // [rows, D] (with collapse_pre)
};
void hc_post(const HcPostParams& p, Stream s);

struct HcHeadParams {
    const float* x = nullptr;      // [rows, hc, D]
    const float* fn = nullptr;     // [hc, hc*D]
    const float* base = nullptr;   // [hc]
    const float* scale = nullptr;  // [1]
    int64_t rows = 0, hc = 0, hidden = 0;
    float norm_eps = 1e-6f, hc_eps = 1e-6f;
    float* y = nullptr;  // [rows, D]
    bool round_bf16 = false;
    float* mix = nullptr;  // [rows, hc + 1] f32 scratch, as HcPreParams::mix
    bool mix_given = false;
    const float* mix_partial = nullptr;  // as HcPreParams::mix_partial
    int64_t mix_splits = 0;
};
void hc_head(const HcHeadParams& p, Stream s);

// ---- Per-sequence state (device) ------------------------------------------------------------

// One sequence's rows in a batch and its state of one layer (all device pointers).
struct DeviceSegment {
    int64_t row_begin = 0;
    int64_t num_rows = 0;
    int64_t first_position = 0;
    float* window = nullptr;        // [window_rows, head_dim] ring, position p in slot p % window_rows
    float* comp_kv = nullptr;       // [comp_ring_rows, comp_width] compressor rows c_p
    float* comp_gate = nullptr;     // [comp_ring_rows, comp_width] z_p + ape
    float* comp_entries = nullptr;  // [capacity, head_dim] compressed KV entries
    float* idx_kv = nullptr;        // indexer compressor (CSA)
    float* idx_gate = nullptr;
    float* idx_entries = nullptr;   // [capacity, index_head_dim] indexer keys
    // Paged entries (the models' state, device_page_pool.h): when `pages` is set, entry i is row
    // i % entries_per_page of the block at comp_offset (indexer keys: idx_offset) floats into page
    // pages[i / entries_per_page], and comp_entries / idx_entries are unused.
    float* const* pages = nullptr;  // [entry pages] page addresses (device)
    int64_t entries_per_page = 0, comp_offset = 0, idx_offset = 0;
};

// Copies each segment's last min(num_rows, ring_rows) rows of `src` into its ring (slot = pos % ring_rows).
enum class RingKind : uint8_t { kWindow, kCompKv, kCompGate, kIdxKv, kIdxGate };
struct RingWriteParams {
    const DeviceSegment* segments = nullptr;  // [num_segments] (device)
    int64_t num_segments = 0;
    int64_t max_rows = 0;  // max num_rows over segments
    RingKind ring = RingKind::kWindow;
    const float* src = nullptr;  // [rows, src_ld]
    int64_t width = 0;
    int64_t ring_rows = 0;
    int64_t src_ld = 0;  // src's row stride (0: width)
    // Optional: a second ring written by the same launch from src2 (the same rows, width, ring_rows and
    // stride), each value plus add2's row (pos % add2_ratio) where add2 is given: a compressor's gate rows
    // with its ape, add_ape's additions (the same bits as add_ape then ring_write).
    RingKind ring2 = RingKind::kWindow;
    const float* src2 = nullptr;  // [rows, src_ld]
    const float* add2 = nullptr;  // [add2_ratio, width]
    int64_t add2_ratio = 0;
};
void ring_write(const RingWriteParams& p, Stream s);

// Compressor (spec §2.10): for every window completed inside a segment's chunk, per-channel
// softmax pooling of its rows (CSA overlap: the previous window's first halves, then this window's
// second halves), bf16, weighted RMS norm, RoPE at the window's first position, QAT; appended as
// entry `window` of the segment's entries. Rows at positions >= first_position come from the chunk's
// projections (kv, gate: gate already includes ape), older rows from the segment's ring.
struct CompressorParams {
    const DeviceSegment* segments = nullptr;
    int64_t num_segments = 0;
    int64_t max_windows = 0;  // max windows completed in one segment's chunk
    bool indexer = false;     // use the idx_* state instead of comp_*
    const float* kv = nullptr;    // [rows, ld] c_t (width = 2·head_dim with overlap, else head_dim)
    const float* gate = nullptr;  // [rows, ld] z_t + ape
    int64_t ld = 0;               // kv's and gate's row stride (0: width)
    // Optional [ratio, width]: added to the chunk's gate rows as they are read (add_ape's additions, the
    // same bits, without its launch; the rows in memory stay without it). The ring's rows hold it already
    // (RingWriteParams::add2).
    const float* ape = nullptr;
    int64_t ratio = 0, head_dim = 0, ring_rows = 0;
    bool overlap = false;
    const float* norm = nullptr;  // [head_dim]
    float eps = 1e-6f;
    const float* cos_sin = nullptr;
    int64_t rope_dim = 0;
    bool official = false;
    Qat qat = Qat::kNone;
};
void compressor(const CompressorParams& p, Stream s);

// gate[r, :] += ape[pos(r) % ratio, :] for every row (position from its segment).
struct AddApeParams {
    float* gate = nullptr;  // [rows, ld]
    const float* ape = nullptr;  // [ratio, width]
    const int32_t* positions = nullptr;  // [rows]
    int64_t rows = 0, width = 0, ratio = 0;
    int64_t ld = 0;  // gate's row stride (0: width)
};
void add_ape(const AddApeParams& p, Stream s);

// ---- Lightning indexer and top-k --------------------------------------------------------------

// score[r, i] for the visible keys i < (pos(r)+1)/ratio of row r's segment (official: bf16 einsum,
// bf16 ReLU·weight, bf16 head sum, in head order); then the top index_topk by score, ties to the lower
// index, written ascending into selected[r, :] (-1 past the count) with counts in num_selected[r].
struct IndexerParams {
    const DeviceSegment* segments = nullptr;
    const int32_t* row_segment = nullptr;  // [rows]
    const int32_t* positions = nullptr;    // [rows]
    int64_t rows = 0;
    const float* q = nullptr;        // [rows, heads, head_dim] (RoPE + QAT applied)
    const float* weights = nullptr;  // [rows, heads] weights_proj output
    int64_t heads = 0, head_dim = 0, ratio = 0, topk = 0;
    int64_t max_visible = 0;  // max visible keys of any row (sizes the score scratch)
    float* scores = nullptr;  // [rows, max_visible] scratch
    int32_t* selected = nullptr;      // [rows, topk]
    int32_t* num_selected = nullptr;  // [rows]
    bool official = false;
    // Fast GEMM mode: the scores' dot products on tensor cores (kernels/indexer_tc.cuh) when official
    // numerics, heads <= 64 and head_dim in {32, 64, 128}; within the fast mode's tolerances.
    bool tensor_cores = false;
    // With tensor cores the scores come from kernels/indexer_tc_gemm.cuh where segments hold >= 8 rows
    // (prefill: 8 rows per block as a tiled GEMM), else from kernels/indexer_tc_rows.cuh with one row per
    // block (decode); the scores are bit-identical to the per-row reference kernel's (kernels/indexer_tc.cuh).
    int64_t max_segment_rows = 0;   // most rows of any one segment (0: unknown, one row per block)
    int64_t tc_rows_per_block = 0;  // tests: 0 picks by max_segment_rows; 1, 2, 4 (indexer_tc_rows.cuh) or 8
                                    // (indexer_tc_gemm.cuh); -1 the per-row reference kernel
    bool gemm_lockstep = false;  // benchmarks: the GEMM kernel with all warps in step (no MMA / head-sum overlap)
    bool scores_only = false;  // benchmarks: the scores without the top-k
};
void indexer_topk(const IndexerParams& p, Stream s);

// Top-k of each row of `scores` (row r has lengths[r] valid entries, or n), ties to the lower index,
// indices ascending; out[r, j] = -1 for j >= min(k, len).
struct TopkParams {
    const float* scores = nullptr;  // [rows, ld]
    int64_t ld = 0;
    const int32_t* lengths = nullptr;  // [rows] or null (= n)
    int64_t n = 0;
    int64_t rows = 0, k = 0;
    int32_t* out = nullptr;  // [rows, k]
    // Benchmark only (same picks): 0 = the default (kernels/topk.cuh's topk_row: adaptive 8-bit digits), 1 = the
    // 4-pass 8-bit radix select it replaced, 2 = adaptive 11-bit digits (the sampler's), 3 = adaptive 12-bit.
    int variant = 0;
};
void topk(const TopkParams& p, Stream s);

// ---- Sparse sink attention ----------------------------------------------------------------------

// For every row and head: candidates = window positions max(0, P-W+1)..P (chunk rows for positions in
// the chunk, else the ring), then compressed entries (HCA: all visible; CSA: selected[r, :]);
// s_j = (q·kv_j)·scale; softmax with exp(sink_h) in the denominator; official: P rounded to bf16
// before P·V and o rounded to bf16; then inverse RoPE of the trailing rope dims (+ bf16 rounding).
enum class AttentionKind : uint8_t { kSliding, kCsa, kHca };
struct SparseAttentionParams {
    const DeviceSegment* segments = nullptr;
    const int32_t* row_segment = nullptr;  // [rows]
    const int32_t* positions = nullptr;    // [rows]
    int64_t rows = 0, heads = 0, head_dim = 0;
    const float* q = nullptr;   // [rows, heads, head_dim]
    // Or q as bf16 bits (exact: official numerics' q holds bf16 values), read by the tensor-core kernels
    // instead of q, which may then be null (an error where those kernels cannot run:
    // sparse_attention_tensor_cores_fit).
    const uint16_t* q_bf16 = nullptr;  // [rows, heads, head_dim]
    const float* kv = nullptr;  // [rows, head_dim] this chunk's K=V rows
    const float* sink = nullptr;  // [heads]
    int64_t window = 0, window_rows = 0;
    AttentionKind kind = AttentionKind::kSliding;
    int64_t ratio = 0;
    const int32_t* selected = nullptr;  // [rows, topk] (CSA)
    int64_t topk = 0;
    int64_t max_candidates = 0;
    float* scratch = nullptr;  // [rows, heads, max_candidates]
    const float* cos_sin = nullptr;
    int64_t rope_dim = 0;
    float softmax_scale = 0;
    bool official = false;
    // Fast GEMM mode: the tensor-core kernel (kernels/attention_tc.cuh, the official kernel's online
    // softmax in blocks of 64) when official numerics, head_dim in {64, 128, 256, 512} and the shared
    // memory allow; equal to the reference kernels within the fast mode's tolerances. The scratch is
    // not used then.
    bool tensor_cores = false;
    float* out = nullptr;  // [rows, heads, head_dim]
    // Optional: the output also in bf16 (exact: every output element is bf16-rounded), for a bf16 GEMM that
    // reads it, in groups of bf16_group_heads heads (0: all): element (r, h, c) at
    // out_bf16[(h / gh) · bf16_group_stride + r · gh · head_dim + (h % gh) · head_dim + c] (gh = 0: heads, one
    // group: [rows, heads · head_dim]). With f32_unused the tensor-core kernel may leave `out` unwritten (the
    // other kernels write it and convert it).
    uint16_t* out_bf16 = nullptr;
    int64_t bf16_group_heads = 0, bf16_group_stride = 0;
    bool f32_unused = false;  // (then `out` may be null where the tensor-core kernels run)
};
void sparse_attention(const SparseAttentionParams& p, Stream s);
// Whether sparse_attention's tensor-core kernels run at this head_dim on the current device (official
// numerics, 16-byte aligned q and kv): where they do, q_bf16 may replace q and f32_unused may leave out null.
bool sparse_attention_tensor_cores_fit(int64_t head_dim);

// ---- MoE ----------------------------------------------------------------------------------------

// Router: scores from logits [rows, E] (sqrtsoftplus | sigmoid | softmax), selection (hash: tid2eid
// rows of the token; else top-k of scores + bias, ties to the lower id, ascending), weights normalized
// (official: no epsilon; exact: +1e-20) and scaled.
enum class ScoringFunc : uint8_t { kSqrtSoftplus, kSigmoid, kSoftmax };
struct RouterParams {
    float* logits = nullptr;          // [rows, E] in: gate logits; out: scores
    const float* bias = nullptr;      // [E] or null
    // V4.1 image spans: rows flagged in `vl_rows` select with `bias_vl` instead of `bias` (spec §6.2).
    const float* bias_vl = nullptr;   // [E] (required with vl_rows)
    const uint8_t* vl_rows = nullptr;  // [rows] or null: 1 selects with bias_vl
    const int32_t* tid2eid = nullptr;  // [vocab, K] (hash routing) or null
    const int32_t* tokens = nullptr;   // [rows]
    int64_t rows = 0, experts = 0, top_k = 0;
    ScoringFunc scoring = ScoringFunc::kSqrtSoftplus;
    bool norm_topk_prob = true;
    float routed_scaling_factor = 1.0f;
    bool official = false;
    float temperature = 1.0f;  // scores from logits / temperature (V4.1's gate_temp)
    // V4.1: the normalization sum runs over the picks in selection order (biased score descending,
    // ties to the lower id) rather than ascending id.
    bool sum_in_selection_order = false;
    float* biased = nullptr;   // [rows, E] scratch (selection scores)
    int32_t* ids = nullptr;    // [rows, K]
    float* weights = nullptr;  // [rows, K]
};
void route(const RouterParams& p, Stream s);

// Token permutation: the rows * K (token, slot) pairs sorted by expert, stable in (token, slot) order.
// perm_src[i] = token of pair i, perm_slot[i] = t*K + k, perm_expert[i] = its expert,
// expert_offsets[e] = first pair of expert e ([experts + 1]).
struct PermuteParams {
    const int32_t* ids = nullptr;  // [rows, K]
    int64_t rows = 0, top_k = 0, experts = 0;
    int32_t* perm_src = nullptr;     // [rows*K]
    int32_t* perm_slot = nullptr;    // [rows*K]
    int32_t* perm_expert = nullptr;  // [rows*K]
    int32_t* expert_offsets = nullptr;  // [experts + 1]
};
void permute(const PermuteParams& p, Stream s);

// Benchmark accounting of one MoE layer's forward: how evenly its pairs spread over the experts held
// here (a trained model's routing is balanced; a random-weight model's may not be). One block, from
// permute's offsets: acc[0] += experts with at least one pair, acc[1] += the most pairs of one expert,
// acc[2] += pairs, acc[3] += 1 (layer forwards). Integer adds: the totals do not depend on the order.
struct ExpertLoadParams {
    const int32_t* expert_offsets = nullptr;  // [experts + 1] i32 (permute's; entries past `experts` ignored)
    int64_t experts = 0;
    unsigned long long* acc = nullptr;        // [4] u64 device accumulators
};
void expert_load_accumulate(const ExpertLoadParams& p, Stream s);

// Benchmarks only (CudaModelOptions::even_routing): replaces the router's choice by an even one,
// pair (r, k) of global row r = first_row + local row to expert ((r·top_k + k)·stride) mod experts,
// stride odd and coprime with experts (distinct experts within a row, every expert's share within one
// of the others'), routing weights kept. The outputs are then not the model's.
struct EvenRoutingParams {
    int32_t* ids = nullptr;  // [rows, top_k] i32, overwritten
    int64_t rows = 0, top_k = 0, experts = 0, first_row = 0;
    int64_t stride = 37;
};
void even_routing(const EvenRoutingParams& p, Stream s);
// The smallest odd stride >= 37 coprime with `experts` (even_routing's default scatter).
int64_t even_routing_stride(int64_t experts);

// h = silu(min(g, L)) · clamp(u, ±L) (L = 0: no clamp) [· w_row] [→ bf16], in place into g.
struct SwigluParams {
    float* g = nullptr;         // [rows, I]
    const float* u = nullptr;   // [rows, I]
    const float* row_weight = nullptr;  // [rows] or null
    const int32_t* row_weight_index = nullptr;  // [rows] index into row_weight, or null (= row)
    int64_t rows = 0, width = 0;
    float limit = 0;
    bool round_bf16 = false;
    int64_t ld = 0;  // row stride of g and u (0: width; e.g. 2·width for w1 and w3 computed as one GEMM)
    // Optional: the results not stored in g but quantized for the fast GEMM as act_quant_fp8 does with
    // 128-column blocks (the same codes and scales as swiglu then act_quant_fp8; width % 128 == 0).
    uint8_t* q = nullptr;     // [rows, width] e4m3
    float* q_scale = nullptr;  // [rows, width / 128]
    // With q: 32 = the values first quantized and dequantized per 32 columns as act_quant_dequant does (V4.1's
    // activation QAT before w2), then quantized per 128: the codes and scales of swiglu, act_quant_dequant
    // (block 32), act_quant_fp8. 0: none.
    int64_t fine_block = 0;
};
void swiglu(const SwigluParams& p, Stream s);

// out[t] = Σ over the token's K expert outputs in ascending expert id (each [· weight] when
// `scale_outputs`: exact numerics apply the routing weight after w2) + shared[t] [→ bf16].
struct CombineParams {
    const float* expert_out = nullptr;  // [rows*K, D] in slot order (t*K + k)
    const int32_t* ids = nullptr;       // [rows, K]
    const float* weights = nullptr;     // [rows, K]
    const float* shared = nullptr;      // [rows, D]
    float* out = nullptr;               // [rows, D]
    int64_t rows = 0, top_k = 0, hidden = 0;
    bool scale_outputs = false;
    bool round_bf16 = false;
};
void moe_combine(const CombineParams& p, Stream s);

// Scatters grouped rows back to slot order: dst[slot[i]] = src[i].
struct ScatterRowsParams {
    const float* src = nullptr;  // [n, width]
    const int32_t* index = nullptr;  // [n]
    float* dst = nullptr;        // [*, width]
    int64_t n = 0, width = 0;
};
void scatter_rows(const ScatterRowsParams& p, Stream s);
// Gathers rows: dst[i] = src[index[i]].
void gather_rows(const ScatterRowsParams& p, Stream s);

// ---- Expert parallelism (one rank of G, each holding experts_per_rank consecutive experts) ------

// The pairs (rows * K slots) of the tokens gathered from every rank, seen from this rank:
// local_ids[i] = ids[i] - first_expert when rank_of(ids[i]) is this rank, else experts_per_rank
// (one past the rank's experts: permute() groups those pairs last, and the grouped GEMMs skip them).
struct ExpertLocalIdsParams {
    const int32_t* ids = nullptr;  // [n] i32 global expert ids
    int64_t n = 0;
    int32_t first_expert = 0, experts_per_rank = 0;
    int32_t* local_ids = nullptr;  // [n] i32 in [0, experts_per_rank]
};
void expert_local_ids(const ExpertLocalIdsParams& p, Stream s);

// The combine's gather index: the expert outputs of a rank's own n pairs come back as one block of n
// rows from each rank; pair i's row is in the block of the rank holding its expert:
// index[i] = (ids[i] / experts_per_rank) * n + i (for gather_rows over the blocks).
struct ExpertSourceRowsParams {
    const int32_t* ids = nullptr;  // [n] i32 global expert ids
    int64_t n = 0;
    int32_t experts_per_rank = 0;
    int32_t* index = nullptr;  // [n] i32
};
void expert_source_rows(const ExpertSourceRowsParams& p, Stream s);

// ---- Grouped projections ------------------------------------------------------------------------

// Tables of a grouped GEMM over `groups` column groups of `rows` rows (wo_a: 8 groups of the heads):
// grouped row i = g·rows + s is row s, group g; its source/destination row in the [rows·groups, width]
// view of the row-major activations is s·groups + g. offsets[g] = g·rows (g = 0..groups).
struct GroupRowTablesParams {
    int64_t groups = 0, rows = 0;
    int32_t* offsets = nullptr;  // [groups + 1] i32
    int32_t* rows_of = nullptr;  // [groups · rows] i32
};
void group_row_tables(const GroupRowTablesParams& p, Stream s);

// ---- Sampling -----------------------------------------------------------------------------------

// One token per row from logits [rows, vocab], with src/engine/sampler.cpp's rules and its
// counter-based uniform (seed, stream, counter) for the subset the GPU implements: greedy
// (temperature 0; ties to the lowest id), untruncated temperature sampling, top-k (k <= 1024) with top-p /
// min-p inside the top-k, and top-p / min-p without top-k when they keep at most 1024 ids (else token -1).
// Logit bias, penalties and logprobs stay on the CPU sampler (sample_supported() says which).
// A row with a draft (>= 0) is a speculative verify row (engine/speculative/verify.cpp's verify_row): greedy,
// the argmax, accepted when it is the draft; sampled, the draft when counter_uniform(seed, accept_stream,
// counter) · q(draft) < p(draft), else a draw from the residual max(p - q, 0) at the row's draw uniform (p
// itself when the residual has no mass): untruncated rows by the blocked inverse CDF, top-k rows over their
// candidates in order.
struct SampleRow {
    uint64_t seed = 0, stream = 0, counter = 0;  // counter = tokens generated so far
    double temperature = 0;
    int32_t top_k = 0;
    double top_p = 1, min_p = 0;
    int32_t draft = -1;          // the draft this row verifies; -1: an ordinary draw
    uint64_t accept_stream = 0;  // stream of the acceptance uniform
    const float* q = nullptr;    // [vocab] f32 (device): the draft's distribution; null: one-hot on the draft
};
constexpr int32_t kMaxSampleTopK = 1024;
// Top-p / min-p without top-k: drawn (verify rows: decided) when the rules keep at most kMaxSampleTopK
// ids, else token -1 (accepted 0): the caller decides the row on the host from its logits (and a verify
// row's draft distribution).
inline bool sample_nucleus_row(const SampleRow& r) {
    return r.temperature > 0 && r.top_k == 0 && (r.top_p < 1 || r.min_p > 0);
}
inline bool sample_supported(const SampleRow& r) {
    return r.temperature <= 0 || r.top_k == 0 || (r.top_k > 0 && r.top_k <= kMaxSampleTopK);
}
struct SampleParams {
    const float* logits = nullptr;   // [*, vocab]
    int64_t rows = 0, vocab = 0;
    const int32_t* logit_row = nullptr;  // [rows] (device): the logits row each draw reads (null: row r)
    const SampleRow* row = nullptr;  // [rows] (device)
    double* scratch = nullptr;       // [rows, vocab] f64
    double* parts = nullptr;         // [sample_parts(rows, vocab)] f64: per block maxima and sums
    int32_t* index_scratch = nullptr;  // [rows, kMaxSampleTopK]
    int32_t* tokens = nullptr;       // [rows]
    uint8_t* accepted = nullptr;     // [rows] (null: not written): 1 when the row accepted its draft
    bool verify_rows = false;        // some row has a draft (runs the residual pass)
    bool nucleus_rows = false;       // some row has top-p / min-p without top-k (sample_nucleus_row)
};
void sample(const SampleParams& p, Stream s);
// Doubles of SampleParams::parts for `rows` rows of `vocab` ids.
int64_t sample_parts(int64_t rows, int64_t vocab);

// ---- MTP drafting (the V4-Flash preview's MTP block, cuda_mtp.cpp) ------------------------------

// dst[r] = src_ptr[r] ? src_ptr[r][0, width) : base[base_row[r]] (the MTP rows' hidden streams: from a
// sequence's tap ring or from this pass's final streams).
struct RowSourcesParams {
    const float* const* src_ptr = nullptr;  // [rows] device pointers (null: take base_row[r])
    const float* base = nullptr;            // [*, width]
    const int32_t* base_row = nullptr;      // [rows]
    float* dst = nullptr;                   // [rows, width]
    int64_t rows = 0, width = 0;
};
void gather_row_sources(const RowSourcesParams& p, Stream s);

// dst_ptr[r][0, width) = src[r] for every row with a non-null destination (the tap rings' writes).
struct ScatterRowPtrsParams {
    const float* src = nullptr;       // [rows, width]
    float* const* dst_ptr = nullptr;  // [rows] device pointers (null: skip)
    int64_t rows = 0, width = 0;
};
void scatter_row_ptrs(const ScatterRowPtrsParams& p, Stream s);

// x[t, j, :] = e[t, :] + h[t, j, :] for every stream j (bf16-rounded when asked): the MTP block's input.
struct AddStreamsParams {
    const float* e = nullptr;  // [rows, D]
    const float* h = nullptr;  // [rows, hc, D]
    float* x = nullptr;        // [rows, hc, D]
    int64_t rows = 0, hc = 1, hidden = 0;
    bool round_bf16 = false;
};
void add_streams(const AddStreamsParams& p, Stream s);

// One draft per row of draft logits, as src/model/draft_sampling.h: argmax (the lowest id among the
// largest), or for a row with sampled[r] and temperature[r] > 0, softmax(logits / T) in f64 stored as
// f32 `probs` and drawn by inverse CDF in id order with uniform[r * uniform_stride]; plus the
// confidence proxy of model/mtp_drafter.cpp (the pick's softmax probability at temperature 1). The
// sums run on one thread in the CPU's order, so results equal the CPU's.
struct DraftSampleParams {
    const float* logits = nullptr;       // [rows, vocab]
    int64_t rows = 0, vocab = 0;
    const double* temperature = nullptr;  // [rows]
    const int32_t* sampled = nullptr;     // [rows] 0/1
    const double* uniform = nullptr;      // [rows * uniform_stride]
    int64_t uniform_stride = 1;
    double* parts = nullptr;     // [draft_sample_parts(rows, vocab)] f64: per block sums and maxima
    float* probs = nullptr;      // [rows, vocab]: written for sampled rows
    int32_t* tokens = nullptr;   // [rows]
    float* confidence = nullptr;  // [rows] the MTP confidence proxy (draft_confidence_proxy), or null: none
};
void draft_sample(const DraftSampleParams& p, Stream s);
// Doubles of DraftSampleParams::parts for `rows` rows of `vocab` ids.
int64_t draft_sample_parts(int64_t rows, int64_t vocab);

// ---- DeepSeek-V4.1 (src/model/v41: single-pass mHC, CSA2 caches, Engram) ------------------------

// V4.1 mHC of one site for every row (model/v41/mhc.cpp): the site's mixes from the RMS-normalized
// flattened streams (pre = sigmoid + eps, post = 2·sigmoid, comb = Sinkhorn of a row softmax) and the
// collapse of the streams with `collapse_pre` (the previous site's pre, spec §4) [→ bf16].
struct HcMixesParams {
    const float* x = nullptr;      // [rows, hc, D]
    const float* fn = nullptr;     // [(2+hc)*hc, hc*D]
    const float* base = nullptr;   // [(2+hc)*hc]
    const float* scale = nullptr;  // [3]
    int64_t rows = 0, hc = 0, hidden = 0, sinkhorn_iters = 0;
    float norm_eps = 1e-20f, hc_eps = 1e-6f;
    float* pre = nullptr;                 // [rows, hc] this site's pre
    float* post = nullptr;                // [rows, hc]
    float* comb = nullptr;                // [rows, hc, hc] (comb[j*hc + k], j = input stream)
    const float* collapse_pre = nullptr;  // [rows, hc]
    float* collapsed = nullptr;           // [rows, D]
    bool round_bf16 = false;
};
void hc_mixes(const HcMixesParams& p, Stream s);

// out[r, d] = Σ_j pre[r, j] · x[r, j, d] (from 0, in stream order) [→ bf16].
struct HcCollapseParams {
    const float* x = nullptr;    // [rows, hc, D]
    const float* pre = nullptr;  // [rows, hc]
    float* out = nullptr;        // [rows, D]
    int64_t rows = 0, hc = 0, hidden = 0;
    bool round_bf16 = false;
};
void hc_collapse(const HcCollapseParams& p, Stream s);

// V4.1's cached vectors in their compact storage (model/v41/qat.h, spec §3.6): each row holds its
// codes then one scale byte per block. kFp8Ue8m0: e4m3 codes + ue8m0 scales (window K=V, block 32);
// kFp4E4m3: packed e2m1 (element 2k in the low nibble) + e4m3 scales (compressed entries, block 16);
// kFp4Ue8m0: packed e2m1 + ue8m0 scales (index keys, block 32); kF32: the raw f32 row (a length that
// is not a multiple of the block is not quantized, as in the reference).
enum class CacheFormat : uint8_t { kF32, kFp8Ue8m0, kFp4E4m3, kFp4Ue8m0 };
inline int64_t cache_row_bytes(CacheFormat f, int64_t n, int64_t block) {
    switch (f) {
        case CacheFormat::kF32: return n * 4;
        case CacheFormat::kFp8Ue8m0: return n + n / block;
        default: return n / 2 + n / block;
    }
}

// Fake quantization of rows in the QAT format (exactly model/v41/qat.cpp's values) and/or their
// compact codes written to per-row destinations.
struct QatRowsParams {
    float* x = nullptr;  // [rows, n]: input; the dequantized values when fake_quant
    int64_t rows = 0, n = 0, block = 32;
    CacheFormat format = CacheFormat::kF32;
    bool fake_quant = true;
    uint8_t* const* dst = nullptr;  // [rows] device array of row destinations (null entries skipped) or null
};
void qat_rows(const QatRowsParams& p, Stream s);

// out[r, 0..n) = the values of compact row r (the cache decoders of the attention and indexer kernels):
// one value per read (cache_value), or 16 per read (cache_values16, by16; n % 16 == 0, and block % 16 == 0
// for the quantized formats), the same floats either way (tests compare both with the CPU's decoders).
struct DecodeRowsParams {
    const uint8_t* src = nullptr;  // [rows, cache_row_bytes(format, n, block)]
    int64_t rows = 0, n = 0, block = 32;
    CacheFormat format = CacheFormat::kF32;
    bool by16 = false;
    bool two_step = false;  // (with by16) cache_codes16 then cache_decode16, the V4.1 attention's key staging
    float* out = nullptr;   // [rows, n]
};
void decode_rows(const DecodeRowsParams& p, Stream s);

// dst[i][0 .. row_bytes) = src[i * row_bytes ..] for every i with dst[i] != null (ring and cache stores).
struct CopyRowsParams {
    const void* src = nullptr;     // [rows, row_bytes]
    void* const* dst = nullptr;    // [rows] device array of destinations
    int64_t rows = 0, row_bytes = 0;
};
void copy_rows(const CopyRowsParams& p, Stream s);

// V4.1 compressor pooling of `groups` groups of `ratio` rows (model/v41/attention.cpp pool_groups):
// per channel, softmax over the group's gate rows and the weighted sum of its kv rows [→ bf16].
// ratio 1 without gate rows: the kv row itself. Row pointers come per (group, r): chunk rows or the
// sequence's pending ring.
struct CompressPoolParams {
    const float* const* kv_rows = nullptr;    // [groups * ratio] device array
    const float* const* gate_rows = nullptr;  // [groups * ratio] device array, or null (ratio 1)
    int64_t groups = 0, ratio = 0, width = 0;
    float* out = nullptr;  // [groups, width]
    bool round_bf16 = false;
};
void compress_pool(const CompressPoolParams& p, Stream s);

// Rows of a V4.1 cache kept in the pages of the model's device page pool (the sequences' state,
// model/cuda_v41_state.h): row i of segment s at tables[s * table_len + i / per_page] + offset +
// (i % per_page) * row bytes. Null tables: a segment's rows are contiguous from its base address.
struct PagedCacheRows {
    const uint8_t* const* tables = nullptr;  // [segments, table_len] page addresses (device)
    int64_t table_len = 0, per_page = 0;
    int64_t offset = 0;  // bytes into a page of the cache's block
};

// One query row of the V4.1 indexer.
struct IndexRow {
    int32_t row = 0;            // batch row (q, weights, candidate mask, published top-k)
    int32_t num_entries = 0;    // n: entries of the KV source
    int32_t visible = 0;        // min(n, (pos+1)/ratio): keys j >= visible score -inf
    int32_t mask_entries = -1;  // candidate users: entries the mask was built for; -1: no mask
    const uint8_t* keys = nullptr;  // [n, key row bytes] the KV source's index keys (compact); paged: key 0
    int32_t segment = 0;            // the row's segment (its page table when the keys are paged)
};

// Lightning-indexer scores of each IndexRow against its keys (the CPU's order per score: per head
// cpu::dot, exact or the official bf16 arithmetic); scores[i, j] = -inf for j >= visible.
struct IndexScoresParams {
    const IndexRow* rows = nullptr;  // [num_rows]
    int64_t num_rows = 0;
    int64_t max_entries = 0;         // max num_entries (scores ld)
    const float* q = nullptr;        // [batch rows, heads, head_dim] (RoPE + QAT applied)
    const float* weights = nullptr;  // [batch rows, heads]
    int64_t heads = 0, head_dim = 0;
    CacheFormat key_format = CacheFormat::kFp4Ue8m0;
    int64_t key_block = 32;
    bool official = false;
    // Fast GEMM mode: the dot products on tensor cores (kernels/v41_indexer_tc.cuh) when official
    // numerics, heads <= 64 and head_dim in {32, 64, 128}; within the fast mode's tolerances.
    bool tensor_cores = false;
    PagedCacheRows paged_keys = {};  // the keys in pool pages (tables null: contiguous from IndexRow::keys)
    // Tensor cores: from 8 rows in one segment (prefill) 8 rows per block share each decoded key tile
    // (kernels/v41_indexer_tc_gemm.cuh; the same bits as one row per block).
    int64_t max_segment_rows = 0;   // most index rows of any one segment (0: unknown, one row per block)
    int64_t tc_rows_per_block = 0;  // tests: 0 picks by max_segment_rows; 1 or 8
    bool gemm_lockstep = false;     // tests: the 8-row kernel with all warps in step (no MMA / head-sum overlap)
    float* scores = nullptr;  // [num_rows, max_entries]
};
void index_scores(const IndexScoresParams& p, Stream s);

// The candidate stage (spec §3.3): `build` (the candidate source): blocks of block_size entries scored
// by their max, the newest visible entry's block pinned, the top keep_blocks blocks (ties to the lower
// block; -inf blocks never) marked in mask[row, :n]; otherwise rows with mask_entries >= 0 get the
// scores of non-candidates (j >= mask_entries or unmarked) set to -inf.
struct CandidateParams {
    const IndexRow* rows = nullptr;
    int64_t num_rows = 0;
    float* scores = nullptr;  // [num_rows, ld]
    int64_t ld = 0;
    uint8_t* mask = nullptr;  // [batch rows, mask_ld]
    int64_t mask_ld = 0;
    int64_t block_size = 0, keep_blocks = 0;
    bool build = false;
    float* block_scores = nullptr;    // [num_rows, ceil(ld / block_size)] scratch (build)
    int32_t* block_picked = nullptr;  // [num_rows, keep_blocks] scratch (build)
};
void candidate_blocks(const CandidateParams& p, Stream s);

// Publishes a top-k: out[rows[i].row, :] = the entries of picked[i, :] whose score is finite, in order
// (ascending), then -1.
struct TopkPublishParams {
    const IndexRow* rows = nullptr;
    int64_t num_rows = 0;
    const int32_t* picked = nullptr;  // [num_rows, k] (topk() output, ascending, -1 padded)
    const float* scores = nullptr;    // [num_rows, ld]
    int64_t ld = 0, k = 0;
    int32_t* out = nullptr;           // [batch rows, k]
};
void topk_publish(const TopkPublishParams& p, Stream s);

// One sequence's rows in a batch for the V4.1 attention.
struct SinkSegment {
    int64_t row_begin = 0, num_rows = 0, first_position = 0;
    const uint8_t* window = nullptr;   // [window_rows, window row bytes] ring, position p in slot p % window_rows
    const uint8_t* entries = nullptr;  // the KV source's compressed entries (paged: entry 0), or null: none
    int64_t window_begin = 0;  // window keys start no earlier than this position (bounded replay; 0: the full window)
};

// A segment's keys pre-decoded to bf16 rows (SinkAttentionParams::keys_bf16, made by key_rows_bf16): the window
// ring's positions ring_lo .. ring_lo + ring_n - 1 (those below first_position that the segment's rows read) at
// key rows ring_row .., its KV source's entries 0 .. entries - 1 at key rows entry_row ..; this chunk's rows are
// key rows row_begin .. (their bf16 form). ring_row < 0: the segment's keys are decoded by the attention itself.
struct SinkBf16Keys {
    int64_t ring_row = -1, ring_lo = 0, ring_n = 0;
    int64_t entry_row = 0, entries = 0;
};

// V4.1 sink attention (model/v41/attention.cpp): keys = window positions max(0, P-W+1, window_begin)..P (this
// chunk's rows from kv, older ones decoded from the ring), then the published top-k entries (>= 0);
// logits = dot·scale; max starts at the sink; p = exp(l - max) / den (bf16 in official numerics);
// o = Σ p·key in key order [→ bf16], inverse RoPE, rope dims → bf16 (official).
struct SinkAttentionParams {
    const SinkSegment* segments = nullptr;
    const int32_t* row_segment = nullptr;  // [rows]
    const int32_t* positions = nullptr;    // [rows]
    int64_t rows = 0, heads = 0, head_dim = 0;
    const float* q = nullptr;     // [rows, heads, head_dim]
    const float* kv = nullptr;    // [rows, head_dim] this chunk's K=V rows (QAT values)
    const float* sink = nullptr;  // [heads]
    int64_t window = 0, window_rows = 0;
    CacheFormat window_format = CacheFormat::kFp8Ue8m0;
    int64_t window_block = 32;
    CacheFormat entry_format = CacheFormat::kFp4E4m3;
    int64_t entry_block = 16;
    const int32_t* selected = nullptr;  // [rows, topk] or null
    int64_t topk = 0;
    int64_t max_candidates = 0;
    float* scratch = nullptr;  // [rows, heads, max_candidates]
    const float* cos_sin = nullptr;
    int64_t rope_dim = 0;
    float softmax_scale = 0;
    bool official = false;
    // Fast GEMM mode: the tensor-core kernel (kernels/v41_attention_tc.cuh; the scratch holds the scores
    // and probabilities) when official numerics, head_dim in {64, 128, 256, 512} and the shared memory
    // allow; equal to the reference kernel within the fast mode's tolerances.
    bool tensor_cores = false;
    // The tensor-core kernel's heads per CTA: 0 = by the row count (16, kernels/v41_attention_tc_heads.cuh, at
    // head_dim 512 while rows x ceil(heads / 16) CTAs fit the SMs once: a decode batch's row spread over four SMs;
    // else 64; on Hopper, pairs of CTAs per 16 heads, "8", while twice those CTAs fit: each of a pair scores half
    // the key blocks, normalizes 8 heads and outputs half the columns); 8, 16 or 64 pins one (tests). All give the
    // same bits.
    int tc_heads_per_cta = 0;
    // The split form (kernels/v41_attention_tc_split.cuh, head_dim 512: a launch of score CTAs over 64-key blocks,
    // then one of softmax + P·V CTAs over 64-column slices; 4-10x the CTAs of the few-rows kernel at a batch of one)
    // for launches of at most this many rows while tc_heads_per_cta is 0; 0: never. The same bits as the others.
    int64_t tc_split_rows = 0;
    // The entries in pool pages, one page table per segment (tables null: contiguous from SinkSegment::entries).
    PagedCacheRows paged_entries = {};
    float* out = nullptr;  // [rows, heads, head_dim]
    // bf16 I/O of the 64-head tensor-core kernel (fast mode's prefill; only where sink_attention_bf16_io(p)):
    // q_bf16 [rows, heads, head_dim] holds q's values (bf16 holds them in official numerics) and is read
    // instead of q, which may then be null or stale; out_bf16 receives the output's bf16 bits (the outputs are
    // bf16-rounded: exact) at out_bf16[(h / gh) · bf16_group_stride + (r · gh + h % gh) · head_dim + c] (gh =
    // bf16_group_heads, 0: heads), i.e. [heads / gh][rows, gh · head_dim]: each group of wo_a's input rows
    // together; out may then be null (not written).
    const uint16_t* q_bf16 = nullptr;
    uint16_t* out_bf16 = nullptr;
    int64_t bf16_group_heads = 0, bf16_group_stride = 0;
    // Keys pre-decoded once per launch (key_rows_bf16): keys_bf16 [key rows, head_dim] bf16 bits, bf16_keys
    // [segments]; a segment with bf16_keys[s].ring_row >= 0 reads every key of its rows from there (16-byte copies
    // instead of a decode per row and pass: the same values, so the same bits). Null: every key decoded in place.
    // The 64-head kernel reads them (its pipelined form: a block's keys copied by cp.async into a second buffer
    // while the block before runs its MMAs, where the device's shared memory holds it: sink_attention_async_keys_fit);
    // the other kernels decode in place. keys_bf16_all: every segment has them (one launch; else one per form).
    const uint16_t* keys_bf16 = nullptr;
    const SinkBf16Keys* bf16_keys = nullptr;
    bool keys_bf16_all = false;
};
void sink_attention(const SinkAttentionParams& p, Stream s);

// The pre-decoded keys of sink attention's segments (SinkBf16Keys): for every segment with ring_row >= 0, its
// ring positions' and entries' values (the attention's own decode of them, rounded to bf16: exact for the
// compact formats) into out's key rows. A launch of ceil(max_rows / 8) x segments blocks of 8 rows.
struct KeyRowsBf16Params {
    const SinkSegment* segments = nullptr;  // [num_segments]
    const SinkBf16Keys* keys = nullptr;     // [num_segments]
    int64_t num_segments = 0;
    int64_t max_rows = 0;  // the largest ring_n + entries of a segment
    int64_t head_dim = 0;  // a multiple of 16
    int64_t window_rows = 0;
    CacheFormat window_format = CacheFormat::kFp8Ue8m0;
    int64_t window_block = 32;
    CacheFormat entry_format = CacheFormat::kFp4E4m3;
    int64_t entry_block = 16;
    PagedCacheRows paged_entries = {};
    uint16_t* out = nullptr;  // [key rows, head_dim] bf16 bits
};
void key_rows_bf16(const KeyRowsBf16Params& p, Stream s);
// Whether the 64-head kernel's pipelined form fits this device's shared memory at head_dim kd.
bool sink_attention_async_keys_fit(int64_t kd);
// Whether sink_attention(p) reads pre-decoded keys: it runs the 64-head kernel (its choice depends on p's shapes, row
// count, alignment and the device, as for sink_attention_bf16_io) and that kernel's pipelined form fits.
bool sink_attention_reads_bf16_keys(const SinkAttentionParams& p);
// Whether sink_attention(p) runs the 64-head tensor-core kernel on this device, the one kernel that reads q_bf16
// and writes out_bf16 (its choice depends on p's shapes, row count, alignment and the device, not on its data).
// sink_attention rejects q_bf16 or out_bf16 (or a null q / out) where this is false.
bool sink_attention_bf16_io(const SinkAttentionParams& p);

// Engram table rows gathered and dequantized: out[t, c*head_dim ..] = table[rows[t, c]]. The table may
// live in mapped (pinned) host memory: the GPU reads the rows it needs over the bus.
struct EngramGatherParams {
    DeviceLinear table;               // [table rows, head_dim]
    const int64_t* rows = nullptr;    // [tokens, cols]
    int64_t tokens = 0, cols = 0;
    float* out = nullptr;             // [tokens, cols * head_dim]
};
void engram_gather(const EngramGatherParams& p, Stream s);

// Engram fusion into the streams (model/v41/ffn.cpp engram_forward): per (token, stream j) the gate
// sigmoid(signed sqrt(<h·w_j, k_j> · rstd(h) · rstd(k_j) / sqrt(D))) and h += gate · v [→ bf16].
struct EngramFuseParams {
    const float* kv = nullptr;           // [tokens, (hc+1)*D]: keys of each stream, then the value
    const float* gate_weight = nullptr;  // [hc, D]
    const uint8_t* gate_off = nullptr;   // [tokens] or null: 1 forces the gate to 0
    float* streams = nullptr;            // [tokens, hc, D]
    int64_t tokens = 0, hc = 0, hidden = 0;
    float eps = 1e-20f;
    bool round_bf16 = false;
    // Fast mode: the gate's three sums (|h|², |key|², h·w·key) as RmsNormParams::tree_sum's order (thread t of 256:
    // elements t, t + 256, .. in order, each warp's butterfly, the warp sums in warp order) instead of the CPU's
    // sequential one on one thread: a fixed order, so a token's bits do not depend on the batch.
    bool tree_sum = false;
};
void engram_fuse(const EngramFuseParams& p, Stream s);

// ---- DSpark drafting (src/model/dspark_common.h, model/v41/dspark.h) ------------------------------

// The drafter's taps: out[m * ld + d] = (Σ_j x[src_row[m], j, d]) / hc in stream order [→ bf16], the
// mean of row src_row[m]'s streams (model/v41/dspark.cpp tap_mean), into one column block of the taps.
struct TapMeanParams {
    const float* x = nullptr;            // [rows, hc, D]
    const int32_t* src_row = nullptr;    // [num] rows of x
    int64_t num = 0, hc = 0, hidden = 0;
    float* out = nullptr;                // [num, ld]: columns [0, hidden) of each row written
    int64_t ld = 0;
    bool round_bf16 = false;
};
void tap_mean(const TapMeanParams& p, Stream s);

// DSparkAttention of one stage (dspark_common.h dspark_attention_core; V4.1's kProbsThenSum form, or
// with sum_then_divide V4's kSumThenDivide: o = Σ e·key [e → bf16 in official] / den):
// block row k of request i (position P_i + k) attends to the ring's context rows of positions
// max(0, P_i - W) .. P_i - 1 (oldest first) and all `block` K=V rows of its block; logits = dot·scale,
// max starts at the sink, p = exp(l - max) / den [→ bf16 in official], o = Σ p·key in key order
// [→ bf16], inverse RoPE at P_i + k, rope dims → bf16 (official), as sink_attention.
struct DSparkAttentionParams {
    const float* q = nullptr;          // [requests * block, heads, head_dim] after RoPE
    const float* block_kv = nullptr;   // [requests * block, head_dim] the blocks' K=V rows (QAT values)
    const uint8_t* const* rings = nullptr;  // [requests] this stage's context ring of each request
    const int32_t* anchor_positions = nullptr;  // [requests] P_i
    int64_t requests = 0, block = 0, heads = 0, head_dim = 0, window = 0, window_rows = 0;
    CacheFormat ring_format = CacheFormat::kFp8Ue8m0;
    int64_t ring_block = 32;
    const float* sink = nullptr;  // [heads]
    float* scratch = nullptr;     // [requests * block, heads, window + block]
    const float* cos_sin = nullptr;
    int64_t rope_dim = 0;
    float softmax_scale = 0;
    bool official = false;
    bool sum_then_divide = false;
    float* out = nullptr;  // [requests * block, heads, head_dim]
};
void dspark_attention(const DSparkAttentionParams& p, Stream s);

// One step k of the Markov head for the `rows` requests still drafting (rows a = 0 .. rows-1, block row
// a * block + k; dspark_common.cpp dspark_markov_draft): logits[a] = U[a*block + k] + bias[a] (fp32),
// confidence[a] = sigmoid(w · [y[a*block + k]; e[a]]) with cpu::dot's order over the concatenation.
struct DSparkMarkovStepParams {
    const float* U = nullptr;     // [requests * block, vocab] base logits
    const float* y = nullptr;     // [requests * block, hidden] collapsed last-stage rows (pre-norm)
    const float* bias = nullptr;  // [rows, vocab] W1[x_{k-1}] · W2ᵀ
    const float* e = nullptr;     // [rows, rank] W1[x_{k-1}]
    const float* weight = nullptr;  // [hidden + rank] the confidence head
    int64_t rows = 0, block = 0, step = 0, vocab = 0, hidden = 0, rank = 0;
    float* logits = nullptr;      // [rows, vocab]
    float* confidence = nullptr;  // [rows] (may be strided into a [steps, requests] table by the caller)
};
void dspark_markov_step(const DSparkMarkovStepParams& p, Stream s);

}  // namespace deepinfer::cuda
