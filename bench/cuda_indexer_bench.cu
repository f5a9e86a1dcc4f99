// SPDX-License-Identifier: Apache-2.0
// The lightning indexer (scores + top-512) at the V4-Flash shape (64 heads x 128, ratio 4) on one GPU:
// a prefill of T tokens from position 0 over paged keys (64 per page, as the device state holds them)
// and decode batches (one row per sequence, every row at context C), each form timed with CUDA
// events (median of the repeats) in its launch variants:
//   scores: per-row reference kernel (indexer_tc.cuh), 4 rows per block (indexer_tc_rows.cuh), the GEMM
//           kernel (indexer_tc_gemm.cuh) with all warps in step and staggered (the default), each
//           without the top-k
//   full:   scores + top-k (topk.cuh): 4 rows per block (the launch default before the GEMM kernel),
//           the GEMM kernel (the launch default now), decode's form
// and a check that every variant gives the same scores and picks bit for bit (exit code 1 if not).
// Then the top-k alone (cuda::topk on the scores just computed, lengths = the visible keys) in its
// variants (TopkParams::variant: the 4-pass 8-bit radix select before, adaptive 11/12-bit digits, the
// default adaptive 8-bit), with the same bit-for-bit check, and on synthetic rows: long rows (bf16-valued normal scores,
// --long rows x keys) and the sampler's shape (f32 normal logits over the V4 vocabulary, top-50, --vocab
// batches).
// Inputs: FP4-like values (e2m1 magnitudes times a power of two per 32, bf16-exact, as after the
// Hadamard+FP4 step), bf16 head weights; never zeros.
//   cuda_indexer_bench [--prefill 4096,8192,16384] [--decode 32,128] [--context 4096] [--reps 10] [--out FILE.jsonl]
//                      [--long 256x16384] [--vocab 32,128] [--topk-only]
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "bench_util.h"
#include "backends/cuda/cuda_backend.h"

