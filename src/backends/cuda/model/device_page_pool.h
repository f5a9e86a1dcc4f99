// SPDX-License-Identifier: Apache-2.0
// The device page pool of a GPU model's sequence state: one device allocation made at load, cut into
// fixed-size pages handed out by reference count. A PageList is one sequence's (or snapshot's) list of
// pages: copying it shares the pages (each reference counted), a page returns to the pool when its
// last holder lets go, and make_writable() gives a holder its own copy of a shared page first
// (copy-on-write). Acquiring never allocates device memory; an exhausted pool throws a
// deepinfer::Error naming the pool's size and the option that sets it. The bookkeeping is on the host
// and guarded by a mutex (the engine thread copies and frees states while the forward thread appends).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "backends/cuda/ops.h"

namespace deepinfer::cuda {

class DeviceBuffer;

class DevicePagePool {
public:
    // `pages` pages of `page_bytes` bytes (a multiple of 256). `on_device`: in one DeviceBuffer; false:
    // the bookkeeping only (page() returns null; unit tests of the accounting without a GPU).
    DevicePagePool(int64_t pages, uint64_t page_bytes, bool on_device = true);
    ~DevicePagePool();
    DevicePagePool(const DevicePagePool&) = delete;
    DevicePagePool& operator=(const DevicePagePool&) = delete;

    int32_t acquire();  // a free page with one reference; throws when none is left
    void retain(int32_t page);
    void release(int32_t page);  // the last release returns the page to the pool
    int32_t references(int32_t page) const;
    float* page(int32_t page) const;  // device address (null without device memory)

    uint64_t page_bytes() const { return page_bytes_; }
    int64_t capacity_pages() const { return static_cast<int64_t>(refs_.size()); }
    int64_t pages_in_use() const;
    int64_t peak_pages() const;

private:
    uint64_t page_bytes_;
    std::unique_ptr<DeviceBuffer> memory_;
    mutable std::mutex mu_;
    std::vector<int32_t> refs_;  // per page
    std::vector<int32_t> free_;  // LIFO
    int64_t in_use_ = 0, peak_ = 0;
};

// A device copy of a shared page, to run on the model's stream before the work that writes `dst`.
struct PageCopy {
    float* dst = nullptr;
    const float* src = nullptr;
};

class PageList {
public:
    PageList() = default;
    explicit PageList(std::shared_ptr<DevicePagePool> pool) : pool_(std::move(pool)) {}
    PageList(const PageList& o);             // shares every page
    PageList& operator=(const PageList& o);  // shares every page
    PageList(PageList&& o) noexcept = default;
    PageList& operator=(PageList&& o) noexcept;
    ~PageList() { clear(); }

    int64_t size() const { return static_cast<int64_t>(ids_.size()); }
    int32_t id(int64_t i) const { return ids_[size_t(i)]; }
    float* page(int64_t i) const { return pool_->page(ids_[size_t(i)]); }
    const std::shared_ptr<DevicePagePool>& pool() const { return pool_; }
    int64_t unshared_pages() const;

    // Grows to `n` pages (fresh pages from the pool, appended to `fresh`: they hold stale bytes) and
    // makes pages [first, n) writable, a shared one replaced by its own copy (appended to `copies`).
    // All or nothing: when the pool runs out nothing changes and the error propagates.
    void make_writable(int64_t first, int64_t n, std::vector<float*>& fresh, std::vector<PageCopy>& copies);
    // Keeps the first `n` pages.
    void shrink(int64_t n);
    void clear() { shrink(0); }

private:
    std::shared_ptr<DevicePagePool> pool_;
    std::vector<int32_t> ids_;
};

// ---- Shared by the models' state layouts and states (V4: device_state_layout.h, V4.1: cuda_v41_state.h)

// A fixed-size buffer's place in a sequence's ring pages (a ring never straddles a page).
struct RingSlot {
    int32_t page = -1;    // index into the sequence's ring pages (-1: no such buffer)
    uint64_t offset = 0;  // bytes into that page (256-aligned)
    uint64_t bytes = 0;
};

inline uint64_t align256(uint64_t n) { return (n + 255) & ~uint64_t(255); }

// Packs the slots (their `bytes` set) into pages of `page_bytes` in order, a slot never straddling a
// page; sets each slot's page and offset and returns the number of pages.
int64_t pack_ring_slots(std::span<RingSlot* const> slots, uint64_t page_bytes);

// Pages of a model's state pool: `bytes` / page_bytes when given (ModelOptions::device_state_bytes), else
// `max_seqs` sequences of `per_sequence` bytes within 90% of the free device memory less 1 GiB (logged
// when that caps it). Throws when the pool would not hold one sequence of `least_pages` pages.
int64_t state_pool_pages(uint64_t bytes, uint64_t per_sequence, int64_t max_seqs, uint64_t page_bytes,
                         int64_t least_pages, int64_t max_len);

// Enqueues on `s` what make_writable() asked for: the copies of shared pages, then the zeroing of
// fresh pages (on the model's stream, so a page freed while a forward was in flight is reused after it).
void enqueue_page_writes(std::span<const PageCopy> copies, std::span<float* const> fresh, uint64_t page_bytes, Stream s);

}  // namespace deepinfer::cuda
