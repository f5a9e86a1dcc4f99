// SPDX-License-Identifier: Apache-2.0
// Per-state token caches: a depth-first walk of the vocabulary trie with an isolated Earley
// recognizer started at the state (see token_cache.h).
#include "grammar/token_cache.h"

#include <omp.h>

#include "deepinfer/check.h"
#include "grammar/earley.h"

namespace deepinfer::grammar {
namespace {

struct Walker {
    const Automaton& a;
    const TokenVocabulary::Impl& v;
    Earley earley;
    ByteSet follow;
    std::vector<int32_t> accepted;  // sorted indices
    std::vector<int32_t> uncertain;

    void add_range(std::vector<int32_t>& out, int32_t lo, int32_t hi) {
        for (int32_t i = lo; i < hi; ++i) out.push_back(i);
    }

    std::string path;  // bytes walked in DFA-only mode, not yet pushed into the recognizer

    bool simple(int32_t t) const { return !a.state_final[size_t(t)] && !a.has_edges(t); }

    // `node` is reached and the recognizer's newest set is its prefix; `flag`: some earlier pop
    // on this path was followed by a byte in FOLLOW.
    void walk(int32_t node, bool flag) {
        const ByteSet allowed = earley.top_bytes();
        const bool popped = earley.popped();
        const auto top = earley.top();
        const int32_t single = top.size() == 1 ? top[0].state : -1;
        for (int32_t c = v.nodes[size_t(node)].first_child; c >= 0; c = v.nodes[size_t(c)].next_sibling) {
            const auto& n = v.nodes[size_t(c)];
            const bool f = flag || (popped && byteset_has(follow, n.byte));
            if (single >= 0) {
                const int32_t t = a.next[size_t(single) * 256 + n.byte];
                if (t >= 0 && simple(t)) {  // one item, a plain step: walk the automaton alone
                    add_range(accepted, n.sub_begin, n.tok_end);
                    path.push_back(char(n.byte));
                    if (n.first_child >= 0) dfa_walk(c, t, f);
                    path.pop_back();
                    continue;
                }
            }
            if (!byteset_has(allowed, n.byte) || !earley.push(n.byte)) {
                if (f) add_range(uncertain, n.sub_begin, n.sub_end);
                continue;
            }
            add_range(accepted, n.sub_begin, n.tok_end);
            if (n.first_child >= 0) walk(c, f);
            earley.pop();
        }
    }

    // The recognizer is `path` bytes behind: its newest set would be the single item at `state`
    // (no pops, no predictions on the way). Falls back to the recognizer where that stops.
    void dfa_walk(int32_t node, int32_t state, bool flag) {
        for (int32_t c = v.nodes[size_t(node)].first_child; c >= 0; c = v.nodes[size_t(c)].next_sibling) {
            const auto& n = v.nodes[size_t(c)];
            const int32_t t = a.next[size_t(state) * 256 + n.byte];
            if (t < 0) {
                if (flag) add_range(uncertain, n.sub_begin, n.sub_end);
                continue;
            }
            add_range(accepted, n.sub_begin, n.tok_end);
            if (n.first_child < 0) continue;
            if (simple(t)) {
                path.push_back(char(n.byte));
                dfa_walk(c, t, flag);
                path.pop_back();
                continue;
            }
            // Catch the recognizer up, continue with it below this node.
            const size_t base = earley.num_sets();
            bool ok = true;
            for (char b : path) ok = ok && earley.push(static_cast<uint8_t>(b));
            ok = ok && earley.push(n.byte);
            DI_ICHECK(ok);
            const std::string saved = std::move(path);
            path.clear();
            walk(c, flag);
            path = saved;
            earley.truncate(base);
        }
    }
};

}  // namespace

StateTokens compute_state_tokens(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
    Walker w{a, v, Earley(&a), a.rule_follow[size_t(a.state_rule[size_t(state)])], {}, {}, {}};
    w.earley.start_at(state);
    w.walk(0, false);
    StateTokens st;
    st.computed = true;
    st.num_accepted = static_cast<int64_t>(w.accepted.size());
    const int64_t words = (v.vocab_size + 63) / 64;
    if (st.num_accepted > 2 * words) {  // a bitset is smaller than the id list
        st.accepted_bits.assign(size_t(words), 0);
        for (int32_t i : w.accepted) {
            const int32_t id = v.sorted[size_t(i)];
            st.accepted_bits[size_t(id >> 6)] |= uint64_t{1} << (id & 63);
        }
    } else {
        st.accepted_ids.reserve(w.accepted.size());
        for (int32_t i : w.accepted) st.accepted_ids.push_back(v.sorted[size_t(i)]);
    }
    st.uncertain = std::move(w.uncertain);
    return st;
}

std::vector<StateTokens> compute_all_state_tokens(const Automaton& a, const TokenVocabulary::Impl& v) {
    std::vector<StateTokens> out(size_t(a.num_states()));
    std::vector<int32_t> todo;
    for (int32_t s = 0; s < a.num_states(); ++s)
        if (a.has_bytes(s)) todo.push_back(s);
#pragma omp parallel for schedule(dynamic, 1) if (todo.size() > 8)
    for (int64_t i = 0; i < static_cast<int64_t>(todo.size()); ++i)
        out[size_t(todo[size_t(i)])] = compute_state_tokens(a, v, todo[size_t(i)]);
    return out;
}

}  // namespace deepinfer::grammar
