// SPDX-License-Identifier: Apache-2.0
// Prefix cache: snapshots of sequence state at whole-block prompt boundaries, keyed by the exact
// token prefix. A new sequence whose prompt starts with a cached prefix starts from a copy of that
// state instead of recomputing it; because every kernel is chunking-invariant, the continuation is
// bit-identical to a full recompute. LRU eviction within a byte budget. Engine thread only.
// Snapshots share the pages of the state they were taken from (copy-on-write, model/paged_rows.h).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "deepinfer/model.h"

namespace deepinfer {

class PrefixCache {
public:
    PrefixCache(uint64_t max_bytes, int64_t block) : max_bytes_(max_bytes), block_(block) {}

    struct Hit {
        const SequenceState* state = nullptr;  // fork it (clone()) to continue from it
        int64_t length = 0;
    };
    // Longest cached prefix of `tokens` of length <= max_length (a multiple of the block).
    Hit lookup(std::span<const int32_t> tokens, int64_t max_length);
    // Stores a snapshot of `state`, which holds exactly `tokens` (length a multiple of the block).
    void insert(std::span<const int32_t> tokens, const SequenceState& state);
    void set_max_bytes(uint64_t max_bytes);
    uint64_t bytes() const { return bytes_; }
    int64_t entries() const { return static_cast<int64_t>(lru_.size()); }
    int64_t block() const { return block_; }

private:
    struct Entry {
        std::vector<int32_t> tokens;
        std::unique_ptr<SequenceState> state;
        uint64_t bytes = 0;
        uint64_t key = 0;
    };
    static uint64_t hash(std::span<const int32_t> tokens);
    void evict(uint64_t max_bytes);

    uint64_t max_bytes_;
    int64_t block_;
    uint64_t bytes_ = 0;
    std::list<Entry> lru_;  // most recently used first
    std::unordered_multimap<uint64_t, std::list<Entry>::iterator> index_;
};

}  // namespace deepinfer
