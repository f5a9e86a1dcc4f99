// SPDX-License-Identifier: Apache-2.0
#include "model/safetensors_patcher.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "deepinfer/check.h"
#include "deepinfer/float_formats.h"

namespace deepinfer {

SafetensorsPatcher::SafetensorsPatcher(const std::string& path)
    : path_(path), file_(path), out_(path, std::ios::in | std::ios::out | std::ios::binary) {
    uint64_t header = 0;
    std::ifstream in(path, std::ios::binary);
    in.read(reinterpret_cast<char*>(&header), 8);
    data_ = 8 + header;
    DI_CHECK(out_.good(), path, ": cannot open for writing");
}

const SafetensorsTensorInfo& SafetensorsPatcher::info(const std::string& name) const {
    const SafetensorsTensorInfo* t = file_.find(name);
    DI_CHECK(t != nullptr, path_, ": no tensor ", name);
    return *t;
}

std::vector<float> SafetensorsPatcher::read_bf16(const std::string& name) const {
    const SafetensorsTensorInfo& t = info(name);
    DI_CHECK(t.dtype == DType::kBF16, path_, ": tensor ", name, " is not bf16");
    const TensorView v = file_.view(t);
    std::vector<float> out(static_cast<size_t>(v.numel()));
    for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(v.data_as<const uint16_t>()[i]);
    return out;
}

void SafetensorsPatcher::write(const std::string& name, const std::vector<float>& values) {
    const SafetensorsTensorInfo& t = info(name);
    if (t.dtype == DType::kF8E4M3 && name.ends_with(".weight")) return write_fp8(t, name, values);
    DI_CHECK(t.dtype == DType::kBF16, path_, ": tensor ", name, " is neither bf16 nor an FP8 linear");
    std::vector<uint16_t> bits(values.size());
    for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
    put(t, bits.data(), bits.size() * 2);
}

void SafetensorsPatcher::zero(const std::string& name) {
    const SafetensorsTensorInfo& t = info(name);
    DI_CHECK(t.dtype == DType::kBF16 || t.dtype == DType::kF8E4M3 || t.dtype == DType::kI8, path_, ": tensor ", name,
             " is neither bf16, FP8 nor packed FP4");
    const std::vector<char> zeros(t.end - t.begin, 0);
    put(t, zeros.data(), zeros.size());
}

void SafetensorsPatcher::copy(const std::string& from, const std::string& to) {
    const SafetensorsTensorInfo& a = info(from);
    const SafetensorsTensorInfo& b = info(to);
    DI_CHECK(a.end - a.begin == b.end - b.begin && a.dtype == b.dtype, path_, ": cannot copy ", from, " to ", to,
             " (format or size differs)");
    put(b, file_.view(a).data(), a.end - a.begin);
}

void SafetensorsPatcher::put(const SafetensorsTensorInfo& t, const void* bytes, size_t n) {
    DI_CHECK(n == size_t(t.end - t.begin), path_, ": patch of ", n, " bytes for a tensor of ", t.end - t.begin);
    out_.seekp(static_cast<std::streamoff>(data_ + t.begin));
    out_.write(static_cast<const char*>(bytes), static_cast<std::streamsize>(n));
    DI_CHECK(out_.good(), path_, ": write failed");
}

// Per 128 x 128 block: the ue8m0 scale 2^k with k = ceil(log2(amax / 448)), the codes e4m3(v / 2^k).
void SafetensorsPatcher::write_fp8(const SafetensorsTensorInfo& t, const std::string& name, const std::vector<float>& v) {
    const std::string scale_name = name.substr(0, name.size() - 7) + ".scale";
    const SafetensorsTensorInfo* st = file_.find(scale_name);
    const int64_t rows = t.shape[0], cols = t.shape[1], br = (rows + 127) / 128, bc = (cols + 127) / 128;
    DI_CHECK(st && int64_t(st->end - st->begin) == br * bc && int64_t(v.size()) == rows * cols, path_, ": cannot write ",
             name, " as FP8 with 128 x 128 scales");
    std::vector<uint8_t> codes(v.size()), scales(size_t(br * bc));
    for (int64_t bi = 0; bi < br; ++bi)
        for (int64_t bj = 0; bj < bc; ++bj) {
            const int64_t r1 = std::min(rows, bi * 128 + 128), c1 = std::min(cols, bj * 128 + 128);
            float amax = 0;
            for (int64_t r = bi * 128; r < r1; ++r)
                for (int64_t c = bj * 128; c < c1; ++c) amax = std::max(amax, std::fabs(v[size_t(r * cols + c)]));
            const int k = amax > 0 ? ceil_log2_bits(amax / 448.0f) : 0;
            scales[size_t(bi * bc + bj)] = e8m0_from_exponent(k);
            for (int64_t r = bi * 128; r < r1; ++r)
                for (int64_t c = bj * 128; c < c1; ++c)
                    codes[size_t(r * cols + c)] = f32_to_e4m3_satfinite(std::ldexp(v[size_t(r * cols + c)], -k));
        }
    put(t, codes.data(), codes.size());
    put(*st, scales.data(), scales.size());
}

}  // namespace deepinfer
