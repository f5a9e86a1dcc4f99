// SPDX-License-Identifier: Apache-2.0
// Every CUDA op of the V4 forward against the CPU reference over a table of shapes including the
// real V4-Flash ones (hidden 4096, 64 heads x 512, q_lora 1024, indexer 64 x 128 top-512, window 128,
// HC 4 x 4096, 256 experts top-6, moe width 2048). Tolerances per op: ops whose arithmetic has no
// transcendental function (GEMMs in every weight format, act_quant, norms, RoPE, QAT simulations,
// HC post, indexer scores, top-k) must be bit-identical; so must the ops with exp/log1p/sigmoid (HC
// pre/head, router, attention softmax): both backends round those once from double precision
// (cpu::exp_f32, dev::exp_f32), which agrees except in vanishingly rare cases. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "backends/cpu/hyper_connection.h"
#include "backends/cpu/linear.h"
#include "backends/cpu/primitives.h"
#include "backends/cuda/attention_tc.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/gemm_fast.h"
#include "ops/cuda_test_util.h"
#include "backends/cuda/model/cuda_weights.h"
#include "deepinfer/dequant.h"
#include "deepinfer/float_formats.h"
#include "engine/sampler.h"
#include "engine/speculative/verify.h"
#include "model/attention_block.h"
#include "model/compressor.h"
#include "model/state.h"

namespace deepinfer {
namespace {

using cuda::DeviceBuffer;
using cuda::Stream;
using test::Dev;
using test::PagedRowsCopy;
using test::randn;

class CudaOps : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};


std::vector<float> bf16_values(std::vector<float> v) {
    for (float& x : v) x = cpu::round_bf16(x);
    return v;
}
std::vector<uint8_t> random_bytes(size_t n, uint32_t seed, uint8_t mask = 0xFF) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (uint8_t& b : v) b = static_cast<uint8_t>(rng()) & mask;
    return v;
}

void expect_bits_equal(const std::vector<float>& ref, const std::vector<float>& got, const std::string& what) {
    ASSERT_EQ(ref.size(), got.size()) << what;
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < ref.size(); ++i)
        if (std::memcmp(&ref[i], &got[i], 4) != 0 && !(std::isnan(ref[i]) && std::isnan(got[i]))) {
            if (bad++ == 0) first = i;
        }
    EXPECT_EQ(bad, 0u) << what << ": " << bad << " of " << ref.size() << " differ; first at " << first << ": "
                       << ref[first] << " vs " << got[first];
}

// A random weight in a stored format, on host (CPU LinearWeight) and device (DeviceLinear).
struct TestWeight {
    std::vector<uint8_t> w, s;
    cpu::LinearWeight host;
    std::unique_ptr<DeviceBuffer> dw, ds;
    cuda::DeviceLinear dev;
    TestWeight(cpu::WeightFormat f, int64_t out, int64_t in, uint32_t seed) {
        DType wt = DType::kF32, st = DType::kF8E8M0;
        Shape wshape{out, in}, sshape;
        switch (f) {
            case cpu::WeightFormat::kF32: {
                auto v = randn(size_t(out * in), seed, 1.0f / std::sqrt(float(in)));
                w.resize(v.size() * 4);
                std::memcpy(w.data(), v.data(), w.size());
                break;
            }
            case cpu::WeightFormat::kBF16: {
                auto v = randn(size_t(out * in), seed, 1.0f / std::sqrt(float(in)));
                w.resize(v.size() * 2);
                for (size_t i = 0; i < v.size(); ++i) {
                    const uint16_t b = f32_to_bf16(v[i]);
                    std::memcpy(w.data() + 2 * i, &b, 2);
                }
                wt = DType::kBF16;
                break;
            }
            case cpu::WeightFormat::kFp8Block:
                w = random_bytes(size_t(out * in), seed);
                for (uint8_t& b : w)
                    if ((b & 0x7F) == 0x7F) b = 0x3F;  // no NaN codes in weights
                sshape = Shape{(out + 127) / 128, (in + 127) / 128};
                s = random_bytes(size_t(sshape.numel()), seed + 1, 0x07);
                for (uint8_t& b : s) b = static_cast<uint8_t>(b + 118);  // 2^-9 .. 2^-2
                wt = DType::kF8E4M3;
                break;
            case cpu::WeightFormat::kFp4:
                w = random_bytes(size_t(out * in / 2), seed);
                wshape = Shape{out, in / 2};
                sshape = Shape{out, in / 32};
                s = random_bytes(size_t(sshape.numel()), seed + 1, 0x03);
                for (uint8_t& b : s) b = static_cast<uint8_t>(b + 122);
                wt = DType::kU8;
                break;
            default: break;
        }
        TensorView wv(w.data(), wt, wshape), sv = s.empty() ? TensorView() : TensorView(s.data(), st, sshape);
        host = cpu::make_linear_weight(wv, sv, out, in);
        dw = std::make_unique<DeviceBuffer>(w.size());
        dw->copy_from_host(w.data(), w.size());
        if (!s.empty()) {
            ds = std::make_unique<DeviceBuffer>(s.size());
            ds->copy_from_host(s.data(), s.size());
        }
        dev = cuda::device_linear_like(host, dw->data(), ds ? ds->data() : nullptr);
    }
};

// ---- GEMM -------------------------------------------------------------------------------------

struct LinearCase {
    cpu::WeightFormat format;
    int64_t rows, out, in;
    bool quantize, round;
};

TEST_F(CudaOps, LinearBitIdenticalToCpuInEveryFormat) {
    const LinearCase cases[] = {
        {cpu::WeightFormat::kF32, 3, 300, 203, false, false},     // odd K: the tail path
        {cpu::WeightFormat::kBF16, 5, 256, 4096, false, true},     // router / weights_proj
        {cpu::WeightFormat::kFp8Block, 1, 1024, 4096, true, true},  // wq_a, decode
        {cpu::WeightFormat::kFp8Block, 7, 32768, 1024, true, true},  // wq_b
        {cpu::WeightFormat::kFp8Block, 4, 4096, 8192, true, true},  // wo_b
        {cpu::WeightFormat::kFp8Block, 3, 1024, 4096, false, true},  // wo_a group (bf16 GEMM on FP8 storage)
        {cpu::WeightFormat::kFp4, 6, 2048, 4096, true, true},     // expert w1/w3
        {cpu::WeightFormat::kFp4, 6, 4096, 2048, true, true},     // expert w2
        {cpu::WeightFormat::kF32, 9, 1024, 4096, false, false},   // exact numerics
        // The staged kernel's tiles (1 row x 16 outputs up to 2 rows, else 4 x 8): single rows, outputs
        // and rows not multiples of a tile, K not a multiple of its 256-wide chunk, decode batches.
        {cpu::WeightFormat::kBF16, 1, 256, 4096, false, true},     // router, decode batch 1
        {cpu::WeightFormat::kBF16, 2, 1000, 264, false, false},
        {cpu::WeightFormat::kF32, 1, 25, 16384, false, false},     // mHC mixing logits
        {cpu::WeightFormat::kF32, 64, 513, 1032, false, true},
        {cpu::WeightFormat::kBF16, 131, 72, 512, false, false},
        // K too wide to stage whole: the chunked one-row tiles (4 and 16 outputs).
        {cpu::WeightFormat::kF32, 1, 20, 26624, false, false},
        {cpu::WeightFormat::kF32, 2, 200, 26624, false, true},
    };
    uint32_t seed = 10;
    for (const LinearCase& c : cases) {
        TestWeight w(c.format, c.out, c.in, seed++);
        auto x = bf16_values(randn(size_t(c.rows * c.in), seed++));
        std::vector<float> ref(size_t(c.rows * c.out));
        cpu::linear({.x = TensorView(x.data(), DType::kF32, {c.rows, c.in}), .weight = &w.host,
                     .y = TensorView(ref.data(), DType::kF32, {c.rows, c.out}), .quantize_activations = c.quantize,
                     .round_output_bf16 = c.round});
        Dev<float> dx(x), dq(x.size()), dy(ref.size());
        const float* xin = dx.ptr();
        if (c.quantize) {
            cuda::act_quant_dequant({.x = dx.ptr(), .out = dq.ptr(), .rows = c.rows, .cols = c.in}, Stream{});
            xin = dq.ptr();
        }
        cuda::linear({.x = xin, .x_ld = c.in, .weight = w.dev, .y = dy.ptr(), .y_ld = c.out, .rows = c.rows,
                      .round_output_bf16 = c.round},
                     Stream{});
        expect_bits_equal(ref, dy.host(ref.size()), "linear " + std::to_string(c.out) + "x" + std::to_string(c.in));
    }
}

TEST_F(CudaOps, GroupedExpertGemmBitIdenticalToPerExpertCpu) {
    // 8 FP4 experts of the real shape; 12 (token, expert) rows gathered from 5 tokens.
    const int64_t E = 8, I = 2048, D = 4096, T = 5, NR = 12;
    std::vector<std::unique_ptr<TestWeight>> ws;
    std::vector<cuda::DeviceLinear> descs;
    for (int64_t e = 0; e < E; ++e) {
        ws.push_back(std::make_unique<TestWeight>(cpu::WeightFormat::kFp4, I, D, 100 + uint32_t(e)));
        descs.push_back(ws.back()->dev);
    }
    auto x = bf16_values(randn(size_t(T * D), 5));
    std::vector<int32_t> src(NR), expert(NR);
    std::mt19937 rng(9);
    for (int64_t r = 0; r < NR; ++r) {
        src[size_t(r)] = int32_t(rng() % T);
        expert[size_t(r)] = int32_t(rng() % E);
    }
    Dev<float> dx(x), dy(size_t(NR * I));
    Dev<cuda::DeviceLinear> dd(descs);
    Dev<int32_t> dsrc(src), dexp(expert);
    cuda::linear({.x = dx.ptr(), .x_ld = D, .row_src = dsrc.ptr(), .weight = descs[0], .experts = dd.ptr(),
                  .row_expert = dexp.ptr(), .y = dy.ptr(), .y_ld = I, .rows = NR, .round_output_bf16 = true},
                 Stream{});
    const auto got = dy.host(size_t(NR * I));
    std::vector<float> ref(size_t(NR * I));
    for (int64_t r = 0; r < NR; ++r)
        cpu::linear({.x = TensorView(x.data() + src[size_t(r)] * D, DType::kF32, {1, D}),
                     .weight = &ws[size_t(expert[size_t(r)])]->host,
                     .y = TensorView(ref.data() + r * I, DType::kF32, {1, I}), .round_output_bf16 = true});
    expect_bits_equal(ref, got, "grouped expert GEMM");
}

TEST_F(CudaOps, GroupRowTablesOfTheGroupedWoA) {
    // 8 groups of 5 rows (and 1 row, decode): grouped row g * rows + s is row s of group g, which is row
    // s * groups + g of the [rows * groups, width] view; group g starts at g * rows.
    for (int64_t rows : {int64_t(5), int64_t(1)}) {
        const int64_t groups = 8;
        Dev<int32_t> doff(static_cast<size_t>(groups + 1)), drows(static_cast<size_t>(groups * rows));
        cuda::group_row_tables({.groups = groups, .rows = rows, .offsets = doff.ptr(), .rows_of = drows.ptr()}, Stream{});
        const auto off = doff.host(size_t(groups + 1)), rows_of = drows.host(size_t(groups * rows));
        for (int64_t g = 0; g <= groups; ++g) EXPECT_EQ(off[size_t(g)], g * rows) << g;
        for (int64_t g = 0; g < groups; ++g)
            for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(rows_of[size_t(g * rows + r)], r * groups + g) << g << " " << r;
    }
}

TEST_F(CudaOps, PermuteIsAStableCountingSortByExpert) {
    // Pairs (token, slot) grouped by expert, each expert's pairs in pair order, with the expert offsets:
    // a prefill of 4096 tokens x top-6 of 256 experts (skewed: a quarter of the picks on 3 experts,
    // 24 tiles of the kernel), a decode batch of 5 rows, and 2000 tokens x top-8 of 384 experts.
    struct Case { int64_t rows, k, experts; };
    for (const Case c : {Case{4096, 6, 256}, Case{5, 6, 256}, Case{2000, 8, 384}}) {
        std::mt19937 rng(uint32_t(c.rows * 31 + c.experts));
        std::vector<int32_t> ids(size_t(c.rows * c.k));
        for (auto& e : ids) e = rng() % 4 == 0 ? int32_t(rng() % 3) : int32_t(rng() % uint32_t(c.experts));
        Dev<int32_t> dids(ids), dsrc(ids.size()), dslot(ids.size()), dexp(ids.size()), doff(size_t(c.experts + 1));
        cuda::permute({.ids = dids.ptr(), .rows = c.rows, .top_k = c.k, .experts = c.experts, .perm_src = dsrc.ptr(),
                       .perm_slot = dslot.ptr(), .perm_expert = dexp.ptr(), .expert_offsets = doff.ptr()},
                      Stream{});
        std::vector<int32_t> want_slot, want_off;
        for (int64_t e = 0; e < c.experts; ++e) {
            want_off.push_back(int32_t(want_slot.size()));
            for (size_t i = 0; i < ids.size(); ++i)
                if (ids[i] == e) want_slot.push_back(int32_t(i));
        }
        want_off.push_back(int32_t(want_slot.size()));
        const auto slot = dslot.host(ids.size()), src = dsrc.host(ids.size()), ex = dexp.host(ids.size());
        EXPECT_EQ(doff.host(want_off.size()), want_off) << c.rows << " rows";
        ASSERT_EQ(slot, want_slot) << c.rows << " rows";
        for (size_t j = 0; j < slot.size(); ++j) {
            ASSERT_EQ(src[j], slot[j] / c.k) << j;
            ASSERT_EQ(ex[j], ids[size_t(slot[j])]) << j;
        }
    }
}

TEST_F(CudaOps, MoeCombineInAscendingExpertOrder) {
    // Per token: the slots' outputs in ascending expert order (scaled by their weights in exact mode),
    // then the shared expert, then bf16 in official numerics: moe_block.cpp's loop, element by element.
    // Hidden 4096 (the real width): 3 tokens spread each row over many blocks, 300 tokens give one
    // block a row; every row must be the same bits either way.
    // K = 6: the float4 kernel (up to 8 slots); K = 10: the scalar one.
    const int64_t D = 4096, E = 256;
    for (const int64_t K : {int64_t(6), int64_t(10)})
    for (bool exact : {false, true}) {
        for (int64_t T : {int64_t(3), int64_t(300)}) {
            std::mt19937 rng(23);
            std::vector<int32_t> ids(size_t(T * K));
            for (int64_t t = 0; t < T; ++t) {  // distinct experts per token, in random slot order
                std::vector<int32_t> all(static_cast<size_t>(E));
                std::iota(all.begin(), all.end(), 0);
                std::shuffle(all.begin(), all.end(), rng);
                std::copy_n(all.begin(), K, ids.begin() + t * K);
            }
            const auto y = randn(size_t(T * K * D), 24), shared = randn(size_t(T * D), 25), w = randn(size_t(T * K), 26);
            std::vector<float> want(size_t(T * D));
            for (int64_t t = 0; t < T; ++t) {
                std::vector<int64_t> order(static_cast<size_t>(K));
                std::iota(order.begin(), order.end(), 0);
                std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return ids[size_t(t * K + a)] < ids[size_t(t * K + b)]; });
                for (int64_t d = 0; d < D; ++d) {
                    float acc = 0;
                    for (int64_t k : order) {
                        const size_t slot = size_t(t * K + k);
                        acc += exact ? y[slot * size_t(D) + size_t(d)] * w[slot] : y[slot * size_t(D) + size_t(d)];
                    }
                    const float v = acc + shared[size_t(t * D + d)];
                    want[size_t(t * D + d)] = exact ? v : cpu::round_bf16(v);
                }
            }
            Dev<float> dy(y), dshared(shared), dw(w), dout(want.size());
            Dev<int32_t> dids(ids);
            cuda::moe_combine({.expert_out = dy.ptr(), .ids = dids.ptr(), .weights = dw.ptr(), .shared = dshared.ptr(),
                               .out = dout.ptr(), .rows = T, .top_k = K, .hidden = D, .scale_outputs = exact,
                               .round_bf16 = !exact},
                              Stream{});
            expect_bits_equal(want, dout.host(want.size()),
                              std::string("moe_combine, ") + std::to_string(T) + " tokens, top-" + std::to_string(K) +
                                  (exact ? ", exact" : ", official"));
        }
    }
}

