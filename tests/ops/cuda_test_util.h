// SPDX-License-Identifier: Apache-2.0
// Helpers shared by the CUDA op tests: a device copy of a host vector, random inputs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <limits>
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

// Rows [n, width] scattered into pages as the models' paged state holds them (DeviceSegment::pages):
// `per_page` rows per page starting `offset` floats into it, logical page k in physical slot
// pages-1-k, every other float NaN (a read of the wrong place shows).
struct PagedRowsCopy {
    int64_t per_page, offset, page_floats, pages;
    Dev<float> memory;
    Dev<float*> table;
    PagedRowsCopy(const std::vector<float>& rows, int64_t width, int64_t per_page_, int64_t offset_)
        : per_page(per_page_),
          offset(offset_),
          page_floats(offset_ + per_page_ * width),
          pages((static_cast<int64_t>(rows.size()) / width + per_page_ - 1) / per_page_),
          memory(scatter(rows, width)),
          table(addresses()) {}

private:
    std::vector<float> scatter(const std::vector<float>& rows, int64_t width) const {
        std::vector<float> m(static_cast<size_t>(pages * page_floats), std::numeric_limits<float>::quiet_NaN());
        const int64_t n = static_cast<int64_t>(rows.size()) / width;
        for (int64_t i = 0; i < n; ++i)
            std::copy_n(rows.begin() + i * width, width,
                        m.begin() + (pages - 1 - i / per_page) * page_floats + offset + (i % per_page) * width);
        return m;
    }
    std::vector<float*> addresses() const {
        std::vector<float*> t(static_cast<size_t>(pages));
        for (int64_t k = 0; k < pages; ++k) t[size_t(k)] = memory.ptr() + (pages - 1 - k) * page_floats;
        return t;
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
