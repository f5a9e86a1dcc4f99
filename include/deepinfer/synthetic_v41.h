// SPDX-License-Identifier: Apache-2.0
// Random-weight DeepSeek-V4.1 checkpoints written in the published layout (spec
// deepseek-v41-model.md §7): FP8 e4m3 linears with ue8m0 scales in the config's weight blocks (32x32
// in the release), packed MXFP4 experts, FP8 Engram tables with per-row per-32 ue8m0 scales, bf16
// embeddings, head, norms, router, compressor and vision weights, f32 mHC parameters, sinks and
// router biases; optionally the DSpark drafter and the vision tower; sharded like the release. For
// loader and `inspect` tests and full-width benchmarks.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "deepinfer/synthetic.h"

namespace deepinfer {

// Writes `dir`/config.json (the given text, which must be a V4.1 config) and the weights.
void write_synthetic_v41_checkpoint(const std::string& dir, const std::string& config_json,
                                    const SyntheticCheckpointOptions& options = {});

// The release's config.json (deepseek-ai/DeepSeek-V4.1-Flash, spec §1.1-1.2) as JSON, to scale down
// for synthetic checkpoints (tests/v41 checks it against tests/data/v41/configs/deepseek-v41-flash.json).
nlohmann::ordered_json v41_flash_config();

// Sets `engram_num_embeddings` of a composite config to the prime layout its Engram keys give
// (spec §5.3), so scaled-down Engram settings stay consistent.
void set_v41_engram_rows(nlohmann::ordered_json& config);

}  // namespace deepinfer
