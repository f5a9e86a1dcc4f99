// SPDX-License-Identifier: Apache-2.0
// The DeepSeek-V4.1 DSpark drafter on the GPU, mirroring src/model/v41/dspark.cpp: an attached
// sequence keeps one context ring per drafter stage in pool pages (window + kRingHeadroom rows in
// the target window's compact FP8 format; the CPU keeps the same values as f32). Every target forward
// over attached sequences takes the taps of each attached segment's last ring-many rows (the mean of the
// streams ENTERING each dspark_target_layer_ids layer, after its Engram) and, after the layers, writes
// their context rows: main_x = main_norm(main_proj(taps)), per stage kv_norm(wkv(main_x)) with RoPE at
// the row's position and the FP8 cache QAT, into ring slot p % rows. Rejected rows are overwritten by
// later passes before a draft reads them (a draft at P reads P - window .. P - 1), so truncate needs no
// undo. Drafting: cuda_v41_dspark_draft.cpp.
#include <algorithm>

#include "backends/cuda/model/cuda_v41_impl.h"
#include "deepinfer/check.h"
#include "model/state.h"

namespace deepinfer::cuda {

// Everything runs in the model (under its lock).
class CudaV41DSparkDrafter final : public Drafter {
public:
    explicit CudaV41DSparkDrafter(const CudaV41Model& model) : model_(model) {}
    std::string_view method() const override { return "dspark"; }
    int64_t max_drafts() const override { return model_.config_.text.dspark_block_size; }
    void attach(Sequence& sequence) const override { model_.dspark_attach(sequence); }
    uint64_t state_bytes(uint64_t) const override { return model_.dspark_state_bytes(); }
    std::vector<Draft> draft(std::span<const DraftRequest> requests) const override { return model_.dspark_draft(requests); }

private:
    const CudaV41Model& model_;
};

std::unique_ptr<Drafter> make_cuda_v41_dspark_drafter(const CudaV41Model& model) {
    return std::make_unique<CudaV41DSparkDrafter>(model);
}

int64_t CudaV41Model::dspark_ring_rows() const { return config_.text.sliding_window + kRingHeadroom; }

uint64_t CudaV41Model::dspark_state_bytes() const { return uint64_t(layout_->dspark_pages) * layout_->page_bytes; }

void CudaV41Model::dspark_attach(Sequence& sequence) const {
    auto* st = dynamic_cast<V41DeviceState*>(&sequence.state());
    DI_CHECK(st != nullptr, "DSpark attach: the sequence was not created by this CUDA DeepSeek-V4.1 model");
    DI_CHECK(st->length == 0, "DSpark attach: attach a sequence before its first forward");
    if (st->dspark) return;
    set_current_device(device_);
    PageList rings(pool_);
    std::vector<float*> fresh;
    std::vector<PageCopy> none;
    rings.make_writable(0, layout_->dspark_pages, fresh, none);
    // Zeroed on the model's stream, after any forward in flight (see new_sequence).
    std::lock_guard<std::mutex> lock(mutex_);
    enqueue_page_writes(none, fresh, layout_->page_bytes, stream_.get());
    st->dspark = std::move(rings);
    if (!tap_sink_) tap_sink_ = std::make_unique<DeviceBuffer>(size_t(formats_.window_bytes));
}

void CudaV41Model::plan_taps(Batch& b, InputBlock& in) const {
    b.num_taps = 0;
    if (dspark_stages_ == 0) return;
    const int64_t rows = dspark_ring_rows(), row_bytes = formats_.window_bytes;
    std::vector<int32_t> src, pos;
    std::vector<std::vector<uint8_t*>> dst(static_cast<size_t>(dspark_stages_));
    // A graph step with any tapped row: every row of the bucket taps, the size the captured work has
    // (its chunks are shorter than a ring); rows whose pass skips the drafter, and padding rows, write their
    // context rows to the sink row (never read).
    const bool pad = b.graph && std::find(b.drafter_taps.begin(), b.drafter_taps.end(), 1) != b.drafter_taps.end();
    DI_ICHECK(!pad || b.max_rows <= rows);
    for (size_t i = 0; i < b.states.size(); ++i) {
        const bool real = i < b.drafter_taps.size();  // (padding segments come last)
        if (pad && (!real || !b.drafter_taps[i])) {
            for (int64_t t = 0; t < b.num_rows[i]; ++t) {
                src.push_back(static_cast<int32_t>(b.row_begin[i] + t));
                pos.push_back(0);
                for (int64_t s = 0; s < dspark_stages_; ++s)
                    dst[size_t(s)].push_back(static_cast<uint8_t*>(tap_sink_->data()));
            }
            continue;
        }
        if (!real || !b.drafter_taps[i]) continue;  // not attached, or its pass skips the drafter
        V41DeviceState& st = *b.states[i];
        // The segment's last ring-many rows (earlier rows of a long chunk would be overwritten by later ones).
        const int64_t n = b.num_rows[i];
        for (int64_t t = std::max<int64_t>(0, n - rows); t < n; ++t) {
            const int64_t p = b.first_position[i] + t;
            src.push_back(static_cast<int32_t>(b.row_begin[i] + t));
            pos.push_back(static_cast<int32_t>(p));
            for (int64_t s = 0; s < dspark_stages_; ++s)
                dst[size_t(s)].push_back(st.dspark_ring(s) + (p % rows) * row_bytes);
        }
    }
    b.num_taps = static_cast<int64_t>(src.size());
    DI_ICHECK(!pad || b.num_taps == b.rows);
    if (b.num_taps == 0) return;
    b.tap_src = in.add(src);
    b.tap_pos = in.add(pos);
    std::vector<uint8_t*> all;
    for (const auto& d : dst) all.insert(all.end(), d.begin(), d.end());
    b.tap_dst = in.add(all);
}

void CudaV41Model::tap_layer(int64_t layer, const Batch& b, const float* x, float* taps) const {
    const V41TextConfig& c = config_.text;
    const auto& ids = c.dspark_target_layer_ids;
    const auto it = std::find(ids.begin(), ids.end(), layer);
    if (b.num_taps == 0 || it == ids.end()) return;
    const int64_t j = it - ids.begin(), D = c.hidden_size, T = static_cast<int64_t>(ids.size());
    tap_mean({.x = x, .src_row = b.at<int32_t>(b.tap_src), .num = b.num_taps, .hc = c.hc_mult, .hidden = D,
              .out = taps + j * D, .ld = T * D, .round_bf16 = official()},
             stream_.get());
}

void CudaV41Model::write_context(const Batch& b, const float* taps) const {
    if (b.num_taps == 0) return;
    const V41TextConfig& c = config_.text;
    const V41DeviceDSpark& d = *weights_.dspark;
    const Stream s = stream_.get();
    const bool off = official();
    const int64_t M = b.num_taps, D = c.hidden_size, hd = c.head_dim;
    const float eps = static_cast<float>(c.rms_norm_eps);
    const int32_t* pos = b.at<int32_t>(b.tap_pos);
    // main_x = main_norm(main_proj(taps)), shared by the stages.
    float* main = workspace_.alloc_n<float>(M * D);
    project(d.main_proj, taps, M, main);
    rms_norm({.x = main, .weight = d.main_norm, .out = main, .rows = M, .n = D, .eps = eps, .round_bf16 = off}, s);
    float* kv = workspace_.alloc_n<float>(M * hd);
    for (int64_t st = 0; st < dspark_stages_; ++st) {
        const V41DeviceLayer& lw = d.stages[size_t(st)];
        project(lw.wkv, main, M, kv);
        rms_norm({.x = kv, .weight = lw.kv_norm, .out = kv, .rows = M, .n = hd, .eps = eps, .round_bf16 = off}, s);
        rope_rows({.x = kv, .rows = M, .heads = 1, .dim = hd, .positions = pos, .cos_sin = rope_main_,
                   .rope_dim = c.qk_rope_head_dim, .round_rope_dims = off},
                  s);
        qat_rows({.x = kv, .rows = M, .n = hd, .block = V41CacheFormats::kWindowBlock, .format = formats_.window,
                  .fake_quant = true, .dst = b.at<uint8_t*>(b.tap_dst) + st * M},
                 s);
    }
}

}  // namespace deepinfer::cuda
