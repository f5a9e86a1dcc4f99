// SPDX-License-Identifier: Apache-2.0
// The MTP block of the V4-Flash preview on the GPU (speculative-decoding.md §5), mirroring
// src/model/mtp_drafter.cpp and CpuModel::forward_mtp_batch: an attached sequence keeps, in device
// memory, the MTP block's sliding-window ring and the final HC streams of its last target rows (a ring
// keyed by position, cuda_model_impl.h). Every target pass over attached sequences then runs the MTP
// rows whose next token it has just learned (position P0-1 from the tap ring, then the chunk's rows but
// the last) with the target's layer code (CudaModel::run_layer), so the MTP ring holds every committed
// position; drafting (cuda_mtp_draft.cpp) chains the block from the last committed row.
#include <cstring>

#include "backends/cuda/model/cuda_model_impl.h"

namespace deepinfer::cuda::v4 {
namespace {

// The Drafter of a CudaModel with an MTP block: everything runs in the model (under its lock).
class CudaMtpDrafter final : public Drafter {
public:
    explicit CudaMtpDrafter(const CudaModel& model) : model_(model) {}
    std::string_view method() const override { return "mtp"; }
    int64_t max_drafts() const override { return kMtpMaxDrafts; }
    void attach(Sequence& sequence) const override { model_.mtp_attach(sequence); }
    uint64_t state_bytes(uint64_t) const override { return model_.mtp_state_bytes(); }
    std::vector<Draft> draft(std::span<const DraftRequest> requests) const override { return model_.mtp_draft(requests); }

private:
    const CudaModel& model_;
};

// Byte offsets of the packed pass inputs (mtp_pass_bytes / pack / bind agree through this).
struct PassLayout {
    size_t tokens = 0, positions = 0, row_segment = 0, src_row = 0, src_ptr = 0, segments = 0, tap_dst = 0, total = 0;
};
PassLayout layout_of(size_t M, size_t segments, size_t rows) {
    PassLayout l;
    size_t at = 0;
    auto place = [&](size_t n) {
        const size_t here = at;
        at = align256(at + n);
        return here;
    };
    l.tokens = place(M * 4);
    l.positions = place(M * 4);
    l.row_segment = place(M * 4);
    l.src_row = place(M * 4);
    l.src_ptr = place(M * sizeof(const float*));
    l.segments = place(segments * sizeof(DeviceSegment));
    l.tap_dst = place(rows * sizeof(float*));
    l.total = at;
    return l;
}

}  // namespace

std::unique_ptr<Drafter> CudaModel::make_mtp_drafter() const { return std::make_unique<CudaMtpDrafter>(*this); }

uint64_t CudaModel::mtp_state_bytes() const { return uint64_t(layout_->mtp_pages) * layout_->page_bytes; }

void CudaModel::mtp_attach(Sequence& sequence) const {
    auto* dev = dynamic_cast<DeviceSequenceState*>(&sequence.state());
    DI_CHECK(dev != nullptr, "MTP attach: the sequence was not created by this CUDA model");
    DI_CHECK(dev->length == 0, "MTP attach: attach a sequence before its first forward");
    if (dev->mtp) return;
    set_current_device(device_);
    DeviceMtpState m{PageList(pool_)};
    std::vector<float*> fresh;
    std::vector<PageCopy> none;
    m.pages.make_writable(0, layout_->mtp_pages, fresh, none);
    dev->mtp = std::move(m);
    std::lock_guard<std::mutex> lock(mutex_);  // zeroed after any forward in flight (see new_sequence)
    for (float* p : fresh) fill_zero(p, layout_->page_bytes, stream_.get());
}

CudaModel::MtpPassPlan CudaModel::mtp_pass_plan(std::span<DeviceSequenceState* const> states,
                                                std::span<const SequenceChunk> chunks) const {
    MtpPassPlan p;
    const int64_t row_floats = config_.hc_mult * config_.hidden_size;
    int64_t offset = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
        const std::span<const int32_t> toks = chunks[i].tokens;
        const int64_t n = static_cast<int64_t>(toks.size()), P0 = states[i]->length;
        const DeviceMtpState* m = states[i]->mtp ? &*states[i]->mtp : nullptr;
        p.graphable = p.graphable && m != nullptr && P0 > 0;
        for (int64_t t = 0; t < n; ++t) {
            // The last kMtpTapRows rows of an attached chunk go to the tap ring.
            float* dst = nullptr;
            if (m && t >= n - kMtpTapRows) dst = states[i]->mtp_tap_row((P0 + t) % kMtpTapRows, row_floats);
            p.tap_dst.push_back(dst);
        }
        if (m) {
            p.any = true;
            // MTP rows at positions P0-1 .. P0+n-2: (h_p, t_{p+1}); h_{P0-1} from the ring.
            const int64_t first = P0 > 0 ? P0 - 1 : 0, count = P0 > 0 ? n : n - 1, seg_row = int64_t(p.tokens.size());
            if (P0 > 0) {
                DI_CHECK(P0 - 1 >= m->taps_first && P0 - 1 < m->taps_end, "MTP: the target state of position ", P0 - 1,
                         " is not available (the tap ring holds ", m->taps_first, "..", m->taps_end - 1, ")");
                p.src_ptr.push_back(states[i]->mtp_tap_row((P0 - 1) % kMtpTapRows, row_floats));
                p.src_row.push_back(-1);
                p.tokens.push_back(toks[0]);
            }
            for (int64_t t = 0; t + 1 < n; ++t) {
                p.src_ptr.push_back(nullptr);
                p.src_row.push_back(static_cast<int32_t>(offset + t));
                p.tokens.push_back(toks[size_t(t + 1)]);
            }
            if (count > 0) {
                const int32_t seg = static_cast<int32_t>(p.segments.size());
                for (int64_t r = 0; r < count; ++r) {
                    p.positions.push_back(static_cast<int32_t>(first + r));
                    p.row_segment.push_back(seg);
                }
                DeviceSegment ds;
                ds.row_begin = seg_row;
                ds.num_rows = count;
                ds.first_position = first;
                ds.window = states[i]->mtp_window();
                p.segments.push_back(ds);
                p.first_position.push_back(first);
                p.num_rows.push_back(count);
                p.max_rows = std::max(p.max_rows, count);
                p.max_position = std::max(p.max_position, first + count - 1);
            }
        }
        offset += n;
    }
    return p;
}

