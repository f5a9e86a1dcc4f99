// SPDX-License-Identifier: Apache-2.0
// Device discovery and the RAII device buffer.
#include <cuda_runtime.h>

#include <string>

#include "backends/cuda/common/cuda_check.h"
#include "backends/cuda/cuda_backend.h"

namespace deepinfer::cuda {

int device_count() {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();  // clear the sticky "no driver" error
        return 0;
    }
    return n;
}

std::string device_description(int index) {
    cudaDeviceProp prop{};
    DI_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
    return std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ", " +
           std::to_string(prop.multiProcessorCount) + " SMs, " +
           std::to_string(prop.totalGlobalMem >> 30) + " GiB)";
}

DeviceBuffer::DeviceBuffer(size_t nbytes) : nbytes_(nbytes) {
    if (nbytes) DI_CUDA_CHECK(cudaMalloc(&data_, nbytes));
}

DeviceBuffer::~DeviceBuffer() {
    if (data_) (void)cudaFree(data_);
}

void DeviceBuffer::copy_from_host(const void* src, size_t nbytes) {
    DI_CHECK(nbytes <= nbytes_, "copy of ", nbytes, " bytes into a device buffer of ", nbytes_);
    DI_CUDA_CHECK(cudaMemcpy(data_, src, nbytes, cudaMemcpyHostToDevice));
}

void DeviceBuffer::copy_to_host(void* dst, size_t nbytes) const {
    DI_CHECK(nbytes <= nbytes_, "copy of ", nbytes, " bytes from a device buffer of ", nbytes_);
    DI_CUDA_CHECK(cudaMemcpy(dst, data_, nbytes, cudaMemcpyDeviceToHost));
}

void synchronize() { DI_CUDA_CHECK(cudaDeviceSynchronize()); }

}  // namespace deepinfer::cuda
