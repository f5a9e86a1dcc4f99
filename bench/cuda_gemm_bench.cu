// SPDX-License-Identifier: Apache-2.0
// The H200's ceilings and the GEMM ops of DeepSeek-V4-Flash against them, measured in one run.
//  1. Ceilings: device-to-device copy bandwidth (bytes read + written), cuBLASLt dense GEMM TFLOP/s
//     in BF16 and FP8 (tensor-wide scales) at 8192^3.
//  2. Per V4-Flash linear (FP8 block-scaled, BF16) and the routed-expert grouped GEMM (256 FP4 experts,
//     top-6), for decode batches and prefill chunks: the fast tensor-core kernel (gemm_fast.h), the
//     reference CUDA-core kernel (small batches only: it is slow), cuBLASLt BF16 / FP8 tensor-scaled /
//     FP8 block-scaled (1x128 activations, 128x128 weights) at the same shape, each as time, TFLOP/s,
//     GB/s and the fraction of its floor: floor = max(FLOPs / measured FP8|BF16 dense rate, bytes /
//     measured copy bandwidth), bytes = weights (+scales) + activations read + f32 output written.
// One JSON line per measurement on stdout (or --out FILE), a markdown table on stderr at the end.
// Weights rotate among copies worth >= 256 MiB so that small weights are read from HBM, not L2.
//  3. DeepSeek-V4.1's dense FP8 linears (32x32 block scales): the native FP8 kernel vs the bf16 fallback.
//     On Hopper, above 64 rows also `fast_classic`: the cp.async kernel (DensePath::kClassic) that the
//     warp-specialized dense kernel replaces there (the same bits), and that kernel's pinned forms
//     (`fast` = kAuto = kWsWide; fast_ws, fast_ws_cluster, fast_ws_cluster_wide).
//  4. --splitk: split-K (gemm_fast.h) at the dense linears of V4-Flash (FP8 128x128, bf16) and V4.1 (bf16)
//     whose output tiles do not fill the GPU, for decode batches: one K chunk (no split: the kernel before
//     split-K), the weight's chunks in one block (unsplit), on separate blocks + ordered sum (split), as the
//     model runs it (auto), and (with --sweep) forced splits into 2..32 chunks.
//   cuda_gemm_bench [--out results.jsonl] [--quick] [--sweep] [--variants v,v] [--splitk] [--only op,op] [--ms 1,4096] [--per-expert 1,8]
//                   [--no-ceilings]
// --sweep: the grouped experts also in every configuration of the register-converting FP4 kernel.
// --variants ws128p2_s5_pers,ws128p2_s4_pers: only those configurations (implies --sweep).
// --per-expert 1,8: the grouped experts also with exactly that many rows for each of the 256 experts
// (with --only v41_experts_w1,v41_experts_w2: V4.1's 384 experts of 5120 x 2304).
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemm_fast.h"

namespace {

using namespace deepinfer;
using namespace deepinfer::cuda;

#define LT_CHECK(call)                                                                   \
    do {                                                                                 \
        cublasStatus_t st_ = (call);                                                     \
        if (st_ != CUBLAS_STATUS_SUCCESS) DI_THROW("cuBLASLt status ", int(st_), " in ", #call); \
    } while (0)

// ---- Device buffers and random fills ----------------------------------------------------------------

struct Buf {
    std::unique_ptr<DeviceBuffer> b;
    explicit Buf(size_t n) : b(std::make_unique<DeviceBuffer>(std::max<size_t>(n, 256))) {}
    template <class T = void>
    T* p() const { return static_cast<T*>(b->data()); }
};

__device__ __forceinline__ uint32_t mix(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
    return static_cast<uint32_t>(x);
}
// kind 0: any byte except e4m3 NaN codes; 1: e8m0 scale bytes 118..125; 2: f32 uniform [-2, 2];
// 3: bf16 uniform [-1/32, 1/32]; 4: any byte (packed fp4)
__global__ void fill_kernel(uint8_t* p, size_t n, uint64_t seed, int kind) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
        const uint32_t h = mix(seed * 0x9E3779B97F4A7C15ULL + i);
        if (kind == 0) {
            uint8_t b = uint8_t(h);
            if ((b & 0x7F) == 0x7F) b ^= 1;
            p[i] = b;
        } else if (kind == 1) {
            p[i] = uint8_t(118 + h % 8);
        } else if (kind == 2) {
            if (i % 4 == 0 && i + 3 < n) *reinterpret_cast<float*>(p + i) = (float(h >> 8) / 16777216.0f - 0.5f) * 4.0f;
        } else if (kind == 3) {
            if (i % 2 == 0 && i + 1 < n) {
                const float v = (float(h >> 8) / 16777216.0f - 0.5f) / 16.0f;
                *reinterpret_cast<uint16_t*>(p + i) = uint16_t(__float_as_uint(v) >> 16);
            }
        } else {
            p[i] = uint8_t(h);
        }
    }
}
__global__ void fill_f32_kernel(float* p, size_t n, float v) {
    for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) p[i] = v;
}
void fill(void* p, size_t n, uint64_t seed, int kind) {
    fill_kernel<<<1024, 256>>>(static_cast<uint8_t*>(p), n, seed, kind);
    DI_CUDA_CHECK(cudaGetLastError());
}

// ---- Timing -----------------------------------------------------------------------------------------

// Median over 5 samples of the mean time of `reps` calls (reps sized to >= ~3 ms per sample), ms.
template <class F>
double time_ms(F&& f) {
    cudaEvent_t a, b;
    DI_CUDA_CHECK(cudaEventCreate(&a));
    DI_CUDA_CHECK(cudaEventCreate(&b));
    int it = 0;
    for (int i = 0; i < 3; ++i) f(it++);
    DI_CUDA_CHECK(cudaEventRecord(a));
    f(it++);
    DI_CUDA_CHECK(cudaEventRecord(b));
    DI_CUDA_CHECK(cudaEventSynchronize(b));
    float one = 0;
    DI_CUDA_CHECK(cudaEventElapsedTime(&one, a, b));
    const int reps = std::clamp(int(3.0 / std::max(one, 1e-4f)), 1, 2000);
    std::vector<double> samples;
    for (int s = 0; s < 5; ++s) {
        DI_CUDA_CHECK(cudaEventRecord(a));
        for (int r = 0; r < reps; ++r) f(it++);
        DI_CUDA_CHECK(cudaEventRecord(b));
        DI_CUDA_CHECK(cudaEventSynchronize(b));
        float ms = 0;
        DI_CUDA_CHECK(cudaEventElapsedTime(&ms, a, b));
        samples.push_back(double(ms) / reps);
    }
    DI_CUDA_CHECK(cudaGetLastError());
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    std::sort(samples.begin(), samples.end());
    return samples[2];
}

// ---- cuBLASLt -------------------------------------------------------------------------------------

