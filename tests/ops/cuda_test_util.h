// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the CUDA op tests: a device copy of a host vector, random inputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "backends/cuda/cuda_backend.h"

namespace deepinfer::test {

// Device copy of a host vector (or n uninitialized elements), kept alive by the test.
template <class T>
struct Dev {
    std::unique_ptr<cuda::DeviceBuffer> buf;
    explicit Dev(const std::vector<T>& v)
        : buf(std::make_unique<cuda::DeviceBuffer>(std::max<size_t>(v.size(), 1) * sizeof(T))) {
        if (!v.empty()) buf->copy_from_host(v.data(), v.size() * sizeof(T));
    }
    explicit Dev(size_t n) : buf(std::make_unique<cuda::DeviceBuffer>(std::max<size_t>(n, 1) * sizeof(T))) {}
    T* ptr() const { return static_cast<T*>(buf->data()); }
    std::vector<T> host(size_t n) const {  // waits for all queued work, then copies the first n elements
        std::vector<T> v(n);
        cuda::synchronize();
        buf->copy_to_host(v.data(), n * sizeof(T));
        return v;
    }
};

// n values from N(0, scale^2), deterministic in seed.
inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> nd(0.0f, scale);
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng);
    return v;
}

}  // namespace deepinfer::test