TEST_F(CudaOps, ExpertParallelPairMapsAndSkippedRows) {
    // Rank 1 of 4, 6 experts each (24 in all): the local ids of 300 random pairs, the combine's
    // source rows, and a grouped GEMM over local ids that skips the other ranks' pairs.
    const int32_t per_rank = 6, rank = 1, experts = 24;
    const int64_t n = 300;
    std::vector<int32_t> ids(n);
    std::mt19937 rng(17);
    for (int32_t& e : ids) e = int32_t(rng() % experts);
    Dev<int32_t> dids(ids), dlocal(static_cast<size_t>(n)), dindex(static_cast<size_t>(n));
    cuda::expert_local_ids({.ids = dids.ptr(), .n = n, .first_expert = rank * per_rank, .experts_per_rank = per_rank,
                            .local_ids = dlocal.ptr()},
                           Stream{});
    cuda::expert_source_rows({.ids = dids.ptr(), .n = n, .experts_per_rank = per_rank, .index = dindex.ptr()}, Stream{});
    const auto local = dlocal.host(size_t(n)), index = dindex.host(size_t(n));
    for (int64_t i = 0; i < n; ++i) {
        const int32_t e = ids[size_t(i)];
        EXPECT_EQ(local[size_t(i)], e / per_rank == rank ? e - rank * per_rank : per_rank) << i;
        EXPECT_EQ(index[size_t(i)], (e / per_rank) * n + i) << i;
    }
    // Grouped FP8 GEMM over the first 40 pairs with their local ids: skipped rows keep their contents.
    const int64_t I = 256, D = 384, NR = 40;
    std::vector<std::unique_ptr<TestWeight>> ws;
    std::vector<cuda::DeviceLinear> descs;
    for (int32_t e = 0; e < per_rank; ++e) {
        ws.push_back(std::make_unique<TestWeight>(cpu::WeightFormat::kFp8Block, I, D, 300 + uint32_t(e)));
        descs.push_back(ws.back()->dev);
    }
    auto x = bf16_values(randn(size_t(NR * D), 6));
    std::vector<float> y0(size_t(NR * I), -7.25f);
    Dev<float> dx(x), dy(y0);
    Dev<cuda::DeviceLinear> dd(descs);
    cuda::linear({.x = dx.ptr(), .x_ld = D, .weight = descs[0], .experts = dd.ptr(), .row_expert = dlocal.ptr(),
                  .num_experts = per_rank, .y = dy.ptr(), .y_ld = I, .rows = NR},
                 Stream{});
    const auto got = dy.host(size_t(NR * I));
    int64_t computed = 0;
    for (int64_t r = 0; r < NR; ++r) {
        const int32_t e = local[size_t(r)];
        std::vector<float> ref(size_t(I), -7.25f);
        if (e < per_rank) {
            ++computed;
            cpu::linear({.x = TensorView(x.data() + r * D, DType::kF32, {1, D}), .weight = &ws[size_t(e)]->host,
                         .y = TensorView(ref.data(), DType::kF32, {1, I})});
        }
        expect_bits_equal(ref, std::vector<float>(got.begin() + r * I, got.begin() + (r + 1) * I),
                          "pair " + std::to_string(r) + (e < per_rank ? " (computed)" : " (skipped)"));
    }
    EXPECT_GT(computed, 0);
    EXPECT_LT(computed, NR);
}

// Every block size (1..128: 1 and 2 take the one-float-per-lane kernel, 4..128 the float4 one), widths whose
// element count is and is not a multiple of a warp's 128 (96 x 5 rows), out apart from x, in place, and
// out off 16-byte alignment (the scalar kernel): the CPU's quantize-dequantize bit for bit.
TEST_F(CudaOps, ActQuantBitIdentical) {
    for (int64_t block : {int64_t(128), int64_t(64), int64_t(32), int64_t(16), int64_t(8), int64_t(4), int64_t(2), int64_t(1)})
        for (int64_t cols : {int64_t(128), int64_t(4096), int64_t(8192), int64_t(96)}) {
            if (cols % block != 0) continue;
            const int64_t rows = cols == 96 ? 5 : 6;
            auto x = randn(size_t(rows * cols), uint32_t(cols + block), 3.0f);
            x[0] = 0.0f;  // an all-small block edge case below
            for (int64_t i = 0; i < 128 && cols > 128; ++i) x[size_t(128 + i)] = 1e-7f * float(i);
            x[size_t(cols + 5)] = 900.0f;  // a large element: the others of its block flush towards zero
            Buffer q(DType::kF8E4M3, {rows, cols}), s(DType::kF32, {rows, cols / block});
            act_quant({.x = TensorView(x.data(), DType::kF32, {rows, cols}), .q = q.view(), .scale = s.view(), .block = block});
            std::vector<float> ref(x.size());
            for (size_t i = 0; i < x.size(); ++i)
                ref[i] = e4m3_to_f32(static_cast<const uint8_t*>(q.data())[i]) *
                         s.view().data_as<const float>()[(int64_t(i) / cols) * (cols / block) + (int64_t(i) % cols) / block];
            const std::string what = "act_quant block " + std::to_string(block) + ", " + std::to_string(cols) + " cols";
            Dev<float> dx(x), dout(x.size());
            cuda::act_quant_dequant({.x = dx.ptr(), .out = dout.ptr(), .rows = rows, .cols = cols, .block = block}, Stream{});
            expect_bits_equal(ref, dout.host(x.size()), what);
            cuda::act_quant_dequant({.x = dx.ptr(), .out = dx.ptr(), .rows = rows, .cols = cols, .block = block}, Stream{});
            expect_bits_equal(ref, dx.host(x.size()), what + ", in place");
            // out one float off 16-byte alignment (the first row from its second block): the scalar kernel.
            if (cols == block) continue;
            Dev<float> dx1(x), dout1(x.size());
            const int64_t skip = block;  // keep whole blocks: the first block of the first row dropped
            cuda::act_quant_dequant({.x = dx1.ptr() + skip, .out = dout1.ptr() + 1, .rows = 1, .cols = cols - skip, .block = block},
                                    Stream{});
            const auto got1 = dout1.host(x.size());
            expect_bits_equal(std::vector<float>(ref.begin() + skip, ref.begin() + cols),
                              std::vector<float>(got1.begin() + 1, got1.begin() + cols - skip + 1), what + ", unaligned out");
        }
}

// ---- Norms, RoPE, QAT ---------------------------------------------------------------------------

TEST_F(CudaOps, RmsNormBitIdentical) {
    // Widths that move as float4 (multiples of 4) and one that does not (102); with and without a
    // weight; out apart from x and in place (the models normalize in place).
    for (int64_t n : {int64_t(512), int64_t(1024), int64_t(4096), int64_t(100), int64_t(102)}) {
        const int64_t rows = 5;
        auto x = bf16_values(randn(size_t(rows * n), uint32_t(n)));
        auto w = randn(size_t(n), 7);
        for (float& v : w) v = 1.0f + 0.1f * v;
        for (int variant = 0; variant < 3; ++variant) {
            const bool round = variant == 1, weighted = variant != 2, in_place = variant == 2;
            std::vector<float> ref(x.size());
            for (int64_t r = 0; r < rows; ++r) {
                cpu::rms_norm(x.data() + r * n, weighted ? w.data() : nullptr, 1e-6f, n, ref.data() + r * n);
                if (round) cpu::round_bf16_inplace(ref.data() + r * n, n);
            }
            Dev<float> dx(x), dw(w), dout(x.size());
            cuda::rms_norm({.x = dx.ptr(), .weight = weighted ? dw.ptr() : nullptr, .out = in_place ? dx.ptr() : dout.ptr(),
                            .rows = rows, .n = n, .eps = 1e-6f, .round_bf16 = round},
                           Stream{});
            expect_bits_equal(ref, (in_place ? dx : dout).host(x.size()),
                              "rms_norm " + std::to_string(n) + " variant " + std::to_string(variant));
        }
    }
}

// RmsNormParams::tree_sum's order on the host: 256 threads' strided partial sums, each warp's xor butterfly
// (every lane of a pair adds the same two values), the 8 warp sums in order; then rms_norm's scaling.
std::vector<float> rms_norm_tree_host(const float* x, const float* w, float eps, int64_t n, bool round) {
    std::vector<float> t(256, 0.0f);
    for (int64_t i = 0; i < n; ++i) t[size_t(i % 256)] = t[size_t(i % 256)] + x[i] * x[i];
    float d = 0.0f;
    for (int warp = 0; warp < 8; ++warp) {
        std::vector<float> v(t.begin() + warp * 32, t.begin() + warp * 32 + 32), next(32);
        for (int o = 16; o > 0; o /= 2) {
            for (int l = 0; l < 32; ++l) next[size_t(l)] = v[size_t(l)] + v[size_t(l ^ o)];
            v = next;
        }
        d = d + v[0];
    }
    const float r = 1.0f / std::sqrt(d / float(n) + eps);
    std::vector<float> out(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
        out[size_t(i)] = w ? w[i] * (x[i] * r) : x[i] * r;
        if (round) out[size_t(i)] = cpu::round_bf16(out[size_t(i)]);
    }
    return out;
}

TEST_F(CudaOps, RmsNormTreeSumInItsOrderAndNearTheReference) {
    // The fast mode's sum of squares (RmsNormParams::tree_sum) bit for bit against its order emulated on the
    // host, at the models' widths (in place, with the forms too), within 1e-4 of the CPU's rms_norm, and a
    // row's bits alone equal to the same row among others (batch invariance).
    for (int64_t n : {int64_t(512), int64_t(1024), int64_t(1280), int64_t(4096), int64_t(5120), int64_t(102)}) {
        const int64_t rows = 7;
        auto x = bf16_values(randn(size_t(rows * n), uint32_t(n) + 3, 3.0f));
        for (int64_t i = 0; i < n; i += 7) x[size_t(2 * n + i)] *= 1e3f;  // a row of mixed magnitudes
        auto w = randn(size_t(n), 8);
        for (float& v : w) v = 1.0f + 0.1f * v;
        for (const bool round : {false, true}) {
            std::vector<float> want(x.size()), ref(x.size());
            for (int64_t r = 0; r < rows; ++r) {
                const auto o = rms_norm_tree_host(x.data() + r * n, w.data(), 1e-6f, n, round);
                std::copy(o.begin(), o.end(), want.begin() + r * n);
                cpu::rms_norm(x.data() + r * n, w.data(), 1e-6f, n, ref.data() + r * n);
                if (round) cpu::round_bf16_inplace(ref.data() + r * n, n);
            }
            const bool forms = n % 128 == 0;
            Dev<float> dx(x), dw(w);
            Dev<uint8_t> q(x.size());
            Dev<float> qs(x.size() / 128 + 1);
            cuda::rms_norm({.x = dx.ptr(), .weight = dw.ptr(), .out = dx.ptr(), .rows = rows, .n = n, .eps = 1e-6f, .round_bf16 = round,
                            .q = forms ? q.ptr() : nullptr, .q_scale = forms ? qs.ptr() : nullptr, .tree_sum = true},
                           Stream{});
            const auto got = dx.host(x.size());
            const std::string what = "n " + std::to_string(n) + (round ? " bf16" : "");
            expect_bits_equal(want, got, "tree rms_norm in its order, " + what);
            for (size_t i = 0; i < got.size(); ++i)
                ASSERT_LE(std::fabs(got[i] - ref[i]), 1e-4f * std::fabs(ref[i]) + (round ? std::fabs(ref[i]) / 128 : 0.0f))
                    << what << " element " << i;
            Dev<float> alone(std::vector<float>(x.begin() + 2 * n, x.begin() + 3 * n));
            cuda::rms_norm({.x = alone.ptr(), .weight = dw.ptr(), .out = alone.ptr(), .rows = 1, .n = n, .eps = 1e-6f,
                            .round_bf16 = round, .tree_sum = true},
                           Stream{});
            expect_bits_equal(std::vector<float>(got.begin() + 2 * n, got.begin() + 3 * n), alone.host(size_t(n)),
                              "a row alone, " + what);
        }
    }
}

// cos/sin table like the CUDA model builds it.
std::vector<float> cos_sin(const cpu::RopeTable& t, int64_t positions) {
    const int64_t half = t.rope_dim() / 2;
    std::vector<float> cs(size_t(positions * half * 2));
    for (int64_t p = 0; p < positions; ++p)
        for (int64_t i = 0; i < half; ++i) {
            const float a = float(p) * t.inv_freq()[size_t(i)];
            cs[size_t((p * half + i) * 2)] = std::cos(a);
            cs[size_t((p * half + i) * 2 + 1)] = std::sin(a);
        }
    return cs;
}

RopeParams flash_yarn() {
    RopeParams r;
    r.rope_theta = 160000;
    r.rope_type = "yarn";
    r.factor = 16;
    r.original_max_position_embeddings = 65536;
    r.beta_fast = 32;
    r.beta_slow = 1;
    return r;
}

TEST_F(CudaOps, KvNormFoldedIntoRopeRowsBitIdentical) {
    // The model's kv path in one launch (RopeRowsParams::head_norm_weight / head_norm_round_bf16): the
    // weighted RMS norm (cpu::rms_norm with kv_norm), bf16 rounding, RoPE, the rope dims rounded, the FP8
    // simulation of the nope dims, against the CPU reference; and against rms_norm then rope_rows on the GPU.
    const cpu::RopeTable rope(flash_yarn(), 64);
    const int64_t positions = 5000, dim = 512;
    Dev<float> dcs(cos_sin(rope, positions));
    std::vector<int32_t> pos = {0, 1, 127, 128, 4095, 4999};
    const int64_t rows = int64_t(pos.size());
    Dev<int32_t> dpos(pos);
    auto w = randn(size_t(dim), 11);
    for (float& v : w) v = 1.0f + 0.1f * v;
    Dev<float> dw(w);
    for (const bool off : {true, false}) {
        auto x = bf16_values(randn(size_t(rows * dim), 13, 2.0f));
        std::vector<float> ref = x;
        for (int64_t r = 0; r < rows; ++r) {
            float* h = ref.data() + r * dim;
            cpu::rms_norm(h, w.data(), 1e-6f, dim, h);
            if (off) cpu::round_bf16_inplace(h, dim);
            rope.apply(h, dim, pos[size_t(r)], false);
            if (off) cpu::round_bf16_inplace(h + dim - 64, 64);
            if (off) fp8_simulate_nope(h, dim - 64);
        }
        const cuda::RopeRowsParams base{.rows = rows, .heads = 1, .dim = dim, .positions = dpos.ptr(), .cos_sin = dcs.ptr(),
                                        .rope_dim = 64, .round_rope_dims = off, .qat = off ? cuda::Qat::kFp8Nope : cuda::Qat::kNone};
        Dev<float> d1(x), d2(x);
        cuda::RopeRowsParams folded = base;
        folded.x = d1.ptr();
        folded.head_norm = cuda::HeadNorm::kF32;
        folded.eps = 1e-6f;
        folded.head_norm_weight = dw.ptr();
        folded.head_norm_round_bf16 = off;
        cuda::rope_rows(folded, Stream{});
        cuda::rms_norm({.x = d2.ptr(), .weight = dw.ptr(), .out = d2.ptr(), .rows = rows, .n = dim, .eps = 1e-6f, .round_bf16 = off},
                       Stream{});
        cuda::RopeRowsParams apart = base;
        apart.x = d2.ptr();
        cuda::rope_rows(apart, Stream{});
        const auto got = d1.host(x.size());
        expect_bits_equal(ref, got, off ? "kv folded, official" : "kv folded, exact");
        expect_bits_equal(d2.host(x.size()), got, "folded = rms_norm then rope_rows");
    }
}