enum class LtKind { kBf16, kFp8Tensor, kFp8Block };
const char* lt_name(LtKind k) {
    return k == LtKind::kBf16 ? "cublaslt_bf16" : k == LtKind::kFp8Tensor ? "cublaslt_fp8_tensor" : "cublaslt_fp8_block";
}

// y[M, N] (bf16, row-major) = x[M, K] · W[N, K]ᵀ as the column-major D[N, M] = op(A)=Wᵀ... (TN layout).
struct LtGemm {
    cublasLtHandle_t h = nullptr;
    cublasLtMatmulDesc_t desc = nullptr;
    cublasLtMatrixLayout_t la = nullptr, lb = nullptr, ld = nullptr;
    cublasLtMatmulHeuristicResult_t heur{};
    bool ok = false;
    void* ws = nullptr;
    size_t ws_bytes = 0;
    bool swap = false;  // block scaling with the activations as A (VEC128) and the weight as B (BLK128x128)
    LtGemm(cublasLtHandle_t handle, LtKind kind, int64_t M, int64_t N, int64_t K, const float* a_scale,
           const float* b_scale, void* workspace, size_t workspace_bytes, bool swapped = false)
        : h(handle), ws(workspace), ws_bytes(workspace_bytes), swap(swapped) {
        if (swap) std::swap(M, N);
        const cudaDataType_t in = kind == LtKind::kBf16 ? CUDA_R_16BF : CUDA_R_8F_E4M3;
        LT_CHECK(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)));
        LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)));
        if (kind != LtKind::kBf16) {
            if (kind == LtKind::kFp8Block) {
                int32_t ma = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F, mb = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
                if (swap) std::swap(ma, mb);
                LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &ma, sizeof(ma)));
                LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mb, sizeof(mb)));
            }
            LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale, sizeof(a_scale)));
            LT_CHECK(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale, sizeof(b_scale)));
        }
        LT_CHECK(cublasLtMatrixLayoutCreate(&la, in, uint64_t(K), uint64_t(N), K));
        LT_CHECK(cublasLtMatrixLayoutCreate(&lb, in, uint64_t(K), uint64_t(M), K));
        LT_CHECK(cublasLtMatrixLayoutCreate(&ld, CUDA_R_16BF, uint64_t(N), uint64_t(M), N));
        cublasLtMatmulPreference_t pref;
        LT_CHECK(cublasLtMatmulPreferenceCreate(&pref));
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof(ws_bytes)));
        int n = 0;
        const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(h, desc, la, lb, ld, ld, pref, 1, &heur, &n);
        ok = st == CUBLAS_STATUS_SUCCESS && n > 0;
        cublasLtMatmulPreferenceDestroy(pref);
    }
    ~LtGemm() {
        if (ld) cublasLtMatrixLayoutDestroy(ld);
        if (lb) cublasLtMatrixLayoutDestroy(lb);
        if (la) cublasLtMatrixLayoutDestroy(la);
        if (desc) cublasLtMatmulDescDestroy(desc);
    }
    void run(const void* w, const void* x, void* y) const {
        const float one = 1.0f, zero = 0.0f;
        if (swap) std::swap(w, x);
        LT_CHECK(cublasLtMatmul(h, desc, &one, w, la, x, lb, &zero, y, ld, y, ld, &heur.algo, ws, ws_bytes, nullptr));
    }
};

// ---- Output -------------------------------------------------------------------------------------

struct Ceilings {
    double copy_gbps = 0, bf16_tflops = 0, fp8_tflops = 0;
};

struct Row {
    std::string op, impl, shape;
    int64_t m = 0, n = 0, k = 0;
    double ms = 0, flops = 0, bytes = 0, floor_ms = 0;
    std::string note;
};

FILE* g_out = stdout;
std::vector<Row> g_rows;

void emit(const Row& r) {
    const double tflops = r.flops / (r.ms * 1e-3) / 1e12, gbps = r.bytes / (r.ms * 1e-3) / 1e9;
    std::fprintf(g_out,
                 "{\"op\":\"%s\",\"impl\":\"%s\",\"shape\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"ms\":%.6f,"
                 "\"tflops\":%.3f,\"gbps\":%.1f,\"flops\":%.6g,\"bytes\":%.6g,\"floor_ms\":%.6f,\"frac_of_floor\":%.4f%s%s%s}\n",
                 r.op.c_str(), r.impl.c_str(), r.shape.c_str(), (long long)r.m, (long long)r.n, (long long)r.k, r.ms,
                 tflops, gbps, r.flops, r.bytes, r.floor_ms, r.floor_ms / r.ms, r.note.empty() ? "" : ",\"note\":\"",
                 r.note.c_str(), r.note.empty() ? "" : "\"");
    std::fflush(g_out);
    g_rows.push_back(r);
}

// ---- The benchmark ----------------------------------------------------------------------------------

struct GemmShape {
    std::string name;
    int64_t n, k;
    WeightKind kind;
};

struct Bench {
    cublasLtHandle_t lt = nullptr;
    Buf workspace{size_t(64) << 20};
    Ceilings c;
    bool quick = false;
    bool sweep = false;  // --sweep: every configuration of the register-converting FP4 kernel
    std::string variants;  // --variants a,b: only those configurations in the sweep (",a,b,"; empty: all)

    double floor_ms(double flops, double bytes, bool fp8) const {
        const double peak = fp8 ? c.fp8_tflops : c.bf16_tflops;
        return std::max(flops / (peak * 1e12), bytes / (c.copy_gbps * 1e9)) * 1e3;
    }

    void ceilings() {
        const size_t n = size_t(2) << 30;
        Buf a(n), b(n);
        fill(a.p(), n, 1, 4);
        const double ms = time_ms([&](int) { DI_CUDA_CHECK(cudaMemcpyAsync(b.p(), a.p(), n, cudaMemcpyDeviceToDevice)); });
        c.copy_gbps = 2.0 * double(n) / (ms * 1e-3) / 1e9;
        emit({"ceiling_copy", "cudaMemcpy_d2d", "2GiB", 0, 0, 0, ms, 0, 2.0 * double(n), 0, "bytes = read + written"});
        const int64_t S = 8192;
        for (LtKind kind : {LtKind::kBf16, LtKind::kFp8Tensor, LtKind::kFp8Block}) {
            const double t = lt_time(kind, S, S, S, nullptr);
            if (t <= 0) continue;
            const double fl = 2.0 * S * S * S;
            if (kind == LtKind::kBf16) c.bf16_tflops = fl / (t * 1e-3) / 1e12;
            if (kind == LtKind::kFp8Tensor) c.fp8_tflops = fl / (t * 1e-3) / 1e12;
            emit({"ceiling_gemm", lt_name(kind), "8192x8192x8192", S, S, S, t, fl, 0, 0, "random data"});
        }
        std::fprintf(stderr, "ceilings: copy %.0f GB/s, bf16 %.0f TFLOP/s, fp8 %.0f TFLOP/s\n", c.copy_gbps, c.bf16_tflops,
                     c.fp8_tflops);
    }

