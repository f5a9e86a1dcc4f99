// SPDX-License-Identifier: Apache-2.0
// The tensors a DeepseekV41ForCausalLM checkpoint must hold, derived from its V41ModelConfig
// (deepseek-v41-model.md §7.2: backbone layers with their Full/Reindex/Reuse extras and Engram
// modules; optionally the DSpark drafter `mtp.0..` and the vision tower), and the check of a
// Checkpoint against that list. The published release holds exactly 96,085 tensors (scales
// included); tests/v41 checks that this list reproduces the count.
#pragma once

#include <vector>

#include "deepinfer/model_config_v41.h"
#include "deepinfer/weight_inventory.h"

namespace deepinfer {

// Every expected tensor (scales are implied by the kinds, as for V4), in checkpoint order.
std::vector<ExpectedTensor> expected_tensors_v41(const V41ModelConfig& config, bool include_dspark,
                                                 bool include_vision);

// Checks `checkpoint` against expected_tensors_v41. The drafter is expected when the checkpoint holds
// any `mtp.` tensor, the vision group (tower, aligner, image delimiters) when it holds any of those:
// transformers saves neither. FP8 linears use the config's weight block (32 x 32 in the release).
InventoryReport check_inventory_v41(const Checkpoint& checkpoint, const V41ModelConfig& config);

// Tensor count of a fully quantized published-layout checkpoint (every linear FP8 or FP4, with its
// `.scale`): expected tensors plus one scale per linear and per Engram table.
int64_t published_tensor_count_v41(const V41ModelConfig& config, bool include_dspark, bool include_vision);

}  // namespace deepinfer