TEST_F(CudaOps, CompressorApeFoldsEqualAddApeThenRingWrite) {
    // The model's compressor step in its folded form (CompressorParams::ape: the gate rows plus ape as the
    // compressor reads them; RingWriteParams::ring2/src2/add2: both rings in one launch, the gate rows plus
    // ape) against the unfolded one (add_ape on the gate rows, the compressor on them, two ring_writes):
    // the same rings and entries bit for bit, and the folded form leaves the gate rows in memory as they were.
    // Segments: a prefill chunk from position 0, a decode row completing a window from ring rows, a chunk
    // starting mid-window; CSA (ratio 4, overlap) and HCA (ratio 128) main compressors and the indexer's.
    struct Case {
        int64_t ratio, head_dim;
        bool overlap, indexer;
        cuda::Qat qat;
    };
    const cpu::RopeTable rope(flash_yarn(), 64);
    Dev<float> dcs(cos_sin(rope, 1024));
    for (const Case& k : {Case{4, 512, true, false, cuda::Qat::kFp8Nope}, Case{128, 512, false, false, cuda::Qat::kFp8Nope},
                          Case{4, 128, true, true, cuda::Qat::kHadamardFp4}}) {
        const int64_t W = k.overlap ? 2 * k.head_dim : k.head_dim;
        const int64_t ring = (k.overlap ? 2 : 1) * k.ratio + kRingHeadroom;
        const std::vector<int64_t> first = {0, 2 * k.ratio - 1, 5 * k.ratio + 1};
        const std::vector<int64_t> count = {2 * k.ratio + 1, 1, 3 * k.ratio + 2};
        int64_t rows = 0, max_rows = 0, max_windows = 0, capacity = 0;
        std::vector<int32_t> positions;
        for (size_t i = 0; i < first.size(); ++i) {
            for (int64_t p = first[i]; p < first[i] + count[i]; ++p) positions.push_back(int32_t(p));
            rows += count[i];
            max_rows = std::max(max_rows, count[i]);
            max_windows = std::max(max_windows, (first[i] + count[i]) / k.ratio - (first[i] + k.ratio) / k.ratio + 1);
            capacity = std::max(capacity, (first[i] + count[i]) / k.ratio + 1);
        }
        const auto kv = randn(size_t(rows * W), 31, 1.0f), gate = randn(size_t(rows * W), 32, 1.0f);
        const auto ape = randn(size_t(k.ratio * W), 33, 0.5f);
        const auto ring_kv = randn(size_t(ring * W), 34, 1.0f), ring_gate = randn(size_t(ring * W), 35, 1.0f);
        auto norm = randn(size_t(k.head_dim), 36, 0.1f);
        for (float& v : norm) v += 1.0f;
        Dev<float> dkv(kv), dape(ape), dnorm(norm);
        Dev<int32_t> dpos(positions);
        const std::string what = std::string(k.indexer ? "indexer" : "main") + " ratio " + std::to_string(k.ratio);
        // One state per form: per segment its rings (the same earlier rows) and its entries.
        struct Form {
            std::vector<std::unique_ptr<Dev<float>>> kv_rings, gate_rings, entries;
            std::unique_ptr<Dev<cuda::DeviceSegment>> segments;
        };
        auto make_form = [&] {
            Form f;
            std::vector<cuda::DeviceSegment> segs;
            int64_t row = 0;
            for (size_t i = 0; i < first.size(); ++i) {
                f.kv_rings.push_back(std::make_unique<Dev<float>>(ring_kv));
                f.gate_rings.push_back(std::make_unique<Dev<float>>(ring_gate));
                f.entries.push_back(std::make_unique<Dev<float>>(std::vector<float>(size_t(capacity * k.head_dim), 0.0f)));
                cuda::DeviceSegment s{.row_begin = row, .num_rows = count[i], .first_position = first[i]};
                (k.indexer ? s.idx_kv : s.comp_kv) = f.kv_rings.back()->ptr();
                (k.indexer ? s.idx_gate : s.comp_gate) = f.gate_rings.back()->ptr();
                (k.indexer ? s.idx_entries : s.comp_entries) = f.entries.back()->ptr();
                segs.push_back(s);
                row += count[i];
            }
            f.segments = std::make_unique<Dev<cuda::DeviceSegment>>(segs);
            return f;
        };
        const int64_t n = int64_t(first.size());
        const cuda::RingKind kv_ring = k.indexer ? cuda::RingKind::kIdxKv : cuda::RingKind::kCompKv;
        const cuda::RingKind gate_ring = k.indexer ? cuda::RingKind::kIdxGate : cuda::RingKind::kCompGate;
        auto compress = [&](const Form& f, const float* g, const float* a) {
            cuda::compressor({.segments = f.segments->ptr(), .num_segments = n, .max_windows = max_windows, .indexer = k.indexer,
                              .kv = dkv.ptr(), .gate = g, .ape = a, .ratio = k.ratio, .head_dim = k.head_dim, .ring_rows = ring,
                              .overlap = k.overlap, .norm = dnorm.ptr(), .eps = 1e-6f, .cos_sin = dcs.ptr(), .rope_dim = 64,
                              .official = true, .qat = k.qat},
                             Stream{});
        };
        // Unfolded: add_ape, compressor, a ring_write per ring.
        Form unfolded = make_form();
        Dev<float> dgate_a(gate);
        cuda::add_ape({.gate = dgate_a.ptr(), .ape = dape.ptr(), .positions = dpos.ptr(), .rows = rows, .width = W, .ratio = k.ratio},
                      Stream{});
        compress(unfolded, dgate_a.ptr(), nullptr);
        for (const auto& [kind, src] : {std::pair{kv_ring, dkv.ptr()}, std::pair{gate_ring, dgate_a.ptr()}})
            cuda::ring_write({.segments = unfolded.segments->ptr(), .num_segments = n, .max_rows = max_rows, .ring = kind, .src = src,
                              .width = W, .ring_rows = ring},
                             Stream{});
        // Folded: the compressor adds ape as it reads, one ring_write fills both rings.
        Form folded = make_form();
        Dev<float> dgate_b(gate);
        compress(folded, dgate_b.ptr(), dape.ptr());
        cuda::ring_write({.segments = folded.segments->ptr(), .num_segments = n, .max_rows = max_rows, .ring = kv_ring,
                          .src = dkv.ptr(), .width = W, .ring_rows = ring, .ring2 = gate_ring, .src2 = dgate_b.ptr(),
                          .add2 = dape.ptr(), .add2_ratio = k.ratio},
                         Stream{});
        for (size_t i = 0; i < first.size(); ++i) {
            const std::string seg = what + ", segment " + std::to_string(i);
            expect_bits_equal(unfolded.kv_rings[i]->host(ring_kv.size()), folded.kv_rings[i]->host(ring_kv.size()), seg + " kv ring");
            expect_bits_equal(unfolded.gate_rings[i]->host(ring_gate.size()), folded.gate_rings[i]->host(ring_gate.size()),
                              seg + " gate ring");
            const auto e = folded.entries[i]->host(size_t(capacity * k.head_dim));
            expect_bits_equal(unfolded.entries[i]->host(e.size()), e, seg + " entries");
            const int64_t done = (first[i] + count[i]) / k.ratio;  // entries [first / ratio, done) written
            if (done > first[i] / k.ratio) {
                EXPECT_TRUE(std::any_of(e.begin() + (done - 1) * k.head_dim, e.begin() + done * k.head_dim,
                                        [](float v) { return v != 0.0f; }))
                    << seg << ": the last completed window's entry was written";
            }
        }
        // The gate ring holds gate + ape (ape is not zero): not the gate rows alone.
        std::vector<float> plain = ring_gate;
        for (int64_t r = 0; r < count[0]; ++r) std::copy_n(gate.begin() + r * W, W, plain.begin() + (first[0] + r) % ring * W);
        const auto held = folded.gate_rings[0]->host(plain.size());
        EXPECT_FALSE(std::equal(plain.begin(), plain.end(), held.begin())) << what << ": the gate ring holds the ape";
        expect_bits_equal(gate, dgate_b.host(gate.size()), what + ": the folded form leaves the gate rows as they were");
    }
}

TEST_F(CudaOps, HeadNormRopeAndQatBitIdentical) {
    const cpu::RopeTable rope(flash_yarn(), 64);
    const int64_t positions = 70000;  // beyond the YaRN original length
    Dev<float> dcs(cos_sin(rope, positions));
    std::vector<int32_t> pos = {0, 1, 127, 128, 4095, 65535, 69999};
    const int64_t rows = int64_t(pos.size());
    Dev<int32_t> dpos(pos);
    struct Variant {
        const char* name;
        int64_t heads, dim;
        cuda::HeadNorm norm;
        bool round_rope;
        cuda::Qat qat;
        bool inverse;
    };
    const Variant variants[] = {
        {"q official (64x512, bf16 head norm)", 64, 512, cuda::HeadNorm::kBf16Arith, true, cuda::Qat::kNone, false},
        {"q exact", 64, 512, cuda::HeadNorm::kF32, false, cuda::Qat::kNone, false},
        {"kv official (fp8 nope)", 1, 512, cuda::HeadNorm::kNone, true, cuda::Qat::kFp8Nope, false},
        {"indexer q official (64x128 Hadamard+fp4)", 64, 128, cuda::HeadNorm::kNone, false, cuda::Qat::kHadamardFp4, false},
        {"Hadamard+fp4 at 64 dims (registers)", 8, 64, cuda::HeadNorm::kNone, false, cuda::Qat::kHadamardFp4, false},
        {"Hadamard+fp4 at 256 dims (registers)", 8, 256, cuda::HeadNorm::kNone, false, cuda::Qat::kHadamardFp4, false},
        {"Hadamard+fp4 at 512 dims (shared memory)", 8, 512, cuda::HeadNorm::kNone, false, cuda::Qat::kHadamardFp4, false},
        {"inverse rope", 64, 512, cuda::HeadNorm::kNone, true, cuda::Qat::kNone, true},
    };
    for (const Variant& v : variants) {
        auto x = bf16_values(randn(size_t(rows * v.heads * v.dim), uint32_t(v.dim + v.heads), 2.0f));
        std::vector<float> ref = x;
        for (int64_t i = 0; i < rows * v.heads; ++i) {
            float* h = ref.data() + i * v.dim;
            if (v.norm == cuda::HeadNorm::kBf16Arith) cpu::rms_norm_bf16_arith(h, 1e-6f, v.dim);
            if (v.norm == cuda::HeadNorm::kF32) cpu::rms_norm(h, nullptr, 1e-6f, v.dim, h);
            rope.apply(h, v.dim, pos[size_t(i / v.heads)], v.inverse);
            if (v.round_rope) cpu::round_bf16_inplace(h + v.dim - 64, 64);
            if (v.qat == cuda::Qat::kFp8Nope) fp8_simulate_nope(h, v.dim - 64);
            if (v.qat == cuda::Qat::kHadamardFp4) hadamard_fp4_simulate(h, v.dim);
        }
        Dev<float> dx(x);
        cuda::rope_rows({.x = dx.ptr(), .rows = rows, .heads = v.heads, .dim = v.dim, .positions = dpos.ptr(),
                         .cos_sin = dcs.ptr(), .rope_dim = 64, .head_norm = v.norm, .eps = 1e-6f, .inverse = v.inverse,
                         .round_rope_dims = v.round_rope, .qat = v.qat},
                        Stream{});
        expect_bits_equal(ref, dx.host(x.size()), v.name);
        if (v.norm != cuda::HeadNorm::kBf16Arith) continue;
        // The result as bf16 bits into out_bf16 (the fast mode's q): exactly the reference's values, x untouched.
        {
            Dev<float> dxb(x);
            Dev<uint16_t> d16(std::vector<uint16_t>(x.size(), uint16_t(0x7FC1)));
            cuda::rope_rows({.x = dxb.ptr(), .rows = rows, .heads = v.heads, .dim = v.dim, .positions = dpos.ptr(),
                             .cos_sin = dcs.ptr(), .rope_dim = 64, .head_norm = v.norm, .eps = 1e-6f,
                             .round_rope_dims = v.round_rope, .qat = v.qat, .out_bf16 = d16.ptr()},
                            Stream{});
            const std::vector<uint16_t> got16 = d16.host(x.size());
            std::vector<float> widened(x.size());
            for (size_t i = 0; i < x.size(); ++i) widened[i] = std::bit_cast<float>(uint32_t(got16[i]) << 16);
            expect_bits_equal(ref, widened, std::string(v.name) + ", bf16 result");
            expect_bits_equal(x, dxb.host(x.size()), std::string(v.name) + ", x only read");
        }
        // Fast mode's tree-ordered sum of squares: the head's scale may move by one bf16 step, so every
        // element stays within two bf16 steps of the reference (no bit-identity claimed).
        Dev<float> dt(x);
        cuda::rope_rows({.x = dt.ptr(), .rows = rows, .heads = v.heads, .dim = v.dim, .positions = dpos.ptr(),
                         .cos_sin = dcs.ptr(), .rope_dim = 64, .head_norm = v.norm, .eps = 1e-6f,
                         .round_rope_dims = v.round_rope, .tree_sum = true},
                        Stream{});
        const std::vector<float> got = dt.host(x.size());
        for (int64_t h = 0; h < rows * v.heads; ++h) {  // RoPE mixes pairs: bound by the head's largest value
            float top = 0;
            for (int64_t d = 0; d < v.dim; ++d) top = std::max(top, std::fabs(ref[size_t(h * v.dim + d)]));
            for (int64_t d = 0; d < v.dim; ++d) {
                const size_t i = size_t(h * v.dim + d);
                ASSERT_LE(std::fabs(got[i] - ref[i]), 2.0f * 0.0078125f * top) << v.name << " tree sum, " << i;
            }
        }
    }
}

// ---- mHC ----------------------------------------------------------------------------------------

