// SPDX-License-Identifier: Apache-2.0
// Test helper: reads named tensors of the committed fixture files (tests/data/...), failing the
// test with a clear message when a tensor is absent or has the wrong dtype.
#pragma once

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "deepinfer/safetensors.h"

namespace deepinfer::test {

// The fixtures' folder: $DI_TEST_DATA_DIR when set (a test binary run on another machine over a copy
// of the tree, e.g. a GPU machine), else the source tree's tests/data compiled in.
inline std::string data_dir() {
    const char* env = std::getenv("DI_TEST_DATA_DIR");
    return env && *env ? std::string(env) : std::string(DI_TEST_DATA_DIR);
}
inline std::string data_path(const std::string& rel) { return data_dir() + "/" + rel; }

inline TensorView fixture_tensor(const SafetensorsFile& f, const std::string& name, DType dtype) {
    const SafetensorsTensorInfo* info = f.find(name);
    if (!info) throw std::runtime_error("fixture " + f.path() + " has no tensor " + name);
    if (info->dtype != dtype)
        throw std::runtime_error("fixture tensor " + name + " is " + std::string(dtype_name(info->dtype)));
    return f.view(*info);
}

template <typename T>
std::vector<T> fixture_values(const SafetensorsFile& f, const std::string& name, DType dtype) {
    TensorView v = fixture_tensor(f, name, dtype);
    std::vector<T> out(static_cast<size_t>(v.nbytes() / sizeof(T)));
    std::memcpy(out.data(), v.data(), v.nbytes());
    return out;
}

// Bitwise equality of floats, with every NaN equal to every NaN.
inline bool same_float(float a, float b) {
    if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
    return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

}  // namespace deepinfer::test