    // cuBLASLt y = x Wᵀ at (M, N, K), random data; returns ms (<= 0 if unsupported). `row` (optional)
    // is filled for emission.
    double lt_time(LtKind kind, int64_t M, int64_t N, int64_t K, Row* row) {
        const size_t es = kind == LtKind::kBf16 ? 2 : 1;
        const size_t wbytes = size_t(N) * K * es;
        const int copies = int(std::clamp<size_t>((size_t(256) << 20) / std::max<size_t>(wbytes, 1), 1, 32));
        Buf w(wbytes * copies), x(size_t(M) * K * es), y(size_t(M) * N * 2);
        fill(w.p(), wbytes * copies, 11, kind == LtKind::kBf16 ? 3 : 0);
        fill(x.p(), size_t(M) * K * es, 12, kind == LtKind::kBf16 ? 3 : 0);
        const size_t sa = size_t((K + 127) / 128) * ((N + 127) / 128 + 4) + 64, sb = size_t((K + 127) / 128) * (M + 4) + 64;
        Buf as(sa * 4), bs(sb * 4);
        fill_f32_kernel<<<256, 256>>>(as.p<float>(), sa, 1.0f);
        fill_f32_kernel<<<256, 256>>>(bs.p<float>(), sb, 1.0f);
        auto g = std::make_unique<LtGemm>(lt, kind, M, N, K, as.p<float>(), bs.p<float>(), workspace.p(), workspace.b->nbytes());
        std::string note;
        if (!g->ok && kind == LtKind::kFp8Block) {
            g = std::make_unique<LtGemm>(lt, kind, M, N, K, bs.p<float>(), as.p<float>(), workspace.p(), workspace.b->nbytes(), true);
            note = "activations as A (VEC128), weight as B (BLK128x128)";
        }
        if (!g->ok) {
            if (row) emit({row->op, lt_name(kind), row->shape, M, N, K, -1, 0, 0, 0, "no cuBLASLt algorithm"});
            return -1;
        }
        const double ms = time_ms([&](int i) { g->run(w.p<uint8_t>() + (i % copies) * wbytes, x.p(), y.p()); });
        if (row) {
            Row r = *row;
            r.impl = lt_name(kind);
            r.ms = ms;
            if (!note.empty()) r.note = note;
            emit(r);
        }
        return ms;
    }

    void linear_shape(const GemmShape& s, int64_t M) {
        const bool fp8 = s.kind == WeightKind::kFp8Block;
        const int64_t N = s.n, K = s.k;
        const size_t wbytes = fp8 ? size_t(N) * K : size_t(N) * K * 2;
        const size_t sbytes = fp8 ? size_t(N / 128) * (K / 128) : 0;
        const double flops = 2.0 * M * N * K;
        const double bytes = double(wbytes + sbytes) + double(M) * K * (fp8 ? 1.0 + 4.0 / 128 : 2.0) + double(M) * N * 4;
        Row base{s.name, "", std::to_string(N) + "x" + std::to_string(K), M, N, K, 0, flops, bytes,
                 floor_ms(flops, bytes, fp8), ""};
        // Weight copies for rotation.
        const int copies = int(std::clamp<size_t>((size_t(256) << 20) / (wbytes + sbytes), 1, 32));
        Buf w(wbytes * copies), sc(std::max<size_t>(sbytes, 1) * copies), xf(size_t(M) * K * 4), xq(size_t(M) * K * 2),
            xs(size_t(M) * (K / 128) * 4 + 16), y(size_t(M) * N * 4);
        fill(w.p(), wbytes * copies, 21, fp8 ? 0 : 3);
        if (fp8) fill(sc.p(), sbytes * copies, 22, 1);
        fill(xf.p(), size_t(M) * K * 4, 23, 2);
        std::vector<DeviceLinear> lin(static_cast<size_t>(copies));
        for (int i = 0; i < copies; ++i) {
            DeviceLinear& d = lin[size_t(i)];
            d.weight = w.p<uint8_t>() + size_t(i) * wbytes;
            d.scale = fp8 ? sc.p<uint8_t>() + size_t(i) * sbytes : nullptr;
            d.kind = s.kind;
            d.scale_kind = fp8 ? ScaleKind::kE8M0 : ScaleKind::kNone;
            d.out_features = N;
            d.in_features = K;
        }
        // Activation conversion (its own row: part of the fast path's cost).
        if (fp8) {
            Row r = base;
            r.op = "act_quant_fp8";
            r.impl = "fast";
            r.flops = 0;
            r.bytes = double(M) * K * (4 + 1) + double(M) * (K / 128) * 4;
            r.floor_ms = floor_ms(0, r.bytes, true);
            r.ms = time_ms([&](int) {
                act_quant_fp8({.x = xf.p<float>(), .x_ld = K, .rows = M, .cols = K, .q = xq.p<uint8_t>(), .scale = xs.p<float>()}, Stream{});
            });
            emit(r);
        } else {
            to_bf16({.x = xf.p<float>(), .x_ld = K, .rows = M, .cols = K, .out = xq.p<uint16_t>()}, Stream{});
        }
        {
            Row r = base;
            r.impl = "fast";
            r.ms = time_ms([&](int i) {
                fast_linear({.a = xq.p(), .a_scale = fp8 ? xs.p<float>() : nullptr, .weight = lin[size_t(i % copies)],
                             .y = y.p<float>(), .y_ld = N, .rows = M},
                            Stream{});
            });
            emit(r);
        }
        if (M > 64 && fast_dense_ws_available()) {  // the cp.async kernel the warp-specialized one replaces, its forms
            for (const auto& [path, name] : {std::pair{DensePath::kClassic, "fast_classic"}, std::pair{DensePath::kWs, "fast_ws"},
                                             std::pair{DensePath::kWsCluster, "fast_ws_cluster"},
                                             std::pair{DensePath::kWsClusterWide, "fast_ws_cluster_wide"}}) {
                Row r = base;
                r.impl = name;
                r.ms = time_ms([&](int i) {
                    fast_linear({.a = xq.p(), .a_scale = fp8 ? xs.p<float>() : nullptr, .weight = lin[size_t(i % copies)],
                                 .y = y.p<float>(), .y_ld = N, .rows = M, .dense_path = path},
                                Stream{});
                });
                emit(r);
            }
        }
        if (M <= 128 && !quick) {
            Row r = base;
            r.impl = "reference";
            r.ms = time_ms([&](int i) {
                linear({.x = xf.p<float>(), .x_ld = K, .weight = lin[size_t(i % copies)], .y = y.p<float>(), .y_ld = N, .rows = M},
                       Stream{});
            });
            emit(r);
        }
        if (fp8) {
            lt_time(LtKind::kFp8Tensor, M, N, K, &base);
            lt_time(LtKind::kFp8Block, M, N, K, &base);
        } else {
            lt_time(LtKind::kBf16, M, N, K, &base);
        }
    }

