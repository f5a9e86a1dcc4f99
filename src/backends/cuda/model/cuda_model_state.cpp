// SPDX-License-Identifier: Apache-2.0
// CudaModel's sequence state in the device page pool (device_sequence_state.h): the pool's size,
// new sequences, and the copy-on-write and zeroing of pages before a forward writes them.
#include <exception>

#include "backends/cuda/model/cuda_model_impl.h"

namespace deepinfer::cuda::v4 {

void CudaModel::make_state_pool(uint64_t bytes) {
    const DeviceStateLayout& L = *layout_;
    const uint64_t P = L.page_bytes;
    // Every sequence the engine may run at max_model_len (MTP-attached when the checkpoint drafts).
    const uint64_t per_seq = L.sequence_bytes(max_len_) + uint64_t(L.mtp_pages + L.dspark_pages) * P;
    const int64_t least = L.ring_pages + L.mtp_pages + L.dspark_pages + L.entry_pages(1);
    const int64_t pages = state_pool_pages(bytes, per_seq, max_seqs_, P, least, max_len_);
    // + the padding sequence's rings and MTP pages
    pool_ = std::make_shared<DevicePagePool>(pages + L.ring_pages + L.mtp_pages, P);
    state_capacity_ = uint64_t(pages) * P;
}

Sequence CudaModel::new_sequence(std::shared_ptr<StatePool>) const {
    set_current_device(device_);
    auto dev = std::make_unique<DeviceSequenceState>(layout_, pool_);
    dev->device = device_;
    std::vector<float*> fresh;
    std::vector<PageCopy> none;
    dev->rings.make_writable(0, layout_->ring_pages, fresh, none);
    // Zeroed on the model's stream after any forward in flight (which may still write pages that a
    // finished sequence returned to the pool) and before the next one.
    std::lock_guard<std::mutex> lock(mutex_);
    for (float* p : fresh) fill_zero(p, layout_->page_bytes, stream_.get());
    return Sequence(std::move(dev));
}

void CudaModel::prepare_writes(std::span<DeviceSequenceState* const> states, std::span<const SequenceChunk> chunks) const {
    std::vector<float*> fresh;
    std::vector<PageCopy> copies;
    std::exception_ptr failed;
    for (size_t i = 0; i < states.size() && !failed; ++i) {
        try {
            DeviceSequenceState& st = *states[i];
            if (chunks.empty()) st.mtp->pages.make_writable(0, layout_->mtp_pages, fresh, copies);
            else st.prepare_writes(static_cast<int64_t>(chunks[i].tokens.size()), fresh, copies);
        } catch (...) {
            failed = std::current_exception();
        }
    }
    // The copies of the sequences already prepared run even when a later one failed: their page
    // lists name the new pages now.
    enqueue_page_writes(copies, fresh, layout_->page_bytes, stream_.get());
    if (failed) std::rethrow_exception(failed);
}

}  // namespace deepinfer::cuda::v4
