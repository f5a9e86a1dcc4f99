// SPDX-License-Identifier: Apache-2.0
// Per-state token caches: a depth-first walk of the vocabulary trie with an isolated Earley
// recognizer started at the state (see token_cache.h), sharing the walks of states that agree up
// to some token length (lookahead_classes.h).
#include "grammar/token_cache.h"

#include <algorithm>
#include <array>
#include <bit>
#include <span>
#include <map>

#include <omp.h>

#include "deepinfer/check.h"
#include "grammar/earley.h"
#include "grammar/lookahead_classes.h"

namespace deepinfer::grammar {
namespace {

// A state's classification in the vocabulary's sorted order (what the walks produce).
struct SortedTokens {
    std::vector<uint64_t> accepted;  // bitset over sorted indices
    std::vector<int32_t> uncertain;  // sorted indices, ascending
};

// Sets bits [lo, hi) of `dst` to `src`'s (all ones when `src` is null); they are clear before.
void or_bit_range(std::vector<uint64_t>& dst, const std::vector<uint64_t>* src, int32_t lo, int32_t hi) {
    if (lo >= hi) return;
    const size_t w0 = size_t(lo) >> 6, w1 = size_t(hi - 1) >> 6;
    for (size_t w = w0; w <= w1; ++w) {
        uint64_t m = ~uint64_t{0};
        if (w == w0) m &= ~uint64_t{0} << (lo & 63);
        if (w == w1) m &= ~uint64_t{0} >> (63 - ((hi - 1) & 63));
        dst[w] |= src ? (*src)[w] & m : m;
    }
}

// Per-automaton facts every walk reads.
struct WalkContext {
    const Automaton& a;
    const TokenVocabulary::Impl& v;
    std::vector<uint8_t> plain;  // [num_states] not final and no rule edges: a byte step is all there is
    const LookaheadClasses* eq = nullptr;

    WalkContext(const Automaton& a_, const TokenVocabulary::Impl& v_) : a(a_), v(v_), plain(size_t(a_.num_states())) {
        for (int32_t s = 0; s < a.num_states(); ++s) plain[size_t(s)] = !a.state_final[size_t(s)] && !a.has_edges(s);
    }
};

struct Walker {
    using Node = TokenVocabulary::Impl::Node;
    const WalkContext& cx;
    const Automaton& a;
    const Node* nodes;
    const int32_t* next;
    const uint8_t* plain;
    Earley inside;   // the state's rule alone (parent unknown): accepts
    Earley outside;  // continuations after the rule ended, in any context: uncertain
    std::span<const int32_t> returns;  // where the state's rule returns to
    const SortedTokens* rep = nullptr;  // the representative to copy from
    SortedTokens out;
    // path[d]: the byte of the walked trie node at depth d+1; the recognizers may lag behind
    // (automaton-only steps) and catch up from it. st[d], sy[d]: the automaton states of this
    // walk and of the representative's at depth d in dfa_walk.
    std::vector<uint8_t> path;
    std::vector<int32_t> st, sy;

    Walker(const WalkContext& cx_, int32_t state)
        : cx(cx_),
          a(cx_.a),
          nodes(cx_.v.nodes.data()),
          next(cx_.a.next.data()),
          plain(cx_.plain.data()),
          inside(&cx_.a),
          outside(&cx_.a),
          returns(cx_.a.rule_returns[size_t(cx_.a.state_rule[size_t(state)])]),
          path(cx_.v.max_token_bytes + 1),
          st(cx_.v.max_token_bytes + 1),
          sy(cx_.v.max_token_bytes + 1) {
        out.accepted.assign((cx.v.sorted.size() + 63) / 64, 0);
        inside.start_at(state);
        outside.start_any_context(seeds_if_popped());
    }

    void accept_node(const Node& n) {  // the tokens that end at n
        const int32_t k = n.tok_end - n.sub_begin;
        if (k == 1) out.accepted[size_t(n.sub_begin) >> 6] |= uint64_t{1} << (n.sub_begin & 63);
        else if (k > 1) or_bit_range(out.accepted, nullptr, n.sub_begin, n.tok_end);
    }
    void uncertain_node(const Node& n) {
        for (int32_t i = n.sub_begin; i < n.tok_end; ++i) out.uncertain.push_back(i);
    }
    std::span<const int32_t> seeds_if_popped() const { return inside.popped() ? returns : std::span<const int32_t>(); }

