// SPDX-License-Identifier: Apache-2.0
// The `fast` GEMM mode of the CUDA backend: tensor-core GEMMs (mma.sync, FP32 accumulation) for the
// stored weight formats, next to the bit-exact CUDA-core `reference` kernels of ops.h.
//  - FP8 e4m3 weights with 128x128 block scales (f32 | ue8m0 | bf16) times activations quantized per
//    128 columns like DeepSeek's act_quant (e4m3 + power-of-two f32 scale): the four k32 MMAs of a
//    128-wide K block accumulate in a fresh register tile, which is then promoted into the FP32
//    accumulator times (activation scale x weight scale).
//  - Packed FP4 (e2m1, per-32 ue8m0 scales) weights, converted to e4m3 on the fly (in registers or in
//    shared memory, see Fp4Path): each 32-subblock's values are shifted by its scale's distance to the
//    largest of the row's four scales in that 128 block (exact while the distance is <= 8 binades;
//    smaller values round in e4m3), and the promotion uses that largest scale.
//  - FP8 e4m3 weights with 32x32 block scales (DeepSeek-V4.1's dense linears; Hopper only) times
//    activations act_quant'ed per 32 columns: each k32 MMA's partial tile is promoted into the FP32
//    accumulator times (activation scale of the k-block) x (weight scale of the 32x32 block).
//  - BF16 weights times bf16 activations (LM head and other bf16 linears).
// Batch invariance: a row's result never depends on the other rows of the launch. Every output
// element is computed by the same sequence of m16n8k32 (m16n8k16 for bf16) MMAs over K in ascending
// order with the same promotion points, whatever tile shape the launcher picks from the row count.
// Split-K (Hopper, FP8 128x128 and BF16 weights whose output tiles alone do not fill the GPU): K is cut
// into fast_linear_k_chunks(w) chunks of whole 128-byte K tiles, a number that depends on the weight's
// kind and shape and the device's SM count only, never on the rows; each chunk accumulates from zero,
// and the chunk sums are added in chunk order, ((c0 + c1) + c2) + ... Decode-sized launches run the
// chunks on separate blocks (partials in FastLinearParams::split_scratch, then an ordered sum kernel);
// larger ones, or launches without scratch, run all chunks in one block with the same accumulators and
// the same ordered sum: the same bits either way. tests/ops/gemm_fast_cuda_test.cpp checks this bit
// for bit.
#pragma once

#include <cstdint>

#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

// Which GEMM kernels the CUDA model uses (CudaModelOptions::gemm).
enum class GemmMode : uint8_t {
    kReference,  // CUDA-core kernels, bit-identical to the CPU reference
    kFast,       // tensor-core kernels of this header, equal to the CPU within per-dtype tolerances
};

// Which kernel multiplies packed FP4 weights on Hopper (sm_90): kAuto = for weights with out_features a
// multiple of 128 and in_features a multiple of 256, up to 64 rows per group on average the decode kernel
// (kernels/gemm_wgmma_fp4dec.cuh: each thread converts its own A fragment in registers, the wgmma width
// from each tile's rows), the warp-specialized one (kernels/gemm_wgmma_fp4ws.cuh: a producer warpgroup
// converts each weight tile once, two consumer warpgroups multiply; by default two producer warpgroups
// taking alternate K tiles, one block per SM looping over the tiles) above; the register kernel
// (kernels/gemm_wgmma_fp4rs.cuh, fixed token-tile widths) only when pinned; else the one that converts
// whole tiles in shared memory (kernels/gemm_wgmma.cuh); kSharedConvert always takes the latter (tests and
// benchmarks compare them). Other devices: the mma.sync kernel either way.
enum class Fp4Path : uint8_t { kAuto, kSharedConvert };
// Which kernel multiplies dense FP8 (128x128 blocks) and BF16 weights on Hopper at more than 64 rows per
// launch: the warp-specialized persistent kernel (kernels/gemm_wgmma_dense_ws.cuh: TMA copies, a producer
// warp and two consumer warpgroups, static tile schedule grouped for L2 reuse) where the launch is plain
// (no row gather, no grouped experts, no split-K partials) and the operands suit the tensor memory
// accelerator; else, or with kClassic, the cp.async kernel (kernels/gemm_wgmma.cuh). Its forms: kWs (one
// block per tile), kWsCluster (clusters of two blocks over row-tile pairs sharing each weight tile by TMA
// multicast), each with the classic kernel's wgmma width (64 for N <= 2048, else 128) or, `Wide`, 128
// for every N (the same bits: the m64n64 and m64n128 instructions compute an element alike). kAuto =
// kWsWide, the fastest on the H200 (1.1-1.9x the classic kernel at 4K-16K rows; the cluster forms ran at
// half its rate, cause not found: bench/results/cuda-dense-prefill-h200-*.md). Every form gives a row the
// same bits as the classic kernel (tests/ops/gemm_fast_cuda_test.cpp compares them); benchmarks and tests
// pin them.
enum class DensePath : uint8_t { kAuto, kClassic, kWs, kWsCluster, kWsWide, kWsClusterWide };
// The FP4 kernels' configurations on Hopper: the register-converting kernel's tile shapes (TN token rows
// x 64·warpgroups weight rows per block, pipeline stages, blocks per SM), the warp-specialized kernel's
// ("ws128_s4", "ws128_s5": pipeline stages; "p2": two producer warpgroups; "_pers": one block per SM
// looping over the tiles; "_pf6": L2 prefetch of the weight rows 6 K tiles ahead; "_late2": a producer
// copies its K tile 2 own tiles ahead after converting, not before; "_self": each producer thread converts
// the raw chunks it copied, no barrier among the producers; "_ea": one elected arrive per producer warp on
// a converted stage; "_pp": the two consumer warpgroups issue their MMAs in turn) and the decode kernel's ("dec64_kt2_72k_b3_pf256": tiles of
// up to 64 rows, 2 K tiles per stage, 72 KB of stages, 3 blocks per SM, 256-byte L2 prefetch);
// FastLinearParams::fp4_rs_variant pins one (tests and benchmarks: a row's bits are the same in every
// one), else the launcher picks by rows per expert.
constexpr int kFp4RsVariants = 32;
const char* fp4_rs_variant_name(int variant);  // e.g. "tn128_wg2_s4_b1"

