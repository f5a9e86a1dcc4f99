// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4-Flash-0731 DSpark drafter on the GPU, mirroring src/model/dspark_v4.cpp: an attached
// sequence keeps one context ring per drafter stage in device memory (window + kRingHeadroom f32 rows,
// as the target's window ring). Every target forward over attached sequences takes the taps of each
// attached sequence's last ring-many rows (the mean of the streams LEAVING each dspark_target_layer_ids
// layer) and, after the layers, writes their context rows: main_x = main_norm(main_proj(taps)), per
// stage the target's K=V row arithmetic (kv_norm(wkv(main_x)), RoPE at the row's position, official:
// the FP8 simulation of the nope dims) into ring slot p % rows. Rejected rows are overwritten by later
// passes before a draft reads them, so truncate needs no undo. Drafting: cuda_dspark_v4_draft.cpp.
#include <algorithm>

#include "backends/cuda/model/cuda_model_impl.h"

namespace deepinfer::cuda::v4 {

// Everything runs in the model (under its lock).
class CudaDSparkV4Drafter final : public Drafter {
public:
    explicit CudaDSparkV4Drafter(const CudaModel& model) : model_(model) {}
    std::string_view method() const override { return "dspark"; }
    int64_t max_drafts() const override { return model_.config_.dspark_block_size; }
    void attach(Sequence& sequence) const override { model_.dspark_attach(sequence); }
    uint64_t state_bytes(uint64_t) const override { return model_.dspark_state_bytes(); }
    std::vector<Draft> draft(std::span<const DraftRequest> requests) const override { return model_.dspark_draft(requests); }

private:
    const CudaModel& model_;
};

std::unique_ptr<Drafter> CudaModel::make_dspark_drafter() const { return std::make_unique<CudaDSparkV4Drafter>(*this); }

uint64_t CudaModel::dspark_state_bytes() const { return uint64_t(layout_->dspark_pages) * layout_->page_bytes; }

void CudaModel::dspark_attach(Sequence& sequence) const {
    auto* dev = dynamic_cast<DeviceSequenceState*>(&sequence.state());
    DI_CHECK(dev != nullptr, "DSpark attach: the sequence was not created by this CUDA model");
    DI_CHECK(dev->length == 0, "DSpark attach: attach a sequence before its first forward");
    if (dev->dspark) return;
    set_current_device(device_);
    PageList pages(pool_);
    std::vector<float*> fresh;
    std::vector<PageCopy> none;
    pages.make_writable(0, layout_->dspark_pages, fresh, none);
    dev->dspark = std::move(pages);
    std::lock_guard<std::mutex> lock(mutex_);  // zeroed after any forward in flight (see new_sequence)
    for (float* p : fresh) fill_zero(p, layout_->page_bytes, stream_.get());
    if (!tap_sink_) tap_sink_ = std::make_unique<DeviceBuffer>(size_t(config_.head_dim) * sizeof(float));
}

CudaModel::TapPlan CudaModel::dspark_tap_plan(std::span<DeviceSequenceState* const> states,
                                              std::span<const SequenceChunk> chunks, const Batch& b) const {
    TapPlan plan;
    if (!weights_.dspark) return plan;
    const int64_t rows = dspark_ring_rows(), hd = config_.head_dim, NS = int64_t(weights_.dspark->stages.size());
    std::vector<std::vector<float*>> dst(static_cast<size_t>(NS));
    int64_t row = 0;
    for (size_t i = 0; i < states.size(); ++i) {
        const int64_t n = b.num_rows[i];
        const DeviceSequenceState& st = *states[i];
        if (st.dspark && chunks[i].drafter_taps) {  // else its pass skips the drafter (graph-eligible)
            for (int64_t t = std::max<int64_t>(0, n - rows); t < n; ++t) {  // only these can still be read
                const int64_t p = b.first_position[i] + t;
                plan.src.push_back(static_cast<int32_t>(row + t));
                plan.pos.push_back(static_cast<int32_t>(p));
                for (int64_t s = 0; s < NS; ++s)
                    dst[size_t(s)].push_back(st.dspark_ring(s) + (p % rows) * hd);
            }
        }
        row += n;
    }
    for (const auto& d : dst) plan.dst.insert(plan.dst.end(), d.begin(), d.end());
    return plan;
}

CudaModel::TapPlan CudaModel::pad_tap_plan(const TapPlan& plan, int64_t rows) const {
    const size_t M = plan.src.size(), NS = weights_.dspark->stages.size(), S = static_cast<size_t>(rows);
    DI_ICHECK(tap_sink_ && M <= S && plan.dst.size() == NS * M);
    TapPlan p;
    p.src.resize(S);
    for (size_t r = 0; r < S; ++r) p.src[r] = static_cast<int32_t>(r);
    p.pos.assign(S, 0);
    p.dst.assign(NS * S, static_cast<float*>(tap_sink_->data()));
    for (size_t j = 0; j < M; ++j) {
        const auto r = static_cast<size_t>(plan.src[j]);
        p.pos[r] = plan.pos[j];
        for (size_t s = 0; s < NS; ++s) p.dst[s * S + r] = plan.dst[s * M + j];
    }
    return p;
}

void CudaModel::dspark_tap_layer(int64_t layer, const Batch& b, const float* x, float* taps) const {
    const ModelConfig& c = config_;
    const auto& ids = c.dspark_target_layer_ids;
    const auto it = std::find(ids.begin(), ids.end(), layer);
    if (b.num_taps == 0 || it == ids.end()) return;
    const int64_t j = it - ids.begin(), D = c.hidden_size, T = static_cast<int64_t>(ids.size());
    tap_mean({.x = x, .src_row = b.tap_src, .num = b.num_taps, .hc = c.hc_mult, .hidden = D, .out = taps + j * D,
              .ld = T * D, .round_bf16 = official()},
             stream_.get());
}

void CudaModel::dspark_write_context(const Batch& b, const float* taps) const {
    if (b.num_taps == 0) return;
    const ModelConfig& c = config_;
    const DeviceDSpark& d = *weights_.dspark;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t M = b.num_taps, D = c.hidden_size, hd = c.head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    float* main = workspace_->alloc_n<float>(M * D);
    project(d.main_proj, taps, M, main);
    rms_norm({.x = main, .weight = d.main_norm, .out = main, .rows = M, .n = D, .eps = eps, .round_bf16 = off}, s);
    float* kv = workspace_->alloc_n<float>(M * hd);
    for (size_t st = 0; st < d.stages.size(); ++st) {
        const DeviceLayer& lw = d.stages[st];
        project(lw.wkv, main, M, kv);
        rms_norm({.x = kv, .weight = lw.kv_norm, .out = kv, .rows = M, .n = hd, .eps = eps, .round_bf16 = off}, s);
        rope_rows({.x = kv, .rows = M, .heads = 1, .dim = hd, .positions = b.tap_pos, .cos_sin = rope_main_,
                   .rope_dim = c.qk_rope_head_dim, .round_rope_dims = off, .qat = off ? Qat::kFp8Nope : Qat::kNone},
                  s);
        scatter_row_ptrs({.src = kv, .dst_ptr = b.tap_dst + int64_t(st) * M, .rows = M, .width = hd}, s);
    }
}

}  // namespace deepinfer::cuda::v4
