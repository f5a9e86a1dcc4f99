// SPDX-License-Identifier: Apache-2.0
// Split rules applied one after the other, each to every piece the previous rules produced, with
// Hugging Face's semantics: a pattern's matches and the gaps between them form a list of
// (span, is_match) parts, the behaviour decides how parts merge, and empty pieces vanish.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include <nlohmann/json.hpp>

#include "deepinfer/check.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

namespace {

// GPT-2's pattern, used by ByteLevel when use_regex is true.
constexpr const char* kByteLevelPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

SplitBehavior parse_behavior(const std::string& name) {
    if (name == "Removed") return SplitBehavior::kRemoved;
    if (name == "Isolated") return SplitBehavior::kIsolated;
    if (name == "MergedWithPrevious") return SplitBehavior::kMergedWithPrevious;
    if (name == "MergedWithNext") return SplitBehavior::kMergedWithNext;
    if (name == "Contiguous") return SplitBehavior::kContiguous;
    DI_THROW("unknown Split behavior \"", name, "\"");
}

void add_rules(const nlohmann::json& config, std::vector<SplitRule>& rules, bool& has_byte_level) {
    DI_CHECK(config.is_object() && config.contains("type"), "pre_tokenizer entry has no \"type\"");
    const std::string type = config.at("type").get<std::string>();
    if (type == "Sequence") {
        for (const auto& sub : config.at("pretokenizers")) add_rules(sub, rules, has_byte_level);
    } else if (type == "Split") {
        const auto& pattern = config.at("pattern");
        const bool literal = pattern.contains("String");
        DI_CHECK(literal || pattern.contains("Regex"), "Split pattern needs \"Regex\" or \"String\"");
        const std::string text = pattern.at(literal ? "String" : "Regex").get<std::string>();
        rules.push_back({Regex(text, literal), parse_behavior(config.at("behavior").get<std::string>()),
                         config.value("invert", false)});
    } else if (type == "ByteLevel") {
        DI_CHECK(!config.value("add_prefix_space", false),
                 "ByteLevel pre-tokenizer with add_prefix_space=true is not supported");
        if (config.value("use_regex", true))
            rules.push_back({Regex(kByteLevelPattern), SplitBehavior::kIsolated, false});
        has_byte_level = true;
    } else {
        DI_THROW("pre-tokenizer type \"", type, "\" is not supported (Sequence, Split, ByteLevel are)");
    }
}

// Parts of one piece (offsets relative to the whole text) as Hugging Face's Pattern::find_matches
// lists them: every match, and every non-empty gap, in order.
struct Part {
    uint32_t begin, end;
    bool is_match;
};

void find_parts(const Regex& regex, std::string_view text, Span piece, std::vector<Part>& parts) {
    parts.clear();
    std::string_view subject = text.substr(piece.first, piece.second - piece.first);
    const uint32_t base = piece.first;
    size_t prev = 0, pos = 0, b = 0, e = 0;
    while (pos <= subject.size() && regex.find(subject, pos, &b, &e)) {
        if (prev != b) parts.push_back({base + uint32_t(prev), base + uint32_t(b), false});
        parts.push_back({base + uint32_t(b), base + uint32_t(e), true});
        prev = e;
        if (e > b) {
            pos = e;
        } else {
            // An empty match: the next search starts one character later.
            if (b >= subject.size()) break;
            auto st = utf8::step(reinterpret_cast<const unsigned char*>(subject.data()) + b,
                                 subject.size() - b);
            pos = b + st.len;
        }
    }
    if (prev != subject.size()) parts.push_back({base + uint32_t(prev), piece.second, false});
}

void apply_behavior(SplitBehavior behavior, std::vector<Part>& parts, std::vector<Span>& out) {
    switch (behavior) {
        case SplitBehavior::kIsolated:
            for (const Part& p : parts) out.push_back({p.begin, p.end});
            return;
        case SplitBehavior::kRemoved:
            for (const Part& p : parts)
                if (!p.is_match) out.push_back({p.begin, p.end});
            return;
        case SplitBehavior::kMergedWithPrevious: {
            bool previous_match = false;
            const size_t first = out.size();
            for (const Part& p : parts) {
                if (p.is_match && !previous_match && out.size() > first)
                    out.back().second = p.end;
                else
                    out.push_back({p.begin, p.end});
                previous_match = p.is_match;
            }
            return;
        }
        case SplitBehavior::kMergedWithNext: {
            bool previous_match = false;
            const size_t first = out.size();
            for (size_t i = parts.size(); i-- > 0;) {
                const Part& p = parts[i];
                if (p.is_match && !previous_match && out.size() > first)
                    out.back().first = p.begin;
                else
                    out.push_back({p.begin, p.end});
                previous_match = p.is_match;
            }
            std::reverse(out.begin() + static_cast<ptrdiff_t>(first), out.end());
            return;
        }
        case SplitBehavior::kContiguous: {
            bool previous_match = false;
            const size_t first = out.size();
            for (const Part& p : parts) {
                if (p.is_match == previous_match && out.size() > first)
                    out.back().second = p.end;
                else
                    out.push_back({p.begin, p.end});
                previous_match = p.is_match;
            }
            return;
        }
    }
}

}  // namespace

PreTokenizer PreTokenizer::from_json(const nlohmann::json& config) {
    PreTokenizer pt;
    bool has_byte_level = false;
    DI_CHECK(!config.is_null(), "tokenizer has no pre_tokenizer; only byte-level BPE is supported");
    add_rules(config, pt.rules_, has_byte_level);
    DI_CHECK(has_byte_level, "pre_tokenizer has no ByteLevel step; only byte-level BPE is supported");
    return pt;
}

void PreTokenizer::split(std::string_view text, std::vector<Span>& pieces,
                         std::vector<Span>& scratch) const {
    pieces.clear();
    if (text.empty()) return;
    pieces.push_back({0, static_cast<uint32_t>(text.size())});
    thread_local std::vector<Part> parts;
    for (const SplitRule& rule : rules_) {
        scratch.clear();
        for (const Span& piece : pieces) {
            find_parts(rule.regex, text, piece, parts);
            if (rule.invert)
                for (Part& p : parts) p.is_match = !p.is_match;
            apply_behavior(rule.behavior, parts, scratch);
        }
        // Empty pieces disappear (Hugging Face drops empty splits).
        pieces.clear();
        for (const Span& s : scratch)
            if (s.second > s.first) pieces.push_back(s);
    }
}

}  // namespace deepinfer
