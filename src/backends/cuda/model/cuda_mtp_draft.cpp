// SPDX-License-Identifier: Apache-2.0
// MTP drafting on the GPU, mirroring MtpDrafter::draft (src/model/mtp_drafter.cpp): from the final
// streams of each request's last committed position (its tap ring) and the anchor, the MTP block,
// its HC head, norm and the target's LM head give the first draft; the block's own output streams
// and that draft give the next, k times (speculative-decoding.md §5.3). Every step runs on the device
// for all requests that still want drafts; draft_sample picks each draft (argmax, or inverse CDF with
// the request's uniform) with src/model/draft_sampling.h's arithmetic. Drafting writes the MTP ring at
// positions >= num_tokens() - 1 only; the next target pass overwrites them before any read. Calls
// replay CUDA graphs per (request bucket, draft count, sampling) when graphs are on (draft_graphs.h).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backends/cuda/model/cuda_model_impl.h"
#include "backends/cuda/model/device_drafts.h"
#include "backends/cuda/model/draft_graphs.h"

namespace deepinfer::cuda::v4 {

std::vector<Draft> CudaModel::mtp_draft(std::span<const DraftRequest> requests) const {
    std::lock_guard<std::mutex> lock(mutex_);
    set_current_device(device_);
    const ModelConfig& c = config_;
    const Stream s = stream_.get();
    const int64_t V = c.vocab_size, W = c.hc_mult * c.hidden_size, R = static_cast<int64_t>(requests.size());
    std::vector<Draft> out(requests.size());
    if (R == 0) return out;
    DI_CHECK(R <= std::max<int64_t>(max_seqs_, 1), "MTP drafting: ", R, " requests, the workspace holds ", max_seqs_);
    // Rows sorted by draft count (descending): the requests still drafting at step k are a prefix.
    std::vector<int64_t> order(static_cast<size_t>(R));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return requests[size_t(a)].num_drafts > requests[size_t(b)].num_drafts; });
    std::vector<DeviceSequenceState*> states;
    int64_t K = 0;
    for (int64_t a = 0; a < R; ++a) {
        const DraftRequest& r = requests[size_t(order[size_t(a)])];
        DI_CHECK(r.sequence != nullptr && r.num_drafts >= 1 && r.num_drafts <= kMtpMaxDrafts,
                 "MTP drafting: bad request (", r.num_drafts, " drafts, at most ", kMtpMaxDrafts, ")");
        DI_CHECK(r.uniforms.empty() || static_cast<int64_t>(r.uniforms.size()) == r.num_drafts, "MTP drafting: ",
                 r.uniforms.size(), " uniforms for ", r.num_drafts, " drafts");
        DI_CHECK(r.anchor >= 0 && r.anchor < V, "MTP drafting: anchor ", r.anchor, " outside the vocabulary");
        auto* dev = dynamic_cast<DeviceSequenceState*>(&r.sequence->state());
        DI_CHECK(dev != nullptr && dev->mtp, "MTP drafting: the sequence is not attached to this model's drafter");
        DI_CHECK(dev->length > 0, "MTP drafting: the sequence has not run its prompt");
        const DeviceMtpState& m = *dev->mtp;
        const int64_t p = dev->length - 1;
        DI_CHECK(p >= m.taps_first && p < m.taps_end, "MTP drafting: the target state of position ", p,
                 " is not available (the tap ring holds ", m.taps_first, "..", m.taps_end - 1, ")");
        DI_CHECK(dev->length - 1 + r.num_drafts <= max_len_, "MTP drafting: positions past max_model_len ", max_len_);
        states.push_back(dev);
        K = std::max(K, r.num_drafts);
    }
    // A call replays the CUDA graph of its request bucket, draft count K and sampling (draft_graphs.h):
    // every step runs every slot (a request with fewer drafts chains on to K, writing its MTP window at
    // positions the next target pass overwrites before any read, as a request of K drafts would), and
    // the slots past the requests draft token 0 at positions 0 .. K-1 of the padding sequence's window
    // (all alike: same inputs, same writes). Rows compute alone: the requests' drafts are the eager ones.
    bool fits = true;  // every slot's K positions within max_model_len
    for (const DeviceSequenceState* st : states) fits = fits && st->length - 1 + K <= max_len_;
    const DraftGraphShape shape = draft_graph_shape(draft_graphs_.enabled() && fits, R, max_seqs_);
    const int64_t Rs = shape.slots;
    auto* pad = static_cast<DeviceSequenceState*>(&pad_.state());
    std::vector<int32_t> anchors, sampled, ident;
    std::vector<const float*> src_ptr;
    std::vector<double> temps, uniforms(static_cast<size_t>(Rs * K), 0.0);
    // Drafting writes the MTP windows: each becomes its sequence's own first (copy-on-write).
    prepare_mtp_writes(states);
    for (int64_t a = 0; a < Rs; ++a) {
        const bool is_pad = a >= R;
        const DraftRequest& r = requests[size_t(order[size_t(std::min(a, R - 1))])];
        const DeviceSequenceState* st = is_pad ? pad : states[size_t(a)];
        anchors.push_back(is_pad ? 0 : r.anchor);
        ident.push_back(static_cast<int32_t>(a));
        const bool smp = !is_pad && !r.uniforms.empty() && r.temperature > 0;
        sampled.push_back(smp ? 1 : 0);
        temps.push_back(is_pad ? 0.0 : r.temperature);
        src_ptr.push_back(st->mtp_tap_row(is_pad ? 0 : (st->length - 1) % kMtpTapRows, W));
        if (is_pad) continue;
        for (size_t k = 0; k < r.uniforms.size(); ++k) uniforms[size_t(a * K) + k] = r.uniforms[k];
    }
    // Per step k: the active rows, their positions and one segment each (MTP ring of that sequence).
    const std::vector<int64_t> active = shape.active(requests, order, K);
    std::vector<int32_t> positions;
    std::vector<DeviceSegment> segs;
    for (int64_t k = 0; k < K; ++k)
        for (int64_t a = 0; a < active[size_t(k)]; ++a) {
            const DeviceSequenceState* st = a >= R ? pad : states[size_t(a)];
            DeviceSegment ds;
            ds.row_begin = a;
            ds.num_rows = 1;
            ds.first_position = (a >= R ? 0 : st->length - 1) + k;
            ds.window = st->mtp_window();
            segs.push_back(ds);
            positions.push_back(static_cast<int32_t>(ds.first_position));
        }
    // Inputs: one pinned block, one copy.
    size_t bytes = 0;
    auto place = [&](size_t n) {
        const size_t at = bytes;
        bytes = align256(bytes + n);
        return at;
    };
    const size_t o_anchor = place(size_t(Rs) * 4), o_sampled = place(size_t(Rs) * 4), o_ident = place(size_t(Rs) * 4);
    const size_t o_src = place(size_t(Rs) * sizeof(const float*)), o_temp = place(size_t(Rs) * 8);
    const size_t o_unif = place(uniforms.size() * 8), o_pos = place(positions.size() * 4);
    const size_t o_segs = place(segs.size() * sizeof(DeviceSegment));
    if (!pinned_in_ || pinned_in_->nbytes() < bytes) pinned_in_ = std::make_unique<PinnedBuffer>(bytes * 2);
    auto* pin = static_cast<uint8_t*>(pinned_in_->host());
    std::memcpy(pin + o_anchor, anchors.data(), size_t(Rs) * 4);
    std::memcpy(pin + o_sampled, sampled.data(), size_t(Rs) * 4);
    std::memcpy(pin + o_ident, ident.data(), size_t(Rs) * 4);
    std::memcpy(pin + o_src, src_ptr.data(), size_t(Rs) * sizeof(const float*));
    std::memcpy(pin + o_temp, temps.data(), size_t(Rs) * 8);
    std::memcpy(pin + o_unif, uniforms.data(), uniforms.size() * 8);
    std::memcpy(pin + o_pos, positions.data(), positions.size() * 4);
    std::memcpy(pin + o_segs, segs.data(), segs.size() * sizeof(DeviceSegment));
    // A graph copies its results to pinned memory that never moves while it lives (draft_graphs.h), eager
    // calls to the staging buffers.
    // Sampled drafts' distributions: the persistent device buffer (Draft::device_probs), copied to the host
    // only when some sampled request reads them there (DraftRequest::host_probs).
    const DraftProbs probs_mode = draft_probs_mode(requests);
    const DraftBuffers hb = draft_graphs_.buffers(shape, probs_mode, K, V, Rs, pinned_out_, pinned_probs_);

    const size_t mark = workspace_->mark();
    ArenaRollback release(*workspace_, mark, stream_);  // (on an exception)
    auto* d_in = static_cast<uint8_t*>(workspace_->alloc(bytes));
    copy_to_device(d_in, pin, bytes, s);
    const auto* d_anchor = reinterpret_cast<const int32_t*>(d_in + o_anchor);
    const auto* d_sampled = reinterpret_cast<const int32_t*>(d_in + o_sampled);
    const auto* d_ident = reinterpret_cast<const int32_t*>(d_in + o_ident);
    const auto* d_src = reinterpret_cast<const float* const*>(d_in + o_src);
    const auto* d_temp = reinterpret_cast<const double*>(d_in + o_temp);
    const auto* d_unif = reinterpret_cast<const double*>(d_in + o_unif);
    const auto* d_pos = reinterpret_cast<const int32_t*>(d_in + o_pos);
    const auto* d_segs = reinterpret_cast<const DeviceSegment*>(d_in + o_segs);
    auto compute = [&] {
        // Step k's drafts and confidences: [K, Rs] each; the streams of the rows still drafting ping-pong.
        int32_t* d_tokens = workspace_->alloc_n<int32_t>(K * Rs);
        float* d_conf = workspace_->alloc_n<float>(K * Rs);
        float* h[2] = {workspace_->alloc_n<float>(Rs * W), workspace_->alloc_n<float>(Rs * W)};
        gather_row_sources({.src_ptr = d_src, .base = nullptr, .base_row = nullptr, .dst = h[0], .rows = Rs, .width = W},
                           s);
        size_t seg_at = 0;
        for (int64_t k = 0; k < K; ++k) {
            const int64_t n = active[size_t(k)];
            const size_t step = workspace_->mark();
            Batch mb;
            mb.rows = n;
            mb.num_segments = n;
            mb.max_rows = 1;
            mb.graph = shape.graph;
            mb.tokens = k == 0 ? d_anchor : d_tokens + (k - 1) * Rs;
            mb.positions = d_pos + seg_at;
            mb.row_segment = d_ident;
            mb.all_segments = mb.segments = d_segs + seg_at;
            for (int64_t a = 0; a < n; ++a) {
                mb.first_position.push_back(segs[seg_at + size_t(a)].first_position);
                mb.num_rows.push_back(1);
                mb.max_position = std::max(mb.max_position, segs[seg_at + size_t(a)].first_position);
            }
            // (a graph's sizes may not follow the positions: the block's sliding window sizes its candidates
            // from max_position, which is the longest context for every call of the graph)
            if (shape.graph) mb.max_position = max_len_ - 1;
            seg_at += size_t(n);
            float* xo = mtp_block(mb, h[k % 2]);
            const float* logits = head_logits(xo, n, weights_.mtp->hc_head, weights_.mtp->norm);
            double* parts = workspace_->alloc_n<double>(draft_sample_parts(n, V));
            // (argmax drafts only: scratch, not read)
            float* probs = hb.device_probs ? hb.device_probs + k * Rs * V : workspace_->alloc_n<float>(n * V);
            draft_sample({.logits = logits, .rows = n, .vocab = V, .temperature = d_temp, .sampled = d_sampled,
                          .uniform = d_unif + k, .uniform_stride = K, .parts = parts, .probs = probs,
                          .tokens = d_tokens + k * Rs, .confidence = d_conf + k * Rs},
                         s);
            // The step's distributions in one copy when asked (rows of greedy drafts are copied but not read).
            if (hb.host_probs) copy_to_host(hb.host_probs + k * Rs * V, probs, size_t(n * V) * 4, s);
            if (k + 1 < K) copy_on_device(h[(k + 1) % 2], xo, size_t(active[size_t(k + 1)] * W) * 4, s);
            workspace_->reset(step);  // stream-ordered: the next step's scratch follows on the stream
        }
        copy_to_host(hb.out, d_tokens, size_t(K * Rs) * 4, s);
        copy_to_host(hb.out + size_t(K * Rs) * 4, d_conf, size_t(K * Rs) * 4, s);
    };
    if (shape.graph)
        draft_graphs_.run(Rs, K, probs_mode, *workspace_, s, compute, stats_.draft_graph_captures,
                          stats_.draft_graph_replays);
    else
        compute();
    stream_.synchronize();
    release.disarm();
    workspace_->reset(mark);
    unpack_device_drafts(hb.out, hb.host_probs, hb.device_probs, K, V, Rs, order, requests, sampled, out);
    return out;
}

}  // namespace deepinfer::cuda::v4
