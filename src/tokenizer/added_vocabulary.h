// SPDX-License-Identifier: Apache-2.0
// Finds added tokens ("<｜User｜>", "</think>", ...) in text before BPE runs, with Hugging Face's
// rules: leftmost-longest matching; tokens with normalized=false are matched first on the whole
// text, normalized ones second inside the gaps; lstrip / rstrip widen a match over neighbouring
// whitespace; single_word rejects matches that touch a word character.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

#include "deepinfer/tokenizer.h"
#include "tokenizer/regex.h"

namespace deepinfer {

// A run of the input: an added token (id >= 0) or ordinary text (id == -1).
struct TextRun {
    uint32_t begin, end;
    int32_t id;
};

class AddedVocabulary {
public:
    explicit AddedVocabulary(std::span<const AddedToken> tokens);

    // Splits text into runs covering it in order. Empty ordinary runs are omitted.
    void split(std::string_view text, std::vector<TextRun>& runs) const;
    bool empty() const { return tokens_.empty(); }

private:
    // A byte trie; node 0 is the root. Children are kept sorted by byte in `edges_`.
    struct Node {
        uint32_t first_edge = 0, num_edges = 0;
        int32_t token = -1;  // index into tokens_ of the token ending here
    };
    struct Edge {
        unsigned char byte;
        uint32_t child;
    };
    struct Trie {
        std::vector<Node> nodes;
        std::vector<Edge> edges;
        bool first_byte[256] = {};
        bool empty() const { return nodes.size() <= 1; }
        // Longest token starting at text[pos]: its index and length, or -1.
        int32_t longest_at(std::string_view text, size_t pos, size_t* len) const;
    };
    static Trie build(std::span<const AddedToken> tokens, std::span<const size_t> indices);
    // Hugging Face's AddedVocabulary::find_matches over text[begin, end).
    void find_matches(const Trie& trie, std::string_view text, uint32_t begin, uint32_t end,
                      std::vector<TextRun>& out) const;

    std::vector<AddedToken> tokens_;
    Trie raw_trie_;         // normalized == false
    Trie normalized_trie_;  // normalized == true
    Regex word_char_;       // one word character, as Rust regex's \w defines it
};

}  // namespace deepinfer
