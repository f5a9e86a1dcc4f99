// SPDX-License-Identifier: Apache-2.0
// The pre-tokenizer of a tokenizer.json: a sequence of Split rules (regex or literal pattern, one
// of Hugging Face's five delimiter behaviours, optional invert) and a ByteLevel step. It cuts
// text into the pieces BPE runs on; the ByteLevel step itself is implicit because the BPE model
// works on raw bytes.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"

namespace deepinfer {

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct SplitRule {
    Regex regex;
    SplitBehavior behavior = SplitBehavior::kIsolated;
    bool invert = false;
};

// A piece of the input: byte offsets [begin, end).
using Span = std::pair<uint32_t, uint32_t>;

class PreTokenizer {
public:
    // `config` is tokenizer.json's "pre_tokenizer". Throws on anything but Sequence / Split /
    // ByteLevel (add_prefix_space=false), or when no ByteLevel step is present.
    static PreTokenizer from_json(const nlohmann::json& config);

    // Cuts text[0, size) into non-empty pieces, in order. `scratch` is reused storage.
    void split(std::string_view text, std::vector<Span>& pieces, std::vector<Span>& scratch) const;

    size_t num_rules() const { return rules_.size(); }

private:
    std::vector<SplitRule> rules_;
};

}  // namespace deepinfer
