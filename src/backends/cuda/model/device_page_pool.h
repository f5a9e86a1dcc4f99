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
#include <vector>

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

}  // namespace deepinfer::cuda
