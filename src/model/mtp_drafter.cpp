// SPDX-License-Identifier: Apache-2.0
// MTP drafting over a batch of sequences.
#include "model/mtp_drafter.h"

#include <algorithm>
#include <cmath>

#include "deepinfer/check.h"
#include "model/draft_sampling.h"
#include "model/forward.h"
#include "model/state.h"

namespace deepinfer {
namespace {

// Rows of a pass kept for drafting: a verify pass commits at least its first row, and at most
// kMaxVerifyRows rows are ever rolled back to, so the last kMaxVerifyRows rows suffice.
constexpr int64_t kMaxVerifyRows = 17;

const float* tap_row(const MtpTaps& taps, int64_t position, int64_t row_floats) {
    DI_CHECK(taps.attached && position >= taps.first && position < taps.first + taps.rows,
             "MTP drafting: the target state of position ", position, " is not available (taps cover ", taps.first,
             "..", taps.first + taps.rows - 1, ")");
    return taps.streams.data() + (position - taps.first) * row_floats;
}

}  // namespace

int64_t MtpDrafter::max_drafts() const { return kMaxVerifyRows - 1; }

void MtpDrafter::attach(Sequence& sequence) const {
    V4SequenceState& st = CpuModel::state_of(sequence);
    DI_CHECK(st.length == 0, "MtpDrafter::attach: attach a sequence before its first forward");
    DI_CHECK(!st.mtp_layers.empty(), "MtpDrafter::attach: the sequence has no MTP state");
    st.mtp_taps.attached = true;
}

void run_mtp_taps(const CpuModel& model, std::span<V4SequenceState* const> states,
                  std::span<const std::span<const int32_t>> tokens, std::span<const int64_t> first_positions,
                  const float* streams) {
    const ModelConfig& mc = model.config();
    const int64_t row = mc.hc_mult * mc.hidden_size;
    std::vector<MtpRows> segs;
    std::vector<float> in;
    std::vector<int32_t> next;
    int64_t offset = 0;
    for (size_t i = 0; i < states.size(); ++i) {
        const int64_t n = static_cast<int64_t>(tokens[i].size()), P0 = first_positions[i];
        const float* x = streams + offset * row;
        offset += n;
        MtpTaps& taps = states[i]->mtp_taps;
        if (!taps.attached) continue;
        // MTP rows at positions P0-1 .. P0+n-2: (h_p, t_{p+1}).
        const int64_t first = P0 > 0 ? P0 - 1 : 0;
        const int64_t count = P0 > 0 ? n : n - 1;
        if (count > 0) {
            if (P0 > 0) {
                const float* h = tap_row(taps, P0 - 1, row);
                in.insert(in.end(), h, h + row);
                next.insert(next.end(), tokens[i].begin(), tokens[i].end());
            } else {
                next.insert(next.end(), tokens[i].begin() + 1, tokens[i].end());
            }
            in.insert(in.end(), x, x + (n - 1) * row);
            segs.push_back({states[i], count, first});
        }
        const int64_t keep = std::min(n, kMaxVerifyRows);
        taps.first = P0 + n - keep;
        taps.rows = keep;
        taps.streams.assign(x + (n - keep) * row, x + n * row);
    }
    if (!segs.empty()) model.forward_mtp_batch(0, segs, in.data(), next, nullptr, false);
}

std::vector<Draft> MtpDrafter::draft(std::span<const DraftRequest> requests) const {
    const ModelConfig& mc = model_.config();
    const int64_t row = mc.hc_mult * mc.hidden_size, V = mc.vocab_size;
    std::vector<Draft> out(requests.size());
    std::vector<V4SequenceState*> states;
    std::vector<float> h;          // current input streams, one row per active request
    std::vector<int32_t> tok;      // current input tokens
    std::vector<size_t> active;    // request index of each row
    for (size_t i = 0; i < requests.size(); ++i) {
        const DraftRequest& r = requests[i];
        DI_CHECK(r.sequence != nullptr && r.num_drafts >= 1 && r.num_drafts <= max_drafts(),
                 "MTP drafting: bad request (", r.num_drafts, " drafts, at most ", max_drafts(), ")");
        DI_CHECK(r.uniforms.empty() || static_cast<int64_t>(r.uniforms.size()) == r.num_drafts,
                 "MTP drafting: ", r.uniforms.size(), " uniforms for ", r.num_drafts, " drafts");
        V4SequenceState& st = CpuModel::state_of(*r.sequence);
        DI_CHECK(st.length > 0, "MTP drafting: the sequence has not run its prompt");
        const float* p = tap_row(st.mtp_taps, st.length - 1, row);
        states.push_back(&st);
        h.insert(h.end(), p, p + row);
        tok.push_back(r.anchor);
        active.push_back(i);
    }
    for (int64_t k = 0; !active.empty(); ++k) {
        std::vector<MtpRows> segs;
        for (size_t a = 0; a < active.size(); ++a) segs.push_back({states[active[a]], 1, states[active[a]]->length - 1 + k});
        std::vector<float> streams;
        const std::vector<float> logits = model_.forward_mtp_batch(0, segs, h.data(), tok, &streams, true);
        std::vector<size_t> still;
        std::vector<float> h2;
        std::vector<int32_t> tok2;
        for (size_t a = 0; a < active.size(); ++a) {
            const DraftRequest& r = requests[active[a]];
            Draft& d = out[active[a]];
            const float* l = logits.data() + int64_t(a) * V;
            const bool sampled = !r.uniforms.empty() && r.temperature > 0;
            const int32_t pick = draw_draft(l, V, r.temperature, sampled ? &r.uniforms[size_t(k)] : nullptr, d.probs);
            d.tokens.push_back(pick);
            d.confidence.push_back(draft_confidence_proxy(l, V, pick));  // softmax at temperature 1 of the draft
            if (k + 1 < r.num_drafts) {
                still.push_back(active[a]);
                h2.insert(h2.end(), streams.begin() + int64_t(a) * row, streams.begin() + int64_t(a + 1) * row);
                tok2.push_back(pick);
            }
        }
        active.swap(still);
        h.swap(h2);
        tok.swap(tok2);
    }
    return out;
}

}  // namespace deepinfer