    // Split-K forms of one dense linear at M rows (section 4). Bytes: weights (+scales) + activations read +
    // f32 output written (the partials' traffic is the split form's cost, not counted).
    void splitk(const std::string& name, int64_t N, int64_t K, WeightKind kind, int64_t M) {
        const bool fp8 = kind == WeightKind::kFp8Block;
        const size_t wbytes = fp8 ? size_t(N) * K : size_t(N) * K * 2;
        const size_t sbytes = fp8 ? size_t((N + 127) / 128) * (K / 128) : 0;
        const double flops = 2.0 * M * N * K;
        const double bytes = double(wbytes + sbytes) + double(M) * K * (fp8 ? 1.0 + 4.0 / 128 : 2.0) + double(M) * N * 4;
        const int copies = int(std::clamp<size_t>((size_t(256) << 20) / (wbytes + sbytes), 1, 32));
        Buf w(wbytes * copies), sc(std::max<size_t>(sbytes, 1) * copies), xf(size_t(M) * K * 4), xq(size_t(M) * K * 2),
            xs(size_t(M) * (K / 128) * 4 + 16), y(size_t(M) * N * 4);
        fill(w.p(), wbytes * copies, 71, fp8 ? 0 : 3);
        if (fp8) fill(sc.p(), sbytes * copies, 72, 1);
        fill(xf.p(), size_t(M) * K * 4, 73, 2);
        if (fp8)
            act_quant_fp8({.x = xf.p<float>(), .x_ld = K, .rows = M, .cols = K, .q = xq.p<uint8_t>(), .scale = xs.p<float>()}, Stream{});
        else
            to_bf16({.x = xf.p<float>(), .x_ld = K, .rows = M, .cols = K, .out = xq.p<uint16_t>()}, Stream{});
        std::vector<DeviceLinear> lin(static_cast<size_t>(copies));
        for (int i = 0; i < copies; ++i) {
            DeviceLinear& d = lin[size_t(i)];
            d.weight = w.p<uint8_t>() + size_t(i) * wbytes;
            d.scale = fp8 ? sc.p<uint8_t>() + size_t(i) * sbytes : nullptr;
            d.kind = kind;
            d.scale_kind = fp8 ? ScaleKind::kE8M0 : ScaleKind::kNone;
            d.out_features = N;
            d.in_features = K;
        }
        const int chunks = fast_linear_k_chunks(lin[0]);
        // Forced splits up to 512 rows, the sweep up to 128.
        const bool force = M <= 512, sweep_m = sweep && M <= 128;
        Buf part(std::max<size_t>(size_t(std::max(force ? chunks : 1, sweep_m ? 32 : 1)) * M * N,
                                  size_t(fast_linear_split_floats(lin[0], M))) * 4);
        const std::string shape = std::to_string(N) + "x" + std::to_string(K);
        auto run = [&](const std::string& impl, int k_chunks, SplitK split) {
            Row r{name, impl, shape, M, N, K, 0, flops, bytes, floor_ms(flops, bytes, fp8),
                  "K chunks " + std::to_string(k_chunks > 0 ? k_chunks : chunks)};
            r.ms = time_ms([&](int i) {
                fast_linear({.a = xq.p(), .a_scale = fp8 ? xs.p<float>() : nullptr, .weight = lin[size_t(i % copies)], .y = y.p<float>(),
                             .y_ld = N, .rows = M, .split_scratch = part.p<float>(), .split = split, .k_chunks = k_chunks},
                            Stream{});
            });
            emit(r);
        };
        run("fast_one_chunk", 1, SplitK::kOff);
        if (chunks > 1) {
            run("fast_unsplit", 0, SplitK::kOff);
            if (force) run("fast_split", 0, SplitK::kForce);
        }
        run("fast_auto", 0, SplitK::kAuto);
        if (sweep_m)
            for (int c : {2, 4, 8, 16, 32})
                if (c != chunks && c <= (fp8 ? K / 128 : K / 64)) run("fast_split_s" + std::to_string(c), c, SplitK::kForce);
    }

    // A V4.1 dense linear (FP8 e4m3, 32x32 ue8m0 block scales) both ways of the fast mode, same data:
    // native (act_quant per 32 + the FP8 32x32 kernel, Hopper) and the fallback (the weight as exact
    // bf16: to_bf16 + the bf16 kernel). The GEMM rows are the kernels alone; the activation
    // conversions are their own rows. The bytes count each form's weight bytes.
    void linear_v41(const std::string& name, int64_t N, int64_t K, int64_t M) {
        const size_t w8 = size_t(N) * K, s8 = size_t((N + 31) / 32) * (K / 32), w16 = size_t(N) * K * 2;
        const double flops = 2.0 * M * N * K;
        const int copies = int(std::clamp<size_t>((size_t(256) << 20) / w16, 1, 32));
        Buf w(w8 * copies), sc(s8 * copies), wb(w16 * copies), xf(size_t(M) * K * 4), xq(size_t(M) * K),
            xs(size_t(M) * (K / 32) * 4 + 16), xb(size_t(M) * K * 2), y(size_t(M) * N * 4);
        fill(w.p(), w8 * copies, 61, 0);
        fill(sc.p(), s8 * copies, 62, 1);
        fill(wb.p(), w16 * copies, 63, 3);
        fill(xf.p(), size_t(M) * K * 4, 64, 2);
        std::vector<DeviceLinear> l8(static_cast<size_t>(copies)), l16(static_cast<size_t>(copies));
        for (int i = 0; i < copies; ++i) {
            DeviceLinear& d = l8[size_t(i)];
            d.weight = w.p<uint8_t>() + size_t(i) * w8;
            d.scale = sc.p<uint8_t>() + size_t(i) * s8;
            d.kind = WeightKind::kFp8Block;
            d.scale_kind = ScaleKind::kE8M0;
            d.out_features = N;
            d.in_features = K;
            d.block_rows = d.block_cols = 32;
            DeviceLinear& e = l16[size_t(i)];
            e.weight = wb.p<uint8_t>() + size_t(i) * w16;
            e.kind = WeightKind::kBF16;
            e.out_features = N;
            e.in_features = K;
        }
        const std::string shape = std::to_string(N) + "x" + std::to_string(K);
        const double out_bytes = double(M) * N * 4;
        auto row = [&](const std::string& op, const std::string& impl, double fl, double bytes, bool fp8, auto&& f) {
            Row r{op, impl, shape, M, N, K, 0, fl, bytes, floor_ms(fl, bytes, fp8), ""};
            r.ms = time_ms(f);
            emit(r);
        };
        row("v41_act_quant32", "fast", 0, double(M) * K * 5 + double(M) * (K / 32) * 4, true, [&](int) {
            act_quant_fp8({.x = xf.p<float>(), .x_ld = K, .rows = M, .cols = K, .q = xq.p<uint8_t>(), .scale = xs.p<float>(), .block = 32},
                          Stream{});
        });
        row("v41_to_bf16", "fast", 0, double(M) * K * 6, false, [&](int) {
            to_bf16({.x = xf.p<float>(), .x_ld = K, .rows = M, .cols = K, .out = xb.p<uint16_t>()}, Stream{});
        });
        if (fast_fp8_b32_available())
            row(name, "fp8_b32_native", flops, double(w8 + s8) + double(M) * K * (1 + 4.0 / 32) + out_bytes, true, [&](int i) {
                fast_linear({.a = xq.p(), .a_scale = xs.p<float>(), .weight = l8[size_t(i % copies)], .y = y.p<float>(), .y_ld = N,
                             .rows = M},
                            Stream{});
            });
        row(name, "bf16_fallback", flops, double(w16) + double(M) * K * 2 + out_bytes, false, [&](int i) {
            fast_linear({.a = xb.p(), .weight = l16[size_t(i % copies)], .y = y.p<float>(), .y_ld = N, .rows = M}, Stream{});
        });
        // The bf16 form and FastLinearParams::fp8_as_bf16 (the FP8 weight multiplied as bf16: the same bits) as
        // the V4.1 model runs them: with split-K partials.
        if (fast_fp8_b32_available()) {
            const int64_t split = fast_linear_split_floats(l16[0], M);
            Buf sp(size_t(std::max<int64_t>(split, 1)) * 4);
            row(name, "bf16_split", flops, double(w16) + double(M) * K * 2 + out_bytes, false, [&](int i) {
                fast_linear({.a = xb.p(), .weight = l16[size_t(i % copies)], .y = y.p<float>(), .y_ld = N, .rows = M,
                             .split_scratch = split > 0 ? sp.p<float>() : nullptr},
                            Stream{});
            });
            // fp8_as_bf16 (the register-A kernel; the model's FP8 twins run it up to kFp8TwinRows rows).
            row(name, "fp8_as_bf16", flops, double(w8 + s8) + double(M) * K * 2 + out_bytes, false, [&](int i) {
                FastLinearParams f{.a = xb.p(), .weight = l8[size_t(i % copies)], .y = y.p<float>(), .y_ld = N, .rows = M,
                                   .split_scratch = split > 0 ? sp.p<float>() : nullptr};
                f.fp8_as_bf16 = true;
                fast_linear(f, Stream{});
            });
        }
    }

