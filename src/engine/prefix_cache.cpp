// SPDX-License-Identifier: Apache-2.0
// Prefix cache: exact-prefix lookup by hash, verified token by token.
#include "engine/prefix_cache.h"

#include <algorithm>

namespace deepinfer {

uint64_t PrefixCache::hash(std::span<const int32_t> tokens) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : tokens) h = (h ^ static_cast<uint32_t>(t)) * 1099511628211ull;
    return h;
}

PrefixCache::Hit PrefixCache::lookup(std::span<const int32_t> tokens, int64_t max_length) {
    for (int64_t len = std::min<int64_t>(max_length, static_cast<int64_t>(tokens.size())) / block_ * block_; len > 0;
         len -= block_) {
        auto prefix = tokens.first(static_cast<size_t>(len));
        auto [b, e] = index_.equal_range(hash(prefix));
        for (auto it = b; it != e; ++it) {
            auto entry = it->second;
            if (entry->tokens.size() == prefix.size() && std::equal(prefix.begin(), prefix.end(), entry->tokens.begin())) {
                lru_.splice(lru_.begin(), lru_, entry);
                return {entry->state.get(), len};
            }
        }
    }
    return {};
}

void PrefixCache::insert(std::span<const int32_t> tokens, const SequenceState& state) {
    if (tokens.empty() || static_cast<int64_t>(tokens.size()) % block_ != 0) return;
    const uint64_t key = hash(tokens);
    auto [b, e] = index_.equal_range(key);
    for (auto it = b; it != e; ++it)
        if (std::equal(tokens.begin(), tokens.end(), it->second->tokens.begin(), it->second->tokens.end())) {
            lru_.splice(lru_.begin(), lru_, it->second);
            return;
        }
    const uint64_t bytes = state.bytes() + tokens.size() * sizeof(int32_t);
    if (bytes > max_bytes_) return;
    evict(max_bytes_ - bytes);
    lru_.push_front(Entry{std::vector<int32_t>(tokens.begin(), tokens.end()), state.clone(), bytes, key});
    index_.emplace(key, lru_.begin());
    bytes_ += bytes;
}

void PrefixCache::set_max_bytes(uint64_t max_bytes) {
    max_bytes_ = max_bytes;
    evict(max_bytes);
}

void PrefixCache::evict(uint64_t max_bytes) {
    while (bytes_ > max_bytes && !lru_.empty()) {
        auto last = std::prev(lru_.end());
        auto [b, e] = index_.equal_range(last->key);
        for (auto it = b; it != e; ++it)
            if (it->second == last) {
                index_.erase(it);
                break;
            }
        bytes_ -= last->bytes;
        lru_.pop_back();
    }
}

}  // namespace deepinfer
