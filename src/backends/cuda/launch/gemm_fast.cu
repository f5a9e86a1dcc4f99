// SPDX-License-Identifier: Apache-2.0
// Launchers of the fast (tensor-core) GEMM and its activation conversions: format checks, the tile
// configuration by rows per tile (any configuration gives a row the same bits; see gemm_fast.h),
// the grouped form's tile table, launch checks.
#include <cudaTypedefs.h>

#include <algorithm>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/common/launch.cuh"
#include "backends/cuda/kernels/gemm_tc.cuh"
#include "backends/cuda/kernels/gemm_wgmma.cuh"
#include "backends/cuda/kernels/gemm_wgmma_dense_ws.cuh"
#include "backends/cuda/kernels/gemm_wgmma_fp4dec.cuh"
#include "backends/cuda/kernels/gemm_wgmma_fp4rs.cuh"
#include "backends/cuda/kernels/gemm_wgmma_fp4ws.cuh"
#include "backends/cuda/kernels/gemm_wgmma_fp8b32.cuh"
#include "backends/cuda/kernels/gemm_wgmma_fp8bf16dec.cuh"

namespace deepinfer::cuda {
namespace {
cudaStream_t raw(Stream s) { return static_cast<cudaStream_t>(s.handle); }

using kernels::tc::BKind;
using kernels::tc::TcArgs;
using kernels::tc::TcConfig;

// The grouped form's tile table for tiles of bm rows in p.tile_scratch (kept when an earlier launch
// built it for the same tiles: FastLinearParams::tile_rows_given).
void expert_tiles(const FastLinearParams& p, int bm, Stream st) {
    if (p.tile_rows_given != bm)
        launch_pdl(kernels::tc::expert_tiles_kernel, 1, kernels::tc::kExpertTileThreads, 0, st, p.expert_offsets, p.num_experts, bm,
                   p.tile_scratch);
    if (p.tile_rows_out) *p.tile_rows_out = bm;
}

template <int WM, int WN, int MT, int NT, int kStages, BKind kB>
void launch(const FastLinearParams& p, const TcArgs& a, Stream st) {
    using C = TcConfig<WM, WN, MT, NT, kStages, kB>;
    auto* kernel = kernels::tc::tc_gemm_kernel<WM, WN, MT, NT, kStages, kB>;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    int64_t grid_x = (p.rows + C::BM - 1) / C::BM;
    TcArgs args = a;
    if (p.experts) {
        expert_tiles(p, C::BM, st);
        args.tile_offsets = p.tile_scratch;
        // Every tile holds at least one row, and at most one partial tile per non-empty expert.
        grid_x = std::min<int64_t>(p.rows, grid_x + std::min<int64_t>(p.num_experts, p.rows));
    }
    const int64_t grid_y = (a.N + C::BN - 1) / C::BN;
    DI_CHECK(grid_x < (int64_t(1) << 31) && grid_y < 65536, "fast linear: grid too large");
    kernel<<<dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), C::kThreads, C::kSmemBytes, raw(st)>>>(args);
    DI_CUDA_CHECK(cudaGetLastError());
}

// Hopper: 128 rows x BN weight rows per block, BN from the weight's shape only (never from M). With
// a.partial, K chunk z on blocks (x, y, z), then their ordered sum.
template <int kWGs, int BN, BKind kB>
void launch_wgmma(const FastLinearParams& p, const TcArgs& a, Stream st) {
    constexpr int kStages = 4;
    using C = kernels::wg::WgConfig<kWGs, BN, kStages, kB>;
    auto* kernel = kernels::wg::wgmma_gemm_kernel<kWGs, BN, kStages, kB, false>;
    if constexpr (kB != BKind::kFp4)
        if (a.k_chunks > 1) kernel = kernels::wg::wgmma_gemm_kernel<kWGs, BN, kStages, kB, true>;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    DI_CHECK(a.k_tiles <= C::kMaxKTiles, "fast linear: in_features too large for the wgmma kernel");
    int64_t grid_x = (p.rows + C::BM - 1) / C::BM;
    TcArgs args = a;
    if (p.experts) {
        expert_tiles(p, C::BM, st);
        args.tile_offsets = p.tile_scratch;
        grid_x = std::min<int64_t>(p.rows, grid_x + std::min<int64_t>(p.num_experts, p.rows));
    }
    const int64_t grid_y = (a.N + BN - 1) / BN, grid_z = a.partial ? a.k_chunks : 1;
    DI_CHECK(grid_x < (int64_t(1) << 31) && grid_y < 65536 && grid_z < 65536, "fast linear: grid too large");
    launch_pdl(kernel, dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y), static_cast<unsigned>(grid_z)), C::kThreads, C::kSmemBytes, st, args);
    DI_CUDA_CHECK(cudaGetLastError());
    if (a.partial) {
        const int64_t threads = a.rows * ((a.N + 3) / 4);
        launch_pdl(kernels::wg::split_reduce_kernel, static_cast<unsigned>((threads + 255) / 256), 256, 0, st, args);
        DI_CUDA_CHECK(cudaGetLastError());
    }
}

int sm_count();

// The driver's cuTensorMapEncodeTiled through the runtime (no link against libcuda); null if absent.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
    static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
        void* f = nullptr;
        cudaDriverEntryPointQueryResult q{};
        if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
            q != cudaDriverEntryPointSuccess) {
            (void)cudaGetLastError();
            return static_cast<PFN_cuTensorMapEncodeTiled_v12000>(nullptr);
        }
        return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
    }();
    return fn;
}