// True when the fast path handles this weight: FP8 with 128x128 blocks (or 32x32 blocks where
// fast_fp8_b32_available, not grouped), FP4, or BF16, with in_features a multiple of 128 (FP8/FP4) or
// 64 (BF16). Others stay on the reference kernel.
bool fast_linear_supported(const DeviceLinear& w);
// The number of K chunks the fast GEMM sums `w`'s products in (see above): > 1 only on sm_90 for FP8
// 128x128-block and BF16 weights whose output tiles number at most a third of the SMs: SMs / tiles
// chunks (one block per SM), at most one per four K tiles (fewer than 3: none); a function of the
// weight's kind and shape and the device, never of the rows.
int fast_linear_k_chunks(const DeviceLinear& w);
// When the fast GEMM splits K over blocks: never, when the unsplit grid is small (kAuto: rows up to
// the decode sizes, partials below kFastSplitMaxFloats), or whenever w has more than one K chunk
// (kForce; tests and benchmarks). The bits are the same in every form.
enum class SplitK : uint8_t { kAuto, kOff, kForce };
constexpr int64_t kFastSplitMaxFloats = int64_t(4) << 20;  // partials of one split launch: 16 MiB
// The f32 scratch (floats) the split form of `w` at `rows` rows takes (FastLinearParams::split_scratch);
// 0 when that launch runs unsplit.
// k_chunks > 0: for a launch that forces that many chunks (FastLinearParams::k_chunks).
int64_t fast_linear_split_floats(const DeviceLinear& w, int64_t rows, SplitK mode = SplitK::kAuto, int k_chunks = 0);
// The same for a grouped launch of `rows` rows in all over `groups` weights of w's shape (kind and out_features, e.g.
// wo_a's slices; grouped_wo_a.h): kAuto splits while the unsplit grid (each group's row tiles x w's output tiles)
// has fewer blocks than the SMs. Routed FP4 experts have one chunk: never split. At most
// fast_linear_split_floats_bound(rows).
int64_t fast_grouped_split_floats(const DeviceLinear& w, int64_t rows, int64_t groups, SplitK mode = SplitK::kAuto);
// An upper bound of fast_linear_split_floats(w, r, kAuto) over every weight and r <= rows on this
// device, and of fast_grouped_split_floats(w, r, groups) (workspace sizing; 0 off sm_90).
int64_t fast_linear_split_floats_bound(int64_t rows);
// The act_quant block (ActQuantFp8Params::block) of a fast_linear_supported FP8/FP4 weight's activations:
// 32 for FP8 with 32x32 blocks (not grouped), else 128.
inline int64_t fast_activation_block(const DeviceLinear& w) {
    return w.kind == WeightKind::kFp8Block && w.block_cols == 32 ? 32 : 128;
}
// True when the current device runs the FP8 tensor-core path (compute capability >= 8.9).
bool fast_fp8_available();
// True when the current device runs FP8 weights with 32x32 block scales natively (wgmma: sm_90). Elsewhere
// those are not fast_linear_supported (V4.1's fast mode uploads them as exact bf16 instead).
bool fast_fp8_b32_available();
// True when the current device runs DensePath::kAuto's warp-specialized dense kernel (sm_90 with the driver's
// TMA tensor-map encoder).
bool fast_dense_ws_available();

