// SPDX-License-Identifier: Apache-2.0
// TokenVocabulary: token bytes from the tokenizer and the sorted-token trie.
#include "grammar/vocabulary.h"

#include <algorithm>

#include "deepinfer/check.h"
#include "deepinfer/tokenizer.h"

namespace deepinfer {

void TokenVocabulary::Impl::build() {
    sorted.clear();
    for (int32_t id = 0; id < vocab_size; ++id)
        if (usable[size_t(id)] && !bytes[size_t(id)].empty()) sorted.push_back(id);
    std::sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) {
        const int c = bytes[size_t(a)].compare(bytes[size_t(b)]);
        return c != 0 ? c < 0 : a < b;
    });
    nodes.assign(1, Node{});
    std::vector<int32_t> path = {0};       // node per depth
    std::vector<int32_t> last_child = {-1};  // per node
    std::string prev;
    auto close_node = [&](int32_t node, int32_t end) {
        nodes[size_t(node)].sub_end = end;
        nodes[size_t(node)].node_end = static_cast<int32_t>(nodes.size());
    };
    for (int32_t i = 0; i < static_cast<int32_t>(sorted.size()); ++i) {
        const std::string& s = bytes[size_t(sorted[size_t(i)])];
        max_token_bytes = std::max(max_token_bytes, s.size());
        size_t lcp = 0;
        while (lcp < s.size() && lcp < prev.size() && s[lcp] == prev[lcp]) ++lcp;
        while (path.size() > lcp + 1) {
            close_node(path.back(), i);
            path.pop_back();
        }
        for (size_t d = lcp; d < s.size(); ++d) {
            const int32_t parent = path.back();
            Node n;
            n.byte = static_cast<uint8_t>(s[d]);
            n.sub_begin = i;
            n.tok_end = i;
            n.depth = static_cast<int32_t>(d + 1);
            nodes.push_back(n);
            last_child.push_back(-1);
            const int32_t id = static_cast<int32_t>(nodes.size() - 1);
            if (last_child[size_t(parent)] < 0) nodes[size_t(parent)].first_child = id;
            else nodes[size_t(last_child[size_t(parent)])].next_sibling = id;
            last_child[size_t(parent)] = id;
            path.push_back(id);
        }
        nodes[size_t(path.back())].tok_end = i + 1;
        prev = s;
    }
    while (!path.empty()) {
        close_node(path.back(), static_cast<int32_t>(sorted.size()));
        path.pop_back();
    }
    nodes[0].sub_begin = 0;
    nodes[0].tok_end = 0;
    // Children come after their parent: one backward pass.
    for (size_t i = nodes.size(); i-- > 0;)
        for (int32_t c = nodes[i].first_child; c >= 0; c = nodes[size_t(c)].next_sibling)
            nodes[i].max_rest = std::max(nodes[i].max_rest, nodes[size_t(c)].max_rest + 1);
    DI_CHECK(max_token_bytes < 65536, "a token of ", max_token_bytes, " bytes is longer than the trie supports");
    scan.resize(nodes.size());
    for (size_t i = 0; i < nodes.size(); ++i) {
        const Node& n = nodes[i];
        scan[i] = {n.node_end, n.sub_begin, n.tok_end, uint16_t(n.depth), uint16_t(n.max_rest), n.byte};
    }
}

TokenVocabulary::TokenVocabulary(const Tokenizer& tokenizer, int32_t vocab_size, std::vector<int32_t> eos_ids,
                                 const std::vector<std::string>& allowed_added)
    : impl_(std::make_unique<Impl>()) {
    Impl& v = *impl_;
    v.vocab_size = vocab_size;
    v.bytes.resize(size_t(vocab_size));
    v.usable.assign(size_t(vocab_size), 0);
    v.is_eos.assign(size_t(vocab_size), 0);
    const int32_t n = std::min(vocab_size, tokenizer.vocab_size());
    for (int32_t id = 0; id < n; ++id) {
        v.bytes[size_t(id)] = std::string(tokenizer.token_bytes(id));
        if (!tokenizer.is_added(id)) v.usable[size_t(id)] = 1;
    }
    for (const AddedToken& t : tokenizer.added_tokens())
        if (t.id >= 0 && t.id < vocab_size) {
            v.bytes[size_t(t.id)] = t.content;
            v.usable[size_t(t.id)] = std::find(allowed_added.begin(), allowed_added.end(), t.content) != allowed_added.end();
        }
    for (int32_t e : eos_ids)
        if (e >= 0 && e < vocab_size) {
            v.is_eos[size_t(e)] = 1;
            v.usable[size_t(e)] = 0;
            v.eos_ids.push_back(e);
        }
    v.build();
}

TokenVocabulary::TokenVocabulary(std::vector<std::string> token_bytes, std::vector<int32_t> eos_ids)
    : impl_(std::make_unique<Impl>()) {
    Impl& v = *impl_;
    v.vocab_size = static_cast<int32_t>(token_bytes.size());
    v.bytes = std::move(token_bytes);
    v.usable.assign(size_t(v.vocab_size), 1);
    v.is_eos.assign(size_t(v.vocab_size), 0);
    for (int32_t e : eos_ids)
        if (e >= 0 && e < v.vocab_size) {
            v.is_eos[size_t(e)] = 1;
            v.usable[size_t(e)] = 0;
            v.eos_ids.push_back(e);
        }
    v.build();
}

TokenVocabulary::~TokenVocabulary() = default;
int32_t TokenVocabulary::size() const { return impl_->vocab_size; }

}  // namespace deepinfer