CudaModel::MtpPassPlan CudaModel::pad_mtp_pass_plan(MtpPassPlan p, const Batch& b, int64_t real_segments) const {
    DI_ICHECK(p.any && p.graphable && b.graph && static_cast<int64_t>(p.segments.size()) == real_segments);
    const auto* pad = static_cast<const DeviceSequenceState*>(&pad_.state());
    int64_t row = static_cast<int64_t>(p.tokens.size());
    for (int64_t i = real_segments; i < b.num_segments; ++i) {
        const int64_t n = b.num_rows[size_t(i)];
        const int32_t seg = static_cast<int32_t>(p.segments.size());
        for (int64_t r = 0; r < n; ++r) {
            p.tokens.push_back(0);
            p.positions.push_back(0);
            p.row_segment.push_back(seg);
            p.src_row.push_back(static_cast<int32_t>(row + r));
            p.src_ptr.push_back(nullptr);
            p.tap_dst.push_back(nullptr);
        }
        DeviceSegment ds;
        ds.row_begin = row;
        ds.num_rows = n;
        ds.first_position = 0;
        ds.window = pad->mtp_window();
        p.segments.push_back(ds);
        p.first_position.push_back(0);
        p.num_rows.push_back(n);
        row += n;
    }
    DI_ICHECK(row == b.rows && static_cast<int64_t>(p.tap_dst.size()) == b.rows);
    p.max_rows = b.max_rows;
    p.max_position = b.max_position;
    return p;
}

size_t CudaModel::mtp_pass_bytes(const MtpPassPlan& p) {
    return p.any ? layout_of(p.tokens.size(), p.segments.size(), p.tap_dst.size()).total : 0;
}

void CudaModel::mtp_pass_pack(const MtpPassPlan& p, uint8_t* host) {
    if (!p.any) return;
    const PassLayout l = layout_of(p.tokens.size(), p.segments.size(), p.tap_dst.size());
    auto put = [&](size_t at, const auto& v) {
        if (!v.empty()) std::memcpy(host + at, v.data(), v.size() * sizeof(v[0]));
    };
    put(l.tokens, p.tokens);
    put(l.positions, p.positions);
    put(l.row_segment, p.row_segment);
    put(l.src_row, p.src_row);
    put(l.src_ptr, p.src_ptr);
    put(l.segments, p.segments);
    put(l.tap_dst, p.tap_dst);
}

