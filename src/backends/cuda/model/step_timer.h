// SPDX-License-Identifier: Apache-2.0
// Device time of a CUDA model's forwards from CUDA events (CudaModelStats::gpu_seconds, gap_seconds):
// each forward's span on its stream, and the idle gap between one forward's end and the next one's
// start. Shared by the V4 and V4.1 CUDA models; guarded by the model's forward mutex.
#pragma once

#include "backends/cuda/cuda_backend.h"

namespace deepinfer::cuda {

struct CudaModelStats;

class StepTimer {
public:
    void start(Stream s) { start_.record(s); }
    void end(Stream s) { end_[which_].record(s); }
    // After the stream synchronized: adds this forward's span and the gap since the previous one.
    void account(CudaModelStats& stats);
    void reset() { have_prev_end_ = false; }

private:
    DeviceEvent start_, end_[2];
    int which_ = 0;
    bool have_prev_end_ = false;
};

}  // namespace deepinfer::cuda