// A [rows, row_bytes] uint8 matrix at `base` (rows `stride` bytes apart) as box_rows x 128-byte TMA boxes in the
// 128-byte swizzle layout; false when the driver or the operand's alignment does not allow it.
bool tile_map(CUtensorMap& m, const void* base, int64_t row_bytes, int64_t rows, int64_t stride, int box_rows = 128) {
    const auto fn = encode_tiled();
    if (!fn || (reinterpret_cast<uintptr_t>(base) & 15) != 0 || stride % 16 != 0 || rows <= 0 || rows > (int64_t(1) << 31) ||
        row_bytes % 128 != 0)
        return false;
    const cuuint64_t dims[2] = {static_cast<cuuint64_t>(row_bytes), static_cast<cuuint64_t>(rows)};
    const cuuint64_t strides[1] = {static_cast<cuuint64_t>(stride)};
    const cuuint32_t box[2] = {128, static_cast<cuuint32_t>(box_rows)}, elem[2] = {1, 1};
    return fn(&m, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, strides, box, elem, CU_TENSOR_MAP_INTERLEAVE_NONE,
              CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Row tiles per group of the dense kernel's tile order (kernels/gemm_wgmma_dense_ws.cuh).
constexpr int kDenseGroupM = 16;

// Hopper, dense FP8 / BF16 at prefill sizes: the warp-specialized persistent kernel, IW = wgmma_bn(N) (the
// classic kernel's instruction width, so the same bits). False (nothing launched) where it does not apply.
template <int IW, BKind kB, int kCluster>
bool launch_dense_ws(const FastLinearParams& p, const TcArgs& a, Stream st) {
    constexpr int kStages = 5;
    using C = kernels::wgd::DenseWsConfig<kStages>;
    if (p.experts || a.a_row_src || a.partial || a.k_tiles > C::kMaxKTiles) return false;
    kernels::wgd::DenseWsArgs args{};
    const int64_t k_bytes = kB == BKind::kBf16 ? 2 * a.K : a.K;
    if (!tile_map(args.a_map, a.a, k_bytes, a.rows, a.a_row_bytes) ||
        !tile_map(args.b_map, a.weight.weight, k_bytes, a.N, k_bytes, C::BN / kCluster))
        return false;
    args.a_scale = a.a_scale;
    args.weight = a.weight;
    args.y_row = a.y_row;
    args.y = a.y;
    args.y_ld = a.y_ld;
    args.rows = a.rows;
    args.N = a.N;
    args.k_tiles = static_cast<int>(a.k_tiles);
    args.k_chunks = std::max(a.k_chunks, 1);
    // Work units: row tiles (kCluster = 1) or row-tile pairs (2) x weight-row tiles.
    const int64_t m_tiles = (a.rows + C::BM * kCluster - 1) / (C::BM * kCluster), n_tiles = (a.N + C::BN - 1) / C::BN;
    DI_CHECK(m_tiles * n_tiles < (int64_t(1) << 31), "fast linear: too many output tiles");
    args.m_tiles = static_cast<int>(m_tiles);
    args.n_tiles = static_cast<int>(n_tiles);
    args.group_m = kDenseGroupM / kCluster;
    args.round_bf16 = a.round_bf16;
    auto* kernel = kernels::wgd::dense_ws_kernel<IW, kB, kStages, kCluster>;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr[1]{};
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = kCluster;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.blockDim = dim3(C::kThreads);
    cfg.dynamicSmemBytes = C::kSmemBytes;
    cfg.stream = raw(st);
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    // Persistent: as many units at once as fit (clusters of two need two SMs of one GPC).
    static const int resident = [&] {
        cudaLaunchConfig_t q = cfg;
        q.gridDim = dim3(static_cast<unsigned>(sm_count() / kCluster * kCluster));
        int n = 0;
        if (kCluster == 1 || cudaOccupancyMaxActiveClusters(&n, kernel, &q) != cudaSuccess || n <= 0) {
            (void)cudaGetLastError();
            n = sm_count() / kCluster;
        }
        return n;
    }();
    const int64_t units = std::min<int64_t>(m_tiles * n_tiles, resident);
    cfg.gridDim = dim3(static_cast<unsigned>(units * kCluster));
    DI_CUDA_CHECK(cudaLaunchKernelEx(&cfg, kernel, args));
    return true;
}

// The dense kernel's form from DensePath (kAuto: kWsWide, the fastest form measured, bench/results/
// cuda-dense-prefill-h200-*.md); false when the launch takes the classic kernel.
template <BKind kB>
bool launch_dense_ws_by_path(const FastLinearParams& p, const TcArgs& a, Stream st) {
    const bool narrow = a.N <= 2048;  // wgmma_bn(N) == 64
    switch (p.dense_path) {
        case DensePath::kClassic: return false;
        case DensePath::kWs: return narrow ? launch_dense_ws<64, kB, 1>(p, a, st) : launch_dense_ws<128, kB, 1>(p, a, st);
        case DensePath::kWsCluster: return narrow ? launch_dense_ws<64, kB, 2>(p, a, st) : launch_dense_ws<128, kB, 2>(p, a, st);
        case DensePath::kWsClusterWide: return launch_dense_ws<128, kB, 2>(p, a, st);
        default: return launch_dense_ws<128, kB, 1>(p, a, st);  // kAuto, kWsWide
    }
}

// Hopper, FP8 with 32x32 blocks (kernels/gemm_wgmma_fp8b32.cuh): BM = 64 x kWGs rows, BN weight rows.
template <int kWGs, int BN>
void launch_fp8b32(const TcArgs& a, Stream st) {
    constexpr int kStages = 4;
    using C = kernels::wg::B32Config<kWGs, BN, kStages>;
    auto* kernel = kernels::wg::wgmma_fp8b32_kernel<kWGs, BN, kStages>;
    const int64_t smem = C::smem_bytes(a.K);
    DI_CHECK(smem <= 227 * 1024, "fast linear: in_features ", a.K, " too large for the FP8 32x32 kernel");
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    const int64_t grid_x = (a.rows + C::BM - 1) / C::BM, grid_y = (a.N + BN - 1) / BN;
    DI_CHECK(grid_x < (int64_t(1) << 31) && grid_y < 65536, "fast linear: grid too large");
    kernel<<<dim3(static_cast<unsigned>(grid_x), static_cast<unsigned>(grid_y)), C::kThreads, static_cast<size_t>(smem), raw(st)>>>(a);
    DI_CUDA_CHECK(cudaGetLastError());
}

// BN from the weight's shape only, warpgroups from the row count (a row's bits are the same either way).
void launch_fp8b32_by_rows(const TcArgs& a, Stream st) {
    const bool small = a.rows <= 64;
    if (a.N <= 2048) {
        if (small) launch_fp8b32<1, 64>(a, st); else launch_fp8b32<2, 64>(a, st);
    } else {
        if (small) launch_fp8b32<1, 128>(a, st); else launch_fp8b32<2, 128>(a, st);
    }
}

// Hopper, packed FP4: the register-converting kernel, TN token rows per tile (grid: weight-row blocks
// fastest, so the blocks sharing a token tile run together), kWGs x 64 weight rows per block.
template <int kWGs, int TN, int kStages, int kMinBlocks>
void launch_fp4_rs(const FastLinearParams& p, const TcArgs& a, Stream st) {
    using C = kernels::wgrs::RsConfig<kWGs, TN, kStages>;
    auto* kernel = kernels::wgrs::fp4_rs_kernel<kWGs, TN, kStages, kMinBlocks>;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    DI_ICHECK(a.N % C::BN == 0);
    int64_t tiles = (p.rows + TN - 1) / TN;
    TcArgs args = a;
    if (p.experts) {
        expert_tiles(p, TN, st);
        args.tile_offsets = p.tile_scratch;
        tiles = std::min<int64_t>(p.rows, tiles + std::min<int64_t>(p.num_experts, p.rows));
    }
    DI_CHECK(tiles < 65536, "fast linear: too many row tiles (", tiles, ")");
    kernel<<<dim3(static_cast<unsigned>(a.N / C::BN), static_cast<unsigned>(tiles)), C::kThreads, C::kSmemBytes, raw(st)>>>(args);
    DI_CUDA_CHECK(cudaGetLastError());
}

// Hopper, packed FP4, the warp-specialized kernel (kernels/gemm_wgmma_fp4ws.cuh): tiles of up to 128
// token rows of one expert x 128 weight rows (weight-row blocks fastest), kProducers producer
// warpgroups; kPersistent: one block per SM looping over the tiles.
int sm_count();

template <int kStages, int kProducers, bool kPersistent, int kPf, int kLate, bool kSelf, int kOpt>
void launch_fp4_ws(const FastLinearParams& p, const TcArgs& a, Stream st) {
    using C = kernels::wgws::WsConfig<kStages, kProducers>;
    auto* kernel = kernels::wgws::fp4_ws_kernel<kStages, kProducers, kPersistent, kPf, kLate, kSelf, kOpt>;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    DI_ICHECK(a.N % C::BN == 0);
    int64_t tiles = (p.rows + C::kMaxTokens - 1) / C::kMaxTokens;
    TcArgs args = a;
    if (p.experts) {
        kernels::tc::expert_tiles_kernel<<<1, kernels::tc::kExpertTileThreads, 0, raw(st)>>>(p.expert_offsets, p.num_experts, C::kMaxTokens,
                                                                                       p.tile_scratch);
        DI_CUDA_CHECK(cudaGetLastError());
        args.tile_offsets = p.tile_scratch;
        tiles = std::min<int64_t>(p.rows, tiles + std::min<int64_t>(p.num_experts, p.rows));
    }
    DI_CHECK(tiles < 65536, "fast linear: too many row tiles (", tiles, ")");
    const int64_t blocks = tiles * (a.N / C::BN);  // an upper bound: the grouped form's count is on the device
    if constexpr (kPersistent) {
        kernel<<<static_cast<unsigned>(std::min<int64_t>(blocks, sm_count())), C::kThreads, C::kSmemBytes, raw(st)>>>(args);
    } else {
        kernel<<<dim3(static_cast<unsigned>(a.N / C::BN), static_cast<unsigned>(tiles)), C::kThreads, C::kSmemBytes, raw(st)>>>(args);
    }
    DI_CUDA_CHECK(cudaGetLastError());
}

// Hopper, packed FP4, the decode kernel (kernels/gemm_wgmma_fp4dec.cuh): tiles of up to kMaxNT token
// rows of one expert (wgmma width from each tile's rows) x 64 weight rows (grid: weight-row blocks fastest).
template <int kMaxNT, int kKTSmall, int kBudget, int kMinBlocks, int kPf>
void launch_fp4_dec(const FastLinearParams& p, const TcArgs& a, Stream st) {
    using C = kernels::wgdec::DecConfig<kMaxNT, kKTSmall, kBudget, kMinBlocks, kPf>;
    auto* kernel = kernels::wgdec::fp4_dec_kernel<kMaxNT, kKTSmall, kBudget, kMinBlocks, kPf>;
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::kSmemBytes));
    DI_ICHECK(a.N % C::BN == 0 && a.k_tiles % 2 == 0);
    int64_t tiles = (p.rows + kMaxNT - 1) / kMaxNT;
    TcArgs args = a;
    if (p.experts) {
        expert_tiles(p, kMaxNT, st);
        args.tile_offsets = p.tile_scratch;
        tiles = std::min<int64_t>(p.rows, tiles + std::min<int64_t>(p.num_experts, p.rows));
    }
    DI_CHECK(tiles < 65536, "fast linear: too many row tiles (", tiles, ")");
    const int64_t wblocks = a.N / C::BN * (a.experts2 ? 2 : 1);  // a second weight set: its blocks after the first's
    launch_pdl(kernel, dim3(static_cast<unsigned>(wblocks), static_cast<unsigned>(tiles)), C::kThreads, C::kSmemBytes, st, args);
    DI_CUDA_CHECK(cudaGetLastError());
}