namespace {

using deepinfer::bench::parse_list;

using namespace deepinfer;

#define CK(x)                                                                                  \
    do {                                                                                       \
        const cudaError_t e_ = (x);                                                            \
        if (e_ != cudaSuccess) {                                                               \
            std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            std::exit(2);                                                                      \
        }                                                                                      \
    } while (0)

constexpr int64_t kHeads = 64, kDim = 128, kRatio = 4, kTopk = 512, kPerPage = 64;

struct Rng {
    uint64_t s;
    uint32_t next() {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        return static_cast<uint32_t>(s >> 16);
    }
};

// n rows of kDim FP4-like values: sign * e2m1 magnitude * 2^e, e per 32 values in [-9, -5] (|x| < 0.2).
std::vector<float> fp4_rows(int64_t n, uint64_t seed) {
    static const float mags[8] = {0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, 1.f};
    Rng r{seed * 0x9E3779B97F4A7C15ull + 1};
    std::vector<float> v(static_cast<size_t>(n * kDim));
    for (size_t b = 0; b < v.size(); b += 32) {
        const float scale = std::ldexp(1.0f, -5 - static_cast<int>(r.next() % 5));
        for (size_t i = b; i < b + 32; ++i) {
            const uint32_t x = r.next();
            v[i] = ((x & 8u) ? -1.f : 1.f) * mags[x & 7u] * scale;
        }
    }
    return v;
}

float bf16_round(float x) {
    uint32_t u;
    std::memcpy(&u, &x, 4);
    u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
    std::memcpy(&x, &u, 4);
    return x;
}

template <class T>
T* upload(const std::vector<T>& v) {
    T* d = nullptr;
    CK(cudaMalloc(&d, std::max<size_t>(v.size(), 1) * sizeof(T)));
    if (!v.empty()) CK(cudaMemcpy(d, v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
    return d;
}

struct Variant {
    const char* name;
    int64_t per_block;
    bool scores_only, lockstep = false;
};

struct Problem {
    std::string form;  // "prefill" or "decode"
    int64_t rows, max_visible, seg_rows;
    double flops, q_bytes, score_bytes;
    cuda::IndexerParams base;
};

FILE* g_out = nullptr;
int g_reps = 10;
bool g_ok = true;

// Median milliseconds of g_reps timed launches of `launch` (after two warm-up launches), CUDA events around each.
template <class Launch>
double median_ms(const Launch& launch) {
    for (int i = 0; i < 2; ++i) launch();
    CK(cudaDeviceSynchronize());
    std::vector<float> t;
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    for (int i = 0; i < g_reps; ++i) {
        CK(cudaEventRecord(a));
        launch();
        CK(cudaEventRecord(b));
        CK(cudaEventSynchronize(b));
        float ms = 0;
        CK(cudaEventElapsedTime(&ms, a, b));
        t.push_back(ms);
    }
    CK(cudaEventDestroy(a));
    CK(cudaEventDestroy(b));
    std::sort(t.begin(), t.end());
    return t[t.size() / 2];
}

double time_ms(const cuda::IndexerParams& p) {
    return median_ms([&] { cuda::indexer_topk(p, cuda::Stream{}); });
}

void run_problem(const Problem& pr, const std::vector<Variant>& variants, const std::vector<int64_t>& visible) {
    const size_t ns = static_cast<size_t>(pr.rows * pr.max_visible), nk = static_cast<size_t>(pr.rows * kTopk);
    std::vector<float> ref_scores;
    std::vector<int32_t> ref_sel;
    for (const Variant& v : variants) {
        cuda::IndexerParams p = pr.base;
        p.tc_rows_per_block = v.per_block;
        p.scores_only = v.scores_only;
        p.gemm_lockstep = v.lockstep;
        CK(cudaMemset(p.scores, 0xFF, ns * 4));  // NaN poison: unwritten scores show
        CK(cudaMemset(p.selected, 0x7F, nk * 4));
        const double ms = time_ms(p);
        std::vector<float> sc(ns);
        std::vector<int32_t> sel(nk);
        CK(cudaMemcpy(sc.data(), p.scores, ns * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(sel.data(), p.selected, nk * 4, cudaMemcpyDeviceToHost));
        int64_t bad = 0;
        if (ref_scores.empty()) {
            ref_scores = sc;
        } else {
            for (int64_t r = 0; r < pr.rows; ++r)
                bad += std::memcmp(&sc[size_t(r * pr.max_visible)], &ref_scores[size_t(r * pr.max_visible)],
                                   size_t(visible[size_t(r)]) * 4) != 0;
        }
        int64_t bad_sel = -1;
        if (!v.scores_only) {
            if (ref_sel.empty()) ref_sel = sel;
            bad_sel = 0;
            for (int64_t r = 0; r < pr.rows; ++r)
                bad_sel += std::memcmp(&sel[size_t(r * kTopk)], &ref_sel[size_t(r * kTopk)], size_t(kTopk) * 4) != 0;
        }
        if (bad != 0 || bad_sel > 0) g_ok = false;
        std::printf("%-8s rows %6lld keys<=%5lld  %-34s %9.3f ms  %7.1f TFLOP/s  rows differing: scores %lld picks %lld\n",
                    pr.form.c_str(), static_cast<long long>(pr.rows), static_cast<long long>(pr.max_visible), v.name, ms,
                    pr.flops / ms * 1e-9, static_cast<long long>(bad), static_cast<long long>(bad_sel));
        if (g_out)
            std::fprintf(g_out,
                         "{\"form\":\"%s\",\"rows\":%lld,\"max_visible\":%lld,\"variant\":\"%s\",\"ms\":%.5f,\"flops\":%.6g,"
                         "\"q_bytes\":%.6g,\"score_bytes\":%.6g,\"tflops\":%.2f,\"rows_differing_scores\":%lld,"
                         "\"rows_differing_picks\":%lld}\n",
                         pr.form.c_str(), static_cast<long long>(pr.rows), static_cast<long long>(pr.max_visible), v.name, ms,
                         pr.flops, pr.q_bytes, pr.score_bytes, pr.flops / ms * 1e-9, static_cast<long long>(bad),
                         static_cast<long long>(bad_sel));
    }
}

double time_topk_ms(const cuda::TopkParams& p) {
    return median_ms([&] { cuda::topk(p, cuda::Stream{}); });
}

// The top-k alone over rows of `scores` (ld floats apart, lengths[r] long) in every variant; picks compared
// with the first variant's (the kernel before).
void run_topk(const std::string& form, const float* scores, int64_t ld, const std::vector<int64_t>& lengths, int64_t k,
              int32_t* d_out) {
    const int64_t rows = int64_t(lengths.size());
    std::vector<int32_t> len32(lengths.begin(), lengths.end());
    int32_t* d_len = upload(len32);
    double bytes = 0;
    for (int64_t l : lengths) bytes += 4.0 * double(l);
    struct V {
        const char* name;
        int variant;
    };
    const V vs[] = {{"topk: 4-pass radix8 (before)", 1}, {"topk: adaptive 11-bit (sampler)", 2}, {"topk: adaptive 12-bit", 3},
                    {"topk: default 8-bit (after)", 0}};
    std::vector<int32_t> ref;
    double before_ms = 0;
    for (const V& v : vs) {
        const size_t nk = size_t(rows * k);
        CK(cudaMemset(d_out, 0x7F, nk * 4));
        const cuda::TopkParams p{.scores = scores, .ld = ld, .lengths = d_len, .n = ld, .rows = rows, .k = k, .out = d_out,
                                 .variant = v.variant};
        const double ms = time_topk_ms(p);
        if (v.variant == 1) before_ms = ms;
        std::vector<int32_t> sel(nk);
        CK(cudaMemcpy(sel.data(), d_out, nk * 4, cudaMemcpyDeviceToHost));
        int64_t bad = 0;
        if (ref.empty()) ref = sel;
        else
            for (int64_t r = 0; r < rows; ++r) bad += std::memcmp(&sel[size_t(r * k)], &ref[size_t(r * k)], size_t(k) * 4) != 0;
        if (bad != 0) g_ok = false;
        std::printf("%-8s rows %6lld keys<=%6lld k %4lld %-30s %9.4f ms  %7.1f GB/s  x%.2f of before  rows differing: %lld\n",
                    form.c_str(), static_cast<long long>(rows), static_cast<long long>(ld), static_cast<long long>(k), v.name, ms,
                    bytes / ms * 1e-6, ms / before_ms, static_cast<long long>(bad));
        if (g_out)
            std::fprintf(g_out,
                         "{\"form\":\"%s\",\"rows\":%lld,\"max_visible\":%lld,\"k\":%lld,\"variant\":\"%s\",\"ms\":%.5f,"
                         "\"score_bytes\":%.6g,\"gbps\":%.1f,\"vs_before\":%.4f,\"rows_differing_picks\":%lld}\n",
                         form.c_str(), static_cast<long long>(rows), static_cast<long long>(ld), static_cast<long long>(k), v.name, ms,
                         bytes, bytes / ms * 1e-6, ms / before_ms, static_cast<long long>(bad));
    }
    CK(cudaFree(d_len));
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int64_t> prefills = {4096, 8192, 16384}, decodes = {32, 128};
    int64_t context = 4096;
    std::string out;
    int64_t long_rows = 256, long_keys = 16384;
    std::vector<int64_t> vocabs = {32, 128};
    bool topk_only = false;
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        auto next = [&]() { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
        if (a == "--prefill") prefills = parse_list(next());
        else if (a == "--decode") decodes = parse_list(next());
        else if (a == "--context") context = std::stoll(next());
        else if (a == "--reps") g_reps = std::stoi(next());
        else if (a == "--out") out = next();
        else if (a == "--long") {
            const std::string v = next();
            const size_t x = v.find('x');
            long_rows = std::stoll(v.substr(0, x));
            long_keys = x == std::string::npos ? 0 : std::stoll(v.substr(x + 1));
        } else if (a == "--vocab") vocabs = parse_list(next());
        else if (a == "--topk-only") topk_only = true;
        else {
            std::fprintf(stderr, "usage: cuda_indexer_bench [--prefill 4096,8192,16384] [--decode 32,128] [--context 4096] "
                                 "[--reps 10] [--out FILE.jsonl] [--long 256x16384] [--vocab 32,128] [--topk-only]\n");
            return 2;
        }
    }
    if (cuda::device_count() == 0) {
        std::fprintf(stderr, "no CUDA device\n");
        return 0;
    }
    std::printf("%s\n", cuda::device_description(0).c_str());
    if (!out.empty()) g_out = std::fopen(out.c_str(), "w");
    int64_t max_t = context;
    for (int64_t t : prefills) max_t = std::max(max_t, t);
    int64_t max_rows = 0;
    for (int64_t t : prefills) max_rows = std::max(max_rows, t);
    for (int64_t b : decodes) max_rows = std::max(max_rows, b);
    // Keys of one sequence of max_t positions in pages of 64 (a page: [offset floats][64 keys x 128]).
    const int64_t nkeys = max_t / kRatio, pages = (nkeys + kPerPage - 1) / kPerPage, offset = 4096;
    const int64_t page_floats = offset + kPerPage * kDim;
    const std::vector<float> keys = fp4_rows(nkeys, 1);
    std::vector<float> paged(static_cast<size_t>(pages * page_floats), 0.25f);
    for (int64_t i = 0; i < nkeys; ++i)
        std::copy_n(keys.begin() + i * kDim, kDim, paged.begin() + (i / kPerPage) * page_floats + offset + (i % kPerPage) * kDim);
    float* d_paged = upload(paged);
    std::vector<float*> table(static_cast<size_t>(pages));
    for (int64_t k = 0; k < pages; ++k) table[size_t(k)] = d_paged + k * page_floats;
    float** d_table = upload(table);
    cuda::DeviceSegment seg;
    seg.pages = d_table;
    seg.entries_per_page = kPerPage;
    seg.idx_offset = offset;
    const std::vector<float> q = fp4_rows(max_rows * kHeads, 2);
    std::vector<float> w(static_cast<size_t>(max_rows * kHeads));
    Rng r{3};
    for (float& x : w) x = bf16_round(static_cast<float>(static_cast<int>(r.next() % 2001) - 1000) / 400.0f + 0.01f);
    float* d_q = upload(q);
    float* d_w = upload(w);
    float* d_scores = nullptr;
    int32_t *d_sel = nullptr, *d_cnt = nullptr;
    CK(cudaMalloc(&d_scores, size_t(max_rows) * size_t(std::max<int64_t>(nkeys, 1)) * 4));
    CK(cudaMalloc(&d_sel, size_t(max_rows * kTopk) * 4));
    CK(cudaMalloc(&d_cnt, size_t(max_rows) * 4));

    auto problem = [&](const std::string& form, const std::vector<int32_t>& pos, const std::vector<int32_t>& rs, int64_t nseg,
                       int64_t seg_rows, int32_t** d_pos, int32_t** d_rs, cuda::DeviceSegment** d_seg, std::vector<int64_t>* vis) {
        Problem pr;
        pr.form = form;
        pr.rows = int64_t(pos.size());
        pr.seg_rows = seg_rows;
        pr.max_visible = 0;
        double keys_total = 0;
        vis->clear();
        for (int32_t x : pos) {
            vis->push_back((x + 1) / kRatio);
            pr.max_visible = std::max<int64_t>(pr.max_visible, vis->back());
            keys_total += double(vis->back());
        }
        pr.flops = 2.0 * kHeads * kDim * keys_total;
        pr.q_bytes = 4.0 * double(pr.rows) * kHeads * kDim;
        pr.score_bytes = 4.0 * keys_total;
        *d_pos = upload(pos);
        *d_rs = upload(rs);
        *d_seg = upload(std::vector<cuda::DeviceSegment>(size_t(nseg), seg));
        pr.base = {.segments = *d_seg, .row_segment = *d_rs, .positions = *d_pos, .rows = pr.rows, .q = d_q, .weights = d_w,
                   .heads = kHeads, .head_dim = kDim, .ratio = kRatio, .topk = kTopk, .max_visible = pr.max_visible,
                   .scores = d_scores, .selected = d_sel, .num_selected = d_cnt, .official = true, .tensor_cores = true,
                   .max_segment_rows = seg_rows};
        return pr;
    };

    const std::vector<Variant> prefill_variants = {
        {"scores: 4 rows/block (before)", 4, true},
        {"scores: GEMM, warps in step", 8, true, true},
        {"scores: GEMM 8 rows/block (after)", 8, true},
        {"full: 4 rows + topk (before)", 4, false},
        {"full: GEMM + topk (after)", 0, false},
    };
    for (int64_t T : prefills) {
        std::vector<int32_t> pos(static_cast<size_t>(T)), rs(static_cast<size_t>(T), 0);
        for (int64_t t = 0; t < T; ++t) pos[size_t(t)] = int32_t(t);
        int32_t *dp, *dr;
        cuda::DeviceSegment* ds;
        std::vector<int64_t> vis;
        const Problem pr = problem("prefill", pos, rs, 1, T, &dp, &dr, &ds, &vis);
        std::vector<Variant> vs = prefill_variants;
        if (T <= 4096) vs.insert(vs.begin() + 1, Variant{"scores: per-row reference kernel", -1, true});
        if (topk_only) vs = {Variant{"scores: GEMM 8 rows/block (after)", 8, true}};
        run_problem(pr, vs, vis);
        run_topk("prefill", d_scores, pr.max_visible, vis, kTopk, d_sel);
        CK(cudaFree(dp));
        CK(cudaFree(dr));
        CK(cudaFree(ds));
    }
    const std::vector<Variant> decode_variants = {{"full: decode default (1 row/block)", 0, false}};
    for (int64_t B : decodes) {
        std::vector<int32_t> pos(static_cast<size_t>(B)), rs(static_cast<size_t>(B));
        for (int64_t b = 0; b < B; ++b) {
            pos[size_t(b)] = int32_t(context - 1);
            rs[size_t(b)] = int32_t(b);
        }
        int32_t *dp, *dr;
        cuda::DeviceSegment* ds;
        std::vector<int64_t> vis;
        const Problem pr = problem("decode", pos, rs, B, 1, &dp, &dr, &ds, &vis);
        run_problem(pr, decode_variants, vis);
        run_topk("decode", d_scores, pr.max_visible, vis, kTopk, d_sel);
        CK(cudaFree(dp));
        CK(cudaFree(dr));
        CK(cudaFree(ds));
    }
    // Synthetic rows: long rows of bf16-valued scores, and the sampler's top-50 over f32 logits.
    auto synthetic = [&](const std::string& form, int64_t rows, int64_t n, int64_t k, bool bf16_valued) {
        if (rows <= 0 || n <= 0) return;
        Rng g{uint64_t(n) * 7 + uint64_t(rows)};
        std::vector<float> v(size_t(rows * n));
        for (float& x : v) {  // sum of 4 uniforms: roughly normal, both signs
            float u = 0;
            for (int j = 0; j < 4; ++j) u += float(g.next() % 65536) / 65536.0f - 0.5f;
            x = bf16_valued ? bf16_round(u * 8.0f) : u * 8.0f;
        }
        float* d = upload(v);
        int32_t* o = nullptr;
        CK(cudaMalloc(&o, size_t(rows * k) * 4));
        run_topk(form, d, n, std::vector<int64_t>(size_t(rows), n), k, o);
        CK(cudaFree(d));
        CK(cudaFree(o));
    };
    synthetic("long", long_rows, long_keys, kTopk, true);
    for (int64_t b : vocabs) synthetic("vocab", b, 129280, 50, false);
    if (g_out) std::fclose(g_out);
    std::printf("%s\n", g_ok ? "all variants bit-identical" : "VARIANTS DIFFER");
    return g_ok ? 0 : 1;
}