TEST_F(CudaOps, HyperConnectionsMatchCpu) {
    for (int64_t hc : {int64_t(4), int64_t(2), int64_t(6)}) {  // 6: the comb spans two slots per lane
        const int64_t D = 4096, T = 3, outputs = (2 + hc) * hc, flat = hc * D;
        auto x = bf16_values(randn(size_t(T * flat), 1));
        auto fn = randn(size_t(outputs * flat), 2, 1.0f / std::sqrt(float(flat)));
        auto base = randn(size_t(outputs), 3, 0.3f), scale = randn(3, 4, 0.3f);
        std::vector<float> post(size_t(T * hc)), comb(size_t(T * hc * hc)), a(size_t(T * D));
        cpu::hc_pre({.x = x.data(), .fn = fn.data(), .base = base.data(), .scale = scale.data(), .num_tokens = T,
                     .hc = hc, .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-6f, .hc_eps = 1e-6f,
                     .post = post.data(), .comb = comb.data(), .collapsed = a.data(), .round_bf16 = true});
        Dev<float> dx(x), dfn(fn), db(base), ds(scale), dpost(post.size()), dcomb(comb.size()), da(a.size());
        Dev<float> dmix(size_t(T * (outputs + 1)));
        for (bool staged : {false, true}) {  // mixing logits in the kernel, or by the staged GEMM first
            const std::string how = staged ? " (staged mixing logits)" : "";
            cuda::hc_pre({.x = dx.ptr(), .fn = dfn.ptr(), .base = db.ptr(), .scale = ds.ptr(), .rows = T, .hc = hc,
                          .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-6f, .hc_eps = 1e-6f, .post = dpost.ptr(),
                          .comb = dcomb.ptr(), .collapsed = da.ptr(), .round_bf16 = true,
                          .mix = staged ? dmix.ptr() : nullptr},
                         Stream{});
            expect_bits_equal(post, dpost.host(post.size()), "hc_pre post" + how);
            expect_bits_equal(comb, dcomb.host(comb.size()), "hc_pre comb (Sinkhorn)" + how);
            expect_bits_equal(a, da.host(a.size()), "hc_pre collapsed (bf16)" + how);
        }
        {  // Fast mode: the split-K logits (f32-accurate, chunk order), then hc_pre from them: f32-close to
           // the CPU, not bit-identical; the same per row for any number of rows. hc 2 and 4 (8 and 24
           // logits) take the tensor-core kernel, hc 6 (48) the FMA kernel, whose order is checked bit for bit.
            const std::vector<float> exact_mix = dmix.host(size_t(T * (outputs + 1)));
            Dev<float> dmixf(size_t(T * (outputs + 1))), dpart(size_t(cuda::hc_mix_splits(flat) * T * (outputs + 1)));
            cuda::hc_mix_splitk({.x = dx.ptr(), .fn = dfn.ptr(), .rows = T, .outputs = outputs, .flat = flat,
                                 .partial = dpart.ptr(), .mix = dmixf.ptr()},
                                Stream{});
            const std::vector<float> fast_mix = dmixf.host(exact_mix.size());
            if (!cuda::hc_mix_uses_tensor_cores(flat, outputs)) {
                // The FMA kernel's documented order, bit for bit: per 512-wide chunk, lane l FMAs k = l,
                // l + 32, ... from 0, a butterfly over the 32 lanes (lane 0's sum), then the chunks' sums in order.
                const int64_t chunk = 512;
                for (int64_t t = 0; t < T; ++t)
                    for (int64_t j = 0; j <= outputs; ++j) {
                        float total = 0.0f;
                        for (int64_t c0 = 0; c0 < flat; c0 += chunk) {
                            float lanes[32];
                            for (int l = 0; l < 32; ++l) {
                                float acc = 0.0f;
                                for (int64_t k = c0 + l; k < std::min(flat, c0 + chunk); k += 32) {
                                    const float xv = x[size_t(t * flat + k)];
                                    acc = std::fma(xv, j < outputs ? fn[size_t(j * flat + k)] : xv, acc);
                                }
                                lanes[l] = acc;
                            }
                            for (int off = 16; off > 0; off /= 2) {
                                float next[32];
                                for (int l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ off];
                                std::copy(next, next + 32, lanes);
                            }
                            total += lanes[0];
                        }
                        ASSERT_EQ(std::bit_cast<uint32_t>(total), std::bit_cast<uint32_t>(fast_mix[size_t(t * (outputs + 1) + j)]))
                            << "split-K mixing order: hc=" << hc << " row " << t << " output " << j;
                    }
            }
            // 21 rows (FMA: 8-row blocks; MMA: one partial 32-row block), 300 (FMA: 16-row blocks; MMA: 10 blocks, the
            // last partial), 1191 (MMA: 38 blocks, the last partial)
            for (int64_t copies : {int64_t(7), int64_t(100), int64_t(397)}) {
                const int64_t n = copies * T;  // copies of these rows: every copy's logits the same bit for bit
                std::vector<float> many;
                for (int64_t i = 0; i < copies; ++i) many.insert(many.end(), x.begin(), x.end());
                Dev<float> dmany(many), dmixm(size_t(n * (outputs + 1))), dpartm(size_t(cuda::hc_mix_splits(flat) * n * (outputs + 1)));
                cuda::hc_mix_splitk({.x = dmany.ptr(), .fn = dfn.ptr(), .rows = n, .outputs = outputs, .flat = flat,
                                     .partial = dpartm.ptr(), .mix = dmixm.ptr()},
                                    Stream{});
                std::vector<float> want;
                for (int64_t i = 0; i < copies; ++i) want.insert(want.end(), fast_mix.begin(), fast_mix.end());
                expect_bits_equal(want, dmixm.host(want.size()), "split-K mixing: 3 rows vs their copies among " + std::to_string(n));
            }
            for (int64_t t = 0; t < T; ++t) {
                float top = 0;
                for (int64_t j = 0; j < outputs; ++j) top = std::max(top, std::fabs(exact_mix[size_t(t * (outputs + 1) + j)]));
                for (int64_t j = 0; j <= outputs; ++j) {
                    const float want = exact_mix[size_t(t * (outputs + 1) + j)], got = fast_mix[size_t(t * (outputs + 1) + j)];
                    const float tol = j < outputs ? 1e-5f * top : 1e-5f * std::fabs(want);  // logits; dot(x, x)
                    ASSERT_LE(std::fabs(got - want), tol) << "hc=" << hc << " row " << t << " logit " << j;
                }
            }
            cuda::hc_pre({.x = dx.ptr(), .fn = dfn.ptr(), .base = db.ptr(), .scale = ds.ptr(), .rows = T, .hc = hc,
                          .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-6f, .hc_eps = 1e-6f, .post = dpost.ptr(),
                          .comb = dcomb.ptr(), .collapsed = da.ptr(), .round_bf16 = true, .mix = dmixf.ptr(),
                          .mix_given = true},
                         Stream{});
            const auto fpost = dpost.host(post.size()), fcomb = dcomb.host(comb.size()), fa = da.host(a.size());
            {  // The same logits summed inside hc_pre from the split-K partials (no reduce launch; `mix` unread).
                Dev<float> poison(std::vector<float>(size_t(T * (outputs + 1)), std::numeric_limits<float>::quiet_NaN()));
                cuda::hc_mix_splitk({.x = dx.ptr(), .fn = dfn.ptr(), .rows = T, .outputs = outputs, .flat = flat,
                                     .partial = dpart.ptr(), .mix = poison.ptr(), .partials_only = true},
                                    Stream{});
                cuda::hc_pre({.x = dx.ptr(), .fn = dfn.ptr(), .base = db.ptr(), .scale = ds.ptr(), .rows = T, .hc = hc,
                              .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-6f, .hc_eps = 1e-6f, .post = dpost.ptr(),
                              .comb = dcomb.ptr(), .collapsed = da.ptr(), .round_bf16 = true, .mix = poison.ptr(),
                              .mix_given = true, .mix_partial = dpart.ptr(), .mix_splits = cuda::hc_mix_splits(flat)},
                             Stream{});
                expect_bits_equal(fpost, dpost.host(post.size()), "hc_pre post from partials");
                expect_bits_equal(fcomb, dcomb.host(comb.size()), "hc_pre comb from partials");
                expect_bits_equal(fa, da.host(a.size()), "hc_pre collapsed from partials");
            }
            for (size_t i = 0; i < post.size(); ++i) EXPECT_NEAR(fpost[i], post[i], 1e-4f) << "fast post " << i;
            for (size_t i = 0; i < comb.size(); ++i) EXPECT_NEAR(fcomb[i], comb[i], 1e-4f) << "fast comb " << i;
            float amax = 0;
            for (float v : a) amax = std::max(amax, std::fabs(v));
            for (size_t i = 0; i < a.size(); ++i) ASSERT_LE(std::fabs(fa[i] - a[i]), 0.0078125f * amax) << "fast collapsed " << i;
        }
        // One row (decode): the mixing logits with all of K staged at once.
        cuda::hc_pre({.x = dx.ptr(), .fn = dfn.ptr(), .base = db.ptr(), .scale = ds.ptr(), .rows = 1, .hc = hc,
                      .hidden = D, .sinkhorn_iters = 20, .norm_eps = 1e-6f, .hc_eps = 1e-6f, .post = dpost.ptr(),
                      .comb = dcomb.ptr(), .collapsed = da.ptr(), .round_bf16 = true, .mix = dmix.ptr()},
                     Stream{});
        expect_bits_equal(std::vector<float>(comb.begin(), comb.begin() + hc * hc), dcomb.host(size_t(hc * hc)),
                          "hc_pre comb, one row");
        expect_bits_equal(std::vector<float>(a.begin(), a.begin() + D), da.host(size_t(D)), "hc_pre collapsed, one row");
        // HC post from the CPU's post/comb: no transcendental, bit-identical.
        auto o = bf16_values(randn(size_t(T * D), 5));
        std::vector<float> y(x.size());
        cpu::hc_post({.out = o.data(), .x = x.data(), .post = post.data(), .comb = comb.data(), .num_tokens = T,
                      .hc = hc, .hidden = D, .y = y.data(), .round_bf16 = true});
        Dev<float> dout(o), dpost2(post), dcomb2(comb), dy(y.size());
        cuda::hc_post({.out = dout.ptr(), .x = dx.ptr(), .post = dpost2.ptr(), .comb = dcomb2.ptr(), .y = dy.ptr(),
                       .rows = T, .hc = hc, .hidden = D, .round_bf16 = true},
                      Stream{});
        expect_bits_equal(y, dy.host(y.size()), "hc_post");
        // HC head.
        auto hfn = randn(size_t(hc * flat), 6, 1.0f / std::sqrt(float(flat)));
        auto hb = randn(size_t(hc), 7, 0.3f), hs = randn(1, 8, 0.3f);
        std::vector<float> hy(size_t(T * D));
        cpu::hc_head({.x = x.data(), .fn = hfn.data(), .base = hb.data(), .scale = hs.data(), .num_tokens = T, .hc = hc,
                      .hidden = D, .norm_eps = 1e-6f, .hc_eps = 1e-6f, .y = hy.data(), .round_bf16 = false});
        Dev<float> dhfn(hfn), dhb(hb), dhs(hs), dhy(hy.size());
        for (bool staged : {false, true}) {
            cuda::hc_head({.x = dx.ptr(), .fn = dhfn.ptr(), .base = dhb.ptr(), .scale = dhs.ptr(), .rows = T, .hc = hc,
                           .hidden = D, .norm_eps = 1e-6f, .hc_eps = 1e-6f, .y = dhy.ptr(),
                           .mix = staged ? dmix.ptr() : nullptr},
                          Stream{});
            expect_bits_equal(hy, dhy.host(hy.size()), staged ? "hc_head (staged mixing logits)" : "hc_head");
        }
        {  // Fast mode: hc_head from the split-K logits, and from their partials summed in the kernel: the same bits.
            Dev<float> dhmix(size_t(T * (hc + 1))), dhpart(size_t(cuda::hc_mix_splits(flat) * T * (hc + 1))), dhy2(hy.size());
            cuda::hc_mix_splitk({.x = dx.ptr(), .fn = dhfn.ptr(), .rows = T, .outputs = hc, .flat = flat, .partial = dhpart.ptr(),
                                 .mix = dhmix.ptr()},
                                Stream{});
            cuda::hc_head({.x = dx.ptr(), .fn = dhfn.ptr(), .base = dhb.ptr(), .scale = dhs.ptr(), .rows = T, .hc = hc,
                           .hidden = D, .norm_eps = 1e-6f, .hc_eps = 1e-6f, .y = dhy.ptr(), .mix = dhmix.ptr(), .mix_given = true},
                          Stream{});
            Dev<float> poison(std::vector<float>(size_t(T * (hc + 1)), std::numeric_limits<float>::quiet_NaN()));
            cuda::hc_head({.x = dx.ptr(), .fn = dhfn.ptr(), .base = dhb.ptr(), .scale = dhs.ptr(), .rows = T, .hc = hc,
                           .hidden = D, .norm_eps = 1e-6f, .hc_eps = 1e-6f, .y = dhy2.ptr(), .mix = poison.ptr(),
                           .mix_given = true, .mix_partial = dhpart.ptr(), .mix_splits = cuda::hc_mix_splits(flat)},
                          Stream{});
            const auto from_mix = dhy.host(hy.size());
            expect_bits_equal(from_mix, dhy2.host(hy.size()), "hc_head from partials");
            float top = 0;
            for (float v : hy) top = std::max(top, std::fabs(v));
            for (size_t i = 0; i < hy.size(); ++i) ASSERT_LE(std::fabs(from_mix[i] - hy[i]), 1e-4f * top) << "fast hc_head " << i;
        }
    }
}

// The tensor-core mixing logits (3xTF32, hc_mix_mma.cuh) against f64 dot products, at V4's shapes and at
// odd ones (a partial last chunk, 1 and 32 outputs, partial warps and blocks), and each row's logits equal
// bit for bit whether it runs alone or among others.
TEST_F(CudaOps, HcMixTensorCoresF32AccurateAndBatchInvariant) {
    struct Shape {
        int64_t flat, outputs;
    };
    for (Shape sh : {Shape{16384, 24}, Shape{16384, 4}, Shape{16400, 4}, Shape{1040, 32}, Shape{1040, 1}, Shape{48, 9}}) {
        ASSERT_TRUE(cuda::hc_mix_uses_tensor_cores(sh.flat, sh.outputs));
        const int64_t rows = 300, O = sh.outputs, F = sh.flat;
        auto x = randn(size_t(rows * F), uint32_t(F + O), 1.0f);  // full f32 values: every lo part matters
        for (int64_t k = 0; k < F; ++k) x[size_t(5 * F + k)] *= 1e-3f;  // a row of small values
        auto fn = randn(size_t(O * F), uint32_t(F * 3 + O), 1.0f / std::sqrt(float(F)));
        Dev<float> dx(x), dfn(fn), dmix(size_t(rows * (O + 1))), dpart(size_t(cuda::hc_mix_splits(F) * rows * (O + 1)));
        cuda::hc_mix_splitk({.x = dx.ptr(), .fn = dfn.ptr(), .rows = rows, .outputs = O, .flat = F, .partial = dpart.ptr(),
                             .mix = dmix.ptr()},
                            Stream{});
        const auto mix = dmix.host(size_t(rows * (O + 1)));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j <= O; ++j) {
                double exact = 0, bound = 0;
                for (int64_t k = 0; k < F; ++k) {
                    const double a = x[size_t(r * F + k)], b = j < O ? fn[size_t(j * F + k)] : a;
                    exact += a * b;
                    bound += std::fabs(a * b);
                }
                const double err = std::fabs(double(mix[size_t(r * (O + 1) + j)]) - exact);
                ASSERT_LE(err, (j < O ? 1e-5 : 1e-6) * bound + 1e-30)
                    << "flat " << F << " outputs " << O << " row " << r << (j < O ? " logit " : " dot(x, x) ") << j;
            }
        for (int64_t r : {int64_t(0), int64_t(5), int64_t(31), int64_t(32), int64_t(130), int64_t(299)}) {  // alone
            Dev<float> dm1(size_t(O + 1)), dp1(size_t(cuda::hc_mix_splits(F) * (O + 1)));
            cuda::hc_mix_splitk({.x = dx.ptr() + r * F, .fn = dfn.ptr(), .rows = 1, .outputs = O, .flat = F, .partial = dp1.ptr(),
                                 .mix = dm1.ptr()},
                                Stream{});
            expect_bits_equal(std::vector<float>(mix.begin() + r * (O + 1), mix.begin() + (r + 1) * (O + 1)), dm1.host(size_t(O + 1)),
                              "hc mix row " + std::to_string(r) + " alone vs among 300, flat " + std::to_string(F));
        }
        {  // 37 rows starting at row 7: the same bits as in the 300-row launch
            const int64_t n = 37, r0 = 7;
            Dev<float> dm(size_t(n * (O + 1))), dp(size_t(cuda::hc_mix_splits(F) * n * (O + 1)));
            cuda::hc_mix_splitk({.x = dx.ptr() + r0 * F, .fn = dfn.ptr(), .rows = n, .outputs = O, .flat = F, .partial = dp.ptr(),
                                 .mix = dm.ptr()},
                                Stream{});
            expect_bits_equal(std::vector<float>(mix.begin() + r0 * (O + 1), mix.begin() + (r0 + n) * (O + 1)), dm.host(size_t(n * (O + 1))),
                              "hc mix rows 7..43 vs among 300");
        }
    }
    EXPECT_FALSE(cuda::hc_mix_uses_tensor_cores(16384, 48));  // hc = 6: the FMA kernel
    EXPECT_FALSE(cuda::hc_mix_uses_tensor_cores(16392, 24));  // K not in 16-wide blocks
}

// ---- Top-k, router ------------------------------------------------------------------------------