// The FP4 kernels' configurations: the register kernel's {TN, warpgroups, stages, min blocks per SM},
// the warp-specialized kernel (ws) with `stages` pipeline stages, wgs - 2 producer warpgroups, one block
// per SM looping over the tiles (persistent) and an L2 prefetch of the weight rows `pf` K tiles ahead, or the decode kernel (dec) with tiles
// of up to `tn` rows, `kt` K tiles per stage (for wgmma widths up to 32; one at 64), a `stages` KB
// shared-memory budget for the pipeline and an L2 prefetch hint of `pf` bytes on the weight copies.
enum class RsKind { kRs, kWs, kDec };
struct RsVariant {
    int tn, wgs, stages, blocks;
    RsKind kind = RsKind::kRs;
    int kt = 1, pf = 0;
    bool persistent = false;  // ws: one block per SM looping over the tiles
    int late = 0;             // ws: > 0: a producer copies its tile `late` own tiles ahead after converting
    bool self = false;        // ws: each producer thread converts the chunks it copied (no producer barrier)
    int opt = 0;              // ws: kernels::wgws::kOptElect | kOptPingPong
};
constexpr RsVariant kRsVariants[kFp4RsVariants] = {
    {8, 1, 8, 3},  {16, 1, 8, 3},  {32, 1, 6, 2}, {64, 2, 4, 1}, {128, 2, 4, 1},        {64, 1, 4, 3},
    {128, 1, 4, 2}, {8, 1, 6, 4}, {128, 2, 6, 1}, {128, 3, 4, 1, RsKind::kWs}, {128, 3, 5, 1, RsKind::kWs},
    {64, 1, 72, 3, RsKind::kDec, 2}, {64, 1, 72, 3, RsKind::kDec, 1}, {32, 1, 72, 3, RsKind::kDec, 2},
    {16, 1, 40, 5, RsKind::kDec, 1}, {64, 1, 72, 3, RsKind::kDec, 2, 256}, {64, 1, 72, 3, RsKind::kDec, 2, 128},
    {128, 4, 4, 1, RsKind::kWs}, {128, 4, 5, 1, RsKind::kWs}, {128, 4, 4, 1, RsKind::kWs, 1, 0, true},
    {128, 4, 5, 1, RsKind::kWs, 1, 0, true}, {128, 3, 4, 1, RsKind::kWs, 1, 0, true}, {128, 4, 4, 1, RsKind::kWs, 1, 6, true},
    {128, 4, 4, 1, RsKind::kWs, 1, 12, true}, {128, 4, 4, 1, RsKind::kWs, 1, 0, true, 1},
    {128, 4, 5, 1, RsKind::kWs, 1, 0, true, 2}, {128, 4, 5, 1, RsKind::kWs, 1, 0, true, 0, true},
    {128, 4, 4, 1, RsKind::kWs, 1, 0, true, 0, true},
    {128, 4, 5, 1, RsKind::kWs, 1, 0, true, 0, false, kernels::wgws::kOptElect},
    {128, 4, 5, 1, RsKind::kWs, 1, 0, true, 0, false, kernels::wgws::kOptPingPong},
    {128, 4, 5, 1, RsKind::kWs, 1, 0, true, 0, false, kernels::wgws::kOptElect | kernels::wgws::kOptPingPong},
    {64, 1, 54, 4, RsKind::kDec, 2, 256},
};