    // The representative's state after byte b from y, when it stays one plain item (else -1).
    int32_t rep_step(int32_t y, uint8_t b) const {
        if (y < 0) return -1;
        const int32_t t = next[size_t(y) * 256 + b];
        return t >= 0 && plain[t] ? t : -1;
    }
    // cx.eq->equivalence_depth(x, y), memoized: a walk meets few pairs (the positions of a counted
    // repetition step in lockstep), and the class tables of all depths do not fit in the caches.
    struct PairDepth {
        int32_t x = -1, y = -1, depth = -1;
    };
    std::array<PairDepth, 256> pair_depth{};
    int32_t equivalence_depth(int32_t x, int32_t y) {
        PairDepth& e = pair_depth[(uint32_t(x) * 2654435761u ^ uint32_t(y)) & 255u];
        if (e.x != x || e.y != y) e = {x, y, cx.eq->equivalence_depth(x, y)};
        return e.depth;
    }

    // At trie node n both walks are one plain item of their own rule instance (x for this state,
    // y for the representative, y < 0: unknown): if x and y agree on every rest of n's subtree,
    // the representative's classification of the subtree is this state's.
    bool try_copy(const Node& n, int32_t x, int32_t y) {
        if (y < 0 || n.max_rest > equivalence_depth(x, y)) return false;
        copy_subtree(n.sub_begin, n.sub_end);
        return true;
    }
    void copy_subtree(int32_t sub_begin, int32_t sub_end) {
        or_bit_range(out.accepted, &rep->accepted, sub_begin, sub_end);
        const auto lo = std::lower_bound(rep->uncertain.begin(), rep->uncertain.end(), sub_begin);
        const auto hi = std::lower_bound(lo, rep->uncertain.end(), sub_end);
        out.uncertain.insert(out.uncertain.end(), lo, hi);
    }

    // `node` (at `depth`) is reached; `inside` is alive at its prefix, `outside` holds the other
    // continuations; y: the representative's plain state here (meaningful only while `inside` is
    // one plain item of the state's own rule instance).
    void walk(int32_t node, int32_t y, int32_t depth) {
        const ByteSet allowed = inside.top_bytes();
        const auto top = inside.top();
        // (Not in a counted repetition: the automaton alone does not know the item's count.)
        const int32_t single = top.size() == 1 && outside.top().empty() && !a.counted(top[0].state) ? top[0].state : -1;
        if (single < 0 || top[0].origin != kOutside) y = -1;
        for (int32_t c = nodes[node].first_child; c >= 0; c = nodes[c].next_sibling) {
            const Node& n = nodes[c];
            if (single >= 0) {
                const int32_t t = next[size_t(single) * 256 + n.byte];
                if (t >= 0 && plain[t]) {  // one item, a plain step: walk the automaton alone
                    const int32_t yt = rep_step(y, n.byte);
                    if (yt >= 0 && try_copy(n, t, yt)) continue;
                    accept_node(n);
                    if (n.first_child >= 0) {
                        path[size_t(depth)] = n.byte;
                        dfa_walk(c, t, yt, depth);
                    }
                    continue;
                }
            }
            const bool in_ok = byteset_has(allowed, n.byte) && inside.push(n.byte);
            const bool out_ok = outside.push_seeded(n.byte, in_ok ? seeds_if_popped() : std::span<const int32_t>());
            if (in_ok) {
                accept_node(n);
                if (n.first_child >= 0) walk(c, -1, depth + 1);
                inside.pop();
            } else if (out_ok) {
                uncertain_node(n);
                if (n.first_child >= 0) walk_outside(c);
            }
            outside.pop();
        }
    }

    void walk_outside(int32_t node) {
        for (int32_t c = nodes[node].first_child; c >= 0; c = nodes[c].next_sibling) {
            const Node& n = nodes[c];
            if (outside.push_seeded(n.byte, {})) {
                uncertain_node(n);
                if (n.first_child >= 0) walk_outside(c);
            }
            outside.pop();
        }
    }

