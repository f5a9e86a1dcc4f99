// SPDX-License-Identifier: Apache-2.0
// Added-token extraction. The tries are tiny (a few thousand nodes for 1,283 DeepSeek tokens),
// and a 256-entry first-byte table lets the scan skip text that cannot start a token.
#include "tokenizer/added_vocabulary.h"

#include <algorithm>
#include <map>

#include "deepinfer/check.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

// Rust regex's \w: Alphabetic, marks, decimal digits, connector punctuation, joiners. L, Nl and M
// are listed although Alphabetic covers them, so that the Unicode-version widening of general
// categories (unicode_compat.h) reaches letters newer than PCRE2's tables.
AddedVocabulary::AddedVocabulary(std::span<const AddedToken> tokens)
    : tokens_(tokens.begin(), tokens.end()), word_char_(R"(^[\p{Alphabetic}\p{L}\p{Nl}\p{M}\p{Nd}\p{Pc}\p{Join_Control}])") {
    std::vector<size_t> raw, normalized;
    for (size_t i = 0; i < tokens_.size(); ++i) {
        if (tokens_[i].content.empty()) continue;
        (tokens_[i].normalized ? normalized : raw).push_back(i);
    }
    raw_trie_ = build(tokens_, raw);
    normalized_trie_ = build(tokens_, normalized);
}

AddedVocabulary::Trie AddedVocabulary::build(std::span<const AddedToken> tokens,
                                             std::span<const size_t> indices) {
    // Build with maps, then flatten into sorted edge arrays.
    std::vector<std::map<unsigned char, uint32_t>> children(1);
    std::vector<int32_t> token_at(1, -1);
    for (size_t idx : indices) {
        uint32_t node = 0;
        for (unsigned char b : tokens[idx].content) {
            auto it = children[node].find(b);
            if (it == children[node].end()) {
                const auto child = static_cast<uint32_t>(children.size());
                children[node][b] = child;
                children.emplace_back();
                token_at.push_back(-1);
                node = child;
            } else {
                node = it->second;
            }
        }
        // Duplicate content: the first token keeps it (Hugging Face keeps the first as well).
        if (token_at[node] < 0) token_at[node] = static_cast<int32_t>(idx);
    }
    Trie trie;
    trie.nodes.resize(children.size());
    for (size_t n = 0; n < children.size(); ++n) {
        trie.nodes[n].first_edge = static_cast<uint32_t>(trie.edges.size());
        trie.nodes[n].num_edges = static_cast<uint32_t>(children[n].size());
        trie.nodes[n].token = token_at[n];
        for (const auto& [byte, child] : children[n]) trie.edges.push_back({byte, child});
    }
    for (const auto& [byte, child] : children[0]) trie.first_byte[byte] = true;
    return trie;
}

int32_t AddedVocabulary::Trie::longest_at(std::string_view text, size_t pos, size_t* len) const {
    int32_t best = -1;
    uint32_t node = 0;
    for (size_t i = pos; i < text.size(); ++i) {
        const Node& nd = nodes[node];
        const auto b = static_cast<unsigned char>(text[i]);
        const Edge* first = edges.data() + nd.first_edge;
        const Edge* last = first + nd.num_edges;
        const Edge* e = std::lower_bound(first, last, b,
                                         [](const Edge& edge, unsigned char v) { return edge.byte < v; });
        if (e == last || e->byte != b) break;
        node = e->child;
        if (nodes[node].token >= 0) {
            best = nodes[node].token;
            *len = i + 1 - pos;
        }
    }
    return best;
}

namespace {

// The code point that ends at text[end) (text is valid UTF-8), or that starts at text[begin].
uint32_t last_code_point(std::string_view text, size_t end) {
    size_t b = end - 1;
    while (b > 0 && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
    return utf8::step(reinterpret_cast<const unsigned char*>(text.data()) + b, end - b).code_point;
}

}  // namespace

void AddedVocabulary::find_matches(const Trie& trie, std::string_view text, uint32_t begin,
                                   uint32_t end, std::vector<TextRun>& out) const {
    std::string_view sentence = text.substr(0, end);
    const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
    uint32_t start_offset = begin;
    size_t pos = begin;
    auto is_word_char = [&](size_t at) {
        size_t b = 0, e = 0;
        auto st = utf8::step(bytes + at, end - at);
        return word_char_.find(sentence.substr(at, st.len), 0, &b, &e);
    };
    while (pos < end) {
        if (!trie.first_byte[bytes[pos]]) {
            ++pos;
            continue;
        }
        size_t len = 0;
        const int32_t idx = trie.longest_at(sentence, pos, &len);
        if (idx < 0) {
            ++pos;
            continue;
        }
        const AddedToken& tok = tokens_[static_cast<size_t>(idx)];
        size_t start = pos, stop = pos + len;
        pos = stop;  // matches never overlap
        if (tok.single_word) {
            bool start_space = start == begin;
            if (!start_space) {
                size_t b = start - 1;
                while (b > begin && (bytes[b] & 0xC0) == 0x80) --b;
                start_space = !is_word_char(b);
            }
            const bool stop_space = stop == end || !is_word_char(stop);
            if (!start_space || !stop_space) continue;
        }
        if (tok.lstrip) {
            size_t s = start;
            while (s > begin && utf8::is_white_space(last_code_point(sentence, s))) {
                size_t b = s - 1;
                while (b > begin && (bytes[b] & 0xC0) == 0x80) --b;
                s = b;
            }
            start = std::max<size_t>(s, start_offset);
        }
        if (tok.rstrip) {
            while (stop < end) {
                auto st = utf8::step(bytes + stop, end - stop);
                if (!utf8::is_white_space(st.code_point)) break;
                stop += st.len;
            }
        }
        if (start_offset < start) out.push_back({start_offset, uint32_t(start), -1});
        out.push_back({uint32_t(start), uint32_t(stop), tok.id});
        start_offset = static_cast<uint32_t>(stop);
    }
    if (start_offset < end) out.push_back({start_offset, end, -1});
}

void AddedVocabulary::split(std::string_view text, std::vector<TextRun>& runs) const {
    runs.clear();
    const auto size = static_cast<uint32_t>(text.size());
    if (raw_trie_.empty() && normalized_trie_.empty()) {
        if (size > 0) runs.push_back({0, size, -1});
        return;
    }
    if (raw_trie_.empty()) {
        find_matches(normalized_trie_, text, 0, size, runs);
        return;
    }
    find_matches(raw_trie_, text, 0, size, runs);
    if (normalized_trie_.empty()) return;
    thread_local std::vector<TextRun> first;
    first.swap(runs);
    runs.clear();
    for (const TextRun& r : first) {
        if (r.id >= 0)
            runs.push_back(r);
        else
            find_matches(normalized_trie_, text, r.begin, r.end, runs);
    }
}

}  // namespace deepinfer