template <int V>
void launch_fp4_rs_variant(const FastLinearParams& p, const TcArgs& a, Stream st) {
    constexpr RsVariant v = kRsVariants[V];
    if constexpr (v.kind == RsKind::kWs)
        launch_fp4_ws<v.stages, v.wgs - 2, v.persistent, v.pf, v.late, v.self, v.opt>(p, a, st);
    else if constexpr (v.kind == RsKind::kDec)
        launch_fp4_dec<v.tn, v.kt, v.stages * 1024, v.blocks, v.pf>(p, a, st);
    else
        launch_fp4_rs<v.wgs, v.tn, v.stages, v.blocks>(p, a, st);
}

// By default, up to 64 rows per group on average, the decode kernel's 64-row tiles (wgmma width 8-64 from
// each tile's rows, two K tiles per stage below 64, L2 prefetch of 256 bytes; 2.2-2.3 TB/s at 1-8 rows per
// expert, 1.4-1.6x the register kernel's 64-token tiles, and no slower at 48-64 rows,
// bench/results/cuda-expert-decode-h200-*.md; since the leaner conversion of a4cb664, 2.6-2.8 TB/s with
// three blocks per SM), at up to 8 rows per group with 128 registers and four blocks per SM
// (dec64_kt2_54k_b4_pf256: 1.01-1.06x over three blocks at 1-8 rows per expert despite ~250 bytes of
// spills, mixed at 16, bench/results/cuda-session28-h200-*.md); the warp-specialized kernel's 128-token tiles above, with
// two producer warpgroups and one block per SM looping over the tiles (ws128p2_s5_pers: 1.16-1.28x over
// the one-producer ws128_s4 at 4K-16K tokens, and 1.09-1.22x more with the 16-byte scale ring, the
// token scales in read order and the 32-bit stage count, bench/results/cuda-expert-prefill-h200-*.md).
// Both keep the row granularity of the shared-memory kernel (64 rows or more per tile), so no expert takes
// more tiles than there, whatever the routing: every tile re-reads and re-converts its expert's weights,
// and under a skewed router 8-row tiles split a hot expert into many (the register kernel's 8-token tiles
// made the 2-layer proxy's decode slower at batch 256, bench/results/cuda-expert-gemm-h200-*.md). A row's
// bits do not depend on the choice (the same MMA sequence per output element; every configuration is
// tested against the shared-memory kernel bit for bit).
int fp4_rs_variant_of(const FastLinearParams& p, int64_t rows_per_group) {
    return p.fp4_rs_variant >= 0 ? p.fp4_rs_variant : rows_per_group <= 8 ? 31 : rows_per_group <= 64 ? 15 : 20;
}

