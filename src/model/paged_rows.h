// SPDX-License-Identifier: Apache-2.0
// Paged storage for the growing part of a sequence's state (compressed KV entries, indexer keys).
// StatePool is one pre-sized arena cut into fixed-size pages; PagedRows is an append-only list of
// fixed-width f32 rows kept in pages. Copying a PagedRows shares its pages (reference counted), and
// an append into a shared, partly filled page copies that page first: prefix-cache snapshots and the
// sequences started from them share the memory of every whole page. A page returns to the pool when
// its last holder goes. Not thread-safe per PagedRows; the pool itself is guarded by a mutex.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace deepinfer {

class StatePool {
public:
    // `capacity_bytes` of pages of `page_bytes` each; the arena is reserved (not touched) up front.
    explicit StatePool(uint64_t capacity_bytes, uint64_t page_bytes = 16 << 10);
    StatePool(const StatePool&) = delete;
    StatePool& operator=(const StatePool&) = delete;

    // A page of page_bytes() bytes; throws when the pool is exhausted. Freed when the last copy dies.
    std::shared_ptr<float> allocate();
    uint64_t page_bytes() const { return page_bytes_; }
    uint64_t capacity_pages() const { return capacity_; }
    uint64_t pages_in_use() const;
    uint64_t peak_pages() const;

private:
    void release(int64_t index);

    uint64_t page_bytes_;
    uint64_t capacity_;
    std::unique_ptr<float[]> arena_;
    mutable std::mutex mu_;
    std::vector<int64_t> free_;
    uint64_t in_use_ = 0;
    uint64_t peak_ = 0;
};

class PagedRows {
public:
    PagedRows() = default;
    // `pool` may be null: pages then come from the heap (same layout, no shared budget).
    PagedRows(int64_t width, std::shared_ptr<StatePool> pool, uint64_t heap_page_bytes = 16 << 10);

    int64_t size() const { return size_; }
    int64_t width() const { return width_; }
    const float* row(int64_t i) const {
        return pages_[static_cast<size_t>(i / rows_per_page_)].get() + (i % rows_per_page_) * width_;
    }
    void append(const float* row);
    // Keeps the first `rows` rows; pages past them are released.
    void truncate(int64_t rows);
    // Bytes of the pages this list references (shared pages counted in full).
    uint64_t bytes() const { return pages_.size() * page_bytes_; }
    // Bytes of the pages only this list holds.
    uint64_t unshared_bytes() const;

private:
    std::shared_ptr<float> new_page();

    int64_t width_ = 0;
    int64_t rows_per_page_ = 1;
    int64_t size_ = 0;
    uint64_t page_bytes_ = 0;
    std::shared_ptr<StatePool> pool_;
    std::vector<std::shared_ptr<float>> pages_;
};

// A fixed-size ring of `rows` rows in pages of the pool (allocated and zeroed at construction).
// Copies share pages; writing a row of a shared page copies that page first (copy-on-write), so a
// prefix snapshot and the sequence started from it share the ring until one of them writes.
class PagedRing {
public:
    PagedRing() = default;
    PagedRing(int64_t rows, int64_t width, std::shared_ptr<StatePool> pool, uint64_t heap_page_bytes = 16 << 10);

    int64_t rows() const { return rows_; }
    const float* row(int64_t slot) const {
        return pages_[static_cast<size_t>(slot / rows_per_page_)].get() + (slot % rows_per_page_) * width_;
    }
    float* mutable_row(int64_t slot);
    uint64_t bytes() const { return pages_.size() * page_bytes_; }
    uint64_t unshared_bytes() const;

private:
    std::shared_ptr<float> new_page();

    int64_t rows_ = 0;
    int64_t width_ = 0;
    int64_t rows_per_page_ = 1;
    uint64_t page_bytes_ = 0;
    std::shared_ptr<StatePool> pool_;
    std::vector<std::shared_ptr<float>> pages_;
};

// Pages needed for `rows` rows of `width` floats with pages of `page_bytes`.
uint64_t paged_bytes(int64_t rows, int64_t width, uint64_t page_bytes);

}  // namespace deepinfer
