// SPDX-License-Identifier: Apache-2.0
// Buffer owns memory (RAII); TensorView is a non-owning view with shape, strides and dtype.
// Views never outlive the Buffer or mapping they point into; the owner's lifetime is the caller's
// contract. Shapes are outermost dimension first; strides count elements (not bytes).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "deepinfer/dtype.h"

namespace deepinfer {

enum class Device : uint8_t { kCpu, kCuda };

inline constexpr int kMaxDims = 8;

class Shape {
public:
    Shape() = default;
    Shape(std::initializer_list<int64_t> dims);
    static Shape from(const int64_t* dims, int ndim);

    int ndim() const { return ndim_; }
    int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
    int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
    int64_t numel() const;
    bool operator==(const Shape& other) const;
    std::string str() const;  // "[2, 3]"

private:
    std::array<int64_t, kMaxDims> dims_{};
    int ndim_ = 0;
};

class TensorView {
public:
    TensorView() = default;
    // A contiguous view (row-major strides).
    TensorView(void* data, DType dtype, Shape shape, Device device = Device::kCpu);

    void* data() const { return data_; }
    template <typename T>
    T* data_as() const {
        return static_cast<T*>(data_);
    }
    DType dtype() const { return dtype_; }
    Device device() const { return device_; }
    const Shape& shape() const { return shape_; }
    int ndim() const { return shape_.ndim(); }
    int64_t dim(int i) const { return shape_[i]; }
    int64_t stride(int i) const { return strides_[static_cast<size_t>(i)]; }
    int64_t numel() const { return shape_.numel(); }
    size_t nbytes() const;  // bytes of the elements (contiguous views)
    bool is_contiguous() const;
    bool empty() const { return data_ == nullptr; }

    // Rows [begin, end) of the outermost dimension.
    TensorView slice_rows(int64_t begin, int64_t end) const;
    std::string describe() const;  // "bf16[4096, 1024]"

private:
    void* data_ = nullptr;
    DType dtype_ = DType::kF32;
    Device device_ = Device::kCpu;
    Shape shape_;
    std::array<int64_t, kMaxDims> strides_{};
};

// Owning, 64-byte-aligned host memory. Movable, not copyable.
class Buffer {
public:
    Buffer() = default;
    explicit Buffer(size_t nbytes);
    Buffer(DType dtype, Shape shape);  // sized for a contiguous tensor, zero-filled
    ~Buffer();
    Buffer(Buffer&& other) noexcept;
    Buffer& operator=(Buffer&& other) noexcept;
    Buffer(const Buffer&) = delete;
    Buffer& operator=(const Buffer&) = delete;

    void* data() const { return data_; }
    size_t nbytes() const { return nbytes_; }
    // The whole buffer viewed as a tensor of `dtype` and `shape` (checked to fit).
    TensorView view(DType dtype, Shape shape) const;
    // The view of the dtype and shape the buffer was made with.
    TensorView view() const;

private:
    void* data_ = nullptr;
    size_t nbytes_ = 0;
    DType dtype_ = DType::kU8;
    Shape shape_;
};

}  // namespace deepinfer