    // 256 FP4 experts, top-6 of T tokens routed uniformly at random (distinct experts per token); or
    // (per_expert > 0) exactly per_expert rows for every expert, T = 256 * per_expert / 6 tokens (a
    // balanced router's decode step).
    // E = 384: DeepSeek-V4.1-Flash's experts (the v41_experts_* shapes).
    void grouped(const std::string& name, int64_t N, int64_t K, int64_t T, int64_t per_expert = 0, int64_t E = 256) {
        const int64_t top = 6;
        if (per_expert > 0) T = std::max<int64_t>(1, E * per_expert / top);
        const int64_t NP = per_expert > 0 ? E * per_expert : T * top;
        const size_t wb = size_t(N) * K / 2, sb = size_t(N) * (K / 32);
        Buf w(wb * E), sc(sb * E);
        fill(w.p(), wb * E, 31, 4);
        fill(sc.p(), sb * E, 32, 1);
        std::vector<DeviceLinear> lin(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) {
            DeviceLinear& d = lin[size_t(e)];
            d.weight = w.p<uint8_t>() + size_t(e) * wb;
            d.scale = sc.p<uint8_t>() + size_t(e) * sb;
            d.kind = WeightKind::kFp4;
            d.scale_kind = ScaleKind::kE8M0;
            d.out_features = N;
            d.in_features = K;
        }
        std::mt19937 rng(static_cast<uint32_t>(T));
        std::vector<std::vector<int32_t>> by_expert(static_cast<size_t>(E));
        for (int64_t e = 0; e < E && per_expert > 0; ++e)
            for (int64_t i = 0; i < per_expert; ++i) by_expert[size_t(e)].push_back(int32_t((e * per_expert + i) % T));
        for (int64_t t = 0; t < T && per_expert == 0; ++t) {
            std::vector<int32_t> ids;
            while (int64_t(ids.size()) < top) {
                const int32_t e = int32_t(rng() % E);
                if (std::find(ids.begin(), ids.end(), e) == ids.end()) ids.push_back(e);
            }
            for (int32_t e : ids) by_expert[size_t(e)].push_back(int32_t(t));
        }
        std::vector<int32_t> src, offsets{0}, row_expert;
        int64_t used = 0;
        for (int64_t e = 0; e < E; ++e) {
            for (int32_t t : by_expert[size_t(e)]) { src.push_back(t); row_expert.push_back(int32_t(e)); }
            offsets.push_back(int32_t(src.size()));
            used += by_expert[size_t(e)].empty() ? 0 : 1;
        }
        Buf dlin(lin.size() * sizeof(DeviceLinear)), dsrc(src.size() * 4), doff(offsets.size() * 4), dexp(row_expert.size() * 4),
            tiles((E + 1) * 4), xf(size_t(T) * K * 4), xq(size_t(T) * K), xs(size_t(T) * (K / 128) * 4 + 16), y(size_t(NP) * N * 4);
        dlin.b->copy_from_host(lin.data(), lin.size() * sizeof(DeviceLinear));
        dsrc.b->copy_from_host(src.data(), src.size() * 4);
        doff.b->copy_from_host(offsets.data(), offsets.size() * 4);
        dexp.b->copy_from_host(row_expert.data(), row_expert.size() * 4);
        fill(xf.p(), size_t(T) * K * 4, 33, 2);
        act_quant_fp8({.x = xf.p<float>(), .x_ld = K, .rows = T, .cols = K, .q = xq.p<uint8_t>(), .scale = xs.p<float>()}, Stream{});
        const double flops = 2.0 * NP * N * K;
        const double bytes = double(used) * double(wb + sb) + double(T) * K + double(NP) * N * 4;
        const std::string routing = per_expert > 0 ? " even" + std::to_string(per_expert) : " top6";
        Row base{name, "", std::to_string(E) + "x" + std::to_string(N) + "x" + std::to_string(K) + routing, NP, N, K, 0,
                 flops, bytes, floor_ms(flops, bytes, true), "m = token-expert pairs; T = " + std::to_string(T)};
        {
            Row r = base;
            r.impl = "fast";
            r.ms = time_ms([&](int) {
                fast_linear({.a = xq.p(), .a_scale = xs.p<float>(), .a_row_src = dsrc.p<int32_t>(), .weight = lin[0],
                             .experts = dlin.p<DeviceLinear>(), .expert_offsets = doff.p<int32_t>(), .num_experts = E,
                             .tile_scratch = tiles.p<int32_t>(), .y = y.p<float>(), .y_ld = N, .rows = NP},
                            Stream{});
            });
            emit(r);
        }
        for (int v = 0; v < kFp4RsVariants && sweep; ++v) {
            // Every configuration of the register-converting kernel (gemm_fast.h fp4_rs_variant).
            if (!variants.empty() && variants.find("," + std::string(fp4_rs_variant_name(v)) + ",") == std::string::npos) continue;
            Row r = base;
            r.impl = std::string("fast_") + fp4_rs_variant_name(v);
            r.ms = time_ms([&](int) {
                fast_linear({.a = xq.p(), .a_scale = xs.p<float>(), .a_row_src = dsrc.p<int32_t>(), .weight = lin[0],
                             .experts = dlin.p<DeviceLinear>(), .expert_offsets = doff.p<int32_t>(), .num_experts = E,
                             .tile_scratch = tiles.p<int32_t>(), .y = y.p<float>(), .y_ld = N, .rows = NP, .fp4_rs_variant = v},
                            Stream{});
            });
            emit(r);
        }
        {
            // The shared-memory-converting FP4 kernel (Hopper's earlier path, gemm_fast.h Fp4Path).
            Row r = base;
            r.impl = "fast_smemconv";
            r.ms = time_ms([&](int) {
                fast_linear({.a = xq.p(), .a_scale = xs.p<float>(), .a_row_src = dsrc.p<int32_t>(), .weight = lin[0],
                             .experts = dlin.p<DeviceLinear>(), .expert_offsets = doff.p<int32_t>(), .num_experts = E,
                             .tile_scratch = tiles.p<int32_t>(), .y = y.p<float>(), .y_ld = N, .rows = NP,
                             .fp4_path = Fp4Path::kSharedConvert},
                            Stream{});
            });
            emit(r);
        }
        if (T <= 32 && !quick && per_expert == 0) {
            Row r = base;
            r.impl = "reference";
            r.ms = time_ms([&](int) {
                linear({.x = xf.p<float>(), .x_ld = K, .row_src = dsrc.p<int32_t>(), .weight = lin[0], .experts = dlin.p<DeviceLinear>(),
                        .row_expert = dexp.p<int32_t>(), .y = y.p<float>(), .y_ld = N, .rows = NP},
                       Stream{});
            });
            emit(r);
        }
        // cuBLASLt FP8 dense at equal FLOPs (M = pairs): the issue's compute-bound yardstick.
        Row eq = base;
        eq.note = "dense FP8 GEMM at equal FLOPs (M = pairs, one weight)";
        eq.bytes = double(N) * K + double(NP) * K + double(NP) * N * 2;
        eq.floor_ms = floor_ms(flops, eq.bytes, true);
        lt_time(LtKind::kFp8Tensor, NP, N, K, &eq);
    }