TEST_F(CudaOps, TopkEqualsCpuWithTies) {
    struct C {
        int64_t n, k;
    };
    for (C c : {C{100000, 512}, C{2000, 512}, C{300, 512}, C{256, 6}, C{5000, 1}}) {
        const int64_t rows = 3;
        std::vector<float> s(size_t(rows * c.n));
        std::mt19937 rng(uint32_t(c.n));
        for (float& v : s) v = float(int(rng() % 64) - 20) * 0.25f;  // many ties, negatives, zeros
        std::vector<int32_t> lengths = {int32_t(c.n), int32_t(c.n / 2), 0};
        Dev<float> ds(s);
        Dev<int32_t> dl(lengths), dout(size_t(rows * c.k));
        cuda::topk({.scores = ds.ptr(), .ld = c.n, .lengths = dl.ptr(), .n = c.n, .rows = rows, .k = c.k, .out = dout.ptr()},
                   Stream{});
        const auto got = dout.host(size_t(rows * c.k));
        for (int64_t r = 0; r < rows; ++r) {
            std::vector<int32_t> ref = topk_lowest_index(s.data() + r * c.n, lengths[size_t(r)], c.k);
            ref.resize(size_t(c.k), -1);
            EXPECT_TRUE(std::equal(ref.begin(), ref.end(), got.begin() + r * c.k)) << "n " << c.n << " k " << c.k << " row " << r;
        }
    }
}

// Every top-k variant (the default topk_row with adaptive 8-bit digits, the 4-pass radix select it
// replaced, adaptive 11-bit digits as the sampler runs them, 12-bit) vs the CPU's topk_lowest_index on
// the cases that steer the adaptive passes and the warp-range compaction: bf16-valued scores of both
// signs (the passes end after 2 digits), f32 logits, keys that differ only in their low bits, all-equal
// rows, ties across warp ranges, +-0, +-inf, denormals, k >= len, rows shorter than k, empty and
// one-entry rows, lengths not a multiple of 32.
TEST_F(CudaOps, TopkVariantsEqualCpuOnEdgeCases) {
    std::mt19937 rng(77);
    std::normal_distribution<float> normal(0.0f, 3.0f);
    auto bf16 = [](float x) {
        uint32_t u;
        std::memcpy(&u, &x, 4);
        u = (u + 0x7FFFu + ((u >> 16) & 1u)) & 0xFFFF0000u;
        std::memcpy(&x, &u, 4);
        return x;
    };
    const float inf = std::numeric_limits<float>::infinity();
    struct Case {
        const char* name;
        int64_t n, k;
        std::vector<int32_t> lengths;  // one row each
        std::function<float(int64_t row, int64_t j)> value;
    };
    const std::vector<Case> cases = {
        {"bf16 both signs", 4099, 512, {4099, 4096, 1000, 513, 512, 511, 37, 1, 0},
         [&](int64_t, int64_t) { return bf16(normal(rng)); }},
        {"bf16 positive", 4096, 512, {4096, 2049, 700}, [&](int64_t, int64_t) { return bf16(std::fabs(normal(rng)) + 0.01f); }},
        {"f32 logits", 129280, 50, {129280, 129280 - 7, 50, 49}, [&](int64_t, int64_t) { return normal(rng); }},
        {"f32 logits k=1", 5000, 1, {5000, 33}, [&](int64_t, int64_t) { return normal(rng); }},
        {"low bits only", 3000, 512, {3000, 2048, 600},
         [&](int64_t r, int64_t) {
             const uint32_t u = 0x3F800000u | (r == 0 ? uint32_t(rng() % 16) : r == 1 ? uint32_t(rng() % 4096) << 4 : uint32_t(rng() % 3) << 9);
             float x;
             std::memcpy(&x, &u, 4);
             return x;
         }},
        {"all equal", 3000, 512, {3000, 1024, 513}, [&](int64_t, int64_t) { return 1.5f; }},
        {"few values", 10000, 512, {10000, 5000, 777}, [&](int64_t, int64_t) { return float(int(rng() % 3)); }},
        {"signed zeros", 2000, 512, {2000, 900},
         [&](int64_t, int64_t j) { return j % 97 == 5 ? 1.0f : (rng() % 2 ? -0.0f : 0.0f); }},
        {"infinities", 2500, 512, {2500, 1300, 520},
         [&](int64_t r, int64_t j) {
             if (r == 0) return j % 25 == 3 ? normal(rng) : -inf;  // 100 finite: the rest of the 512 are -inf ties
             if (r == 1) return j % 7 == 0 ? inf : normal(rng);
             return rng() % 2 ? -inf : inf;
         }},
        {"denormals", 3000, 512, {3000, 1500},
         [&](int64_t, int64_t) {
             const uint32_t u = (uint32_t(rng() % 2) << 31) | uint32_t(rng() % 0x800000u);
             float x;
             std::memcpy(&x, &u, 4);
             return x;
         }},
        {"k >= len", 300, 512, {300, 299, 64, 31, 0}, [&](int64_t, int64_t) { return bf16(normal(rng)); }},
        {"k == len", 512, 512, {512, 511}, [&](int64_t, int64_t) { return normal(rng); }},
        {"short rows", 300, 40, {300, 257, 41, 40, 39, 2}, [&](int64_t, int64_t) { return float(int(rng() % 8) - 4); }},
    };
    for (const Case& c : cases) {
        const int64_t rows = int64_t(c.lengths.size());
        std::vector<float> s(size_t(rows * c.n));
        for (int64_t r = 0; r < rows; ++r)
            for (int64_t j = 0; j < c.n; ++j) s[size_t(r * c.n + j)] = c.value(r, j);
        std::vector<int32_t> ref(size_t(rows * c.k), -1);
        for (int64_t r = 0; r < rows; ++r) {
            const std::vector<int32_t> sel = topk_lowest_index(s.data() + r * c.n, c.lengths[size_t(r)], c.k);
            std::copy(sel.begin(), sel.end(), ref.begin() + r * c.k);
        }
        Dev<float> ds(s);
        Dev<int32_t> dl(c.lengths);
        for (int variant = 0; variant <= 3; ++variant) {
            Dev<int32_t> dout(std::vector<int32_t>(size_t(rows * c.k), 0x7F7F7F7F));
            cuda::topk({.scores = ds.ptr(), .ld = c.n, .lengths = dl.ptr(), .n = c.n, .rows = rows, .k = c.k, .out = dout.ptr(),
                        .variant = variant},
                       Stream{});
            const auto got = dout.host(size_t(rows * c.k));
            for (int64_t r = 0; r < rows; ++r)
                EXPECT_TRUE(std::equal(ref.begin() + r * c.k, ref.begin() + (r + 1) * c.k, got.begin() + r * c.k))
                    << c.name << ": variant " << variant << " row " << r << " length " << c.lengths[size_t(r)] << " k " << c.k;
        }
    }
}

TEST_F(CudaOps, RouterMatchesCpu) {
    const int64_t E = 256, K = 6, T = 9;
    auto logits = randn(size_t(T * E), 21, 2.0f);
    auto bias = randn(size_t(E), 22, 0.1f);
    std::vector<int32_t> tid2eid(size_t(16 * K)), tokens(T);
    std::mt19937 rng(23);
    for (int64_t v = 0; v < 16; ++v) {
        std::vector<int32_t> perm(E);
        for (int64_t e = 0; e < E; ++e) perm[size_t(e)] = int32_t(e);
        std::shuffle(perm.begin(), perm.end(), rng);
        std::copy_n(perm.begin(), K, tid2eid.begin() + v * K);
    }
    for (int32_t& t : tokens) t = int32_t(rng() % 16);
    for (bool hash : {false, true}) {
        // CPU reference (moe_block.cpp's route on precomputed logits).
        std::vector<int32_t> ref_ids(size_t(T * K));
        std::vector<float> ref_w(size_t(T * K));
        for (int64_t t = 0; t < T; ++t) {
            std::vector<float> s(logits.begin() + t * E, logits.begin() + (t + 1) * E);
            for (float& v : s) v = std::sqrt(cpu::softplus(v));
            std::vector<int32_t> id;
            if (hash) {
                id.assign(tid2eid.begin() + tokens[size_t(t)] * K, tid2eid.begin() + (tokens[size_t(t)] + 1) * K);
            } else {
                std::vector<float> b = s;
                for (int64_t e = 0; e < E; ++e) b[size_t(e)] += bias[size_t(e)];
                id = topk_lowest_index(b.data(), E, K);
            }
            float sum = 0;
            for (int64_t k = 0; k < K; ++k) sum += s[size_t(id[size_t(k)])];
            for (int64_t k = 0; k < K; ++k) {
                ref_ids[size_t(t * K + k)] = id[size_t(k)];
                ref_w[size_t(t * K + k)] = s[size_t(id[size_t(k)])] / sum * 1.5f;
            }
        }
        Dev<float> dl(logits), db(bias), dbiased(logits.size()), dw(size_t(T * K));
        Dev<int32_t> dt(tid2eid), dtok(tokens), did(size_t(T * K));
        cuda::route({.logits = dl.ptr(), .bias = hash ? nullptr : db.ptr(), .tid2eid = hash ? dt.ptr() : nullptr,
                     .tokens = dtok.ptr(), .rows = T, .experts = E, .top_k = K, .routed_scaling_factor = 1.5f,
                     .official = true, .biased = dbiased.ptr(), .ids = did.ptr(), .weights = dw.ptr()},
                    Stream{});
        EXPECT_EQ(did.host(ref_ids.size()), ref_ids) << (hash ? "hash" : "score") << " routing ids";
        expect_bits_equal(ref_w, dw.host(ref_w.size()), hash ? "hash weights" : "score weights");
    }
}

// ---- Indexer and sparse attention at the real widths ----------------------------------------------

TEST_F(CudaOps, IndexerScoresAndTop512BitIdentical) {
    const int64_t IH = 64, ID = 128, m = 4, topk = 512, keys = 2000;
    std::vector<int32_t> pos = {8003, 2047, 3, 5000, 7999};  // visible: 2000 (capped by keys), 512, 1, 1250, 2000
    const int64_t rows = int64_t(pos.size());
    // Keys and queries are Hadamard+FP4 simulated as in the model (bf16 values on the fp4 grid).
    auto k = randn(size_t(keys * ID), 31);
    auto q = randn(size_t(rows * IH * ID), 32);
    for (int64_t i = 0; i < keys; ++i) hadamard_fp4_simulate(k.data() + i * ID, ID);
    for (int64_t i = 0; i < rows * IH; ++i) hadamard_fp4_simulate(q.data() + i * ID, ID);
    auto hw = bf16_values(randn(size_t(rows * IH), 33));
    std::vector<int32_t> ref(size_t(rows * topk), -1);
    std::vector<std::vector<float>> ref_scores;
    const float ss = 1.0f / std::sqrt(float(ID)), ws = 1.0f / std::sqrt(float(IH));
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t visible = std::min<int64_t>(keys, (pos[size_t(r)] + 1) / m);
        std::vector<float> sc(static_cast<size_t>(visible));
        for (int64_t i = 0; i < visible; ++i) {
            float s = 0;
            for (int64_t h = 0; h < IH; ++h) {
                const float dp = cpu::dot(q.data() + (r * IH + h) * ID, k.data() + i * ID, ID);
                const float wgt = cpu::round_bf16(hw[size_t(r * IH + h)] * ss * ws);
                s = cpu::round_bf16(s + cpu::round_bf16(std::max(cpu::round_bf16(dp), 0.0f) * wgt));
            }
            sc[size_t(i)] = s;
        }
        auto sel = topk_lowest_index(sc.data(), visible, topk);
        std::copy(sel.begin(), sel.end(), ref.begin() + r * topk);
        ref_scores.push_back(sc);
    }
    // The GPU reads the visible count from the positions; cap them to the keys present.
    std::vector<int32_t> gpos = pos;
    for (int32_t& p : gpos) p = std::min<int32_t>(p, int32_t(keys * m - 1));
    Dev<float> dk(k), dq(q), dhw(hw), dscores(size_t(rows * keys));
    Dev<int32_t> dpos(gpos), drs(std::vector<int32_t>(size_t(rows), 0)), dsel(size_t(rows * topk)), dcnt(static_cast<size_t>(rows));
    // Contiguous keys, then the keys in pages as the models' state holds them (37 per page, after 96 floats).
    const PagedRowsCopy paged(k, ID, 37, 96);
    for (bool in_pages : {false, true}) {
        cuda::DeviceSegment seg;
        seg.idx_entries = in_pages ? nullptr : dk.ptr();
        if (in_pages) {
            seg.pages = paged.table.ptr();
            seg.entries_per_page = paged.per_page;
            seg.idx_offset = paged.offset;
        }
        Dev<cuda::DeviceSegment> dseg(std::vector<cuda::DeviceSegment>{seg});
        cuda::indexer_topk({.segments = dseg.ptr(), .row_segment = drs.ptr(), .positions = dpos.ptr(), .rows = rows,
                            .q = dq.ptr(), .weights = dhw.ptr(), .heads = IH, .head_dim = ID, .ratio = m, .topk = topk,
                            .max_visible = keys, .scores = dscores.ptr(), .selected = dsel.ptr(),
                            .num_selected = dcnt.ptr(), .official = true},
                           Stream{});
        EXPECT_EQ(dsel.host(ref.size()), ref) << (in_pages ? "paged keys" : "contiguous keys");
    }
    cuda::DeviceSegment seg;
    seg.idx_entries = dk.ptr();
    Dev<cuda::DeviceSegment> dseg(std::vector<cuda::DeviceSegment>{seg});

    // Tensor cores (fast mode): only the f32 order of each dot product differs before its bf16
    // rounding, so nearly every score is equal and the rest within a few bf16 steps; the picks agree
    // but for near-ties; a row's scores do not depend on the rows beside it (or the grid's key split).
    std::vector<float> first_row;
    for (int64_t n : {rows, int64_t(1)}) {
        Dev<float> dsc(size_t(rows * keys));
        Dev<int32_t> dsel2(size_t(rows * topk));
        cuda::indexer_topk({.segments = dseg.ptr(), .row_segment = drs.ptr(), .positions = dpos.ptr(), .rows = n,
                            .q = dq.ptr(), .weights = dhw.ptr(), .heads = IH, .head_dim = ID, .ratio = m, .topk = topk,
                            .max_visible = keys, .scores = dsc.ptr(), .selected = dsel2.ptr(), .num_selected = dcnt.ptr(),
                            .official = true, .tensor_cores = true},
                           Stream{});
        const auto scores = dsc.host(size_t(n * keys));
        const auto sel = dsel2.host(size_t(n * topk));
        int64_t total = 0, equal = 0;
        for (int64_t r = 0; r < n; ++r) {
            const auto& want = ref_scores[size_t(r)];
            float top = 0;
            for (float v : want) top = std::max(top, std::fabs(v));
            for (size_t i = 0; i < want.size(); ++i) {
                const float got = scores[size_t(r * keys) + i];
                ++total;
                equal += got == want[i];
                ASSERT_LE(std::fabs(got - want[i]), 0.03f * top) << "row " << r << " key " << i;
            }
            std::vector<int32_t> a(ref.begin() + r * topk, ref.begin() + (r + 1) * topk), b(sel.begin() + r * topk, sel.begin() + (r + 1) * topk);
            std::sort(a.begin(), a.end());
            std::sort(b.begin(), b.end());
            std::vector<int32_t> both;
            std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
            const auto valid = std::count_if(a.begin(), a.end(), [](int32_t v) { return v >= 0; });
            EXPECT_GE(double(std::count_if(both.begin(), both.end(), [](int32_t v) { return v >= 0; })), 0.95 * double(valid)) << "row " << r;
        }
        EXPECT_GE(double(equal), 0.9 * double(total)) << n << " rows";
        if (first_row.empty()) first_row.assign(scores.begin(), scores.begin() + keys);
        else expect_bits_equal(first_row, std::vector<float>(scores.begin(), scores.begin() + keys), "indexer on tensor cores: row alone");
    }
}

