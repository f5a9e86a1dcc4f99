// SPDX-License-Identifier: Apache-2.0
// The drafts a GPU drafter (MTP: cuda_mtp_draft.cpp; DSpark: dspark_markov.h) copied to pinned host
// memory, handed back per request.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/drafter.h"

namespace deepinfer::cuda {

// host_out: [steps, slots] int32 drafts then [steps, slots] f32 confidences, slot a < order.size() is
// request order[a] (later slots are a graph's padding); host_probs: [steps, slots, vocab] distributions
// of the sampled slots (sampled[a] != 0,
// whose out[order[a]].probs is sized [num_drafts, vocab]), null when none samples. Appends each
// request's num_drafts drafts to out[order[a]].
void unpack_device_drafts(const uint8_t* host_out, const float* host_probs, int64_t steps, int64_t vocab, int64_t slots,
                          std::span<const int64_t> order, std::span<const DraftRequest> requests,
                          std::span<const int32_t> sampled, std::vector<Draft>& out);

}  // namespace deepinfer::cuda
