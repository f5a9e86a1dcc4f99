// SPDX-License-Identifier: Apache-2.0
// The NCCL implementation of ExpertExchange: one communicator per GPU of the replica, made together
// in this process (ncclCommInitAll); each rank's host thread enqueues its sends and receives as one
// NCCL group on its own stream. NVLink multicast (NVLS) is never used: the constructor sets
// NCCL_NVLS_ENABLE=0 unless the environment already sets it, and refuses to run when it is on.
#pragma once

#include <memory>
#include <vector>

#include "backends/cuda/model/expert_exchange.h"

namespace deepinfer::cuda {

// Whether this build has NCCL (expert parallelism needs it).
bool nccl_available();
// Communicators over `devices` (CUDA device indices, one rank each, in rank order), the MoE layers'
// dispatch form (routed from `routed_min_rows` rows per forward under kAuto). Throws without NCCL.
std::unique_ptr<ExpertExchange> make_nccl_exchange(const std::vector<int>& devices,
                                                   EpDispatch dispatch = EpDispatch::kAuto, int64_t routed_min_rows = 0);

}  // namespace deepinfer::cuda