    // Memory-bound ops of a step at T tokens (bytes read + written over the copy bandwidth).
    void elementwise(int64_t T) {
        const int64_t D = 4096, hc = 4, I = 2048, K = 6;
        Buf x(size_t(T) * hc * D * 4), y(size_t(T) * hc * D * 4), o(size_t(T) * D * 4), w(size_t(D) * 4),
            g(size_t(T) * K * I * 4), u(size_t(T) * K * I * 4), e(size_t(T) * K * D * 4), post(size_t(T) * hc * 4),
            comb(size_t(T) * hc * hc * 4), rw(size_t(T) * K * 4), ids(size_t(T) * K * 4);
        fill(x.p(), size_t(T) * hc * D * 4, 41, 2);
        fill(o.p(), size_t(T) * D * 4, 42, 2);
        fill(w.p(), size_t(D) * 4, 43, 2);
        fill(g.p(), size_t(T) * K * I * 4, 44, 2);
        fill(u.p(), size_t(T) * K * I * 4, 45, 2);
        fill(e.p(), size_t(T) * K * D * 4, 46, 2);
        fill(post.p(), size_t(T) * hc * 4, 47, 2);
        fill(comb.p(), size_t(T) * hc * hc * 4, 48, 2);
        fill(rw.p(), size_t(T) * K * 4, 49, 2);
        std::vector<int32_t> hid(size_t(T * K));
        for (int64_t t = 0; t < T; ++t)
            for (int64_t k = 0; k < K; ++k) hid[size_t(t * K + k)] = int32_t(k * 40 + t % 40);  // ascending, distinct
        ids.b->copy_from_host(hid.data(), hid.size() * 4);
        auto row = [&](const std::string& op, const std::string& shape, int64_t m, double bytes, auto&& f) {
            Row r{op, "reference", shape, m, 0, 0, 0, 0, bytes, floor_ms(0, bytes, true), "memory-bound; T = " + std::to_string(T)};
            r.ms = time_ms([&](int) { f(); });
            emit(r);
        };
        row("rms_norm", "T x 4096", T, 2.0 * T * D * 4, [&] {
            rms_norm({.x = o.p<float>(), .weight = w.p<float>(), .out = y.p<float>(), .rows = T, .n = D, .round_bf16 = true}, Stream{});
        });
        row("hc_post", "T x 4 x 4096", T, double(T) * D * 4 * (1 + 2 * hc), [&] {
            hc_post({.out = o.p<float>(), .x = x.p<float>(), .post = post.p<float>(), .comb = comb.p<float>(), .y = y.p<float>(),
                     .rows = T, .hc = hc, .hidden = D, .round_bf16 = true},
                    Stream{});
        });
        {  // mHC's 24 mixing logits and dot(x, x) of the T x 16384 streams (the fast mode's split-K partials, as
           // hc_pre reads them): x read, fn (1.5 MB, from L2) and the partial planes written.
            const int64_t outs = (2 + hc) * hc, flat = hc * D, splits = hc_mix_splits(flat);
            Buf fn(size_t(outs) * flat * 4), part(size_t(splits) * T * (outs + 1) * 4);
            fill(fn.p(), size_t(outs) * flat * 4, 50, 2);
            row("hc_mix", "T x 16384 -> 24", T, double(T) * flat * 4 + double(splits) * T * (outs + 1) * 4, [&] {
                hc_mix_splitk({.x = x.p<float>(), .fn = fn.p<float>(), .rows = T, .outputs = outs, .flat = flat, .partial = part.p<float>(),
                               .partials_only = true},
                              Stream{});
            });
        }
        row("swiglu", "6T x 2048", T * K, 3.0 * T * K * I * 4, [&] {
            swiglu({.g = g.p<float>(), .u = u.p<float>(), .row_weight = rw.p<float>(), .rows = T * K, .width = I, .limit = 10.0f,
                    .round_bf16 = true},
                   Stream{});
        });
        {  // SwiGLU with w2's FP8 quantization in the same pass (the routed experts' fast path): g, u read,
           // codes and per-128 scales written.
            Buf q(size_t(T) * K * I), qs(size_t(T) * K * (I / 128) * 4);
            row("swiglu_quant", "6T x 2048", T * K, double(T) * K * I * (4 + 4 + 1) + double(T) * K * (I / 128) * 4, [&] {
                swiglu({.g = g.p<float>(), .u = u.p<float>(), .row_weight = rw.p<float>(), .rows = T * K, .width = I, .limit = 10.0f,
                        .round_bf16 = true, .q = q.p<uint8_t>(), .q_scale = qs.p<float>()},
                       Stream{});
            });
        }
        row("moe_combine", "T x (6+1) x 4096", T, double(T) * D * 4 * (K + 2), [&] {
            moe_combine({.expert_out = e.p<float>(), .ids = ids.p<int32_t>(), .weights = rw.p<float>(), .shared = o.p<float>(),
                         .out = y.p<float>(), .rows = T, .top_k = K, .hidden = D, .round_bf16 = true},
                        Stream{});
        });
    }

