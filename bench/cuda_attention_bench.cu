// SPDX-License-Identifier: Apache-2.0
// The sparse sink attention's tensor-core kernels (kernels/attention_tc.cuh: wgmmaK = the wgmma kernel
// with kWg = K, 3 being sparse_attention's pick; the cp.async ring; the one-buffer kernel) timed side by side at the V4-Flash widths (64 heads x 512, window 128, CSA
// top-512 at ratio 4, HCA at ratio 128), with their outputs compared bit for bit (issue 9).
//   prefill T: one sequence's chunk of T rows from position 0 (the chunk's rows are the window; T/4
//              or T/128 compressed entries, CSA picks: min(visible, 512) distinct visible entries)
//   decode B:  B sequences of one row each at position context - 1 (window in each sequence's ring)
// Inputs are random bf16 values (never zeros). Times: CUDA events, median of --reps launches after a
// warm-up. FLOPs: 64 heads x (q·k + p·v) = 4 · 512 per candidate and head, over each row's candidates
// ("useful"), and over its blocks of 64 ("padded": what the kernels compute). The BF16 ceiling to
// divide by comes from cuda_gemm_bench --only none in the same call.
//
//   cuda_attention_bench [--prefill 4096,16384] [--batches 32,512] [--context 4096] [--reps 10]
//                        [--variants wgmma3,wgmma4,wgmma2,wgmma1,ring,one] [--out results.jsonl]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "backends/cuda/attention_tc.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/ops.h"

namespace {

using deepinfer::bench::parse_list;
using namespace deepinfer;

#define BENCH_CHECK(x)                                                                                       \
    do {                                                                                                     \
        const cudaError_t e_ = (x);                                                                          \
        if (e_ != cudaSuccess) {                                                                             \
            std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));          \
            std::exit(1);                                                                                    \
        }                                                                                                    \
    } while (0)

// n floats holding bf16 values ~ scale · U(-1.7, 1.7) from a hash of (seed, i).
__global__ void fill_bf16_kernel(float* x, int64_t n, uint32_t seed, float scale) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ (static_cast<uint32_t>(i >> 32) + seed) * 0x85EBCA77u;
        h ^= h >> 15;
        h *= 0x2C1B3C6Du;
        h ^= h >> 12;
        const float u = (static_cast<float>(h >> 8) * (1.0f / 16777216.0f)) * 3.4f - 1.7f;
        const uint32_t bits = __float_as_uint(u * scale) & 0xFFFF0000u;  // a bf16 value
        x[i] = __uint_as_float(bits);
    }
}

struct Buf {
    void* p = nullptr;
    explicit Buf(size_t bytes) { BENCH_CHECK(cudaMalloc(&p, std::max<size_t>(bytes, 16))); }
    ~Buf() { cudaFree(p); }
    Buf(const Buf&) = delete;
    Buf& operator=(const Buf&) = delete;
    template <class T>
    T* as() const { return static_cast<T*>(p); }
};

float* filled(Buf& b, int64_t n, uint32_t seed, float scale) {
    fill_bf16_kernel<<<1024, 256>>>(b.as<float>(), n, seed, scale);
    BENCH_CHECK(cudaGetLastError());
    return b.as<float>();
}

constexpr int64_t kH = 64, kD = 512, kRope = 64, kWindow = 128, kTopk = 512;

struct Problem {
    std::string name;
    int64_t rows = 0;
    std::vector<int32_t> positions, row_segment;
    std::vector<cuda::DeviceSegment> segments;
};

// Candidates of a row: window, then compressed entries (CSA: at most top-k).
int64_t candidates(int64_t pos, bool csa) {
    const int64_t window = std::min<int64_t>(pos + 1, kWindow);
    const int64_t vis = (pos + 1) / (csa ? 4 : 128);
    return window + (csa ? std::min(vis, kTopk) : vis);
}