void CudaModel::mtp_pass_bind(const MtpPassPlan& p, const uint8_t* device, Batch& b) {
    if (!p.any) return;
    const PassLayout l = layout_of(p.tokens.size(), p.segments.size(), p.tap_dst.size());
    b.mtp = &p;
    b.mtp_tokens = reinterpret_cast<const int32_t*>(device + l.tokens);
    b.mtp_positions = reinterpret_cast<const int32_t*>(device + l.positions);
    b.mtp_row_segment = reinterpret_cast<const int32_t*>(device + l.row_segment);
    b.mtp_src_row = reinterpret_cast<const int32_t*>(device + l.src_row);
    b.mtp_src_ptr = reinterpret_cast<const float* const*>(device + l.src_ptr);
    b.mtp_segments = reinterpret_cast<const DeviceSegment*>(device + l.segments);
    b.mtp_tap_dst = reinterpret_cast<float* const*>(device + l.tap_dst);
}

void CudaModel::run_mtp_pass(const Batch& b, const float* x) const {
    const MtpPassPlan& p = *b.mtp;
    const Stream s = stream_.get();
    const int64_t W = config_.hc_mult * config_.hidden_size, M = static_cast<int64_t>(p.tokens.size());
    DI_ICHECK(static_cast<int64_t>(p.tap_dst.size()) == b.rows);
    const size_t mark = workspace_->mark();
    // The rows' hidden streams first: the ring row of P0-1 may be a slot this pass writes.
    float* h = workspace_->alloc_n<float>(M * W);
    gather_row_sources({.src_ptr = b.mtp_src_ptr, .base = x, .base_row = b.mtp_src_row, .dst = h, .rows = M, .width = W}, s);
    scatter_row_ptrs({.src = x, .dst_ptr = b.mtp_tap_dst, .rows = b.rows, .width = W}, s);
    if (M > 0) {
        Batch mb;
        mb.rows = M;
        mb.num_segments = static_cast<int64_t>(p.segments.size());
        mb.max_rows = p.max_rows;
        mb.tokens = b.mtp_tokens;
        mb.positions = b.mtp_positions;
        mb.row_segment = b.mtp_row_segment;
        mb.all_segments = mb.segments = b.mtp_segments;
        mb.first_position = p.first_position;
        mb.num_rows = p.num_rows;
        mb.max_position = p.max_position;
        mb.graph = b.graph;
        mb.short_chunks = b.short_chunks;
        mtp_block(mb, h);
    }
    workspace_->reset(mark);  // stream-ordered
}

void CudaModel::mtp_pass_done(std::span<DeviceSequenceState* const> states, std::span<const SequenceChunk> chunks) {
    for (size_t i = 0; i < chunks.size(); ++i) {
        if (!states[i]->mtp) continue;
        DeviceMtpState& m = *states[i]->mtp;
        const int64_t P0 = states[i]->length, end = P0 + static_cast<int64_t>(chunks[i].tokens.size());
        // Rows before P0 stay valid when they continue the ring's range and were not overwritten.
        const int64_t kept = m.taps_first <= P0 && m.taps_end >= P0 ? m.taps_first : P0;
        m.taps_first = std::max(kept, end - kMtpTapRows);
        m.taps_end = end;
    }
}

float* CudaModel::mtp_block(const Batch& mb, const float* h) const {
    const ModelConfig& c = config_;
    const DeviceMtp& w = *weights_.mtp;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t M = mb.rows, D = c.hidden_size, hc = c.hc_mult;
    const float eps = static_cast<float>(c.rms_norm_eps);
    // e = enorm(Embed[t_{p+1}]), hs = hnorm(h_p) per stream (bf16-rounded after both norms in official).
    float* e = workspace_->alloc_n<float>(M * D);
    float* hs = workspace_->alloc_n<float>(M * hc * D);
    embed({.table = weights_.embed, .tokens = mb.tokens, .x = e, .rows = M, .hc = 1, .round_bf16 = false}, s);
    rms_norm({.x = e, .weight = w.enorm, .out = e, .rows = M, .n = D, .eps = eps, .round_bf16 = off}, s);
    rms_norm({.x = h, .weight = w.hnorm, .out = hs, .rows = M * hc, .n = D, .eps = eps, .round_bf16 = off}, s);
    // x = e_proj(e) broadcast to the streams + h_proj(hs).
    float* ep = workspace_->alloc_n<float>(M * D);
    float* hp = workspace_->alloc_n<float>(M * hc * D);
    project(w.e_proj, e, M, ep);
    project(w.h_proj, hs, M * hc, hp);
    float* x = workspace_->alloc_n<float>(M * hc * D);
    float* y = workspace_->alloc_n<float>(M * hc * D);
    add_streams({.e = ep, .h = hp, .x = x, .rows = M, .hc = hc, .hidden = D, .round_bf16 = off}, s);
    run_layer(w.block, mb, x, y);
    return x;
}

}  // namespace deepinfer::cuda::v4
