// SPDX-License-Identifier: Apache-2.0
// Host API of the CUDA backend (no CUDA types here). Functions taking TensorViews expect device
// memory (Device::kCuda) and run on the default stream unless a stream handle is given.
#pragma once

#include <cstddef>
#include <string>

#include "deepinfer/dequant.h"

namespace deepinfer::cuda {

// Number of usable CUDA devices; 0 when there is no driver or no GPU (never throws).
int device_count();
// "NVIDIA H200 (sm_90, 132 SMs, 139 GiB)" for device `index`.
std::string device_description(int index);

// Device memory owned RAII (a stand-in until the stream-ordered allocator lands).
class DeviceBuffer {
public:
    explicit DeviceBuffer(size_t nbytes);
    ~DeviceBuffer();
    DeviceBuffer(const DeviceBuffer&) = delete;
    DeviceBuffer& operator=(const DeviceBuffer&) = delete;
    void* data() const { return data_; }
    size_t nbytes() const { return nbytes_; }
    void copy_from_host(const void* src, size_t nbytes);
    void copy_to_host(void* dst, size_t nbytes) const;

private:
    void* data_ = nullptr;
    size_t nbytes_ = 0;
};

// Same contracts as the CPU ops in deepinfer/dequant.h; outputs f32 or bf16; ue8m0 or f32 scales.
void dequant_fp8_block(const DequantFp8BlockParams& p);
void dequant_fp4(const DequantFp4Params& p);
void synchronize();

}  // namespace deepinfer::cuda