    // Decode attention of a CSA layer: B sequences at position ctx-1, each reading its 128-row window
    // and 512 selected compressed entries (of ctx/4), 64 heads x 512. Floor: each sequence's candidate
    // rows read once (they are shared by the heads) + q and out.
    void decode_attention(int64_t B, int64_t ctx) {
        const int64_t H = 64, Dh = 512, W = 128, WR = W + 16, ratio = 4, topk = 512, R = 64;
        const int64_t cap = ctx / ratio + 1, pos = ctx - 1, maxc = W + topk;
        Buf win(size_t(B) * WR * Dh * 4), ent(size_t(B) * cap * Dh * 4), q(size_t(B) * H * Dh * 4), kv(size_t(B) * Dh * 4),
            out(size_t(B) * H * Dh * 4), scratch(size_t(B) * H * maxc * 4), sink(size_t(H) * 4), cs(size_t(ctx) * R * 4),
            sel(size_t(B) * topk * 4), segs(size_t(B) * sizeof(DeviceSegment)), rs(size_t(B) * 4), ps(size_t(B) * 4);
        fill(win.p(), size_t(B) * WR * Dh * 4, 51, 2);
        fill(ent.p(), size_t(B) * cap * Dh * 4, 52, 2);
        fill(q.p(), size_t(B) * H * Dh * 4, 53, 2);
        fill(kv.p(), size_t(B) * Dh * 4, 54, 2);
        fill(sink.p(), size_t(H) * 4, 55, 2);
        fill(cs.p(), size_t(ctx) * R * 4, 56, 2);
        std::vector<DeviceSegment> hs(static_cast<size_t>(B));
        std::vector<int32_t> rows(static_cast<size_t>(B)), positions(static_cast<size_t>(B), int32_t(pos)), picks;
        for (int64_t b = 0; b < B; ++b) {
            DeviceSegment& d = hs[size_t(b)];
            d.row_begin = b;
            d.num_rows = 1;
            d.first_position = pos;
            d.window = win.p<float>() + size_t(b) * WR * Dh;
            d.comp_entries = ent.p<float>() + size_t(b) * cap * Dh;
            rows[size_t(b)] = int32_t(b);
            for (int64_t j = 0; j < topk; ++j) picks.push_back(int32_t((j * (ctx / ratio)) / topk));  // ascending, visible
        }
        segs.b->copy_from_host(hs.data(), hs.size() * sizeof(DeviceSegment));
        rs.b->copy_from_host(rows.data(), rows.size() * 4);
        ps.b->copy_from_host(positions.data(), positions.size() * 4);
        sel.b->copy_from_host(picks.data(), picks.size() * 4);
        const double bytes = double(B) * (double(W + topk) * Dh * 4 + 2.0 * H * Dh * 4);
        Row r{"decode_attention_csa", "reference", "64x512 heads, window 128 + 512 picks, ctx " + std::to_string(ctx), B, 0, 0, 0,
              0, bytes, floor_ms(0, bytes, true), "memory-bound; m = sequences"};
        r.ms = time_ms([&](int) {
            sparse_attention({.segments = segs.p<DeviceSegment>(), .row_segment = rs.p<int32_t>(), .positions = ps.p<int32_t>(),
                              .rows = B, .heads = H, .head_dim = Dh, .q = q.p<float>(), .kv = kv.p<float>(), .sink = sink.p<float>(),
                              .window = W, .window_rows = WR, .kind = AttentionKind::kCsa, .ratio = ratio,
                              .selected = sel.p<int32_t>(), .topk = topk, .max_candidates = maxc, .scratch = scratch.p<float>(),
                              .cos_sin = cs.p<float>(), .rope_dim = R, .softmax_scale = 0.044f, .official = true,
                              .out = out.p<float>()},
                             Stream{});
        });
        emit(r);
    }
};

void print_table(const Ceilings& c) {
    std::fprintf(stderr, "\n| op | shape | m | impl | ms | TFLOP/s | GB/s | floor ms | frac of floor |\n|---|---|---|---|---|---|---|---|---|\n");
    for (const Row& r : g_rows) {
        if (r.ms <= 0) continue;
        std::fprintf(stderr, "| %s | %s | %lld | %s | %.4f | %.1f | %.0f | %.4f | %.2f |\n", r.op.c_str(), r.shape.c_str(),
                     (long long)r.m, r.impl.c_str(), r.ms, r.flops / (r.ms * 1e-3) / 1e12, r.bytes / (r.ms * 1e-3) / 1e9,
                     r.floor_ms, r.floor_ms / r.ms);
    }
    std::fprintf(stderr, "\nceilings: copy %.0f GB/s, cuBLASLt bf16 %.0f TFLOP/s, fp8 %.0f TFLOP/s\n", c.copy_gbps,
                 c.bf16_tflops, c.fp8_tflops);
}

}  // namespace