    // Below `node`, whose prefix leaves `inside` as the single plain item at `state` and `outside`
    // empty, with the recognizers `synced` bytes deep (path[synced..depth of node) not pushed):
    // plain steps neither pop nor predict, so the automaton alone walks the subtree, a linear scan
    // of the preorder node array that skips rejected subtrees. Falls back to the recognizers
    // where a step leaves the plain states.
    void dfa_walk(int32_t node, int32_t state, int32_t y, int32_t synced) {
        // Locals: the byte stores into `path` may alias anything, members would be reloaded.
        const TokenVocabulary::Impl::ScanNode* const nd = cx.v.scan.data();
        const int32_t* const nx = next;
        const uint8_t* const pl = plain;
        int32_t* const sts = st.data();
        int32_t* const sys = sy.data();
        uint8_t* const pth = path.data();
        uint64_t* const acc = out.accepted.data();
        const bool sharing = rep != nullptr;
        const int32_t base = nd[node].depth;
        sts[base] = state;
        sys[base] = y;
        for (int32_t i = node + 1, end = nd[node].node_end; i < end;) {
            const TokenVocabulary::Impl::ScanNode& n = nd[i];
            const int32_t d = n.depth;
            const int32_t t = nx[size_t(sts[d - 1]) * 256 + n.byte];
            if (t < 0) {
                i = n.node_end;
                continue;
            }
            if (pl[t]) {
                int32_t yt = -1;
                if (sharing) {
                    yt = rep_step(sys[d - 1], n.byte);
                    if (yt >= 0 && n.max_rest <= equivalence_depth(t, yt)) {
                        copy_subtree(n.sub_begin, nodes[i].sub_end);
                        i = n.node_end;
                        continue;
                    }
                }
                const int32_t k = n.tok_end - n.sub_begin;
                if (k == 1) acc[size_t(n.sub_begin) >> 6] |= uint64_t{1} << (n.sub_begin & 63);
                else if (k > 1) or_bit_range(out.accepted, nullptr, n.sub_begin, n.tok_end);
                sts[d] = t;
                sys[d] = yt;
                pth[d - 1] = n.byte;
                ++i;  // the children follow
                continue;
            }
            accept_node(nodes[i]);
            if (n.node_end > i + 1) {  // has children
                // Catch the recognizers up, continue with them below this node.
                const size_t base_in = inside.num_sets(), base_out = outside.num_sets();
                bool ok = true;
                for (int32_t k = synced; k < d - 1; ++k) {
                    ok = ok && inside.push(pth[k]);
                    outside.push_seeded(pth[k], {});
                }
                ok = ok && inside.push(n.byte);
                outside.push_seeded(n.byte, seeds_if_popped());
                DI_ICHECK(ok);
                walk(i, -1, d);
                inside.truncate(base_in);
                outside.truncate(base_out);
            }
            i = n.node_end;
        }
    }
};

// Walks `state`; with `rep` (a state already computed), copies its
// classification wherever the two provably agree.
SortedTokens walk_state(const WalkContext& cx, int32_t state, int32_t rep_state, const SortedTokens* rep) {
    Walker w(cx, state);
    int32_t y = -1;
    if (rep && cx.plain[size_t(state)] && cx.plain[size_t(rep_state)]) {
        w.rep = rep;
        y = rep_state;
        if (w.try_copy(cx.v.nodes[0], state, y)) return std::move(w.out);
    }
    w.walk(0, y, 0);
    return std::move(w.out);
}

// Hardware popcount where the CPU has it (the generic x86-64 build would call a library routine).
__attribute__((target_clones("popcnt", "default"))) int64_t count_bits(const std::vector<uint64_t>& bits) {
    int64_t n = 0;
    for (uint64_t w : bits) n += __builtin_popcountll(w);
    return n;
}

// The cache in token-id order. With `rep` (the representative's sorted classification and
// cache), starts from the representative's id bitset and flips the tokens where the two differ.
StateTokens to_state_tokens(const TokenVocabulary::Impl& v, const SortedTokens& s, const SortedTokens* rep_sorted,
                            const StateTokens* rep) {
    StateTokens st;
    st.computed = true;
    st.num_accepted = count_bits(s.accepted);
    const int64_t words = (v.vocab_size + 63) / 64;
    st.uncertain = s.uncertain;
    if (st.num_accepted <= 2 * words) {  // an id list is smaller than a bitset
        st.accepted_ids.reserve(size_t(st.num_accepted));
        for (size_t wi = 0; wi < s.accepted.size(); ++wi)
            for (uint64_t w = s.accepted[wi]; w; w &= w - 1)
                st.accepted_ids.push_back(v.sorted[wi * 64 + size_t(std::countr_zero(w))]);
        return st;
    }
    const bool from_rep = rep_sorted && rep && rep->accepted_bits;
    bool same = from_rep;
    for (size_t wi = 0; same && wi < s.accepted.size(); ++wi) same = s.accepted[wi] == rep_sorted->accepted[wi];
    if (same) {
        st.accepted_bits = rep->accepted_bits;
        return st;
    }
    auto bits = std::make_shared<std::vector<uint64_t>>(from_rep ? *rep->accepted_bits : std::vector<uint64_t>(size_t(words), 0));
    for (size_t wi = 0; wi < s.accepted.size(); ++wi)
        for (uint64_t w = from_rep ? s.accepted[wi] ^ rep_sorted->accepted[wi] : s.accepted[wi]; w; w &= w - 1) {
            const int32_t id = v.sorted[wi * 64 + size_t(std::countr_zero(w))];
            (*bits)[size_t(id >> 6)] ^= uint64_t{1} << (id & 63);
        }
    st.accepted_bits = std::move(bits);
    return st;
}

// For each state, the state whose cache it copies from (-1: a full walk); representatives come
// before their dependents. Only plain states (not final, no rule edges) share. At each depth, from
// the deepest down, states pair up when they are equivalent to that depth, or when their dominant
// transitions (the target most bytes lead to: the next position of a counted repetition, the loop
// of a string's characters) take the same bytes into states equivalent to that depth; the walk
// then copies the representative's classification under every trie node where the two provably
// agree. At most `max_reps` distinct representatives (their sorted classifications are kept until
// the end).
std::vector<int32_t> choose_representatives(const Automaton& a, const LookaheadClasses& eq,
                                            const std::vector<int32_t>& todo, size_t max_reps) {
    std::vector<int32_t> rep(size_t(a.num_states()), -1);
    std::vector<uint8_t> placed(size_t(a.num_states()), 0), is_rep(size_t(a.num_states()), 0);
    struct Cand {
        int32_t state, dom, dom_bytes;  // dom_bytes: id of the byte set leading to dom
    };
    std::vector<Cand> cand;
    std::vector<int32_t> count(size_t(a.num_states()), 0);
    std::map<ByteSet, int32_t> byte_set_ids;
    for (int32_t s : todo) {
        if (a.state_final[size_t(s)] || a.has_edges(s)) continue;
        int32_t dom = -1;
        for (int b = 0; b < 256; ++b) {
            const int32_t t = a.next[size_t(s) * 256 + size_t(b)];
            if (t >= 0 && ++count[size_t(t)] > (dom < 0 ? 0 : count[size_t(dom)])) dom = t;
        }
        ByteSet to_dom{0, 0, 0, 0};
        for (int b = 0; b < 256; ++b) {
            const int32_t t = a.next[size_t(s) * 256 + size_t(b)];
            if (t >= 0) count[size_t(t)] = 0;
            if (t == dom) byteset_add(to_dom, uint8_t(b));
        }
        cand.push_back({s, dom, byte_set_ids.emplace(to_dom, int32_t(byte_set_ids.size())).first->second});
    }
    size_t num_reps = 0;
    size_t num_placed = 0;
    // Buckets by class id (reused across depths); `touched` in order of first use.
    std::vector<std::vector<int32_t>> buckets(size_t(a.num_states()));
    std::vector<int32_t> touched, group;
    std::vector<std::pair<int32_t, int32_t>> by_bytes;  // (dom_bytes, state) of one bucket
    auto assign = [&](const std::vector<int32_t>& g) {
        bool any_open = false;
        for (int32_t s : g) any_open |= !placed[size_t(s)];
        if (!any_open) return;
        int32_t primary = -1;
        for (int32_t s : g)  // a full walk if possible, else any state already placed
            if (placed[size_t(s)] && rep[size_t(s)] < 0) {
                primary = s;
                break;
            }
        for (size_t i = 0; primary < 0 && i < g.size(); ++i)
            if (placed[size_t(g[i])]) primary = g[i];
        if (!is_rep[size_t(primary < 0 ? g[0] : primary)] && num_reps >= max_reps) return;
        if (primary < 0) {
            primary = g[0];
            placed[size_t(primary)] = 1;
            ++num_placed;
        }
        if (!is_rep[size_t(primary)]) {
            is_rep[size_t(primary)] = 1;
            ++num_reps;
        }
        for (int32_t s : g)
            if (!placed[size_t(s)]) {
                placed[size_t(s)] = 1;
                rep[size_t(s)] = primary;
                ++num_placed;
            }
    };
    for (int32_t d = eq.last_depth(); d >= 1 && num_placed < cand.size(); --d) {
        for (int pass = 0; pass < 2; ++pass) {
            for (const Cand& c : cand) {
                auto& b = buckets[size_t(eq.class_of(pass == 0 ? c.state : c.dom, d))];
                if (b.empty()) touched.push_back(eq.class_of(pass == 0 ? c.state : c.dom, d));
                b.push_back(pass == 0 ? c.state : int32_t(&c - cand.data()));
            }
            for (int32_t k : touched) {
                auto& b = buckets[size_t(k)];
                if (pass == 0) {
                    if (b.size() >= 2) assign(b);
                } else if (b.size() >= 2) {  // the same bytes must lead to the dominant target
                    bool any_open = false;  // else every group of the bucket is settled: skip the sort
                    for (int32_t ci : b) any_open |= !placed[size_t(cand[size_t(ci)].state)];
                    if (!any_open) {
                        b.clear();
                        continue;
                    }
                    by_bytes.clear();
                    bool sorted = true;  // typically one byte set throughout: nothing to sort
                    for (int32_t ci : b) {
                        sorted = sorted && (by_bytes.empty() || by_bytes.back().first <= cand[size_t(ci)].dom_bytes);
                        by_bytes.emplace_back(cand[size_t(ci)].dom_bytes, cand[size_t(ci)].state);
                    }
                    if (!sorted)
                        std::stable_sort(by_bytes.begin(), by_bytes.end(),
                                         [](const auto& x, const auto& y) { return x.first < y.first; });
                    for (size_t i = 0; i < by_bytes.size();) {
                        size_t j = i;
                        group.clear();
                        for (; j < by_bytes.size() && by_bytes[j].first == by_bytes[i].first; ++j) group.push_back(by_bytes[j].second);
                        if (group.size() >= 2) assign(group);
                        i = j;
                    }
                }
                b.clear();
            }
            touched.clear();
        }
    }
    return rep;
}


// Caches of the states of a counted repetition (automaton.h, CountedLoop), which depend on the
// item's count c. One walk per state with the rule's automaton (no rule references inside), c left
// symbolic: a token is accepted for the counts in one range [lo, hi], since starting an iteration
// at the loop state needs c + j < max and leaving the repetition needs c + j >= min, j being the
// iterations the token started before. Likewise the uncertain tokens (the rule ends inside the
// token, after the suffix, and the any-context recognizer over its return states goes on). The
// caches per count follow, one per range of counts where the classification stays the same.
struct CountedWalker {
    using Node = TokenVocabulary::Impl::Node;
    struct Range {
        int32_t begin, end;  // sorted indices
        int32_t lo, hi;      // counts
    };
    const Automaton& a;
    const Node* nodes;
    const CountedLoop& loop;
    Earley outside;
    std::span<const int32_t> returns;
    std::vector<Range> acc, unc;