TEST_F(CudaOps, SparseSinkAttentionMatchesCpu) {
    // One CSA query batch at the real widths: 64 heads x 512, window 128 (ring of 144), top-512 of 1500
    // compressed entries; rows in the chunk at positions 5997..6008 (window partly in the ring). All 12
    // rows (16 heads per block), then the first 4 alone (4 heads per block).
    const int64_t H = 64, Dh = 512, R = 64, W = 128, WR = W + 16, topk = 512, m = 4, n_entries = 1500;
    const int64_t P0 = 5997, rows = 12;
    const cpu::RopeTable rope(flash_yarn(), R);
    Dev<float> dcs(cos_sin(rope, 8192));
    auto ring = bf16_values(randn(size_t(WR * Dh), 41));
    auto entries = bf16_values(randn(size_t(n_entries * Dh), 42));
    auto kv = bf16_values(randn(size_t(rows * Dh), 43));
    auto q = bf16_values(randn(size_t(rows * H * Dh), 44, 0.05f));
    auto sink = randn(size_t(H), 45);
    std::vector<int32_t> selected(size_t(rows * topk));
    std::mt19937 rng(46);
    for (int64_t r = 0; r < rows; ++r) {
        std::vector<int32_t> all(n_entries);
        for (int64_t i = 0; i < n_entries; ++i) all[size_t(i)] = int32_t(i);
        std::shuffle(all.begin(), all.end(), rng);
        std::sort(all.begin(), all.begin() + topk);
        std::copy_n(all.begin(), topk, selected.begin() + r * topk);
    }
    for (bool official : {true, false}) {
        std::vector<float> ref(size_t(rows * H * Dh));
        const float scale = 1.0f / std::sqrt(float(Dh));
        for (int64_t t = 0; t < rows; ++t) {
            const int64_t pos = P0 + t;
            std::vector<const float*> cand;
            for (int64_t qp = std::max<int64_t>(0, pos - W + 1); qp <= pos; ++qp)
                cand.push_back(qp >= P0 ? kv.data() + (qp - P0) * Dh : ring.data() + (qp % WR) * Dh);
            for (int64_t j = 0; j < topk; ++j) cand.push_back(entries.data() + selected[size_t(t * topk + j)] * Dh);
            std::vector<float> sc(cand.size());
            for (int64_t h = 0; h < H; ++h) {
                const float* qh = q.data() + (t * H + h) * Dh;
                float mx = -INFINITY;
                for (size_t j = 0; j < cand.size(); ++j) mx = std::max(mx, sc[j] = cpu::dot(qh, cand[j], Dh) * scale);
                float den = cpu::exp_f32(sink[size_t(h)] - mx);
                for (size_t j = 0; j < cand.size(); ++j) den += (sc[j] = cpu::exp_f32(sc[j] - mx));
                float* oh = ref.data() + (t * H + h) * Dh;
                std::fill(oh, oh + Dh, 0.0f);
                for (size_t j = 0; j < cand.size(); ++j) {
                    const float pj = official ? cpu::round_bf16(sc[j]) : sc[j];
                    for (int64_t d = 0; d < Dh; ++d) oh[d] += pj * cand[j][d];
                }
                for (int64_t d = 0; d < Dh; ++d) oh[d] /= den;
                if (official) cpu::round_bf16_inplace(oh, Dh);
                rope.apply(oh, Dh, pos, true);
                if (official) cpu::round_bf16_inplace(oh + Dh - R, R);
            }
        }
        Dev<float> dring(ring), dent(entries), dkv(kv), dq(q), dsink(sink), dout(ref.size()),
            dscratch(size_t(rows * H * (W + topk)));
        std::vector<int32_t> positions(static_cast<size_t>(rows));
        for (int64_t t = 0; t < rows; ++t) positions[size_t(t)] = int32_t(P0 + t);
        Dev<int32_t> dsel(selected), dpos(positions), drs(std::vector<int32_t>(size_t(rows), 0));
        // Contiguous entries, then entries in pages as the models' state holds them (64 per page, after 256 floats).
        cuda::DeviceSegment seg;
        seg.num_rows = rows;
        seg.first_position = P0;
        seg.window = dring.ptr();
        seg.comp_entries = dent.ptr();
        const PagedRowsCopy paged(entries, Dh, 64, 256);
        cuda::DeviceSegment pseg = seg;
        pseg.comp_entries = nullptr;
        pseg.pages = paged.table.ptr();
        pseg.entries_per_page = paged.per_page;
        pseg.comp_offset = paged.offset;
        Dev<cuda::DeviceSegment> dseg(std::vector<cuda::DeviceSegment>{seg}), dpseg(std::vector<cuda::DeviceSegment>{pseg});
        struct Run {
            int64_t rows;
            bool in_pages;
        };
        for (const Run run : {Run{rows, false}, Run{4, false}, Run{rows, true}}) {
            const int64_t n = run.rows;
            cuda::sparse_attention({.segments = run.in_pages ? dpseg.ptr() : dseg.ptr(), .row_segment = drs.ptr(),
                                    .positions = dpos.ptr(), .rows = n, .heads = H, .head_dim = Dh, .q = dq.ptr(),
                                    .kv = dkv.ptr(), .sink = dsink.ptr(), .window = W, .window_rows = WR,
                                    .kind = cuda::AttentionKind::kCsa, .ratio = m, .selected = dsel.ptr(), .topk = topk,
                                    .max_candidates = W + topk, .scratch = dscratch.ptr(), .cos_sin = dcs.ptr(),
                                    .rope_dim = R, .softmax_scale = scale, .official = official, .out = dout.ptr()},
                                   Stream{});
            const std::vector<float> want(ref.begin(), ref.begin() + n * H * Dh);
            expect_bits_equal(want, dout.host(want.size()),
                              std::string(official ? "sparse attention (official)" : "sparse attention (exact)") + ", " +
                                  std::to_string(n) + " rows" + (run.in_pages ? ", paged entries" : ""));
        }
        if (!official) continue;
        // The tensor-core kernel (fast mode): the official kernel's online softmax in blocks of 64 with
        // bf16 P; equal to the reference within bf16 rounding of the outputs, and batch-invariant.
        std::vector<float> first;
        for (int64_t n : {rows, int64_t(4), -rows}) {  // -rows: all rows, paged entries
            const bool in_pages = n < 0;
            n = in_pages ? -n : n;
            Dev<float> dtc(ref.size());
            cuda::sparse_attention({.segments = in_pages ? dpseg.ptr() : dseg.ptr(), .row_segment = drs.ptr(), .positions = dpos.ptr(), .rows = n,
                                    .heads = H, .head_dim = Dh, .q = dq.ptr(), .kv = dkv.ptr(), .sink = dsink.ptr(),
                                    .window = W, .window_rows = WR, .kind = cuda::AttentionKind::kCsa, .ratio = m,
                                    .selected = dsel.ptr(), .topk = topk, .max_candidates = W + topk,
                                    .scratch = nullptr, .cos_sin = dcs.ptr(), .rope_dim = R, .softmax_scale = scale,
                                    .official = true, .tensor_cores = true, .out = dtc.ptr()},
                                   Stream{});
            const std::vector<float> got = dtc.host(size_t(n * H * Dh));
            double max_ref = 0, max_err = 0, sum_ref = 0, sum_err = 0;
            for (size_t i = 0; i < got.size(); ++i) {
                const double e = std::fabs(double(got[i]) - double(ref[i]));
                max_ref = std::max(max_ref, std::fabs(double(ref[i])));
                max_err = std::max(max_err, e);
                sum_ref += std::fabs(double(ref[i]));
                sum_err += e;
            }
            EXPECT_LE(max_err, 2e-2 * max_ref) << n << " rows";
            EXPECT_LE(sum_err, 4e-3 * sum_ref) << n << " rows";
            EXPECT_GT(max_err, 0.0) << "the tensor-core path ran (it differs from the reference in rounding)";
            if (first.empty()) first = got;
            else expect_bits_equal(std::vector<float>(first.begin(), first.begin() + n * H * Dh), got,
                                   "tensor-core attention: rows alone equal rows in a batch");
        }
        // sparse_attention's pick (the wgmma kernel on sm_90), the pipelined kernel (rows in flight through a
        // ring, where the device's shared memory holds it) and the one-buffer kernel give the same bits:
        // CSA (10 full blocks of 64) and HCA (128 window + 46 entries: 3 blocks, the last partial),
        // batches of 12 rows and 1 row.
        for (const cuda::AttentionKind kind : {cuda::AttentionKind::kCsa, cuda::AttentionKind::kHca}) {
            for (const int64_t n : {rows, int64_t(1)}) {
                std::vector<float> outs[2];
                for (const bool single : {false, true}) {
                    Dev<float> dtc(size_t(n * H * Dh));
                    const bool csa = kind == cuda::AttentionKind::kCsa;
                    const cuda::SparseAttentionParams ap{.segments = dseg.ptr(), .row_segment = drs.ptr(), .positions = dpos.ptr(), .rows = n,
                                            .heads = H, .head_dim = Dh, .q = dq.ptr(), .kv = dkv.ptr(), .sink = dsink.ptr(),
                                            .window = W, .window_rows = WR, .kind = kind, .ratio = csa ? m : 128,
                                            .selected = csa ? dsel.ptr() : nullptr, .topk = csa ? topk : 0,
                                            .max_candidates = W + topk, .scratch = nullptr, .cos_sin = dcs.ptr(), .rope_dim = R,
                                            .softmax_scale = scale, .official = true, .tensor_cores = true, .out = dtc.ptr()};
                    if (single) ASSERT_TRUE(cuda::sparse_attention_tc_one_buffer(ap, Stream{}));
                    else cuda::sparse_attention(ap, Stream{});
                    outs[single ? 1 : 0] = dtc.host(size_t(n * H * Dh));
                }
                EXPECT_NE(outs[0], std::vector<float>(outs[0].size(), 0.0f));
                expect_bits_equal(outs[1], outs[0],
                                  std::string("tensor-core attention: pick = one buffer, ") + (kind == cuda::AttentionKind::kCsa ? "CSA" : "HCA") +
                                      ", " + std::to_string(n) + " rows");
                // The bf16 copy (out_bf16: one [rows, heads·Dh] group, or groups of 8 heads group-major as the
                // dense wo_a launches read it), from the wgmma kernel with the f32 output skipped and from the
                // reference kernel (tensor_cores off: f32, then converted): the high halves of the f32 outputs.
                for (const bool tc : {true, false}) {
                    for (const int64_t gh : {int64_t(0), int64_t(8)}) {
                        Dev<float> df(size_t(n * H * Dh));
                        Dev<uint16_t> d16(size_t(n * H * Dh));
                        const bool csa = kind == cuda::AttentionKind::kCsa;
                        Dev<float> dscr(size_t(n * H * (W + topk)));
                        cuda::sparse_attention({.segments = dseg.ptr(), .row_segment = drs.ptr(), .positions = dpos.ptr(), .rows = n,
                                                .heads = H, .head_dim = Dh, .q = dq.ptr(), .kv = dkv.ptr(), .sink = dsink.ptr(),
                                                .window = W, .window_rows = WR, .kind = kind, .ratio = csa ? m : 128,
                                                .selected = csa ? dsel.ptr() : nullptr, .topk = csa ? topk : 0,
                                                .max_candidates = W + topk, .scratch = dscr.ptr(), .cos_sin = dcs.ptr(), .rope_dim = R,
                                                .softmax_scale = scale, .official = true, .tensor_cores = tc, .out = df.ptr(),
                                                .out_bf16 = d16.ptr(), .bf16_group_heads = gh, .bf16_group_stride = gh ? n * gh * Dh : 0,
                                                .f32_unused = tc},
                                               Stream{});
                        const std::vector<float> f32 = tc ? outs[0] : df.host(size_t(n * H * Dh));
                        const std::vector<uint16_t> got = d16.host(size_t(n * H * Dh));
                        int64_t bad = 0;
                        for (int64_t r = 0; r < n; ++r)
                            for (int64_t h = 0; h < H; ++h)
                                for (int64_t c = 0; c < Dh; ++c) {
                                    uint32_t bits;
                                    std::memcpy(&bits, &f32[size_t((r * H + h) * Dh + c)], 4);
                                    const int64_t at = gh ? (h / gh) * n * gh * Dh + (r * gh + h % gh) * Dh + c : (r * H + h) * Dh + c;
                                    bad += got[size_t(at)] != uint16_t(bits >> 16) || (bits & 0xFFFFu) != 0;
                                }
                        EXPECT_EQ(bad, 0) << "bf16 output, tensor cores " << tc << ", groups of " << gh << " heads, " << n << " rows";
                    }
                }
            }
        }
    }
}

