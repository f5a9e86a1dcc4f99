// SPDX-License-Identifier: Apache-2.0
// The rounding operations of the `official` numerics mode, bit-exact against PyTorch/ml_dtypes
// (tests/data/formats/official_ops.safetensors, tools/reference/make_official_ops.py): the FP8
// simulation of cached KV, the indexer's Hadamard + FP4 simulation, and the bf16 head norm.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "backends/cpu/primitives.h"
#include "model/compressor.h"
#include "unit/fixtures.h"

namespace deepinfer {
namespace {

using test::fixture_values;

class OfficialOps : public ::testing::Test {
protected:
    SafetensorsFile fx{test::data_path("formats/official_ops.safetensors")};

    // Applies `op` to each row of `input` and counts elements that differ bitwise from `expected`.
    template <typename Op>
    void check(const char* input, const char* expected, int64_t cols, Op op, int max_mismatches = 0) {
        std::vector<float> x = fixture_values<float>(fx, input, DType::kF32);
        std::vector<float> want = fixture_values<float>(fx, expected, DType::kF32);
        ASSERT_EQ(x.size(), want.size());
        int mismatches = 0;
        for (size_t r = 0; r < x.size() / size_t(cols); ++r) {
            float* row = x.data() + r * size_t(cols);
            op(row);
            for (int64_t c = 0; c < cols; ++c)
                if (!test::same_float(row[c], want[r * size_t(cols) + size_t(c)]) && mismatches++ < 5)
                    ADD_FAILURE() << expected << " row " << r << " col " << c << ": got " << row[c] << " want "
                                  << want[r * size_t(cols) + size_t(c)];
        }
        EXPECT_LE(mismatches, max_mismatches) << expected;
    }
};

TEST_F(OfficialOps, KvFp8Simulation) {
    check("kv_x", "kv_fp8_sim", 512, [](float* r) { fp8_simulate_nope(r, 448); });
}

TEST_F(OfficialOps, WalshHadamard) {
    check("ix_x", "ix_hadamard", 128, [](float* r) {
        walsh_hadamard(r, 128);
        cpu::round_bf16_inplace(r, 128);
    });
}

TEST_F(OfficialOps, Fp4Simulation) { check("ix_x", "ix_fp4_sim", 128, [](float* r) { fp4_simulate(r, 128); }); }

TEST_F(OfficialOps, IndexerHadamardFp4) {
    check("ix_x", "ix_hadamard_fp4", 128, [](float* r) { hadamard_fp4_simulate(r, 128); });
}

TEST_F(OfficialOps, HeadNormInBf16Arithmetic) {
    check("qn_x", "qn_out", 512, [](float* r) { cpu::rms_norm_bf16_arith(r, 1e-6f, 512); });
}

}  // namespace
}  // namespace deepinfer
