// SPDX-License-Identifier: Apache-2.0
// Widening \p{X}: the newer code points of each category become extra ranges inside the
// character class (or a new class around the property when it stands alone).
#include "tokenizer/unicode_compat.h"

#include <cstdint>
#include <cstdio>
#include <map>

namespace deepinfer {

namespace {

struct NewerRange {
    const char* category;  // two-letter general category
    uint32_t first, last;
};

constexpr NewerRange kNewer[] = {
#include "tokenizer/unicode_newer.inc"
};

// Category name ("L" or "Lu", ...) -> class fragment ("\x{11F00}-\x{11F10}...").
const std::map<std::string, std::string>& newer_ranges() {
    static const std::map<std::string, std::string> table = [] {
        std::map<std::string, std::string> out;
        char buf[40];
        for (const NewerRange& r : kNewer) {
            if (r.first == r.last)
                std::snprintf(buf, sizeof(buf), "\\x{%X}", r.first);
            else
                std::snprintf(buf, sizeof(buf), "\\x{%X}-\\x{%X}", r.first, r.last);
            out[r.category] += buf;
            out[std::string(1, r.category[0])] += buf;
        }
        return out;
    }();
    return table;
}

}  // namespace

std::string widen_unicode_properties(const std::string& pattern) {
    if (pattern.find("\\p{") == std::string::npos) return pattern;
    const auto& extra = newer_ranges();
    std::string out;
    bool in_class = false;
    size_t i = 0;
    while (i < pattern.size()) {
        const char c = pattern[i];
        if (c == '\\' && i + 1 < pattern.size()) {
            if (pattern[i + 1] == 'p' && i + 2 < pattern.size() && pattern[i + 2] == '{') {
                const size_t close = pattern.find('}', i + 3);
                if (close != std::string::npos) {
                    const std::string prop = pattern.substr(i, close + 1 - i);
                    auto it = extra.find(pattern.substr(i + 3, close - i - 3));
                    if (it == extra.end())
                        out += prop;
                    else if (in_class)
                        out += prop + it->second;
                    else
                        out += "[" + prop + it->second + "]";
                    i = close + 1;
                    continue;
                }
            }
            out.append(pattern, i, 2);  // any other escape, copied as is
            i += 2;
            continue;
        }
        if (!in_class && c == '[') {
            in_class = true;
            out.push_back(c);
            ++i;
            // A ']' right after '[' or '[^' is a literal, not the end of the class.
            if (i < pattern.size() && pattern[i] == '^') out.push_back(pattern[i++]);
            if (i < pattern.size() && pattern[i] == ']') out.push_back(pattern[i++]);
            continue;
        }
        if (in_class && c == ']') in_class = false;
        out.push_back(c);
        ++i;
    }
    return out;
}

}  // namespace deepinfer