TEST_F(CudaOps, SparseSinkAttentionKernelsAgreeAtPrefillShapes) {
    // The tensor-core kernels (wgmma on sm_90 and its earlier forms; the cp.async ring; the one-buffer kernel) give the same
    // bits on a prefill batch at the model's widths (64 heads x 512, window 128 in a ring of 144, CSA
    // top-512 at ratio 4, HCA at ratio 128): two segments, one from position 0 (partial windows, fewer
    // than 512 visible entries, partial blocks) and one from position 5997 (windows partly in the
    // ring, full picks); q at two scales (flat and peaked softmaxes). Each row's output is also the
    // same computed alone (batch-invariant).
    const int64_t H = 64, Dh = 512, R = 64, W = 128, WR = W + 16, topk = 512, n_entries = 1600;
    const int64_t rows_a = 160, rows_b = 96, rows = rows_a + rows_b, P0b = 5997;
    const cpu::RopeTable rope(flash_yarn(), R);
    Dev<float> dcs(cos_sin(rope, 8192));
    std::vector<float> sink = randn(size_t(H), 145);
    Dev<float> dsink(sink);
    std::vector<int32_t> positions(static_cast<size_t>(rows)), row_seg(static_cast<size_t>(rows));
    for (int64_t t = 0; t < rows; ++t) {
        positions[size_t(t)] = int32_t(t < rows_a ? t : P0b + (t - rows_a));
        row_seg[size_t(t)] = t < rows_a ? 0 : 1;
    }
    Dev<int32_t> dpos(positions), drs(row_seg);
    Dev<float> dring_a(bf16_values(randn(size_t(WR * Dh), 141))), dring_b(bf16_values(randn(size_t(WR * Dh), 142)));
    Dev<float> dent_a(bf16_values(randn(size_t(n_entries * Dh), 143))), dent_b(bf16_values(randn(size_t(n_entries * Dh), 144)));
    Dev<float> dkv(bf16_values(randn(size_t(rows * Dh), 146)));
    std::vector<cuda::DeviceSegment> segs(2);
    segs[0].row_begin = 0;
    segs[0].num_rows = rows_a;
    segs[0].first_position = 0;
    segs[0].window = dring_a.ptr();
    segs[0].comp_entries = dent_a.ptr();
    segs[1].row_begin = rows_a;
    segs[1].num_rows = rows_b;
    segs[1].first_position = P0b;
    segs[1].window = dring_b.ptr();
    segs[1].comp_entries = dent_b.ptr();
    Dev<cuda::DeviceSegment> dseg(segs);
    // CSA picks: distinct visible entries ((pos + 1) / 4 of them) in random order, the first min(visible, 512) used.
    std::vector<int32_t> selected(size_t(rows * topk), 0);
    std::mt19937 rng(147);
    for (int64_t t = 0; t < rows; ++t) {
        const int64_t vis = std::min<int64_t>((positions[size_t(t)] + 1) / 4, n_entries);
        std::vector<int32_t> all(static_cast<size_t>(vis));
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), rng);
        std::copy_n(all.begin(), std::min<int64_t>(vis, topk), selected.begin() + t * topk);
    }
    Dev<int32_t> dsel(selected);
    const cuda::TcaVariant variants[] = {cuda::TcaVariant::kAuto,          cuda::TcaVariant::kWgmma,       cuda::TcaVariant::kWgmmaScores1,
                                         cuda::TcaVariant::kWgmmaScores4,  cuda::TcaVariant::kWgmmaShared, cuda::TcaVariant::kRing,
                                         cuda::TcaVariant::kOneBuffer};
    const char* names[] = {"pick", "wgmma", "wgmma (scores on 1 warpgroup)", "wgmma (scores on 4 warpgroups)",
                           "wgmma (shared-memory epilogue)", "ring", "one buffer"};
    for (const float q_scale : {0.05f, 1.0f}) {
        const std::vector<float> qh = bf16_values(randn(size_t(rows * H * Dh), 148, q_scale));
        Dev<float> dq(qh);
        std::vector<uint16_t> qh16(qh.size());
        for (size_t i = 0; i < qh.size(); ++i) qh16[i] = uint16_t(std::bit_cast<uint32_t>(qh[i]) >> 16);
        Dev<uint16_t> dq16(qh16);
        for (const cuda::AttentionKind kind : {cuda::AttentionKind::kCsa, cuda::AttentionKind::kHca}) {
            const bool csa = kind == cuda::AttentionKind::kCsa;
            cuda::SparseAttentionParams ap{.segments = dseg.ptr(), .row_segment = drs.ptr(), .positions = dpos.ptr(), .rows = rows,
                                           .heads = H, .head_dim = Dh, .q = dq.ptr(), .kv = dkv.ptr(), .sink = dsink.ptr(),
                                           .window = W, .window_rows = WR, .kind = kind, .ratio = csa ? 4 : 128,
                                           .selected = csa ? dsel.ptr() : nullptr, .topk = csa ? topk : 0,
                                           .max_candidates = W + (csa ? topk : n_entries), .scratch = nullptr,
                                           .cos_sin = dcs.ptr(), .rope_dim = R, .softmax_scale = 1.0f / std::sqrt(float(Dh)),
                                           .official = true, .tensor_cores = true, .out = nullptr};
            const std::string what = std::string(csa ? "CSA" : "HCA") + ", q scale " + std::to_string(q_scale) + ": ";
            std::vector<float> first;
            for (size_t v = 0; v < std::size(variants); ++v) {
                Dev<float> dout(std::vector<float>(size_t(rows * H * Dh), std::nanf("")));
                ap.out = dout.ptr();
                if (!cuda::sparse_attention_tc_variant(ap, Stream{}, variants[v])) {
                    EXPECT_NE(variants[v], cuda::TcaVariant::kAuto);
                    EXPECT_NE(variants[v], cuda::TcaVariant::kOneBuffer);
                    continue;
                }
                const std::vector<float> got = dout.host(size_t(rows * H * Dh));
                EXPECT_EQ(std::count_if(got.begin(), got.end(), [](float x) { return std::isnan(x); }), 0) << what << names[v];
                if (first.empty()) {
                    first = got;
                    EXPECT_NE(first, std::vector<float>(first.size(), 0.0f));
                } else {
                    expect_bits_equal(first, got, what + names[v] + " = " + names[0]);
                }
                // q as bf16 bits (q_bf16, q null): the same bits.
                Dev<float> dout_q16(std::vector<float>(size_t(rows * H * Dh), std::nanf("")));
                cuda::SparseAttentionParams bq = ap;
                bq.q = nullptr;
                bq.q_bf16 = dq16.ptr();
                bq.out = dout_q16.ptr();
                ASSERT_TRUE(cuda::sparse_attention_tc_variant(bq, Stream{}, variants[v])) << what << names[v];
                expect_bits_equal(got, dout_q16.host(size_t(rows * H * Dh)), what + names[v] + ", q in bf16");
            }
            // The model's fast form through sparse_attention: q in bf16 only, the output in bf16 only (out
            // null, f32_unused): the f32 output's values.
            {
                ASSERT_TRUE(cuda::sparse_attention_tensor_cores_fit(Dh));
                Dev<uint16_t> dob(std::vector<uint16_t>(size_t(rows * H * Dh), uint16_t(0x7FC1)));
                cuda::SparseAttentionParams bq = ap;
                bq.q = nullptr;
                bq.q_bf16 = dq16.ptr();
                bq.out = nullptr;
                bq.out_bf16 = dob.ptr();
                bq.f32_unused = true;
                cuda::sparse_attention(bq, Stream{});
                const std::vector<uint16_t> got16 = dob.host(size_t(rows * H * Dh));
                std::vector<float> widened(got16.size());
                for (size_t i = 0; i < got16.size(); ++i) widened[i] = std::bit_cast<float>(uint32_t(got16[i]) << 16);
                expect_bits_equal(first, widened, what + "q and output in bf16 only");
            }
            // Rows alone (the last row of each segment, through sparse_attention's pick) = rows in the batch.
            for (const int64_t r : {rows_a - 1, rows - 1}) {
                Dev<float> dout(size_t(H * Dh));
                cuda::SparseAttentionParams one = ap;
                one.rows = 1;
                one.positions = dpos.ptr() + r;
                one.row_segment = drs.ptr() + r;
                one.q = dq.ptr() + r * H * Dh;
                one.selected = csa ? dsel.ptr() + r * topk : nullptr;
                one.out = dout.ptr();
                cuda::sparse_attention(one, Stream{});
                expect_bits_equal(std::vector<float>(first.begin() + r * H * Dh, first.begin() + (r + 1) * H * Dh),
                                  dout.host(size_t(H * Dh)), what + "row " + std::to_string(r) + " alone");
                Dev<float> dout16(std::vector<float>(size_t(H * Dh), std::nanf("")));  // and with q in bf16
                one.q = nullptr;
                one.q_bf16 = dq16.ptr() + r * H * Dh;
                one.out = dout16.ptr();
                cuda::sparse_attention(one, Stream{});
                expect_bits_equal(std::vector<float>(first.begin() + r * H * Dh, first.begin() + (r + 1) * H * Dh),
                                  dout16.host(size_t(H * Dh)), what + "row " + std::to_string(r) + " alone, q in bf16");
            }
        }
    }
}

// ---- Sampling -----------------------------------------------------------------------------------

// cuda::sample over host rows of logits [*, V]: draw k reads logits row row_of[k] (null: row k); verify
// rows' outcomes into `accepted` when given.
std::vector<int32_t> device_sample(const std::vector<float>& logits, int64_t V, const std::vector<cuda::SampleRow>& rows,
                                   const std::vector<int32_t>* row_of = nullptr, std::vector<uint8_t>* accepted = nullptr) {
    const int64_t n = static_cast<int64_t>(rows.size());
    Dev<float> dl(logits);
    Dev<cuda::SampleRow> drow(rows);
    Dev<int32_t> drow_of(row_of ? *row_of : std::vector<int32_t>(1, 0));
    Dev<double> dscratch(static_cast<size_t>(n * V)), dparts(static_cast<size_t>(cuda::sample_parts(n, V)));
    Dev<int32_t> didx(static_cast<size_t>(n * cuda::kMaxSampleTopK)), dtok(static_cast<size_t>(n));
    Dev<uint8_t> dacc(static_cast<size_t>(n));
    bool verify = false, nucleus = false;
    for (const cuda::SampleRow& r : rows) {
        verify = verify || r.draft >= 0;
        nucleus = nucleus || cuda::sample_nucleus_row(r);
    }
    cuda::sample({.logits = dl.ptr(), .rows = n, .vocab = V, .logit_row = row_of ? drow_of.ptr() : nullptr,
                  .row = drow.ptr(), .scratch = dscratch.ptr(), .parts = dparts.ptr(), .index_scratch = didx.ptr(),
                  .tokens = dtok.ptr(), .accepted = accepted ? dacc.ptr() : nullptr, .verify_rows = verify,
                  .nucleus_rows = nucleus},
                 Stream{});
    if (accepted) *accepted = dacc.host(static_cast<size_t>(n));
    return dtok.host(static_cast<size_t>(n));
}

// A draft distribution near p (scale 0.2) or unrelated to it (scale 4): q = softmax((l + scale * noise) / t)
// into qr [V], and a draft drawn from q by the inverse CDF at a uniform of `rng`.
int32_t noisy_draft(const float* l, const float* noise, int64_t V, double scale, double t, float* qr, std::mt19937& rng) {
    std::vector<double> z(static_cast<size_t>(V));
    for (int64_t v = 0; v < V; ++v) z[size_t(v)] = double(l[v]) + scale * noise[v];
    const double mx = *std::max_element(z.begin(), z.end());
    double den = 0;
    for (double& x : z) den += (x = std::exp((x - mx) / t));
    for (int64_t v = 0; v < V; ++v) qr[v] = static_cast<float>(z[size_t(v)] / den);
    double u = std::uniform_real_distribution<double>(0, 1)(rng), acc = 0;
    int32_t draft = 0;
    for (; draft + 1 < V; ++draft) {
        acc += qr[draft];
        if (u < acc) break;
    }
    return draft;
}

// The CPU sampler's parameters of a device sampling row (the fields both have).
SamplingParams params_of(const cuda::SampleRow& sr) {
    SamplingParams sp;
    sp.temperature = sr.temperature;
    sp.top_k = sr.top_k;
    sp.top_p = sr.top_p;
    sp.min_p = sr.min_p;
    return sp;
}

// Verify rows (a draft to test; engine/speculative/verify.cpp's verify_row): greedy, and sampled with
// one-hot drafts or drafts from a distribution q on the device (close to p: mostly accepted; unrelated:
// mostly rejected, the residual max(p - q, 0) drawn by the blocked walk; top-k rows over their candidates),
// at V4's vocabulary and a small one; bonus rows (no draft) in the same launch. Tokens and outcomes are the
// CPU verifier's.
TEST_F(CudaOps, SamplerVerifyRowsEqualTheCpuVerifier) {
    for (const int64_t V : {int64_t{129280}, int64_t{1000}}) {
        const int64_t rows = 48;
        auto logits = randn(size_t(rows * V), 31, 3.0f);
        const auto noise = randn(size_t(rows * V), 32, 1.0f);
        std::vector<float> q(size_t(rows * V), 0.0f);
        std::vector<cuda::SampleRow> host_rows(static_cast<size_t>(rows));
        std::vector<int32_t> ref(static_cast<size_t>(rows));
        std::vector<uint8_t> ref_acc(static_cast<size_t>(rows));
        std::mt19937 rng(7);
        Dev<float> dq(static_cast<size_t>(rows * V));  // (filled below, before the launch)
        const double temps[] = {0.0, 0.7, 1.0, 1.3};
        for (int64_t r = 0; r < rows; ++r) {
            const float* l = logits.data() + r * V;
            cuda::SampleRow& sr = host_rows[size_t(r)];
            sr.seed = 500 + uint64_t(r);
            sr.stream = uint64_t(r % 3);
            sr.counter = uint64_t(r % 5);
            sr.accept_stream = sr.stream + kAcceptStream;
            sr.temperature = temps[r % 4];
            const int kind = int(r / 4) % 4;  // 0 one-hot at the argmax, 1 one-hot anywhere, 2 q near p, 3 q unrelated
            const int64_t argmax = std::max_element(l, l + V) - l;
            int32_t draft = static_cast<int32_t>(kind == 0 ? argmax : int64_t(rng() % uint32_t(V)));
            float* qr = q.data() + r * V;
            if (sr.temperature > 0 && kind >= 2) {  // q's logits: p's plus noise
                draft = noisy_draft(l, noise.data() + r * V, V, kind == 3 ? 4.0 : 0.2, sr.temperature, qr, rng);
                sr.q = dq.ptr() + r * V;
            }
            if (r % 8 == 7) draft = -1;  // a bonus row: an ordinary draw
            sr.draft = draft;
            if (r % 6 == 5) sr.top_k = 50;  // top-k rows (one sum over the candidates, in their order)
            if (r % 12 == 11) {
                sr.top_k = 300;
                sr.top_p = 0.9;
                sr.min_p = 0.01;
            }
            ASSERT_TRUE(cuda::sample_supported(sr));
            const SamplingParams sp = params_of(sr);
            const std::vector<int32_t> generated(sr.counter, 3);
            const VerifyRowResult v = verify_row(
                {.sample = {.logits = std::span<const float>(l, size_t(V)), .params = &sp, .generated = generated,
                            .seed = sr.seed, .stream = sr.stream},
                 .draft = draft >= 0 ? std::optional<int32_t>(draft) : std::nullopt,
                 .draft_probs = sr.q ? std::span<const float>(qr, size_t(V)) : std::span<const float>()});
            ref[size_t(r)] = v.token;
            ref_acc[size_t(r)] = v.accepted ? 1 : 0;
        }
        dq.buf->copy_from_host(q.data(), q.size() * sizeof(float));
        std::vector<uint8_t> acc;
        EXPECT_EQ(device_sample(logits, V, host_rows, nullptr, &acc), ref) << "V=" << V;
        EXPECT_EQ(acc, ref_acc) << "V=" << V;
        // Both outcomes of the test, in greedy and sampled rows alike.
        int64_t accepted = 0, rejected = 0;
        for (int64_t r = 0; r < rows; ++r)
            if (host_rows[size_t(r)].draft >= 0 && host_rows[size_t(r)].temperature > 0) (ref_acc[size_t(r)] ? accepted : rejected) += 1;
        EXPECT_GE(accepted, 4) << "V=" << V;
        EXPECT_GE(rejected, 4) << "V=" << V;
    }
}

// Top-p / min-p without top-k: drawn on the device when the rules keep at most 1,024 ids (the CPU's token),
// handed back (-1) when they keep more; at V4's vocabulary with sharp rows (small nuclei) and flat ones,
// and at a vocabulary the device sorts whole (every row drawn). Ties in the logits test the id order.
TEST_F(CudaOps, SamplerNucleusRowsEqualTheCpuSampler) {
    for (const int64_t V : {int64_t{129280}, int64_t{1000}}) {
        const int64_t rows = 24;
        auto logits = randn(size_t(rows * V), 55, 3.0f);
        for (float& x : logits) x = std::round(x * 8.0f) / 8.0f;  // (equal logits)
        struct Cfg { double t, top_p, min_p; bool flat; };
        const Cfg cfgs[] = {{0.3, 0.9, 0.0, false}, {0.5, 0.95, 0.0, false}, {0.25, 1.0, 0.05, false},
                            {0.4, 0.8, 0.01, false}, {3.0, 0.99, 0.0, true}, {5.0, 1.0, 0.05, true}};
        std::vector<cuda::SampleRow> host_rows(static_cast<size_t>(rows));
        std::vector<int32_t> ref(static_cast<size_t>(rows));
        std::vector<uint8_t> flat(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) {
            const Cfg& c = cfgs[r % 6];
            cuda::SampleRow& sr = host_rows[size_t(r)];
            sr.seed = 900 + uint64_t(r);
            sr.stream = uint64_t(r % 2);
            sr.counter = uint64_t(r % 7);
            sr.temperature = c.t;
            sr.top_p = c.top_p;
            sr.min_p = c.min_p;
            ASSERT_TRUE(cuda::sample_supported(sr));
            ASSERT_TRUE(cuda::sample_nucleus_row(sr));
            const SamplingParams sp = params_of(sr);
            const std::vector<int32_t> generated(sr.counter, 3);
            const SampleInput in{.logits = std::span<const float>(logits.data() + r * V, size_t(V)), .params = &sp,
                                 .generated = generated, .seed = sr.seed, .stream = sr.stream};
            ref[size_t(r)] = sample(in).token;
            const size_t kept = sampling_distribution(processed_logits(in), sp).ids.size();
            flat[size_t(r)] = V > cuda::kMaxSampleTopK && c.flat;
            if (V > cuda::kMaxSampleTopK) {  // (the cases are far from the device's 1,024 ids either way)
                if (c.flat) {
                    EXPECT_GT(kept, size_t{2048}) << "row " << r;
                } else {
                    EXPECT_LT(kept, size_t{512}) << "row " << r;
                }
            }
        }
        const std::vector<int32_t> got = device_sample(logits, V, host_rows);
        for (int64_t r = 0; r < rows; ++r)
            EXPECT_EQ(got[size_t(r)], flat[size_t(r)] ? -1 : ref[size_t(r)]) << "V=" << V << " row " << r;
    }
}

