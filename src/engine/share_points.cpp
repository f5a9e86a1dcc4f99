// SPDX-License-Identifier: Apache-2.0
#include "engine/share_points.h"

#include <algorithm>

namespace deepinfer {

std::vector<uint64_t> SharePoints::block_hashes(std::span<const int32_t> prompt) const {
    std::vector<uint64_t> out;
    out.reserve(prompt.size() / static_cast<size_t>(block_));
    uint64_t h = 1469598103934665603ull;  // FNV-1a over the tokens, chained across blocks
    for (size_t i = 0; i < prompt.size(); ++i) {
        h = (h ^ static_cast<uint32_t>(prompt[i])) * 1099511628211ull;
        if ((i + 1) % static_cast<size_t>(block_) == 0) out.push_back(h);
    }
    return out;
}

void SharePoints::add(std::span<const uint64_t> hashes) {
    for (uint64_t h : hashes) ++count_[h];
}

void SharePoints::remove(std::span<const uint64_t> hashes) {
    for (uint64_t h : hashes) {
        auto it = count_.find(h);
        if (it == count_.end()) continue;
        if (--it->second <= 0) count_.erase(it);
    }
}

int64_t SharePoints::count(uint64_t h) const {
    auto it = count_.find(h);
    return it == count_.end() ? 0 : it->second;
}

int64_t SharePoints::next_share_point(std::span<const uint64_t> hashes, int64_t from, int64_t max_len) const {
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(hashes.size()), std::max<int64_t>(max_len, 0) / block_);
    for (int64_t k = std::max<int64_t>(from, 0) / block_ + 1; k <= n; ++k) {
        const int64_t held = count(hashes[static_cast<size_t>(k - 1)]);
        if (held < 2) return 0;  // counts never grow along a prompt: nobody shares more
        if (k == n || count(hashes[static_cast<size_t>(k)]) < held) return k * block_;
    }
    return 0;
}

}  // namespace deepinfer
