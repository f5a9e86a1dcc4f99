// SPDX-License-Identifier: Apache-2.0
// The MTP drafter of the DeepSeek-V4-Flash preview (speculative-decoding.md §5): block mtp.0 reads
// the target's final HC streams of position p (before the HC head) and the token at p+1, and predicts
// the token at p+2; k drafts by chaining the block's own output streams (vLLM's recursion).
//
// Per sequence (V4SequenceState::mtp_taps): the final streams of the last target pass's rows. Every
// target forward of an attached sequence first runs the MTP block over the rows whose next token it
// has just learned (position P-1 from the previous pass, then this chunk's rows but the last), so the
// MTP ring holds every committed position; the last row waits for its next token. After a verify pass
// and truncate(m), row m-1 of the pass is the pending one. Rejected rows write MTP ring slots ahead of
// the committed length, which later passes overwrite before any query reads them (rings keyed by
// position with headroom, state.h), so nothing is undone.
#pragma once

#include <span>

#include "deepinfer/drafter.h"

namespace deepinfer {

class CpuModel;
struct V4SequenceState;

class MtpDrafter final : public Drafter {
public:
    explicit MtpDrafter(const CpuModel& model) : model_(model) {}
    std::string_view method() const override { return "mtp"; }
    int64_t max_drafts() const override;
    void attach(Sequence& sequence) const override;
    std::vector<Draft> draft(std::span<const DraftRequest> requests) const override;

private:
    const CpuModel& model_;
};

// Called by CpuModel::forward_batch after the target layers: the MTP rows of every attached sequence
// that this pass completes (see above), and the new taps. `first_positions` are the positions of the
// chunks' first rows; `streams` the final streams of all rows [rows, hc, D] in chunk order.
void run_mtp_taps(const CpuModel& model, std::span<V4SequenceState* const> states,
                  std::span<const std::span<const int32_t>> tokens, std::span<const int64_t> first_positions,
                  const float* streams);

}  // namespace deepinfer
