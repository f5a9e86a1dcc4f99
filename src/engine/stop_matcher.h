// SPDX-License-Identifier: Apache-2.0
// Stop strings matched on the detokenized text as it grows, across token boundaries: the text is
// fed incrementally (UTF-8-safe pieces from IncrementalDecoder) and the earliest match wins.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace deepinfer {

class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stops);
    // Appends `piece` to the text; returns the text length at which the first stop string starts
    // once one has appeared (the text before it is the completion).
    std::optional<size_t> feed(const std::string& piece);
    const std::string& text() const { return text_; }
    bool empty() const { return stops_.empty(); }

private:
    std::vector<std::string> stops_;
    size_t longest_ = 0;
    std::string text_;
};

}  // namespace deepinfer
