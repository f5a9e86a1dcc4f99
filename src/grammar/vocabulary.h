// SPDX-License-Identifier: Apache-2.0
// TokenVocabulary internals: each token's bytes, the usable tokens sorted by bytes, and a trie
// over them whose every subtree is a contiguous range of the sorted order (so a rejected prefix
// rejects a whole range at once, and "uncertain" sets are sorted ranges the matcher re-walks
// sharing prefixes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "deepinfer/grammar.h"

namespace deepinfer {

struct TokenVocabulary::Impl {
    struct Node {
        int32_t first_child = -1;
        int32_t next_sibling = -1;
        int32_t sub_begin = 0;  // [sub_begin, sub_end): sorted indices of the tokens in this subtree
        int32_t sub_end = 0;
        int32_t tok_end = 0;    // [sub_begin, tok_end): tokens whose bytes end exactly here
        int32_t max_rest = 0;   // the most bytes a token of this subtree has below this node
        int32_t depth = 0;      // bytes from the root
        int32_t node_end = 0;   // nodes are in depth-first preorder: the subtree is [this, node_end)
        uint8_t byte = 0;
    };
    int32_t vocab_size = 0;
    std::vector<std::string> bytes;  // [vocab_size] the bytes each id contributes to the text
    std::vector<uint8_t> usable;     // [vocab_size] may appear in constrained text
    std::vector<uint8_t> is_eos;     // [vocab_size]
    std::vector<int32_t> eos_ids;
    std::vector<int32_t> sorted;     // usable ids sorted by bytes (then id)
    std::vector<Node> nodes;         // nodes[0] is the root (empty prefix)
    // The fields of `nodes` a linear scan of a subtree reads, packed (20 bytes instead of 40): the
    // automaton-only walks of the token caches are bound by the memory they stream.
    struct ScanNode {
        int32_t node_end = 0, sub_begin = 0, tok_end = 0;
        uint16_t depth = 0, max_rest = 0;  // token bytes fit: max_token_bytes < 65536 (checked)
        uint8_t byte = 0;
    };
    std::vector<ScanNode> scan;      // [nodes.size()]
    size_t max_token_bytes = 0;

    void build();  // sorted + trie from bytes/usable
};

}  // namespace deepinfer
