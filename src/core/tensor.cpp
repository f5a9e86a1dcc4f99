// SPDX-License-Identifier: Apache-2.0
// Shape, TensorView and Buffer.
#include "deepinfer/tensor.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "deepinfer/check.h"

namespace deepinfer {

// ---- Shape ------------------------------------------------------------------------------------

Shape::Shape(std::initializer_list<int64_t> dims) {
    DI_CHECK(dims.size() <= static_cast<size_t>(kMaxDims), "tensor rank ", dims.size(),
             " exceeds the maximum of ", kMaxDims);
    for (int64_t d : dims) {
        DI_CHECK(d >= 0, "negative dimension ", d);
        dims_[static_cast<size_t>(ndim_++)] = d;
    }
}

Shape Shape::from(const int64_t* dims, int ndim) {
    DI_CHECK(ndim >= 0 && ndim <= kMaxDims, "tensor rank ", ndim, " exceeds the maximum of ", kMaxDims);
    Shape s;
    for (int i = 0; i < ndim; ++i) {
        DI_CHECK(dims[i] >= 0, "negative dimension ", dims[i]);
        s.dims_[static_cast<size_t>(i)] = dims[i];
    }
    s.ndim_ = ndim;
    return s;
}

int64_t Shape::numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= dims_[static_cast<size_t>(i)];
    return n;
}

bool Shape::operator==(const Shape& other) const {
    if (ndim_ != other.ndim_) return false;
    for (int i = 0; i < ndim_; ++i)
        if (dims_[static_cast<size_t>(i)] != other.dims_[static_cast<size_t>(i)]) return false;
    return true;
}

std::string Shape::str() const {
    std::string s = "[";
    for (int i = 0; i < ndim_; ++i) {
        if (i) s += ", ";
        s += std::to_string(dims_[static_cast<size_t>(i)]);
    }
    return s + "]";
}

// ---- TensorView -------------------------------------------------------------------------------

TensorView::TensorView(void* data, DType dtype, Shape shape, Device device)
    : data_(data), dtype_(dtype), device_(device), shape_(shape) {
    int64_t stride = 1;
    for (int i = shape_.ndim() - 1; i >= 0; --i) {
        strides_[static_cast<size_t>(i)] = stride;
        stride *= shape_[i];
    }
}

size_t TensorView::nbytes() const {
    auto bytes = dtype_storage_bytes(dtype_, static_cast<uint64_t>(numel()));
    DI_CHECK(bytes.has_value(), "tensor ", describe(), " does not fill whole bytes");
    return static_cast<size_t>(*bytes);
}

bool TensorView::is_contiguous() const {
    int64_t stride = 1;
    for (int i = shape_.ndim() - 1; i >= 0; --i) {
        if (shape_[i] != 1 && strides_[static_cast<size_t>(i)] != stride) return false;
        stride *= shape_[i];
    }
    return true;
}

TensorView TensorView::slice_rows(int64_t begin, int64_t end) const {
    DI_CHECK(ndim() >= 1 && begin >= 0 && begin <= end && end <= shape_[0], "row slice [", begin,
             ", ", end, ") out of range for ", describe());
    TensorView v = *this;
    v.shape_[0] = end - begin;
    int64_t bit_offset = begin * strides_[0] * dtype_bits(dtype_);
    DI_CHECK(bit_offset % 8 == 0, "row slice of ", describe(), " does not start on a byte");
    v.data_ = static_cast<char*>(data_) + bit_offset / 8;
    return v;
}

std::string TensorView::describe() const {
    return std::string(dtype_name(dtype_)) + shape_.str();
}

// ---- Buffer -----------------------------------------------------------------------------------

Buffer::Buffer(size_t nbytes) : nbytes_(nbytes) {
    if (nbytes == 0) return;
    size_t rounded = (nbytes + 63) / 64 * 64;
    data_ = std::aligned_alloc(64, rounded);
    DI_CHECK(data_ != nullptr, "out of host memory allocating ", nbytes, " bytes");
    std::memset(data_, 0, rounded);
}

Buffer::Buffer(DType dtype, Shape shape) : Buffer([&] {
      auto bytes = dtype_storage_bytes(dtype, static_cast<uint64_t>(shape.numel()));
      DI_CHECK(bytes.has_value(), "tensor ", dtype_name(dtype), shape.str(), " has no byte size");
      return static_cast<size_t>(*bytes);
  }()) {
    dtype_ = dtype;
    shape_ = shape;
}

Buffer::~Buffer() { std::free(data_); }

Buffer::Buffer(Buffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      nbytes_(std::exchange(other.nbytes_, 0)),
      dtype_(other.dtype_),
      shape_(other.shape_) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
    if (this != &other) {
        std::free(data_);
        data_ = std::exchange(other.data_, nullptr);
        nbytes_ = std::exchange(other.nbytes_, 0);
        dtype_ = other.dtype_;
        shape_ = other.shape_;
    }
    return *this;
}

TensorView Buffer::view(DType dtype, Shape shape) const {
    auto bytes = dtype_storage_bytes(dtype, static_cast<uint64_t>(shape.numel()));
    DI_CHECK(bytes.has_value() && *bytes <= nbytes_, "view ", dtype_name(dtype), shape.str(),
             " does not fit a buffer of ", nbytes_, " bytes");
    return TensorView(data_, dtype, shape);
}

TensorView Buffer::view() const { return TensorView(data_, dtype_, shape_); }

}  // namespace deepinfer