// Whether `block` can be a fused QAT step's block (ActQuantFp8Params::pre_block, ToBf16Params::quant_block): a
// power of two from 4 to 128, so that a warp's 128 columns hold whole blocks of whole float4 lanes.
inline bool fused_qat_block_ok(int64_t block) { return block >= 4 && block <= 128 && (block & (block - 1)) == 0; }

// DeepSeek's act_quant into e4m3 bytes + f32 scales: s = 2^ceil(log2(max(amax, 1e-4)/448)) per `block`
// (128, or 32 for FP8 weights with 32x32 blocks) consecutive columns of a row, q = e4m3(clamp(x/s, ±448));
// q·s equals act_quant_dequant with that block bit for bit.
// Row r reads x row (row_src ? row_src[r] : r).
struct ActQuantFp8Params {
    const float* x = nullptr;  // [*, x_ld] f32
    int64_t x_ld = 0;
    const int32_t* row_src = nullptr;  // [rows] or null
    int64_t rows = 0, cols = 0;        // cols % 128 == 0
    uint8_t* q = nullptr;              // [rows, cols] e4m3
    float* scale = nullptr;            // [rows, cols/block] f32
    int64_t block = 128;               // 128 or 32
    // > 0 (a power of two, 4..128): x is first act_quant_dequant'ed per pre_block columns (V4.1's QAT per 32
    // before the experts' quantization per 128): the codes and scales of act_quant_dequant then this.
    int64_t pre_block = 0;
};
void act_quant_fp8(const ActQuantFp8Params& p, Stream s);

// out = bf16(x) (round to nearest even; exact for rows that already hold bf16 values).
struct ToBf16Params {
    const float* x = nullptr;  // [rows, x_ld] f32
    int64_t x_ld = 0;
    int64_t rows = 0, cols = 0;  // cols % 8 == 0 (quant_block > 0: cols % 128 == 0)
    uint16_t* out = nullptr;     // [rows, cols] bf16
    // > 0 (a power of two, 4..128): out = bf16(act_quant_dequant(x) per quant_block columns), one pass with
    // the bits of act_quant_dequant then to_bf16 (exact: e4m3 times a power of two is a bf16 value).
    int64_t quant_block = 0;
};
void to_bf16(const ToBf16Params& p, Stream s);