// Counts the elements of a and b whose bits differ (count[0]); where they differ: the largest |a - b|
// and |b| (as float bits, count[1], count[2]), and counts by 64-column group of a head's 512 (count[3 +
// g]) and by group of 16 heads (count[11 + h]): a layout error shows in some groups, rounding in all.
__global__ void count_diff_kernel(const uint32_t* a, const uint32_t* b, int64_t n, unsigned long long* count, bool stats = true) {
    unsigned long long c = 0;
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        if (a[i] == b[i]) continue;
        ++c;
        if (!stats) continue;
        const float fa = __uint_as_float(a[i]), fb = __uint_as_float(b[i]);
        atomicMax(count + 1, static_cast<unsigned long long>(__float_as_uint(fabsf(fa - fb))));
        atomicMax(count + 2, static_cast<unsigned long long>(__float_as_uint(fabsf(fb))));
        atomicAdd(count + 3 + (i % 512) / 64, 1ull);
        atomicAdd(count + 11 + ((i / 512) % 64) / 16, 1ull);
    }
    if (c) atomicAdd(count, c);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int64_t> prefills{4096, 16384}, batches{32, 512};
    int64_t context = 4096, reps = 10;
    std::string variants_arg = "wgmma3,wgmma4,wgmma2,wgmma1,ring,one", out_path;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--prefill") prefills = parse_list(v);
        else if (k == "--batches") batches = parse_list(v);
        else if (k == "--context") context = std::stoll(v);
        else if (k == "--reps") reps = std::max<int64_t>(1, std::stoll(v));
        else if (k == "--variants") variants_arg = v;
        else if (k == "--out") out_path = v;
        else {
            std::fprintf(stderr, "unknown option %s\n", k.c_str());
            return 2;
        }
    }
    struct Variant {
        const char* name;
        cuda::TcaVariant v;
    };
    std::vector<Variant> variants;
    for (const Variant v : {Variant{"wgmma3", cuda::TcaVariant::kWgmma}, Variant{"wgmma4", cuda::TcaVariant::kWgmmaScores1},
                            Variant{"wgmma2", cuda::TcaVariant::kWgmmaScores4}, Variant{"wgmma1", cuda::TcaVariant::kWgmmaShared},
                            Variant{"ring", cuda::TcaVariant::kRing}, Variant{"one", cuda::TcaVariant::kOneBuffer}})
        if (("," + variants_arg + ",").find("," + std::string(v.name) + ",") != std::string::npos) variants.push_back(v);
    FILE* jl = out_path.empty() ? nullptr : std::fopen(out_path.c_str(), "w");

    // RoPE table: any bf16-valued cos/sin pairs do for timing and bit comparison.
    const int64_t max_pos = std::max<int64_t>(context, prefills.empty() ? 0 : *std::max_element(prefills.begin(), prefills.end())) + 1;
    Buf cos_sin(size_t(max_pos * kRope) * 4);
    filled(cos_sin, max_pos * kRope, 7, 0.5f);
    Buf sink(kH * 4);
    filled(sink, kH, 8, 1.0f);
    cudaEvent_t e0, e1;
    BENCH_CHECK(cudaEventCreate(&e0));
    BENCH_CHECK(cudaEventCreate(&e1));
    std::mt19937 rng(1234);

    std::printf("%-14s %-4s %-7s %10s %12s %12s %9s %s\n", "case", "kind", "kernel", "ms", "TFLOP/s", "TFLOP/s pad", "vs ring", "bits");
    struct Case {
        bool prefill;
        int64_t n;
    };
    std::vector<Case> cases;
    for (const int64_t t : prefills) cases.push_back({true, t});
    for (const int64_t b : batches) cases.push_back({false, b});
    for (const Case c : cases) {
        const int64_t rows = c.prefill ? c.n : c.n;
        const int64_t nseg = c.prefill ? 1 : c.n;
        const int64_t WR = kWindow;  // window ring rows per sequence
        std::vector<int32_t> positions(static_cast<size_t>(rows)), row_segment(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
            positions[size_t(r)] = int32_t(c.prefill ? r : context - 1);
            row_segment[size_t(r)] = int32_t(c.prefill ? 0 : r);
        }
        Buf dpos(positions.size() * 4), drs(row_segment.size() * 4);
        BENCH_CHECK(cudaMemcpy(dpos.p, positions.data(), positions.size() * 4, cudaMemcpyHostToDevice));
        BENCH_CHECK(cudaMemcpy(drs.p, row_segment.data(), row_segment.size() * 4, cudaMemcpyHostToDevice));
        Buf q(size_t(rows * kH * kD) * 4), kv(size_t(rows * kD) * 4), ring(size_t(nseg * WR * kD) * 4);
        filled(q, rows * kH * kD, 11, 0.25f);
        filled(kv, rows * kD, 12, 1.0f);
        filled(ring, nseg * WR * kD, 13, 1.0f);
        Buf out(size_t(rows * kH * kD) * 4), first(size_t(rows * kH * kD) * 4);
        Buf diff(15 * 8);
        for (const bool csa : {true, false}) {
            const int64_t ratio = csa ? 4 : 128;
            const int64_t max_pos_case = c.prefill ? c.n - 1 : context - 1;
            const int64_t per_seq = std::max<int64_t>((max_pos_case + 1) / ratio, 1);
            Buf entries(size_t(nseg * per_seq * kD) * 4);
            filled(entries, nseg * per_seq * kD, csa ? 14 : 15, 1.0f);
            std::vector<cuda::DeviceSegment> segs(static_cast<size_t>(nseg));
            for (int64_t s = 0; s < nseg; ++s) {
                cuda::DeviceSegment& g = segs[size_t(s)];
                g.row_begin = c.prefill ? 0 : s;
                g.num_rows = c.prefill ? rows : 1;
                g.first_position = c.prefill ? 0 : context - 1;
                g.window = ring.as<float>() + s * WR * kD;
                g.comp_entries = entries.as<float>() + s * per_seq * kD;
            }
            Buf dseg(segs.size() * sizeof(cuda::DeviceSegment));
            BENCH_CHECK(cudaMemcpy(dseg.p, segs.data(), segs.size() * sizeof(cuda::DeviceSegment), cudaMemcpyHostToDevice));
            // CSA picks: min(visible, top-k) distinct visible entries in random order (partial Fisher-Yates).
            std::vector<int32_t> selected(csa ? size_t(rows * kTopk) : 0, 0);
            if (csa) {
                std::vector<int32_t> perm;
                for (int64_t r = 0; r < rows; ++r) {
                    const int64_t vis = (positions[size_t(r)] + 1) / ratio, k = std::min(vis, kTopk);
                    perm.resize(size_t(vis));
                    for (int64_t i = 0; i < vis; ++i) perm[size_t(i)] = int32_t(i);
                    for (int64_t i = 0; i < k; ++i) {
                        const int64_t j = i + int64_t(rng() % uint64_t(vis - i));
                        std::swap(perm[size_t(i)], perm[size_t(j)]);
                        selected[size_t(r * kTopk + i)] = perm[size_t(i)];
                    }
                }
            }
            Buf dsel(selected.size() * 4);
            if (csa) BENCH_CHECK(cudaMemcpy(dsel.p, selected.data(), selected.size() * 4, cudaMemcpyHostToDevice));
            double useful = 0, padded = 0;
            for (int64_t r = 0; r < rows; ++r) {
                const int64_t n = candidates(positions[size_t(r)], csa);
                useful += double(kH) * 4.0 * double(kD) * double(n);
                padded += double(kH) * 4.0 * double(kD) * double((n + 63) / 64 * 64);
            }
            const cuda::SparseAttentionParams p{
                .segments = dseg.as<cuda::DeviceSegment>(), .row_segment = drs.as<int32_t>(), .positions = dpos.as<int32_t>(),
                .rows = rows, .heads = kH, .head_dim = kD, .q = q.as<float>(), .kv = kv.as<float>(), .sink = sink.as<float>(),
                .window = kWindow, .window_rows = WR, .kind = csa ? cuda::AttentionKind::kCsa : cuda::AttentionKind::kHca,
                .ratio = ratio, .selected = csa ? dsel.as<int32_t>() : nullptr, .topk = csa ? kTopk : 0,
                .max_candidates = kWindow + (csa ? kTopk : per_seq), .scratch = nullptr, .cos_sin = cos_sin.as<float>(),
                .rope_dim = kRope, .softmax_scale = 1.0f / std::sqrt(float(kD)), .official = true, .tensor_cores = true,
                .out = out.as<float>()};
            const std::string name = c.prefill ? "prefill " + std::to_string(c.n) : "decode b" + std::to_string(c.n);
            double ring_ms = 0;
            std::vector<std::pair<std::string, double>> times;
            bool have_first = false;
            for (const Variant& v : variants) {
                BENCH_CHECK(cudaMemset(out.p, 0xFF, size_t(rows * kH * kD) * 4));  // NaN: unwritten outputs show
                if (!cuda::sparse_attention_tc_variant(p, cuda::Stream{}, v.v)) {
                    std::printf("%-14s %-4s %-6s (not available on this device)\n", name.c_str(), csa ? "CSA" : "HCA", v.name);
                    continue;
                }
                BENCH_CHECK(cudaGetLastError());
                BENCH_CHECK(cudaDeviceSynchronize());
                std::vector<float> ms;
                for (int64_t i = 0; i < reps; ++i) {
                    BENCH_CHECK(cudaEventRecord(e0));
                    cuda::sparse_attention_tc_variant(p, cuda::Stream{}, v.v);
                    BENCH_CHECK(cudaEventRecord(e1));
                    BENCH_CHECK(cudaEventSynchronize(e1));
                    float t = 0;
                    BENCH_CHECK(cudaEventElapsedTime(&t, e0, e1));
                    ms.push_back(t);
                }
                std::sort(ms.begin(), ms.end());
                const double med = ms[ms.size() / 2];
                std::string bits = "reference";
                if (!have_first) {
                    BENCH_CHECK(cudaMemcpy(first.p, out.p, size_t(rows * kH * kD) * 4, cudaMemcpyDeviceToDevice));
                    have_first = true;
                    // every output written (no NaN pattern 0xFFFFFFFF left)
                    BENCH_CHECK(cudaMemset(diff.p, 0, 15 * 8));
                    Buf nan_pat(size_t(rows * kH * kD) * 4);
                    BENCH_CHECK(cudaMemset(nan_pat.p, 0xFF, size_t(rows * kH * kD) * 4));
                    count_diff_kernel<<<1024, 256>>>(out.as<uint32_t>(), nan_pat.as<uint32_t>(), rows * kH * kD, diff.as<unsigned long long>(), false);
                    unsigned long long written = 0;
                    BENCH_CHECK(cudaMemcpy(&written, diff.p, 8, cudaMemcpyDeviceToHost));
                    if (written != static_cast<unsigned long long>(rows * kH * kD)) bits = "UNWRITTEN " + std::to_string(rows * kH * kD - int64_t(written));
                } else {
                    BENCH_CHECK(cudaMemset(diff.p, 0, 15 * 8));
                    count_diff_kernel<<<1024, 256>>>(out.as<uint32_t>(), first.as<uint32_t>(), rows * kH * kD, diff.as<unsigned long long>());
                    unsigned long long d[15];
                    BENCH_CHECK(cudaMemcpy(d, diff.p, 15 * 8, cudaMemcpyDeviceToHost));
                    bits = d[0] == 0 ? "identical" : "DIFFER " + std::to_string(d[0]);
                    if (d[0]) {
                        float mad, mref;
                        const uint32_t u1 = uint32_t(d[1]), u2 = uint32_t(d[2]);
                        std::memcpy(&mad, &u1, 4);
                        std::memcpy(&mref, &u2, 4);
                        char buf[256];
                        std::snprintf(buf, sizeof buf, " max|diff| %.3g max|ref| %.3g cols/64 %llu %llu %llu %llu %llu %llu %llu %llu heads/16 %llu %llu %llu %llu",
                                      double(mad), double(mref), d[3], d[4], d[5], d[6], d[7], d[8], d[9], d[10], d[11], d[12], d[13], d[14]);
                        bits += buf;
                    }
                }
                if (std::string(v.name) == "ring") ring_ms = med;
                times.emplace_back(v.name, med);
                std::printf("%-14s %-4s %-7s %10.3f %12.1f %12.1f %9s %s\n", name.c_str(), csa ? "CSA" : "HCA", v.name, med,
                            useful / med * 1e-9, padded / med * 1e-9, "", bits.c_str());
                if (jl)
                    std::fprintf(jl,
                                 "{\"case\":\"%s\",\"kind\":\"%s\",\"kernel\":\"%s\",\"rows\":%lld,\"ms\":%.4f,\"useful_flop\":%.6e,"
                                 "\"padded_flop\":%.6e,\"tflops\":%.2f,\"tflops_padded\":%.2f,\"bits\":\"%s\",\"reps\":%lld}\n",
                                 name.c_str(), csa ? "CSA" : "HCA", v.name, static_cast<long long>(rows), med, useful, padded,
                                 useful / med * 1e-9, padded / med * 1e-9, bits.c_str(), static_cast<long long>(reps));
            }
            if (ring_ms > 0)
                for (const auto& [n, t] : times) std::printf("%-14s %-4s %-6s speedup vs ring %.3fx\n", name.c_str(), csa ? "CSA" : "HCA", n.c_str(), ring_ms / t);
        }
    }
    if (jl) std::fclose(jl);
    return 0;
}