    CountedWalker(const Automaton& a_, const TokenVocabulary::Impl& v, int32_t state)
        : a(a_),
          nodes(v.nodes.data()),
          loop(a_.loops[size_t(a_.rule_loop[size_t(a_.state_rule[size_t(state)])])]),
          outside(&a_),
          returns(a_.rule_returns[size_t(a_.state_rule[size_t(state)])]) {}

    void walk(int32_t node, int32_t x, int32_t j, int32_t lo) {
        for (int32_t c = nodes[node].first_child; c >= 0; c = nodes[c].next_sibling) {
            const Node& n = nodes[c];
            const int32_t t = a.next[size_t(x) * 256 + n.byte];
            if (t < 0) continue;
            int32_t jt = j, lot = lo;
            if (x == loop.state) {
                if (byteset_has(loop.exit, n.byte)) {
                    lot = loop.min - j;
                } else if (++jt > loop.max) {
                    continue;
                }
            }
            const int32_t hi = loop.max == CountedLoop::kUnbounded ? INT32_MAX : loop.max - jt;
            if (lot > hi) continue;
            if (n.tok_end > n.sub_begin) acc.push_back({n.sub_begin, n.tok_end, lot, hi});
            if (n.first_child < 0) continue;
            if (a.state_final[size_t(t)]) {  // the rule ends here (final states scan nothing)
                outside.start_any_context(returns);
                walk_outside(c, lot, hi);
            } else {
                walk(c, t, jt, lot);
            }
        }
    }
    void walk_outside(int32_t node, int32_t lo, int32_t hi) {
        for (int32_t c = nodes[node].first_child; c >= 0; c = nodes[c].next_sibling) {
            const Node& n = nodes[c];
            if (outside.push_seeded(n.byte, {})) {
                if (n.tok_end > n.sub_begin) unc.push_back({n.sub_begin, n.tok_end, lo, hi});
                if (n.first_child >= 0) walk_outside(c, lo, hi);
            }
            outside.pop();
        }
    }
};

void clear_bit_range(std::vector<uint64_t>& dst, int32_t lo, int32_t hi) {
    for (int32_t i = lo; i < hi; ++i) dst[size_t(i) >> 6] &= ~(uint64_t{1} << (i & 63));
}

void add_uncertain(const std::vector<CountedWalker::Range>& unc, int32_t c, std::vector<int32_t>& out) {
    for (const auto& r : unc)
        if (r.lo <= c && c <= r.hi)
            for (int32_t i = r.begin; i < r.end; ++i) out.push_back(i);
}

StateTokens compute_counted_state_tokens(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
    CountedWalker w(a, v, state);
    w.walk(0, state, 0, INT32_MIN);
    const size_t words = (v.sorted.size() + 63) / 64;
    const CountRole role = a.state_role[size_t(state)];
    if (role == CountRole::kFixed) {  // the count is 0 here
        SortedTokens st;
        st.accepted.assign(words, 0);
        for (const auto& r : w.acc)
            if (r.lo <= 0 && 0 <= r.hi) or_bit_range(st.accepted, nullptr, r.begin, r.end);
        add_uncertain(w.unc, 0, st.uncertain);
        return to_state_tokens(v, st, nullptr, nullptr);
    }
    // Counts 0..cap; the classification changes where a range starts (lo) or ends (hi + 1). The
    // ranges found at every count go in at once; the others are bucketed by the count of their
    // change (+(index + 1): starts there, -(index + 1): ends just before).
    const int32_t cap = w.loop.cap;
    SortedTokens cur, prev;
    cur.accepted.assign(words, 0);
    std::vector<int32_t> ev_begin(size_t(cap) + 2, 0), events;
    std::vector<uint8_t> change(size_t(cap) + 1, 0);
    change[0] = 1;
    for (int pass = 0; pass < 2; ++pass) {
        for (size_t i = 0; i < w.acc.size(); ++i) {
            const auto& r = w.acc[i];
            const int32_t lo = std::max(r.lo, 0), hi = std::min(r.hi, cap);
            if (lo > hi) continue;
            if (lo == 0 && hi == cap) {  // at every count (most tokens when the bound is far)
                if (pass == 0) or_bit_range(cur.accepted, nullptr, r.begin, r.end);
                continue;
            }
            if (pass == 0) {
                ++ev_begin[size_t(lo) + 1];
                if (hi < cap) ++ev_begin[size_t(hi) + 2];
            } else {
                events[size_t(ev_begin[size_t(lo)]++)] = int32_t(i) + 1;
                if (hi < cap) events[size_t(ev_begin[size_t(hi) + 1]++)] = -(int32_t(i) + 1);
            }
        }
        if (pass == 0) {
            for (size_t k = 1; k < ev_begin.size(); ++k) ev_begin[k] += ev_begin[k - 1];
            events.resize(size_t(ev_begin.back()));
        } else {  // the fill advanced each bucket's start to the next one's: shift back
            for (size_t k = ev_begin.size() - 1; k > 0; --k) ev_begin[k] = ev_begin[k - 1];
            ev_begin[0] = 0;
        }
    }
    for (int32_t c = 0; c <= cap; ++c) change[size_t(c)] |= ev_begin[size_t(c) + 1] > ev_begin[size_t(c)];
    for (const auto& r : w.unc) {
        if (r.lo > 0 && r.lo <= cap) change[size_t(r.lo)] = 1;
        if (r.hi >= 0 && r.hi < cap) change[size_t(r.hi) + 1] = 1;
    }
    StateTokens out;
    out.computed = true;
    out.count_index.assign(size_t(cap) + 1, 0);
    for (int32_t c = 0; c <= cap; ++c) {
        if (!change[size_t(c)]) {
            out.count_index[size_t(c)] = static_cast<int32_t>(out.by_count.size() - 1);
            continue;
        }
        for (int32_t e = ev_begin[size_t(c)]; e < ev_begin[size_t(c) + 1]; ++e) {
            const int32_t k = events[size_t(e)];
            const auto& r = w.acc[size_t(std::abs(k) - 1)];
            if (k > 0) or_bit_range(cur.accepted, nullptr, r.begin, r.end);
            else clear_bit_range(cur.accepted, r.begin, r.end);
        }
        cur.uncertain.clear();
        add_uncertain(w.unc, c, cur.uncertain);
        const bool first = out.by_count.empty();
        out.by_count.push_back(to_state_tokens(v, cur, first ? nullptr : &prev, first ? nullptr : &out.by_count.back()));
        prev.accepted = cur.accepted;
        out.count_index[size_t(c)] = static_cast<int32_t>(out.by_count.size() - 1);
    }
    return out;
}

}  // namespace

StateTokens compute_state_tokens(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state) {
    if (a.counted(state)) return compute_counted_state_tokens(a, v, state);
    const WalkContext cx(a, v);
    return to_state_tokens(v, walk_state(cx, state, -1, nullptr), nullptr, nullptr);
}

std::vector<StateTokens> compute_all_state_tokens(const Automaton& a, const TokenVocabulary::Impl& v, bool share_work) {
    std::vector<StateTokens> out(size_t(a.num_states()));
    std::vector<int32_t> todo, counted;
    for (int32_t s = 0; s < a.num_states(); ++s)
        if (a.has_bytes(s)) (a.counted(s) ? counted : todo).push_back(s);
    std::vector<int32_t> rep(size_t(a.num_states()), -1);
    std::unique_ptr<LookaheadClasses> eq;
    if (share_work && todo.size() > 1) {
        eq = std::make_unique<LookaheadClasses>(a, static_cast<int32_t>(v.max_token_bytes));
        // Each kept classification is a bitset of the vocabulary: at most ~64 MiB of them.
        const size_t max_reps = std::max<size_t>(16, (size_t{64} << 20) / std::max<size_t>(1, v.sorted.size() / 8));
        rep = choose_representatives(a, *eq, todo, max_reps);
    }
    WalkContext cx(a, v);
    cx.eq = eq.get();
    // Waves: full walks first, then states whose representative is done.
    std::vector<int32_t> level(size_t(a.num_states()), -1);
    std::vector<uint8_t> needed(size_t(a.num_states()), 0);
    int32_t num_levels = 0;
    for (int32_t s : todo) {
        int32_t d = 0;
        for (int32_t r = rep[size_t(s)]; r >= 0; r = rep[size_t(r)]) ++d;
        level[size_t(s)] = d;
        num_levels = std::max(num_levels, d + 1);
        if (rep[size_t(s)] >= 0) needed[size_t(rep[size_t(s)])] = 1;
    }
    std::vector<SortedTokens> kept(size_t(a.num_states()));
    // Counted repetitions (walked alone) go with the first wave: fewer parallel regions to wait for.
    for (int32_t d = 0; d < std::max(num_levels, counted.empty() ? 0 : 1); ++d) {
        std::vector<int32_t> wave = d == 0 ? counted : std::vector<int32_t>();
        for (int32_t s : todo)
            if (level[size_t(s)] == d) wave.push_back(s);
#pragma omp parallel for schedule(dynamic, 1) if (wave.size() > 1)
        for (int64_t i = 0; i < static_cast<int64_t>(wave.size()); ++i) {
            const int32_t s = wave[size_t(i)], r = rep[size_t(s)];
            if (a.counted(s)) {
                out[size_t(s)] = compute_counted_state_tokens(a, v, s);
                continue;
            }
            if (r >= 0 && cx.plain[size_t(s)] && cx.plain[size_t(r)] &&
                eq->equivalent(s, r, static_cast<int32_t>(v.max_token_bytes))) {  // the same for every token
                out[size_t(s)] = out[size_t(r)];
                if (needed[size_t(s)]) kept[size_t(s)] = kept[size_t(r)];
                continue;
            }
            SortedTokens st = walk_state(cx, s, r, r >= 0 ? &kept[size_t(r)] : nullptr);
            out[size_t(s)] = to_state_tokens(v, st, r >= 0 ? &kept[size_t(r)] : nullptr, r >= 0 ? &out[size_t(r)] : nullptr);
            if (needed[size_t(s)]) kept[size_t(s)] = std::move(st);
        }
    }
    return out;
}

}  // namespace deepinfer::grammar