void launch_fp4_rs_by_rows(const FastLinearParams& p, const TcArgs& a, int64_t rows_per_group, Stream st) {
    const int v = fp4_rs_variant_of(p, rows_per_group);
    DI_CHECK(v < kFp4RsVariants, "fast linear: no FP4 kernel configuration ", v);
    switch (v) {
        case 0: launch_fp4_rs_variant<0>(p, a, st); break;
        case 1: launch_fp4_rs_variant<1>(p, a, st); break;
        case 2: launch_fp4_rs_variant<2>(p, a, st); break;
        case 3: launch_fp4_rs_variant<3>(p, a, st); break;
        case 4: launch_fp4_rs_variant<4>(p, a, st); break;
        case 5: launch_fp4_rs_variant<5>(p, a, st); break;
        case 6: launch_fp4_rs_variant<6>(p, a, st); break;
        case 7: launch_fp4_rs_variant<7>(p, a, st); break;
        case 8: launch_fp4_rs_variant<8>(p, a, st); break;
        case 9: launch_fp4_rs_variant<9>(p, a, st); break;
        case 10: launch_fp4_rs_variant<10>(p, a, st); break;
        case 11: launch_fp4_rs_variant<11>(p, a, st); break;
        case 12: launch_fp4_rs_variant<12>(p, a, st); break;
        case 13: launch_fp4_rs_variant<13>(p, a, st); break;
        case 14: launch_fp4_rs_variant<14>(p, a, st); break;
        case 15: launch_fp4_rs_variant<15>(p, a, st); break;
        case 16: launch_fp4_rs_variant<16>(p, a, st); break;
        case 17: launch_fp4_rs_variant<17>(p, a, st); break;
        case 18: launch_fp4_rs_variant<18>(p, a, st); break;
        case 19: launch_fp4_rs_variant<19>(p, a, st); break;
        case 20: launch_fp4_rs_variant<20>(p, a, st); break;
        case 21: launch_fp4_rs_variant<21>(p, a, st); break;
        case 22: launch_fp4_rs_variant<22>(p, a, st); break;
        case 23: launch_fp4_rs_variant<23>(p, a, st); break;
        case 24: launch_fp4_rs_variant<24>(p, a, st); break;
        case 25: launch_fp4_rs_variant<25>(p, a, st); break;
        case 26: launch_fp4_rs_variant<26>(p, a, st); break;
        case 27: launch_fp4_rs_variant<27>(p, a, st); break;
        case 28: launch_fp4_rs_variant<28>(p, a, st); break;
        case 29: launch_fp4_rs_variant<29>(p, a, st); break;
        case 30: launch_fp4_rs_variant<30>(p, a, st); break;
        default: launch_fp4_rs_variant<31>(p, a, st); break;
    }
}

// Packed FP4 on Hopper at the shapes of the register kernels (launch_fp4_rs_by_rows), from the device and
// the weight's shape only.
bool fp4_rs_path(const FastLinearParams& p) {
    const DeviceLinear& w = p.weight;
    return w.kind == WeightKind::kFp4 && p.fp4_path == Fp4Path::kAuto && w.out_features % 128 == 0 && w.in_features % 256 == 0 &&
           compute_capability() == 90;
}


int sm_count() {
    int dev = 0, n = 0;
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
        return 1;
    return std::max(n, 1);
}

// The wgmma kernel's tile width: from the weight's shape only.
int64_t wgmma_bn(int64_t N) { return N <= 2048 ? 64 : 128; }
// Its rows per block: one warpgroup for decode-sized row counts (more blocks per SM to stream
// weights), two for prefill (the B tile shared by 128 rows); a row's bits are the same either way.
bool wgmma_small(int64_t rows_per_group) { return rows_per_group <= 64; }

// Split-K: chunks of at least this many 128-byte K tiles (measured on the H200 at the V4-Flash and V4.1
// shapes, 1-128 rows: one block per SM and chunks of >= 4 K tiles beat two blocks per SM or 2-tile
// chunks, bench/results/cuda-splitk-h200-*).
constexpr int64_t kMinChunkTiles = 4;
// ... and no split into two chunks (the indexer's wq_b, 64 output tiles: slower than one chunk at 1-4096 rows).
constexpr int64_t kMinChunks = 3;

