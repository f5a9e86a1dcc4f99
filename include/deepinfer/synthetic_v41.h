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

// The release's config cut to `layers` decoder layers (4..40) that keep the published schedule's layer
// kinds in proportion, for full-width benchmarks of a few layers (cuda_engine_bench --family v41):
// layers 0 and 1 sliding-window only (Engram at 1); then a ratio-2 group and a ratio-1 group, the rest
// split 18 : 20 as the 40 published layers; in the ratio-2 group every 6th layer from its first is a KV
// and index source (2, 8, 14), in the ratio-1 group its first is the KV and candidate source and every
// 4th an index source (20, 24, ..); the second Engram layer 12 layers into the ratio-2 group (14) when
// the group reaches it. No MTP layers or DSpark targets (num_nextn_predict_layers 0); everything else
// (widths, experts, Engram sizes, vision) as published. v41_flash_layers(40) has the release's schedule.
nlohmann::ordered_json v41_flash_layers(int64_t layers);

// Rewrites a random V4.1 checkpoint written by write_synthetic_v41_checkpoint (one file, bf16 linears
// and experts: fp8_linears = fp4_experts = false, sharded = false, with the drafter; config
// dspark_markov_rank == hidden_size) so that its DSpark drafter agrees with the target (benchmarks and
// tests of speculative decoding; the values are special, every layer still runs at full cost):
//   * every residual branch's output projection is zero (attention wo_b, routed and shared w2, Engram
//     wkv) in the target and in the drafter's stages, so the target's streams stay its token's embedding
//     (up to mHC scalings) and its next token depends on the current token only: logits L(x) =
//     head · n(x), n(x) = norm ⊙ rmsnorm(embed[x]) (up to bf16 rounding of the scaled streams);
//   * the noise token's embedding is zero, so the drafter's block rows 1.. collapse to 0 and give U = 0;
//     row 0 (the anchor) gives U_0 = L(anchor) through the last stage's norm (= the target's norm);
//   * Markov head: embed[x] = n(x) (+ `noise` x N(0, 1) x rms(n(x))), head = the target's head, so the
//     Markov bias is L(x) and draft k is argmax L(draft k-1) (draft 1: argmax 2·L(anchor)), the
//     target's greedy continuation; the confidence head is zero (raw confidence 1/2, calibrated online).
void make_dspark_agree_with_target(const std::string& dir, double noise = 0.0, uint64_t seed = 7);

// Sets `engram_num_embeddings` of a composite config to the prime layout its Engram keys give
// (spec §5.3), so scaled-down Engram settings stay consistent.
void set_v41_engram_rows(nlohmann::ordered_json& config);

}  // namespace deepinfer
