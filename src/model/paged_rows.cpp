// SPDX-License-Identifier: Apache-2.0
// StatePool and PagedRows.
#include "model/paged_rows.h"

#include <algorithm>
#include <cstring>

#include "deepinfer/check.h"

namespace deepinfer {

StatePool::StatePool(uint64_t capacity_bytes, uint64_t page_bytes)
    : page_bytes_(page_bytes), capacity_(capacity_bytes / page_bytes) {
    DI_CHECK(page_bytes >= 64 && page_bytes % 64 == 0, "state pool: page size ", page_bytes, " must be a multiple of 64");
    // new float[] without value-initialization: the pages are touched only when used.
    arena_.reset(new float[capacity_ * (page_bytes_ / sizeof(float))]);
    free_.reserve(capacity_);
    for (uint64_t i = capacity_; i-- > 0;) free_.push_back(static_cast<int64_t>(i));
}

std::shared_ptr<float> StatePool::allocate() {
    int64_t index;
    {
        std::lock_guard<std::mutex> lock(mu_);
        DI_CHECK(!free_.empty(), "state pool exhausted (", capacity_, " pages of ", page_bytes_, " bytes)");
        index = free_.back();
        free_.pop_back();
        peak_ = std::max(peak_, ++in_use_);
    }
    float* p = arena_.get() + static_cast<uint64_t>(index) * (page_bytes_ / sizeof(float));
    return std::shared_ptr<float>(p, [this, index](float*) { release(index); });
}

void StatePool::release(int64_t index) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(index);
    --in_use_;
}

uint64_t StatePool::pages_in_use() const {
    std::lock_guard<std::mutex> lock(mu_);
    return in_use_;
}

uint64_t StatePool::peak_pages() const {
    std::lock_guard<std::mutex> lock(mu_);
    return peak_;
}

namespace {
// Rows of `width` floats per page; a row must fit a page.
int64_t rows_per_page(int64_t width, uint64_t page_bytes) {
    DI_CHECK(width > 0 && static_cast<uint64_t>(width) * sizeof(float) <= page_bytes, "paged state: a row of ", width,
             " floats does not fit a page of ", page_bytes, " bytes");
    return static_cast<int64_t>(page_bytes / (static_cast<uint64_t>(width) * sizeof(float)));
}

// A page from the pool, or from the heap when there is no pool.
std::shared_ptr<float> allocate_page(const std::shared_ptr<StatePool>& pool, uint64_t page_bytes) {
    if (pool) return pool->allocate();
    return std::shared_ptr<float>(new float[page_bytes / sizeof(float)], std::default_delete<float[]>());
}
// Bytes of the pages no other holder shares.
uint64_t unshared_page_bytes(const std::vector<std::shared_ptr<float>>& pages, uint64_t page_bytes) {
    uint64_t n = 0;
    for (const auto& p : pages) n += p.use_count() == 1 ? page_bytes : 0;
    return n;
}
}  // namespace

PagedRows::PagedRows(int64_t width, std::shared_ptr<StatePool> pool, uint64_t heap_page_bytes)
    : width_(width), pool_(std::move(pool)) {
    page_bytes_ = pool_ ? pool_->page_bytes() : heap_page_bytes;
    rows_per_page_ = rows_per_page(width, page_bytes_);
}

std::shared_ptr<float> PagedRows::new_page() { return allocate_page(pool_, page_bytes_); }

void PagedRows::append(const float* row) {
    DI_ICHECK(width_ > 0);
    const int64_t slot = size_ % rows_per_page_;
    if (slot == 0) {
        pages_.push_back(new_page());
    } else if (pages_.back().use_count() > 1) {
        // Copy-on-write: the last page is shared with a snapshot and only partly filled.
        std::shared_ptr<float> copy = new_page();
        std::memcpy(copy.get(), pages_.back().get(), static_cast<size_t>(slot * width_) * sizeof(float));
        pages_.back() = std::move(copy);
    }
    std::memcpy(pages_.back().get() + slot * width_, row, static_cast<size_t>(width_) * sizeof(float));
    ++size_;
}

void PagedRows::truncate(int64_t rows) {
    DI_ICHECK(rows >= 0 && rows <= size_);
    size_ = rows;
    pages_.resize(static_cast<size_t>((rows + rows_per_page_ - 1) / rows_per_page_));
}

uint64_t PagedRows::unshared_bytes() const { return unshared_page_bytes(pages_, page_bytes_); }

PagedRing::PagedRing(int64_t rows, int64_t width, std::shared_ptr<StatePool> pool, uint64_t heap_page_bytes)
    : rows_(rows), width_(width), pool_(std::move(pool)) {
    page_bytes_ = pool_ ? pool_->page_bytes() : heap_page_bytes;
    rows_per_page_ = rows_per_page(width, page_bytes_);
    for (int64_t r = 0; r < rows; r += rows_per_page_) {
        pages_.push_back(new_page());
        std::memset(pages_.back().get(), 0, page_bytes_);
    }
}

std::shared_ptr<float> PagedRing::new_page() { return allocate_page(pool_, page_bytes_); }

float* PagedRing::mutable_row(int64_t slot) {
    std::shared_ptr<float>& page = pages_[static_cast<size_t>(slot / rows_per_page_)];
    if (page.use_count() > 1) {
        std::shared_ptr<float> copy = new_page();
        std::memcpy(copy.get(), page.get(), page_bytes_);
        page = std::move(copy);
    }
    return page.get() + (slot % rows_per_page_) * width_;
}

uint64_t PagedRing::unshared_bytes() const { return unshared_page_bytes(pages_, page_bytes_); }

uint64_t paged_bytes(int64_t rows, int64_t width, uint64_t page_bytes) {
    const int64_t per_page = std::max<int64_t>(1, static_cast<int64_t>(page_bytes / (uint64_t(width) * 4)));
    return static_cast<uint64_t>((rows + per_page - 1) / per_page) * page_bytes;
}

}  // namespace deepinfer
