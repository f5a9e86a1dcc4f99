// SPDX-License-Identifier: Apache-2.0
// `deepinfer inspect` for DeepSeek-V4.1 checkpoints: the config summary, the per-layer schedule
// (encoder/decoder half, CSA2 mode, ratio, KV and index sources, RoPE set, Engram) and the tensor
// check against expected_tensors_v41. Text for people, JSON for programs.
#pragma once

#include <string>

#include "deepinfer/checkpoint.h"
#include "deepinfer/model_config_v41.h"

namespace deepinfer {

std::string inspect_v41_text(const Checkpoint& checkpoint, const V41ModelConfig& config);
std::string inspect_v41_json(const Checkpoint& checkpoint, const V41ModelConfig& config);

}  // namespace deepinfer
