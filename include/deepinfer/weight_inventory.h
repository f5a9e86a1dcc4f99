// SPDX-License-Identifier: Apache-2.0
// The tensors a DeepseekV4ForCausalLM checkpoint must hold, derived from its ModelConfig
// (deepseek-v4-model.md §4.2-4.5), and the check of a Checkpoint against that list: which are
// missing, which are unexpected, which have the wrong shape or dtype. Used by `inspect` and the loader.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "deepinfer/checkpoint.h"

namespace deepinfer {

enum class WeightKind : uint8_t {
    kLinear,        // [out, in]: fp8 e4m3 + block `.scale`, or a dense float
    kExpertLinear,  // [out, in]: fp4 packed (i8/u8 [out, in/2] or F4) + per-32 `.scale`, fp8 + `.scale`, or dense
    kFloat,         // any float dtype (norm weights, embeddings, router, compressor projections)
    kIndex,         // integer table (tid2eid)
    kRowTable,      // [rows, cols] lookup table: fp8 e4m3 + `.scale` ue8m0 [rows, cols/32] (V4.1 Engram), or a
                    // dense float with an optional float `.scale` [rows, 1 | cols/32]
};

struct ExpectedTensor {
    std::string name;  // canonical, without the ".scale" companion
    Shape shape;       // logical shape (unpacked)
    WeightKind kind = WeightKind::kFloat;
};

// Every expected tensor, in checkpoint order. MTP blocks are included when `include_mtp`.
std::vector<ExpectedTensor> expected_tensors(const ModelConfig& config, bool include_mtp = true);

// The tensors of a DeepSeek-V4-Flash-0731 DSpark drafter with `stages` stages under mtp.N
// (speculative-decoding.md §1.8): per stage a sliding-window score-routed layer with
// dspark_n_routed_experts experts; mtp.0.main_proj / main_norm; on the last stage norm, hc_head_*,
// markov_head.markov_w1 / markov_w2 and confidence_head.proj.
std::vector<ExpectedTensor> expected_dspark_tensors(const ModelConfig& config, int64_t stages);

struct InventoryReport {
    std::vector<std::string> missing;     // expected, not found (canonical names)
    std::vector<std::string> unexpected;  // found, not expected (stored names)
    std::vector<std::string> mismatched;  // found with the wrong shape or dtype: one message each
    bool merged_experts = false;          // transformers' merged experts.gate_up_proj / down_proj
    bool has_mtp = false;     // mtp.* tensors: an MTP block or (has_dspark) a DSpark drafter
    bool has_dspark = false;  // V4: 0731-style DSpark drafter (mtp.0.main_proj, no e_proj)
    bool has_vision = false;  // V4.1: the vision tower, aligner or image delimiters are present
    int64_t num_parameters = 0;  // logical elements of weights (scales not counted)
    int64_t num_scale_elements = 0;
    std::map<std::string, uint64_t> bytes_by_dtype;   // dtype name -> bytes
    std::map<std::string, int64_t> tensors_by_dtype;  // dtype name -> count
    bool complete() const { return missing.empty() && unexpected.empty() && mismatched.empty(); }
};

// Checks `checkpoint` against `expected_tensors(config)`. MTP tensors are expected only when the
// checkpoint has any (transformers does not save them).
InventoryReport check_inventory(const Checkpoint& checkpoint, const ModelConfig& config);

// The family-independent part of the check: each expected tensor's presence, dtype and shape (fp8
// linears in `block_rows` x `block_cols` scale blocks, fp4 experts per 32), then, in finish(), the
// accounting of every tensor of the checkpoint (parameters, bytes by dtype, the unexpected ones).
class InventoryChecker {
public:
    InventoryChecker(const Checkpoint& checkpoint, int64_t block_rows, int64_t block_cols);
    void check(const ExpectedTensor& expected);
    bool consumed(const std::string& canonical_name) const { return consumed_.count(canonical_name) > 0; }
    InventoryReport& report() { return report_; }
    InventoryReport finish();

private:
    void check_scale(const ExpectedTensor& e, const Shape& want, bool e8m0_only);
    const Checkpoint& ckpt_;
    int64_t block_rows_, block_cols_;
    InventoryReport report_;
    std::set<std::string> consumed_;
};

}  // namespace deepinfer
