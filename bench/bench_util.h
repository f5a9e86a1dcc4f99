// SPDX-License-Identifier: Apache-2.0
// Small helpers the bench binaries share: wall-clock seconds since a time point, and comma-separated
// integer lists from the command line ("1,32,128"; empty items are skipped).
#pragma once

#include <chrono>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

namespace deepinfer::bench {

using Clock = std::chrono::steady_clock;

inline double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

inline std::vector<int64_t> parse_list(const std::string& s) {
    std::vector<int64_t> v;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');)
        if (!item.empty()) v.push_back(std::stoll(item));
    return v;
}

}  // namespace deepinfer::bench
