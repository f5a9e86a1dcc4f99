// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/step_timer.h"

#include "backends/cuda/model/cuda_model.h"

namespace deepinfer::cuda {

void StepTimer::account(CudaModelStats& stats) {
    stats.gpu_seconds += DeviceEvent::elapsed_ms(start_, end_[which_]) * 1e-3;
    if (have_prev_end_) stats.gap_seconds += DeviceEvent::elapsed_ms(end_[which_ ^ 1], start_) * 1e-3;
    have_prev_end_ = true;
    which_ ^= 1;
    ++stats.forwards;
}

}  // namespace deepinfer::cuda