// The split form's partial floats for S chunks at `rows` rows over `groups` weights (1: dense), 0 when the launch
// runs unsplit: kAuto splits while the unsplit grid (row tiles of a group's rows, an upper bound: rows / groups
// rounded up, per group) has fewer blocks than the SMs and the partials stay below kFastSplitMaxFloats.
int64_t split_floats(int64_t N, int64_t rows, int64_t S, SplitK mode, int64_t groups = 1) {
    if (S <= 1 || rows <= 0 || mode == SplitK::kOff) return 0;
    const int64_t floats = S * rows * N;
    if (mode == SplitK::kForce) return floats;
    const int64_t per_group = (rows + groups - 1) / groups;
    const int64_t row_tiles = groups * ((per_group + (wgmma_small(per_group) ? 63 : 127)) / (wgmma_small(per_group) ? 64 : 128));
    const int64_t blocks = row_tiles * ((N + wgmma_bn(N) - 1) / wgmma_bn(N));
    return blocks < sm_count() && floats < kFastSplitMaxFloats ? floats : 0;
}

// Tile shapes by rows per tile: 16x32 (decode), 64x64, 128x128 (prefill); on Hopper the wgmma kernel.
template <BKind kB>
void launch_by_rows(const FastLinearParams& p, const TcArgs& a, int64_t rows_per_group, Stream st) {
    if (compute_capability() == 90) {
        // BN from the weight's shape; one warpgroup per block for decode-sized row counts (more
        // blocks per SM to stream weights), two for prefill (the B tile shared by 128 rows).
        const bool small = wgmma_small(rows_per_group);
        if constexpr (kB != BKind::kFp4) {
            if (!small) {
                if (launch_dense_ws_by_path<kB>(p, a, st)) return;
            }
        }
        if (wgmma_bn(a.N) == 64) {
            if (small) launch_wgmma<1, 64, kB>(p, a, st); else launch_wgmma<2, 64, kB>(p, a, st);
        } else {
            if (small) launch_wgmma<1, 128, kB>(p, a, st); else launch_wgmma<2, 128, kB>(p, a, st);
        }
        return;
    }
    if (rows_per_group <= 16)
        launch<1, 2, 1, 2, 8, kB>(p, a, st);
    else if (rows_per_group <= 64)
        launch<2, 2, 2, 4, 4, kB>(p, a, st);
    else
        launch<2, 4, 4, 4, 3, kB>(p, a, st);
}

// fp8_as_bf16's register-A kernel (kernels/gemm_wgmma_fp8bf16dec.cuh): token tiles of TN rows on grid y; K
// chunk z on blocks (x, y, z) with a.partial, then their ordered sum. Stages of kKT K tiles, as many as
// about 48 KB hold (3 to 8; 4 blocks per SM at 8 rows).
template <int TN, int kKT>
void launch_fp8bf16_dec(const TcArgs& a, Stream st) {
    constexpr int kStageBytes = kernels::wgfb::DecConfig<TN, kKT, 3>::kStageBytes;
    constexpr int kStages = std::clamp(48 * 1024 / kStageBytes, 3, 8);
    using C = kernels::wgfb::DecConfig<TN, kKT, kStages>;
    auto* kernel = a.k_chunks > 1 ? kernels::wgfb::fp8bf16_dec_kernel<TN, kKT, kStages, true>
                                  : kernels::wgfb::fp8bf16_dec_kernel<TN, kKT, kStages, false>;
    // The launch's shared memory depends on K; the function's limit is set to the largest K's, never lowered
    // (a graph's kernel node keeps its launch's size while later eager launches of other K would set the
    // limit: session 44 call 12, where ncu, profiling a decode graph's nodes, saw the launch of Engram's wkv
    // twin fail after wq_b's smaller launch had set the limit; with this, session 45 call 1's ncu over the same
    // graph ran every twin launch).
    const int smem = C::smem_bytes(a.K);
    DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, C::smem_bytes(64 * C::kMaxKTiles)));
    const int64_t grid_z = a.partial ? a.k_chunks : 1, tiles = (a.rows + TN - 1) / TN;
    launch_pdl(kernel, dim3(static_cast<unsigned>(a.N / 64), static_cast<unsigned>(tiles), static_cast<unsigned>(grid_z)),
               C::kThreads, smem, st, a);
    DI_CUDA_CHECK(cudaGetLastError());
    if (a.partial) {
        const int64_t threads = a.rows * ((a.N + 3) / 4);
        launch_pdl(kernels::wg::split_reduce_kernel, static_cast<unsigned>((threads + 255) / 256), 256, 0, st, a);
        DI_CUDA_CHECK(cudaGetLastError());
    }
}

// FP8 32x32-block weights multiplied as bf16 (FastLinearParams::fp8_as_bf16; `a` holds the bf16 shape's K
// tiles and split-K): the register-A kernel with the widest wgmma the rows need, token tiles of 128 beyond.
void launch_fp8_as_bf16(const TcArgs& a, int64_t rows, Stream st) {
    if (rows <= 8) launch_fp8bf16_dec<8, 2>(a, st);
    else if (rows <= 16) launch_fp8bf16_dec<16, 2>(a, st);
    else if (rows <= 32) launch_fp8bf16_dec<32, 2>(a, st);
    else if (rows <= 64) launch_fp8bf16_dec<64, 1>(a, st);
    else launch_fp8bf16_dec<128, 1>(a, st);
}

// A fast launch's K tiles: 128 bytes of K each (64 bf16 columns, else 128 one-byte ones).
int64_t fast_k_tiles(const DeviceLinear& w) { return w.kind == WeightKind::kBF16 ? w.in_features / 64 : w.in_features / 128; }

}  // namespace

bool fast_fp8_available() { return compute_capability() >= 89; }

