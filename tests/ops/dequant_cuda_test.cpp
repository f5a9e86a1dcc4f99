// SPDX-License-Identifier: Apache-2.0
// CUDA dequantization against the CPU reference (bit-exact), over a table of shapes including the
// real V4-Flash ones. Skips cleanly when no GPU is present.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "backends/cuda/cuda_backend.h"
#include "deepinfer/dequant.h"

namespace deepinfer {
namespace {

class CudaDequant : public ::testing::Test {
protected:
    void SetUp() override {
        if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    }
};

void fill(const Buffer& b, uint32_t seed, uint8_t mask) {
    std::mt19937 rng(seed);
    for (size_t i = 0; i < b.nbytes(); ++i) static_cast<uint8_t*>(b.data())[i] = uint8_t(rng()) & mask;
}

TEST_F(CudaDequant, Fp8BlockMatchesCpu) {
    const int64_t shapes[][2] = {{300, 200}, {1024, 4096}, {32768, 1024}, {4096, 8192}, {512, 4096}};
    for (const auto& sh : shapes) {
        for (DType sdt : {DType::kF8E8M0, DType::kF32}) {
            for (DType odt : {DType::kF32, DType::kBF16}) {
                const int64_t rows = sh[0], cols = sh[1];
                Buffer w(DType::kF8E4M3, {rows, cols}), s(sdt, {(rows + 127) / 128, (cols + 127) / 128});
                fill(w, 7, 0xFF);
                if (sdt == DType::kF8E8M0) fill(s, 8, 0x7F);
                else for (int64_t i = 0; i < s.view().numel(); ++i) s.view().data_as<float>()[i] = 0.5f + float(i % 7);
                Buffer cpu(odt, {rows, cols}), gpu(odt, {rows, cols});
                dequant_fp8_block({.weight = w.view(), .scale = s.view(), .out = cpu.view()});
                cuda::DeviceBuffer dw(w.nbytes()), ds(s.nbytes()), dout(gpu.nbytes());
                dw.copy_from_host(w.data(), w.nbytes());
                ds.copy_from_host(s.data(), s.nbytes());
                cuda::dequant_fp8_block({.weight = TensorView(dw.data(), DType::kF8E4M3, {rows, cols}, Device::kCuda),
                                         .scale = TensorView(ds.data(), sdt, s.view().shape(), Device::kCuda),
                                         .out = TensorView(dout.data(), odt, {rows, cols}, Device::kCuda)});
                dout.copy_to_host(gpu.data(), gpu.nbytes());
                // NaN codes decode to the same canonical NaN on both sides.
                EXPECT_EQ(std::memcmp(cpu.data(), gpu.data(), cpu.nbytes()), 0) << rows << "x" << cols;
            }
        }
    }
}

TEST_F(CudaDequant, Fp4MatchesCpu) {
    const int64_t shapes[][2] = {{64, 192}, {2048, 4096}, {4096, 2048}};
    for (const auto& sh : shapes) {
        const int64_t rows = sh[0], cols = sh[1];
        Buffer w(DType::kU8, {rows, cols / 2}), s(DType::kF8E8M0, {rows, cols / 32});
        fill(w, 3, 0xFF);
        fill(s, 4, 0x7F);
        for (size_t i = 0; i < s.nbytes(); ++i) static_cast<uint8_t*>(s.data())[i] |= 0x40;
        Buffer cpu(DType::kBF16, {rows, cols}), gpu(DType::kBF16, {rows, cols});
        dequant_fp4({.weight = w.view(), .scale = s.view(), .out = cpu.view()});
        cuda::DeviceBuffer dw(w.nbytes()), ds(s.nbytes()), dout(gpu.nbytes());
        dw.copy_from_host(w.data(), w.nbytes());
        ds.copy_from_host(s.data(), s.nbytes());
        cuda::dequant_fp4({.weight = TensorView(dw.data(), DType::kU8, {rows, cols / 2}, Device::kCuda),
                           .scale = TensorView(ds.data(), DType::kF8E8M0, {rows, cols / 32}, Device::kCuda),
                           .out = TensorView(dout.data(), DType::kBF16, {rows, cols}, Device::kCuda)});
        dout.copy_to_host(gpu.data(), gpu.nbytes());
        EXPECT_EQ(std::memcmp(cpu.data(), gpu.data(), cpu.nbytes()), 0) << rows << "x" << cols;
    }
}

}  // namespace
}  // namespace deepinfer
