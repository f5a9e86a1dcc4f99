// SPDX-License-Identifier: Apache-2.0
// Per-state token caches: a depth-first walk of the vocabulary trie with an isolated Earley
// recognizer started at the state (see token_cache.h).
#include "grammar/token_cache.h"

#include <span>

#include <omp.h>

#include "deepinfer/check.h"
#include "grammar/earley.h"

namespace deepinfer::grammar {
namespace {

struct Walker {
    const Automaton& a;
    const TokenVocabulary::Impl& v;
    Earley inside;   // the state's rule alone (parent unknown): accepts
    Earley outside;  // continuations after the rule ended, in any context: uncertain
    std::span<const int32_t> returns;  // where the state's rule returns to
    std::vector<int32_t> accepted;     // sorted indices
    std::vector<int32_t> uncertain;
    std::string path;  // bytes walked in automaton-only mode, not yet pushed into the recognizers

    void add_range(std::vector<int32_t>& out, int32_t lo, int32_t hi) {
        for (int32_t i = lo; i < hi; ++i) out.push_back(i);
    }
    bool simple(int32_t t) const { return !a.state_final[size_t(t)] && !a.has_edges(t); }
    std::span<const int32_t> seeds_if_popped() const { return inside.popped() ? returns : std::span<const int32_t>(); }

    // `node` is reached; `inside` is alive at its prefix, `outside` holds the other continuations.
    void walk(int32_t node) {
        const ByteSet allowed = inside.top_bytes();
        const auto top = inside.top();
        const int32_t single = top.size() == 1 && outside.top().empty() ? top[0].state : -1;
        for (int32_t c = v.nodes[size_t(node)].first_child; c >= 0; c = v.nodes[size_t(c)].next_sibling) {
            const auto& n = v.nodes[size_t(c)];
            if (single >= 0) {
                const int32_t t = a.next[size_t(single) * 256 + n.byte];
                if (t >= 0 && simple(t)) {  // one item, a plain step: walk the automaton alone
                    add_range(accepted, n.sub_begin, n.tok_end);
                    path.push_back(char(n.byte));
                    if (n.first_child >= 0) dfa_walk(c, t);
                    path.pop_back();
                    continue;
                }
            }
            const bool in_ok = byteset_has(allowed, n.byte) && inside.push(n.byte);
            const bool out_ok = outside.push_seeded(n.byte, in_ok ? seeds_if_popped() : std::span<const int32_t>());
            if (in_ok) {
                add_range(accepted, n.sub_begin, n.tok_end);
                if (n.first_child >= 0) walk(c);
                inside.pop();
            } else if (out_ok) {
                add_range(uncertain, n.sub_begin, n.tok_end);
                if (n.first_child >= 0) walk_outside(c);
            }
            outside.pop();
        }
    }

    void walk_outside(int32_t node) {
        for (int32_t c = v.nodes[size_t(node)].first_child; c >= 0; c = v.nodes[size_t(c)].next_sibling) {
            const auto& n = v.nodes[size_t(c)];
            if (outside.push_seeded(n.byte, {})) {
                add_range(uncertain, n.sub_begin, n.tok_end);
                if (n.first_child >= 0) walk_outside(c);
            }
            outside.pop();
        }
    }

    // The recognizers are `path` bytes behind: `inside` would be the single item at `state` and
    // `outside` empty (plain steps neither pop nor predict). Falls back where that stops.
    void dfa_walk(int32_t node, int32_t state) {
        for (int32_t c = v.nodes[size_t(node)].first_child; c >= 0; c = v.nodes[size_t(c)].next_sibling) {
            const auto& n = v.nodes[size_t(c)];
            const int32_t t = a.next[size_t(state) * 256 + n.byte];
            if (t < 0) continue;
            add_range(accepted, n.sub_begin, n.tok_end);
            if (n.first_child < 0) continue;
            if (simple(t)) {
                path.push_back(char(n.byte));
                dfa_walk(c, t);
                path.pop_back();
                continue;
            }
            // Catch the recognizers up, continue with them below this node.
            const size_t base_in = inside.num_sets(), base_out = outside.num_sets();
            bool ok = true;
            for (char b : path) {
                ok = ok && inside.push(static_cast<uint8_t>(b));
                outside.push_seeded(static_cast<uint8_t>(b), {});
            }
            ok = ok && inside.push(n.byte);
            outside.push_seeded(n.byte, seeds_if_popped());
            DI_ICHECK(ok);
            const std::string saved = std::move(path);
            path.clear();
            walk(c);
            path = saved;
            inside.truncate(base_in);
            outside.truncate(base_out);
        }
    }
};

}  // namespace

StateTokens compute_state_tokens(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
    const int32_t rule = a.state_rule[size_t(state)];
    Walker w{a, v, Earley(&a), Earley(&a), a.rule_returns[size_t(rule)], {}, {}, {}};
    w.inside.start_at(state);
    w.outside.start_any_context(w.seeds_if_popped());
    w.walk(0);
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