// Verify rows of top-p / min-p requests without top-k (the nucleus kernel): top-p alone, min-p alone, both;
// drafts one-hot at the argmax, at the second id of the order (inside the nucleus: either outcome), anywhere
// (nearly always outside it: p = 0, rejected, the residual is p), drawn from q near p or from an unrelated q
// (rejection-heavy, the residual over the nucleus); bonus rows. Sharp rows keep a nucleus the device
// decides: tokens and outcomes equal the CPU verifier's. Flat rows keep more than 1,024 ids at V4's
// vocabulary: token -1 and accepted 0 (the engine decides them on the host); at V = 1,000 the device
// sorts every id and decides them too. Ties in the logits test the id order.
TEST_F(CudaOps, SamplerNucleusVerifyRowsEqualTheCpuVerifier) {
    for (const int64_t V : {int64_t{129280}, int64_t{1000}}) {
        const int64_t rows = 60;
        auto logits = randn(size_t(rows * V), 61, 3.0f);
        for (float& x : logits) x = std::round(x * 8.0f) / 8.0f;  // (equal logits)
        const auto noise = randn(size_t(rows * V), 62, 1.0f);
        struct Cfg { double t, top_p, min_p; bool flat; };
        const Cfg cfgs[] = {{0.3, 0.9, 0.0, false}, {0.5, 0.95, 0.0, false}, {0.25, 1.0, 0.05, false},
                            {0.4, 0.8, 0.01, false}, {3.0, 0.99, 0.0, true}, {5.0, 1.0, 0.05, true}};
        std::vector<float> q(size_t(rows * V), 0.0f);
        std::vector<cuda::SampleRow> host_rows(static_cast<size_t>(rows));
        std::vector<int32_t> ref(static_cast<size_t>(rows));
        std::vector<uint8_t> ref_acc(static_cast<size_t>(rows)), flat(static_cast<size_t>(rows));
        std::mt19937 rng(17);
        Dev<float> dq(static_cast<size_t>(rows * V));  // (filled below, before the launch)
        int64_t flat_verify = 0;
        for (int64_t r = 0; r < rows; ++r) {
            const Cfg& c = cfgs[r % 6];
            const int kind = int(r / 6) % 5;  // 0 one-hot argmax, 1 one-hot second, 2 one-hot anywhere, 3 q near p, 4 q unrelated
            const float* l = logits.data() + r * V;
            cuda::SampleRow& sr = host_rows[size_t(r)];
            sr.seed = 700 + uint64_t(r);
            sr.stream = uint64_t(r % 3);
            sr.counter = uint64_t(r % 5);
            sr.accept_stream = sr.stream + kAcceptStream;
            sr.temperature = c.t;
            sr.top_p = c.top_p;
            sr.min_p = c.min_p;
            std::vector<int32_t> order(static_cast<size_t>(V));
            std::iota(order.begin(), order.end(), 0);
            std::partial_sort(order.begin(), order.begin() + 2, order.end(),
                              [&](int32_t a, int32_t b) { return l[a] != l[b] ? l[a] > l[b] : a < b; });
            int32_t draft = kind == 0 ? order[0] : kind == 1 ? order[1] : static_cast<int32_t>(rng() % uint32_t(V));
            float* qr = q.data() + r * V;
            if (kind >= 3) {  // q's logits: p's plus noise, untruncated
                draft = noisy_draft(l, noise.data() + r * V, V, kind == 4 ? 4.0 : 0.2, c.t, qr, rng);
                sr.q = dq.ptr() + r * V;
            }
            if (r % 10 == 9) draft = -1;  // a bonus row: an ordinary nucleus draw
            sr.draft = draft;
            ASSERT_TRUE(cuda::sample_supported(sr));
            ASSERT_TRUE(cuda::sample_nucleus_row(sr));
            const SamplingParams sp = params_of(sr);
            const std::vector<int32_t> generated(sr.counter, 3);
            const SampleInput in{.logits = std::span<const float>(l, size_t(V)), .params = &sp, .generated = generated,
                                 .seed = sr.seed, .stream = sr.stream};
            const VerifyRowResult v = verify_row({.sample = in,
                                                  .draft = draft >= 0 ? std::optional<int32_t>(draft) : std::nullopt,
                                                  .draft_probs = sr.q ? std::span<const float>(qr, size_t(V)) : std::span<const float>()});
            ref[size_t(r)] = v.token;
            ref_acc[size_t(r)] = v.accepted ? 1 : 0;
            flat[size_t(r)] = V > cuda::kMaxSampleTopK && c.flat;
            flat_verify += flat[size_t(r)] && draft >= 0;
            const size_t kept = sampling_distribution(processed_logits(in), sp).ids.size();
            if (V > cuda::kMaxSampleTopK) {  // (the cases are far from the device's 1,024 ids either way)
                if (c.flat) {
                    EXPECT_GT(kept, size_t{2048}) << "row " << r;
                } else {
                    EXPECT_LT(kept, size_t{512}) << "row " << r;
                }
            }
        }
        dq.buf->copy_from_host(q.data(), q.size() * sizeof(float));
        std::vector<uint8_t> acc;
        const std::vector<int32_t> got = device_sample(logits, V, host_rows, nullptr, &acc);
        int64_t accepted = 0, rejected = 0, rejected_in_nucleus = 0;
        for (int64_t r = 0; r < rows; ++r) {
            const bool f = flat[size_t(r)];
            EXPECT_EQ(got[size_t(r)], f ? -1 : ref[size_t(r)]) << "V=" << V << " row " << r;
            EXPECT_EQ(acc[size_t(r)], f ? 0 : ref_acc[size_t(r)]) << "V=" << V << " row " << r;
            const int32_t d = host_rows[size_t(r)].draft;
            if (f || d < 0) continue;
            (ref_acc[size_t(r)] ? accepted : rejected) += 1;
            // (a rejection whose residual draw differs from the draft's own row: the residual over the nucleus)
            rejected_in_nucleus += !ref_acc[size_t(r)] && ref[size_t(r)] != d;
        }
        // Both outcomes among the rows the device decides, and flat verify rows given up at V4's vocabulary.
        EXPECT_GE(accepted, 6) << "V=" << V;
        EXPECT_GE(rejected, 6) << "V=" << V;
        EXPECT_GE(rejected_in_nucleus, 6) << "V=" << V;
        if (V > cuda::kMaxSampleTopK) {
            EXPECT_GE(flat_verify, 10) << "V=" << V;
        }
    }
}

TEST_F(CudaOps, SamplerPicksTheCpuSamplersTokens) {
    const int64_t V = 129280;
    struct Cfg {
        double temperature;
        int32_t top_k;
        double top_p, min_p;
    };
    const Cfg cfgs[] = {{0.0, 0, 1.0, 0.0}, {1.0, 0, 1.0, 0.0}, {0.7, 0, 1.0, 0.0}, {1.0, 50, 1.0, 0.0},
                        {0.8, 1024, 0.9, 0.0}, {1.2, 40, 1.0, 0.05}, {0.6, 7, 0.5, 0.1}};
    const int64_t rows = int64_t(std::size(cfgs)) * 4;
    auto logits = randn(size_t(rows * V), 77, 3.0f);
    for (int64_t i = 0; i < 64; ++i) logits[size_t(5 * V + i)] = 12.0f;  // ties at the top
    std::vector<cuda::SampleRow> host_rows(static_cast<size_t>(rows));
    std::vector<int32_t> ref(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        const Cfg& c = cfgs[r / 4];
        cuda::SampleRow& sr = host_rows[size_t(r)];
        sr.seed = 1000 + uint64_t(r);
        sr.stream = uint64_t(r % 2);
        sr.counter = uint64_t(r % 4);
        sr.temperature = c.temperature;
        sr.top_k = c.top_k;
        sr.top_p = c.top_p;
        sr.min_p = c.min_p;
        ASSERT_TRUE(cuda::sample_supported(sr));
        const SamplingParams sp = params_of(sr);
        const std::vector<int32_t> generated(sr.counter, 3);  // the counter is the number generated so far
        ref[size_t(r)] = sample({.logits = std::span<const float>(logits.data() + r * V, size_t(V)), .params = &sp,
                                 .generated = generated, .seed = sr.seed, .stream = sr.stream})
                             .token;
    }
    EXPECT_EQ(device_sample(logits, V, host_rows), ref);
}

// Top-k rows take the top-k of slices of the row on many blocks, then the top-k of those candidates
// (kernels::topk_sliced): the CPU sampler's candidates, so its tokens, where a wrong candidate set would
// show: ties across slices at and above the k-th value (the lowest ids win), +0 and -0 as ties, k = 1 and
// k = 1024 (the largest the device takes), a row with fewer finite logits than k; many draws each.
TEST_F(CudaOps, SamplerTopkSlicesEqualTheCpuSampler) {
    const int64_t V = 129280;
    const float inf = std::numeric_limits<float>::infinity();
    struct Cfg {
        double temperature;
        int32_t top_k;
        double top_p;
    };
    const Cfg cfgs[] = {{1.0, 50, 1.0}, {2.0, 64, 1.0}, {1.0, 50, 1.0}, {1.5, 1024, 0.9}, {0.7, 1, 1.0}, {1.0, 50, 1.0}};
    const int64_t draws = 16, rows = int64_t(std::size(cfgs)) * draws;
    std::vector<float> base = randn(size_t(std::size(cfgs) * V), 81, 3.0f);
    auto at = [&](int64_t c, int64_t i) -> float& { return base[size_t(c * V + i)]; };
    for (int64_t i = 0; i < 100; ++i) at(0, 1000 + 1290 * i) = 20.0f;  // 100 ties across the slices, top 50
    for (int64_t i = 0; i < 30; ++i) at(1, 4000 * i + 7) = 24.0f;      // 30 above, then ties at the threshold
    for (int64_t i = 0; i < 100; ++i) at(1, 1290 * i + 11) = 20.0f;
    for (int64_t i = 0; i < V; ++i) at(2, i) = -5.0f - float(i % 7);   // +0 and -0 tie at the top
    for (int64_t i = 0; i < 80; ++i) at(2, 1600 * i + 3) = i % 2 ? -0.0f : 0.0f;
    at(4, 70000) = 30.0f;  // k = 1: equal maxima in two slices
    at(4, 5000) = 30.0f;
    for (int64_t i = 0; i < V; ++i) at(5, i) = -inf;  // 10 finite logits, k = 50
    for (int64_t i = 0; i < 10; ++i) at(5, 12000 * i + 5) = float(i) * 0.3f;
    std::vector<float> logits(size_t(rows * V));
    std::vector<cuda::SampleRow> host_rows(static_cast<size_t>(rows));
    std::vector<int32_t> ref(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        const int64_t c = r / draws;
        std::copy_n(base.begin() + c * V, V, logits.begin() + r * V);
        cuda::SampleRow& sr = host_rows[size_t(r)];
        sr.seed = 500 + uint64_t(r);
        sr.stream = uint64_t(r % 3);
        sr.counter = uint64_t(r % 5);
        sr.temperature = cfgs[c].temperature;
        sr.top_k = cfgs[c].top_k;
        sr.top_p = cfgs[c].top_p;
        ASSERT_TRUE(cuda::sample_supported(sr));
        const SamplingParams sp = params_of(sr);
        const std::vector<int32_t> generated(sr.counter, 3);
        ref[size_t(r)] = sample({.logits = std::span<const float>(logits.data() + r * V, size_t(V)), .params = &sp,
                                 .generated = generated, .seed = sr.seed, .stream = sr.stream})
                             .token;
    }
    for (int64_t r = 0; r < draws; ++r) EXPECT_LE(ref[size_t(r)], 1000 + 1290 * 49) << "the 50 lowest tied ids";
    EXPECT_EQ(ref[size_t(4 * draws)], 5000);
    EXPECT_EQ(device_sample(logits, V, host_rows), ref);
}

// Greedy rows take their argmax over slices of the row on many blocks, then the first maximum of the
// slices: the CPU's pick in every corner (ties across slices, NaN, all -inf, the last id, id 0).
TEST_F(CudaOps, GreedySamplerFirstMaximumAcrossSlices) {
    const int64_t V = 129280, rows = 9;
    const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
    auto logits = randn(size_t(rows * V), 93, 3.0f);
    auto at = [&](int64_t r, int64_t i) -> float& { return logits[size_t(r * V + i)]; };
    at(1, 70001) = 30.0f;  // ties in different slices: the lower id wins
    at(1, 5003) = 30.0f;
    at(1, 129000) = 30.0f;
    at(2, 0) = nan;  // NaN at id 0: never replaced
    at(2, 777) = 50.0f;
    for (int64_t i = 0; i < V; ++i) at(3, i) = -inf;  // all -inf: id 0
    for (int64_t i = 1; i < V; i += 3) at(4, i) = nan;  // NaNs never win
    at(4, 4000) = 40.0f;
    at(5, V - 1) = 40.0f;  // the last id
    for (int64_t i = 0; i < V; ++i) at(6, i) = -inf;  // one finite value at the end
    at(6, V - 2) = -1e30f;
    at(7, 0) = 40.0f;  // id 0 and an equal later id
    at(7, 65000) = 40.0f;
    for (int64_t i = 0; i < V; ++i) at(8, i) = 1.0f;  // all equal: id 0
    std::vector<cuda::SampleRow> host_rows(static_cast<size_t>(rows));
    std::vector<int32_t> ref(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        host_rows[size_t(r)].temperature = 0.0;
        SamplingParams sp;
        sp.temperature = 0.0;
        ref[size_t(r)] = sample({.logits = std::span<const float>(logits.data() + r * V, size_t(V)), .params = &sp}).token;
    }
    EXPECT_EQ(ref[1], 5003);
    EXPECT_EQ(ref[4], 4000);
    EXPECT_EQ(device_sample(logits, V, host_rows), ref);
}

// Draws that read shared logits rows through logit_row (n > 1 siblings: one row, several streams),
// and low temperatures whose tails underflow to zero weight (the CPU trims them before the walk).
TEST_F(CudaOps, SamplerDrawsFromSharedRowsAndUnderflowedTails) {
    const int64_t V = 129280, logit_rows = 3, draws = 48;
    auto logits = randn(size_t(logit_rows * V), 91, 4.0f);
    for (int64_t i = 0; i < V; i += 97) logits[size_t(V + i)] = -1e30f;  // a few dead tokens in row 1
    std::vector<cuda::SampleRow> host_rows(static_cast<size_t>(draws));
    std::vector<int32_t> row_of(static_cast<size_t>(draws)), ref(static_cast<size_t>(draws));
    const double temps[] = {0.005, 0.02, 0.3, 1.0};
    for (int64_t k = 0; k < draws; ++k) {
        cuda::SampleRow& sr = host_rows[size_t(k)];
        sr.seed = 7;
        sr.stream = uint64_t(k % 5);  // siblings of one request: same seed and row, their own streams
        sr.counter = uint64_t(k / 5);
        sr.temperature = temps[k % 4];
        sr.top_k = k % 3 == 0 ? 0 : (k % 3 == 1 ? 64 : 1000);
        sr.top_p = k % 3 == 2 ? 0.97 : 1.0;
        row_of[size_t(k)] = int32_t(k % logit_rows);
        ASSERT_TRUE(cuda::sample_supported(sr));
        const SamplingParams sp = params_of(sr);
        const std::vector<int32_t> generated(sr.counter, 3);
        ref[size_t(k)] = sample({.logits = std::span<const float>(logits.data() + row_of[size_t(k)] * V, size_t(V)),
                                 .params = &sp, .generated = generated, .seed = sr.seed, .stream = sr.stream})
                             .token;
    }
    EXPECT_EQ(device_sample(logits, V, host_rows, &row_of), ref);
}

}  // namespace
}  // namespace deepinfer
