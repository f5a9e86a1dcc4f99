// SPDX-License-Identifier: Apache-2.0
// A speculative drafter of a model (speculative-decoding.md §1, §5): proposes the next tokens of many
// sequences at once; the engine verifies them with one target forward over [anchor, drafts...]
// (engine/speculative/verify.h). A drafter belongs to its Model (Model::drafter()) and is immutable;
// what it keeps per sequence lives in that sequence's state.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace deepinfer {

class Sequence;

struct DraftRequest {
    // A sequence the drafter is attached to, committed through position num_tokens() - 1; its last
    // forward pass covered that position (rows after it were rolled back with truncate()).
    Sequence* sequence = nullptr;
    int32_t anchor = 0;          // the token at position num_tokens(): sampled, not yet run
    int64_t num_drafts = 0;      // drafts wanted, 1 .. max_drafts()
    double temperature = 0;      // of the sampled drafts
    // [num_drafts] uniforms in [0, 1): draft k is drawn from softmax(logits / temperature) by inverse
    // CDF in id order with uniforms[k]. Empty (or temperature <= 0): argmax drafts (one-hot).
    std::span<const double> uniforms = {};
    // Sampled drafts: whether the caller reads Draft::probs on the host. false: a GPU drafter may keep
    // the distributions on its device only (Draft::device_probs) and skip their copy to the host
    // (verification on the device, Model::forward_sampled's DeviceDraw::draft_probs).
    bool host_probs = true;
};

struct Draft {
    std::vector<int32_t> tokens;     // [num_drafts]
    std::vector<float> probs;        // [num_drafts, vocab]: the distribution each sampled draft came from
    std::vector<float> confidence;   // [num_drafts] estimated probability that draft k is accepted given
                                     // drafts < k were (empty: the drafter has no estimate)
    // Sampled drafts of a GPU drafter: the same distributions on the drafter's device, draft k's [vocab]
    // f32 at device_probs + k * device_probs_stride; valid until the drafter's next draft() call. null:
    // none (argmax drafts, or a host drafter).
    const float* device_probs = nullptr;
    int64_t device_probs_stride = 0;
};

class Drafter {
public:
    virtual ~Drafter() = default;
    virtual std::string_view method() const = 0;  // "mtp" | "dspark"
    virtual int64_t max_drafts() const = 0;
    // Makes `sequence` keep, in its forward passes, what drafting needs (target hidden states / taps).
    // Call before the sequence's first forward; copies (fork, prefix snapshots) stay attached.
    virtual void attach(Sequence& sequence) const = 0;
    // Bytes that attach() adds to a sequence's state with state pages of `page_bytes` (admission
    // estimates; 0 when the drafter keeps nothing beyond what Model::estimate_state_bytes counts).
    virtual uint64_t state_bytes(uint64_t page_bytes) const {
        (void)page_bytes;
        return 0;
    }
    // Drafts for several sequences in one batched pass. Does not change what the sequences' target
    // forward computes; may write drafter state at positions >= num_tokens() - 1 (later passes
    // overwrite it).
    virtual std::vector<Draft> draft(std::span<const DraftRequest> requests) const = 0;
};

}  // namespace deepinfer