int fast_linear_k_chunks(const DeviceLinear& w) {
    const bool fp8 = w.kind == WeightKind::kFp8Block && w.block_rows == 128 && w.block_cols == 128;
    if (!(fp8 || w.kind == WeightKind::kBF16) || !fast_linear_supported(w) || compute_capability() != 90) return 1;
    const int64_t tiles = (w.out_features + wgmma_bn(w.out_features) - 1) / wgmma_bn(w.out_features), sms = sm_count();
    if (tiles >= sms) return 1;
    const int64_t S = std::min(sms / tiles, fast_k_tiles(w) / kMinChunkTiles);  // blocks: at most one per SM
    return S >= kMinChunks ? static_cast<int>(S) : 1;
}

int64_t fast_linear_split_floats(const DeviceLinear& w, int64_t rows, SplitK mode, int k_chunks) {
    if (k_chunks <= 0) return split_floats(w.out_features, rows, fast_linear_k_chunks(w), mode);
    return split_floats(w.out_features, rows, std::min<int64_t>(k_chunks, fast_k_tiles(w)), mode);
}

int64_t fast_grouped_split_floats(const DeviceLinear& w, int64_t rows, int64_t groups, SplitK mode) {
    return groups > 0 ? split_floats(w.out_features, rows, fast_linear_k_chunks(w), mode, groups) : 0;
}

int64_t fast_linear_split_floats_bound(int64_t rows) {
    // S <= SMs / tiles, so S·N <= S·tiles·128 <= SMs·128.
    if (compute_capability() != 90) return 0;
    return std::min<int64_t>(kFastSplitMaxFloats, std::max<int64_t>(rows, 0) * sm_count() * 128);
}

bool fast_fp8_b32_available() { return compute_capability() == 90; }

bool fast_dense_ws_available() { return compute_capability() == 90 && encode_tiled() != nullptr; }

const char* fp4_rs_variant_name(int variant) {
    static constexpr const char* kNames[kFp4RsVariants] = {
        "tn8_wg1_s8_b3",   "tn16_wg1_s8_b3", "tn32_wg1_s6_b2",       "tn64_wg2_s4_b1",       "tn128_wg2_s4_b1",
        "tn64_wg1_s4_b3",  "tn128_wg1_s4_b2", "tn8_wg1_s6_b4",       "tn128_wg2_s6_b1",      "ws128_s4",
        "ws128_s5",        "dec64_kt2_72k_b3", "dec64_kt1_72k_b3", "dec32_kt2_72k_b3", "dec16_kt1_40k_b5",
        "dec64_kt2_72k_b3_pf256", "dec64_kt2_72k_b3_pf128", "ws128p2_s4", "ws128p2_s5", "ws128p2_s4_pers", "ws128p2_s5_pers", "ws128_s4_pers", "ws128p2_s4_pers_pf6", "ws128p2_s4_pers_pf12", "ws128p2_s4_pers_late1", "ws128p2_s5_pers_late2",
        "ws128p2_s5_pers_self", "ws128p2_s4_pers_self", "ws128p2_s5_pers_ea", "ws128p2_s5_pers_pp", "ws128p2_s5_pers_ea_pp",
        "dec64_kt2_54k_b4_pf256"};
    return variant >= 0 && variant < kFp4RsVariants ? kNames[variant] : "by_rows";
}

bool fast_linear_supported(const DeviceLinear& w) {
    switch (w.kind) {
        case WeightKind::kFp8Block:
            if (w.block_rows == 32 && w.block_cols == 32)
                return w.in_features % 128 == 0 && w.scale_kind != ScaleKind::kNone && fast_fp8_b32_available();
            return w.block_rows == 128 && w.block_cols == 128 && w.in_features % 128 == 0 && w.scale_kind != ScaleKind::kNone;
        case WeightKind::kFp4: return w.in_features % 128 == 0;
        case WeightKind::kBF16: return w.in_features % 64 == 0;
        default: return false;
    }
}

bool fp8_as_bf16_supported(const DeviceLinear& w) {
    return compute_capability() == 90 && w.kind == WeightKind::kFp8Block && w.block_rows == 32 && w.block_cols == 32 &&
           w.scale_kind != ScaleKind::kNone && w.out_features % 64 == 0 && w.in_features % 64 == 0 &&
           w.in_features / 64 <= kernels::wgfb::kMaxKTiles;
}

bool fp8_twin_supported(const DeviceLinear& w) {
    return fp8_as_bf16_supported(w) && w.out_features >= kFp8TwinMinOut && w.out_features * w.in_features >= kFp8TwinMinElems;
}

