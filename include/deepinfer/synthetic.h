// SPDX-License-Identifier: Apache-2.0
// Random-weight checkpoints of any DeepseekV4 config, written in DeepSeek's published layout
// (FP8 e4m3 linears with ue8m0 128x128 block scales, packed FP4 experts with per-32 ue8m0 scales,
// bf16 norms/embeddings/router/compressor projections, f32 HC parameters, sinks, ape and biases,
// i64 tid2eid). For benchmarks at full width and for loader tests; the values are random but follow
// testing-notes.md's scales (std ~ 1/sqrt(fan_in), norms 1 +- 0.1).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace deepinfer {

struct SyntheticCheckpointOptions {
    uint64_t seed = 1;
    bool fp8_linears = true;  // false: bf16 linears
    bool fp4_experts = true;  // false: experts like the other linears
    // Multiplies the residual branches' output projections (wo_b, expert and shared w2), which keeps
    // official-numerics runs of random models stable (testing-notes.md §3).
    double residual_damping = 1.0;
    // V4.1: also write the DSpark drafter (mtp.0..) and the vision tower, and shard the checkpoint as
    // the release does (one shard per layer, the Engram tables apart, model.safetensors.index.json).
    bool include_drafter = true;
    // V4: > 0 writes a DeepSeek-V4-Flash-0731-style DSpark drafter with this many stages under mtp.N
    // (expected_dspark_tensors) instead of the config's MTP blocks; the config's dspark_* keys size it.
    int64_t dspark_stages = 0;
    bool include_vision = false;
    bool sharded = false;
    // Fill with all OpenMP threads, one random stream per (tensor, 64 MiB piece): other values than the
    // sequential single stream (same distributions); for checkpoints of hundreds of GB.
    bool parallel = false;
};

// A DeepseekV4 config.json at the published DeepSeek-V4-Flash widths (hidden 4096, 64 heads x 512,
// q_lora 1024, 8 output groups, window 128, indexer 64 x 128 top-512, HC 4 x 4096, moe width 2048
// top-6, FP8 linears with 128x128 ue8m0 blocks, FP4 experts) with the layer schedule, expert count and
// vocabulary cut as a test or benchmark needs.
struct V4FlashShape {
    std::vector<int> compress_ratios = {4, 128};  // one per layer: 0 sliding, 4 CSA, 128 HCA (MTP entry added)
    int64_t num_hash_layers = 0;
    int64_t n_routed_experts = 256;
    int64_t vocab_size = 129280;
};
std::string v4_flash_config(const V4FlashShape& shape);

// Writes `dir`/config.json (the given text) and `dir`/model.safetensors.
void write_synthetic_checkpoint(const std::string& dir, const std::string& config_json,
                                const SyntheticCheckpointOptions& options = {});

// Rewrites a random V4 checkpoint with a DSpark drafter written by write_synthetic_checkpoint (one file,
// bf16 linears and experts: fp8_linears = fp4_experts = false; dspark_stages > 0; config
// dspark_markov_rank == hidden_size) so that its drafter agrees with the target: residual branches
// zeroed in the target and the stages, the noise embedding zero, the Markov head = (n(x) + noise, the
// target's head), the confidence head zero (model/dspark_agree.h says what each part does).
void make_v4_dspark_agree_with_target(const std::string& dir, double noise = 0.0, uint64_t seed = 7);

struct ExpectedTensor;

// The writer behind both families: random tensors for `expected` in the published formats (FP8 with
// `block_rows` x `block_cols` ue8m0 scales, packed FP4 experts per 32, FP8 lookup tables with per-row
// per-32 scales), grouped into shards by `shard_of(name)` (one file: model.safetensors; several:
// named shards plus model.safetensors.index.json). `routed_experts`/`experts_per_token` size tid2eid.
struct SyntheticLayout {
    int64_t block_rows = 128, block_cols = 128;
    int64_t routed_experts = 0, experts_per_token = 0;
    std::string (*shard_of)(const std::string& canonical_name) = nullptr;  // null: one file
};
void write_synthetic_tensors(const std::string& dir, const std::vector<ExpectedTensor>& expected,
                             const SyntheticLayout& layout, const SyntheticCheckpointOptions& options);

}  // namespace deepinfer
