// SPDX-License-Identifier: Apache-2.0
#include "backends/cuda/model/device_page_pool.h"

#include <algorithm>

#include "backends/cuda/cuda_backend.h"
#include "deepinfer/check.h"
#include "deepinfer/log.h"

namespace deepinfer::cuda {

DevicePagePool::DevicePagePool(int64_t pages, uint64_t page_bytes, bool on_device) : page_bytes_(page_bytes) {
    DI_CHECK(pages >= 0 && page_bytes > 0 && page_bytes % 256 == 0, "device page pool: ", pages, " pages of ",
             page_bytes, " bytes (page size must be a positive multiple of 256)");
    DI_CHECK(pages < (int64_t{1} << 31), "device page pool: ", pages, " pages is too many");
    if (on_device && pages > 0) memory_ = std::make_unique<DeviceBuffer>(static_cast<size_t>(pages) * page_bytes);
    refs_.assign(static_cast<size_t>(pages), 0);
    free_.reserve(static_cast<size_t>(pages));
    for (int64_t p = pages - 1; p >= 0; --p) free_.push_back(static_cast<int32_t>(p));
}

DevicePagePool::~DevicePagePool() = default;

int32_t DevicePagePool::acquire() {
    std::lock_guard<std::mutex> lock(mu_);
    DI_CHECK(!free_.empty(), "device state pool exhausted: all ", refs_.size(), " pages of ", page_bytes_,
             " bytes are in use (", (refs_.size() * page_bytes_) >> 20,
             " MiB; raise ModelOptions::device_state_bytes / --device-state-gib, or admit fewer sequences)");
    const int32_t p = free_.back();
    free_.pop_back();
    refs_[size_t(p)] = 1;
    peak_ = std::max(peak_, ++in_use_);
    return p;
}

void DevicePagePool::retain(int32_t p) {
    std::lock_guard<std::mutex> lock(mu_);
    DI_CHECK(p >= 0 && size_t(p) < refs_.size() && refs_[size_t(p)] > 0, "device page pool: retain of free page ", p);
    ++refs_[size_t(p)];
}

void DevicePagePool::release(int32_t p) {
    std::lock_guard<std::mutex> lock(mu_);
    DI_CHECK(p >= 0 && size_t(p) < refs_.size() && refs_[size_t(p)] > 0, "device page pool: release of free page ", p);
    if (--refs_[size_t(p)] == 0) {
        free_.push_back(p);
        --in_use_;
    }
}

int32_t DevicePagePool::references(int32_t p) const {
    std::lock_guard<std::mutex> lock(mu_);
    return refs_[size_t(p)];
}

float* DevicePagePool::page(int32_t p) const {
    if (!memory_) return nullptr;
    return reinterpret_cast<float*>(static_cast<char*>(memory_->data()) + static_cast<size_t>(p) * page_bytes_);
}

int64_t DevicePagePool::pages_in_use() const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_;
}

int64_t DevicePagePool::peak_pages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
}

PageList::PageList(const PageList& o) : pool_(o.pool_), ids_(o.ids_) {
    for (int32_t p : ids_) pool_->retain(p);
}

PageList& PageList::operator=(const PageList& o) {
    if (this == &o) return *this;
    PageList copy(o);
    return *this = std::move(copy);
}

PageList& PageList::operator=(PageList&& o) noexcept {
    if (this == &o) return *this;
    clear();
    pool_ = std::move(o.pool_);
    ids_ = std::move(o.ids_);
    o.ids_.clear();
    return *this;
}

int64_t PageList::unshared_pages() const {
    int64_t n = 0;
    for (int32_t p : ids_) n += pool_->references(p) == 1;
    return n;
}

void PageList::make_writable(int64_t first, int64_t n, std::vector<float*>& fresh, std::vector<PageCopy>& copies) {
    first = std::max<int64_t>(first, 0);
    std::vector<int64_t> shared;  // indices below size() that another holder references
    for (int64_t i = first; i < std::min(n, size()); ++i)
        if (pool_->references(ids_[size_t(i)]) > 1) shared.push_back(i);
    const int64_t grow = std::max<int64_t>(n - size(), 0);
    std::vector<int32_t> got;
    try {
        for (int64_t k = 0; k < grow + static_cast<int64_t>(shared.size()); ++k) got.push_back(pool_->acquire());
    } catch (...) {
        for (int32_t p : got) pool_->release(p);
        throw;
    }
    size_t g = 0;
    for (int64_t i : shared) {
        const int32_t old = ids_[size_t(i)], own = got[g++];
        copies.push_back({pool_->page(own), pool_->page(old)});
        ids_[size_t(i)] = own;
        pool_->release(old);
    }
    for (int64_t k = 0; k < grow; ++k) {
        ids_.push_back(got[g++]);
        fresh.push_back(pool_->page(ids_.back()));
    }
}

void PageList::shrink(int64_t n) {
    while (size() > std::max<int64_t>(n, 0)) {
        pool_->release(ids_.back());
        ids_.pop_back();
    }
}

int64_t pack_ring_slots(std::span<RingSlot* const> slots, uint64_t page_bytes) {
    int64_t pages = 0;
    uint64_t used = page_bytes;  // forces a first page
    for (RingSlot* s : slots) {
        DI_ICHECK(s->bytes <= page_bytes);
        if (used + s->bytes > page_bytes) {
            ++pages;
            used = 0;
        }
        s->page = static_cast<int32_t>(pages - 1);
        s->offset = used;
        used = align256(used + s->bytes);
    }
    return pages;
}

int64_t state_pool_pages(uint64_t bytes, uint64_t per_seq, int64_t max_seqs, uint64_t P, int64_t least, int64_t max_len) {
    int64_t pages = 0;
    if (bytes > 0) {
        pages = static_cast<int64_t>(bytes / P);
    } else {
        // Every sequence the engine may run at max_model_len, within 90% of the device memory still
        // free less 1 GiB (graphs, the runtime, other models).
        const uint64_t want = uint64_t(max_seqs) * per_seq;
        const uint64_t free = device_free_bytes(), reserve = uint64_t{1} << 30;
        const uint64_t room = free > reserve ? (free - reserve) / 10 * 9 : free / 2;
        pages = static_cast<int64_t>(std::min(want, room) / P);
        if (want > room)
            DI_LOG_INFO("CUDA state pool: {} MiB ({} pages of {} KiB) of the {} MiB that {} sequences of {} tokens "
                        "would take; the engine admits what fits",
                        room >> 20, pages, P >> 10, want >> 20, max_seqs, max_len);
    }
    DI_CHECK(pages >= least, "device state pool of ", pages * int64_t(P), " bytes holds no sequence (one needs at least ",
             least * int64_t(P), " bytes; raise --device-state-gib)");
    return pages;
}

void enqueue_page_writes(std::span<const PageCopy> copies, std::span<float* const> fresh, uint64_t page_bytes, Stream s) {
    for (const PageCopy& c : copies) copy_on_device(c.dst, c.src, page_bytes, s);
    for (float* p : fresh) fill_zero(p, page_bytes, s);
}

}  // namespace deepinfer::cuda