void fast_linear(const FastLinearParams& p, Stream s) {
    if (p.rows == 0) return;
    if (fp8_twin_pays(p)) {  // the same bits from the FP8 form (register-A kernel); split-K as for the bf16 weight
        FastLinearParams q = p;
        q.weight = p.fp8_twin;
        q.fp8_twin = {};
        q.fp8_as_bf16 = true;
        fast_linear(q, s);
        return;
    }
    const DeviceLinear& w = p.weight;
    DI_CHECK(fast_linear_supported(w), "fast linear: unsupported weight (kind ", int(w.kind), ", ", w.out_features, "x",
             w.in_features, ")");
    DI_CHECK(p.a && p.y && p.y_ld >= w.out_features, "fast linear: null operand or bad y_ld");
    DI_CHECK(!p.experts || (p.expert_offsets && p.tile_scratch && p.num_experts > 0),
             "fast grouped linear: needs expert_offsets, tile_scratch and num_experts");
    const bool b32 = w.kind == WeightKind::kFp8Block && w.block_cols == 32;
    DI_CHECK(!p.fp8_as_bf16 || (!p.experts && fp8_as_bf16_supported(w)),
             "fast linear: fp8_as_bf16 takes FP8 32x32-block weights on sm_90 (out_features and in_features multiples of 64, "
             "in_features <= 16384), not grouped");
    const DeviceLinear shape = p.fp8_as_bf16 ? fp8_as_bf16_shape(w) : w;  // K tiles and split-K
    const bool bf16 = shape.kind == WeightKind::kBF16;
    DI_CHECK(bf16 || p.a_scale, "fast linear: FP8/FP4 weights need act_quant scales");
    DI_CHECK(bf16 || fast_fp8_available(), "fast linear: FP8 tensor cores need compute capability 8.9 or newer");
    TcArgs a{};
    a.a = static_cast<const uint8_t*>(p.a);
    a.a_row_bytes = bf16 ? 2 * w.in_features : w.in_features;
    a.a_scale = p.a_scale;
    a.a_row_src = p.a_row_src;
    a.weight = w;
    a.experts = p.experts;
    a.expert_offsets = p.expert_offsets;
    a.num_experts = p.num_experts;
    a.y_row = p.y_row;
    a.y = p.y;
    a.y_ld = p.y_ld;
    a.rows = p.rows;
    a.N = w.out_features;
    a.K = w.in_features;
    a.k_tiles = fast_k_tiles(shape);
    a.round_bf16 = p.round_output_bf16;
    // Split-K (the wgmma kernel's FP8 128x128 and BF16 forms only).
    a.k_chunks = 1;
    if (bf16 || (w.kind == WeightKind::kFp8Block && w.block_cols == 128)) {
        a.k_chunks = p.k_chunks > 0 ? static_cast<int>(std::min<int64_t>(p.k_chunks, a.k_tiles)) : fast_linear_k_chunks(shape);
        const int64_t need = split_floats(a.N, p.rows, a.k_chunks, p.split, p.experts ? p.num_experts : 1);
        if (need > 0 && p.split_scratch && compute_capability() == 90) a.partial = p.split_scratch;
    }
    const int64_t per_group = p.experts ? (p.rows + p.num_experts - 1) / p.num_experts : p.rows;
    const Stream st = s;
    if (p.experts2) {  // a second weight set: one launch of the FP4 decode kernel, else one launch per set
        DI_CHECK(p.experts && p.y2, "fast linear: a second weight set needs the grouped form and y2");
        const int v = fp4_rs_variant_of(p, per_group);
        const bool one = fp4_rs_path(p) && v >= 0 && v < kFp4RsVariants && kRsVariants[v].kind == RsKind::kDec;
        if (!one) {
            FastLinearParams q = p;
            q.experts2 = nullptr;
            q.y2 = nullptr;
            int tile_rows = p.tile_rows_given;
            q.tile_rows_out = &tile_rows;
            fast_linear(q, s);
            q.experts = p.experts2;
            q.y = p.y2;
            q.tile_rows_given = tile_rows;
            fast_linear(q, s);
            if (p.tile_rows_out) *p.tile_rows_out = tile_rows;
            return;
        }
        a.experts2 = p.experts2;
        a.y2 = p.y2;
    }
    DI_CHECK(!b32 || !p.experts, "fast linear: FP8 32x32-block weights are not grouped");
    if (p.fp8_as_bf16) {
        launch_fp8_as_bf16(a, per_group, st);
        return;
    }
    if (b32) {
        launch_fp8b32_by_rows(a, st);
        return;
    }
    switch (w.kind) {
        case WeightKind::kFp8Block: launch_by_rows<BKind::kFp8>(p, a, per_group, st); break;
        case WeightKind::kFp4:
            // The choice depends on the device and the weight's shape only (never on the rows).
            if (fp4_rs_path(p))
                launch_fp4_rs_by_rows(p, a, per_group, st);
            else
                launch_by_rows<BKind::kFp4>(p, a, per_group, st);
            break;
        default: launch_by_rows<BKind::kBf16>(p, a, per_group, st); break;
    }
}

void act_quant_fp8(const ActQuantFp8Params& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.cols % 128 == 0 && p.x_ld % 4 == 0 && (p.block == 128 || p.block == 32), "act_quant_fp8: cols = ", p.cols,
             ", x_ld = ", p.x_ld, ", block = ", p.block);
    DI_CHECK(p.pre_block == 0 || fused_qat_block_ok(p.pre_block), "act_quant_fp8: pre_block ", p.pre_block,
             " is not a power of two in 4..128");
    const int64_t groups = (p.cols / 128 + kernels::tc::kActQuantBlocks - 1) / kernels::tc::kActQuantBlocks;
    const int64_t threads = p.rows * groups * 32;
    launch_pdl(kernels::tc::act_quant_fp8_kernel, static_cast<unsigned>((threads + 255) / 256), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

void to_bf16(const ToBf16Params& p, Stream s) {
    if (p.rows == 0) return;
    DI_CHECK(p.cols % 8 == 0 && p.x_ld % 4 == 0, "to_bf16: cols = ", p.cols, ", x_ld = ", p.x_ld);
    if (p.quant_block > 0) {
        DI_CHECK(fused_qat_block_ok(p.quant_block) && p.cols % 128 == 0,
                 "to_bf16: quant_block ", p.quant_block, " (a power of two in 4..128) with cols = ", p.cols, " (a multiple of 128)");
        const int64_t threads = p.rows * (p.cols / 4);
        launch_pdl(kernels::tc::to_bf16_quant_kernel, static_cast<unsigned>((threads + 255) / 256), 256, 0, s, p);
        DI_CUDA_CHECK(cudaGetLastError());
        return;
    }
    const int64_t threads = p.rows * (p.cols / 8);
    launch_pdl(kernels::tc::to_bf16_kernel, static_cast<unsigned>((threads + 255) / 256), 256, 0, s, p);
    DI_CUDA_CHECK(cudaGetLastError());
}

}  // namespace deepinfer::cuda