// y[out_row(r), n] = a[src(r), :] · W[n, :] on tensor cores, r in [0, rows).
// Plain form: `weight`. Grouped form (routed experts, one launch): rows are grouped by expert
// (expert_offsets[e] .. expert_offsets[e+1], as permute() writes them) and use experts[e]
// (device array, all of `weight`'s shape and format); `tile_scratch` holds num_experts + 1 ints.
struct FastLinearParams {
    const void* a = nullptr;           // [*, K] e4m3 (FP8/FP4 weights) or bf16 (BF16 weights), dense rows
    const float* a_scale = nullptr;    // [*, K/128] f32 act_quant scales (FP8/FP4 weights); [*, K/32] for 32x32 FP8
    const int32_t* a_row_src = nullptr;  // [rows] a row of each output row, or null (= r)
    DeviceLinear weight;
    const DeviceLinear* experts = nullptr;     // [num_experts] (device) or null
    const int32_t* expert_offsets = nullptr;   // [num_experts + 1] (device)
    int64_t num_experts = 0;
    int32_t* tile_scratch = nullptr;           // [num_experts + 1] (device)
    const int32_t* y_row = nullptr;  // [rows] destination row of each row, or null (= r)
    float* y = nullptr;              // [*, y_ld] f32
    int64_t y_ld = 0;
    int64_t rows = 0;
    bool round_output_bf16 = false;
    Fp4Path fp4_path = Fp4Path::kAuto;
    int fp4_rs_variant = -1;  // -1: by rows per group; 0 .. kFp4RsVariants - 1: that configuration
    // Split-K: the partials of the split form, fast_linear_split_floats(weight, rows, split) floats (grouped:
    // fast_grouped_split_floats(weight, rows, num_experts, split)) (stream-ordered scratch), or null: then the launch
    // runs unsplit (the same bits).
    float* split_scratch = nullptr;
    SplitK split = SplitK::kAuto;
    int k_chunks = 0;  // 0: fast_linear_k_chunks(weight); else that many (benchmarks: other chunkings' bits differ)
    DensePath dense_path = DensePath::kAuto;
    // Grouped form: tile_scratch already holds the tile table of these expert_offsets for tiles of
    // tile_rows_given rows (an earlier launch's *tile_rows_out), so it is not built again unless this
    // launch's tiles differ; 0: build it. tile_rows_out (or null): set to the tile rows of the table
    // this launch leaves in tile_scratch.
    int tile_rows_given = 0;
    int* tile_rows_out = nullptr;
    // Grouped form: a second weight set over the same rows and tables (the same shape: [num_experts]
    // like `experts`), its output into y2 (same y_row, y_ld). One launch where the FP4 decode kernel
    // runs (its grid twice as wide: twice the blocks streaming weights at small batches), else two; the
    // same bits either way (every output element's instruction sequence is that of its own launch).
    const DeviceLinear* experts2 = nullptr;
    float* y2 = nullptr;
    // FP8 32x32-block weights with power-of-two scales (sm_90, not grouped, out_features % 64 == 0,
    // in_features % 64 == 0 and <= 16384) multiplied as their exact bf16 values with bf16 activations (`a`
    // bf16 rows, no a_scale): the bits of the same weight uploaded as bf16 (upload_fp8_as_bf16) with half its
    // bytes read, by a weight-streaming kernel for decode sizes (kernels/gemm_wgmma_fp8bf16dec.cuh: each
    // thread converts its own wgmma A fragment in registers; token tiles of up to 128 rows, so slower than the
    // bf16 form from ~32 rows). Split-K and its scratch as for that bf16 weight (fp8_as_bf16_shape).
    bool fp8_as_bf16 = false;
    // A bf16 `weight` dequantized at load from FP8 32x32 blocks with power-of-two scales
    // (upload_fp8_as_bf16): that FP8 form as stored, or empty. Launches where fp8_twin_pays read it instead
    // (fp8_as_bf16, the register-A kernel): the same bits, half the weight bytes.
    DeviceLinear fp8_twin = {};
};
// Whether `w` (FP8 32x32 blocks, the stored form of a bf16 weight) can be a FastLinearParams::fp8_twin on
// this device, and whether it is worth its bytes: only launches of up to kFp8TwinRows rows use twins, and
// only of weights with at least kFp8TwinMinOut rows and kFp8TwinMinElems elements (below, the bf16
// kernel's split-K streams as fast). Session 44's cuda_gemm_bench on an H200 (bench/results/
// cuda-session44-h200.md), twin vs bf16 at 1 / 16 rows: wq_b 32768x1280 13.6 / 17.7 vs 20.9 / 22.7 us, wo_b
// 5120x8192 23.4 / 25.1 vs 25.9 / 27.2, Engram wkv 25600x6144 54.7 / 71.9 vs 83.8 / 85.3; the shared
// expert's 2304x5120 and 5120x2304 and wq_a 1280x5120 within 5% either way (not twinned).
constexpr int64_t kFp8TwinRows = 16, kFp8TwinMinOut = 2048, kFp8TwinMinElems = int64_t(1) << 24;
// Whether this device's fast GEMM can multiply `w` with FastLinearParams::fp8_as_bf16: FP8 32x32 blocks (with
// scales), sm_90, out_features % 64 == 0, in_features % 64 == 0 and at most 16384.
bool fp8_as_bf16_supported(const DeviceLinear& w);
bool fp8_twin_supported(const DeviceLinear& w);  // fp8_as_bf16_supported and the sizes above
inline bool fp8_twin_pays(const FastLinearParams& p) {
    return p.fp8_twin.weight && !p.experts && p.rows <= kFp8TwinRows && p.weight.kind == WeightKind::kBF16 &&
           p.fp8_twin.out_features == p.weight.out_features && p.fp8_twin.in_features == p.weight.in_features;
}
// The shape the fast GEMM gives an fp8_as_bf16 weight for its K tiles and split-K: the bf16 weight's.
inline DeviceLinear fp8_as_bf16_shape(const DeviceLinear& w) {
    DeviceLinear v = w;
    v.kind = WeightKind::kBF16;
    v.scale = nullptr;
    v.scale_kind = ScaleKind::kNone;
    return v;
}
void fast_linear(const FastLinearParams& p, Stream s);

}  // namespace deepinfer::cuda
