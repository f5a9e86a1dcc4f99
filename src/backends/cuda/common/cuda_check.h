// SPDX-License-Identifier: Apache-2.0
// DI_CUDA_CHECK: turns a CUDA runtime error into a deepinfer::Error with the call's text.
#pragma once

#include <cuda_runtime.h>

#include "deepinfer/check.h"

#define DI_CUDA_CHECK(call)                                                                   \
    do {                                                                                      \
        cudaError_t di_err_ = (call);                                                         \
        if (di_err_ != cudaSuccess) [[unlikely]]                                              \
            DI_THROW("CUDA error ", cudaGetErrorName(di_err_), " (", cudaGetErrorString(di_err_), \
                     ") in ", #call);                                                         \
    } while (0)
