// SPDX-License-Identifier: Apache-2.0
// Stop-string matching: each feed searches only the tail that a new match can touch.
#include "engine/stop_matcher.h"

#include <algorithm>

namespace deepinfer {

StopMatcher::StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {
    std::erase_if(stops_, [](const std::string& s) { return s.empty(); });
    for (const auto& s : stops_) longest_ = std::max(longest_, s.size());
}

std::optional<size_t> StopMatcher::feed(const std::string& piece) {
    const size_t old = text_.size();
    text_ += piece;
    if (stops_.empty() || piece.empty()) return std::nullopt;
    const size_t from = old >= longest_ ? old - longest_ + 1 : 0;
    std::optional<size_t> best;
    for (const auto& s : stops_) {
        const size_t pos = text_.find(s, from);
        if (pos != std::string::npos && (!best || pos < *best)) best = pos;
    }
    return best;
}

}  // namespace deepinfer