int main(int argc, char** argv) {
    std::string out, only;
    std::vector<int64_t> ms;
    std::vector<int64_t> per_expert;
    std::string variants;
    bool quick = false, no_ceilings = false, sweep = false, splitk = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--out" && i + 1 < argc) out = argv[++i];
        else if (a == "--quick") quick = true;
        else if (a == "--sweep") sweep = true;
        else if (a == "--splitk") splitk = true;
        else if (a == "--only" && i + 1 < argc) only = "," + std::string(argv[++i]) + ",";
        else if (a == "--variants" && i + 1 < argc) {
            variants = "," + std::string(argv[++i]) + ",";
            sweep = true;
        }
        else if (a == "--ms" && i + 1 < argc) {
            for (const char* t = argv[++i]; *t;) {
                char* end = nullptr;
                ms.push_back(std::strtoll(t, &end, 10));
                t = *end ? end + 1 : end;
            }
        } else if (a == "--per-expert" && i + 1 < argc) {
            for (const char* t = argv[++i]; *t;) {
                char* end = nullptr;
                per_expert.push_back(std::strtoll(t, &end, 10));
                t = *end ? end + 1 : end;
            }
        } else if (a == "--no-ceilings") no_ceilings = true;
        else {
            std::fprintf(stderr,
                         "usage: cuda_gemm_bench [--out FILE.jsonl] [--quick] [--sweep] [--variants v,v] [--splitk] [--only op,op] [--ms 1,4096] "
                         "[--per-expert 1,8] [--no-ceilings]\n");
            return 2;
        }
    }
    auto wanted = [&](const std::string& name) { return only.empty() || only.find("," + name + ",") != std::string::npos; };
    auto m_wanted = [&](int64_t m) { return ms.empty() || std::find(ms.begin(), ms.end(), m) != ms.end(); };
    if (device_count() == 0) {
        std::fprintf(stderr, "no CUDA device\n");
        return 1;
    }
    if (!out.empty()) g_out = std::fopen(out.c_str(), "w");
    std::fprintf(stderr, "device: %s\n", device_description(0).c_str());
    Bench b;
    b.quick = quick;
    b.sweep = sweep;
    b.variants = variants;
    LT_CHECK(cublasLtCreate(&b.lt));
    if (no_ceilings) {
        b.c = {4.2e3, 780, 1380};  // nominal values for filtered runs (profiling)
    } else {
        b.ceilings();
    }
    const std::vector<GemmShape> shapes = {
        {"wq_a", 1024, 4096, WeightKind::kFp8Block},   {"wq_b", 32768, 1024, WeightKind::kFp8Block},
        {"wkv", 512, 4096, WeightKind::kFp8Block},     {"wo_b", 4096, 8192, WeightKind::kFp8Block},
        {"shared_w1", 2048, 4096, WeightKind::kFp8Block}, {"shared_w2", 4096, 2048, WeightKind::kFp8Block},
        {"wo_a_group", 1024, 4096, WeightKind::kBF16},  {"lm_head", 129280, 4096, WeightKind::kBF16},
    };
    if (splitk) {
        // The dense linears whose output tiles do not fill the GPU (V4-Flash FP8 and bf16, V4.1 bf16), and two
        // that do (no split: the control).
        const std::vector<GemmShape> split_shapes = {
            {"wq_a", 1024, 4096, WeightKind::kFp8Block},          {"wkv", 512, 4096, WeightKind::kFp8Block},
            {"shared_w1", 2048, 4096, WeightKind::kFp8Block},     {"shared_w2", 4096, 2048, WeightKind::kFp8Block},
            {"wo_b", 4096, 8192, WeightKind::kFp8Block},          {"indexer_wq_b", 8192, 1024, WeightKind::kFp8Block},
            {"wq_b", 32768, 1024, WeightKind::kFp8Block},         {"wo_a_group", 1024, 4096, WeightKind::kBF16},
            {"indexer_weights", 64, 4096, WeightKind::kBF16},     {"v41_wq_a", 1280, 5120, WeightKind::kBF16},
            {"v41_wkv", 512, 5120, WeightKind::kBF16},            {"v41_shared_w1", 2304, 5120, WeightKind::kBF16},
            {"v41_shared_w2", 5120, 2304, WeightKind::kBF16},     {"v41_wo_b", 5120, 8192, WeightKind::kBF16},
            {"lm_head", 129280, 4096, WeightKind::kBF16},
        };
        for (const GemmShape& s : split_shapes) {
            if (!wanted(s.name)) continue;
            for (int64_t m : {int64_t(1), int64_t(8), int64_t(32), int64_t(128), int64_t(512), int64_t(4096)})
                if (m_wanted(m) && !(s.name == "lm_head" && m > 512)) b.splitk(s.name, s.n, s.k, s.kind, m);
        }
        print_table(b.c);
        cublasLtDestroy(b.lt);
        if (g_out != stdout) std::fclose(g_out);
        return 0;
    }
    const std::vector<int64_t> decode = {1, 32, 128, 512}, prefill = {4096, 8192, 16384};
    for (const GemmShape& s : shapes) {
        if (!wanted(s.name)) continue;
        for (int64_t m : decode)
            if (m_wanted(m)) b.linear_shape(s, m);
        if (s.name != "lm_head")
            for (int64_t m : prefill) {
                if ((quick && m > 4096) || !m_wanted(m)) continue;
                b.linear_shape(s, m);
            }
    }
    // DeepSeek-V4.1's dense FP8 32x32 linears (hidden 5120, q_lora 1280, 64x512 heads, 8 x 1024 output
    // groups, shared expert 2304, Engram wkv): native FP8 vs the bf16 fallback.
    const std::vector<std::pair<std::string, std::pair<int64_t, int64_t>>> v41 = {
        {"v41_wq_a", {1280, 5120}},       {"v41_wq_b", {32768, 1280}},     {"v41_wkv", {512, 5120}},
        {"v41_wo_b", {5120, 8192}},       {"v41_shared_w1", {2304, 5120}}, {"v41_shared_w2", {5120, 2304}},
        {"v41_engram_wkv", {25600, 6144}},
    };
    for (const auto& [name, nk] : v41) {
        if (!wanted(name)) continue;
        for (int64_t m : {int64_t(1), int64_t(4), int64_t(8), int64_t(16), int64_t(32), int64_t(64), int64_t(128), int64_t(512),
                          int64_t(4096)})
            // (4, 8, 16 and 64 rows only when --ms names them)
            if (ms.empty() ? (m == 1 || m == 32 || m == 128 || m == 512 || m == 4096) : m_wanted(m)) b.linear_v41(name, nk.first, nk.second, m);
    }
    for (int64_t t : {int64_t(1), int64_t(32), int64_t(128), int64_t(512), int64_t(1024), int64_t(2048), int64_t(4096), int64_t(8192),
                      int64_t(16384)}) {
        if ((quick && t > 4096) || !m_wanted(t)) continue;
        if (wanted("experts_w1")) b.grouped("experts_w1", 2048, 4096, t);
        if (wanted("experts_w2")) b.grouped("experts_w2", 4096, 2048, t);
    }
    // --per-expert r: the grouped experts with exactly r rows per expert (even routing); V4.1's 384 experts
    // of 5120 x 2304 (v41_experts_*: only when named in --only).
    for (int64_t r : per_expert) {
        if (wanted("experts_w1")) b.grouped("experts_w1", 2048, 4096, 0, r);
        if (wanted("experts_w2")) b.grouped("experts_w2", 4096, 2048, 0, r);
        if (!only.empty() && wanted("v41_experts_w1")) b.grouped("v41_experts_w1", 2304, 5120, 0, r, 384);
        if (!only.empty() && wanted("v41_experts_w2")) b.grouped("v41_experts_w2", 5120, 2304, 0, r, 384);
    }
    // Memory-bound ops (reference CUDA-core kernels), last: their floors are bytes / copy bandwidth.
    for (int64_t t : {int64_t(1), int64_t(32), int64_t(128), int64_t(512), int64_t(4096), int64_t(16384)})
        if (wanted("elementwise") && m_wanted(t)) b.elementwise(t);
    for (int64_t bsz : {int64_t(1), int64_t(32), int64_t(128), int64_t(512)})
        if (wanted("decode_attention") && m_wanted(bsz)) b.decode_attention(bsz, 4096);
    print_table(b.c);
    cublasLtDestroy(b.lt);
    if (g_out != stdout) std::fclose(g_out);
    return 0;
}
