// SPDX-License-Identifier: Apache-2.0
// The drafts a GPU drafter (MTP: cuda_mtp_draft.cpp; DSpark: dspark_markov.h) copied to pinned host
// memory, and the distributions of its sampled drafts it keeps on the device, handed back per request.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/drafter.h"

namespace deepinfer::cuda {

// host_out: [steps, slots] int32 drafts then [steps, slots] f32 confidences, slot a < order.size() is
// request order[a] (later slots are a graph's padding); device_probs: [steps, slots, vocab] f32 on the
// device, the distributions of the sampled slots (sampled[a] != 0), null when none samples; host_probs:
// their pinned copy, null when no sampled request has host_probs. Appends each request's num_drafts drafts
// to out[order[a]]; a sampled request gets device_probs (its slot's row of step 0, stride slots * vocab)
// and, when it has host_probs, probs ([num_drafts, vocab] from host_probs; else probs stays empty).
void unpack_device_drafts(const uint8_t* host_out, const float* host_probs, const float* device_probs, int64_t steps,
                          int64_t vocab, int64_t slots, std::span<const int64_t> order,
                          std::span<const DraftRequest> requests, std::span<const int32_t> sampled,
                          std::vector<Draft>& out);

}  // namespace deepinfer::cuda
