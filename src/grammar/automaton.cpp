// SPDX-License-Identifier: Apache-2.0
// IR -> per-rule NFA (Thompson) -> per-rule DFA (subset construction over bytes and rule refs) ->
// the flat Automaton, plus nullable and FOLLOW analysis.
#include "grammar/automaton.h"

#include <algorithm>
#include <map>

#include "deepinfer/grammar.h"
#include "grammar/lookahead_classes.h"
#include "grammar/utf8_ranges.h"

namespace deepinfer::grammar {
namespace {

struct NfaState {
    std::vector<int32_t> eps;
    std::vector<std::array<int32_t, 3>> bytes;  // lo, hi, target
    std::vector<std::pair<int32_t, int32_t>> rules;  // rule, target
};

class NfaBuilder {
public:
    NfaBuilder(const Grammar& g, int64_t limit) : g_(g), limit_(limit) {}
    std::vector<NfaState> states;

    int32_t add() {
        if (static_cast<int64_t>(states.size()) >= limit_)
            throw GrammarError("grammar", "rule '" + rule_name_ + "'",
                               "the grammar is too large (more than " + std::to_string(limit_) +
                                   " automaton states; reduce repetition counts such as maxLength or maxItems)");
        states.emplace_back();
        return static_cast<int32_t>(states.size() - 1);
    }
    void set_rule_name(std::string n) { rule_name_ = std::move(n); }

    // Builds `id` starting at `from`; returns the end state.
    int32_t build(ExprId id, int32_t from) {
        const Expr& e = g_.expr(id);
        switch (e.kind) {
            case ExprKind::kEmpty: return from;
            case ExprKind::kBytes: {
                int32_t cur = from;
                for (unsigned char c : e.bytes) {
                    const int32_t nxt = add();
                    states[size_t(cur)].bytes.push_back({c, c, nxt});
                    cur = nxt;
                }
                return cur;
            }
            case ExprKind::kByteClass: {
                const int32_t end = add();
                for (const auto& [a, b] : e.ranges) states[size_t(from)].bytes.push_back({int32_t(a), int32_t(b), end});
                return end;
            }
            case ExprKind::kCharClass: {
                const int32_t end = add();
                std::vector<ByteRangeSeq> seqs;
                for (const auto& [a, b] : e.ranges) utf8_sequences(a, b, seqs);
                for (const ByteRangeSeq& s : seqs) {
                    int32_t cur = from;
                    for (size_t i = 0; i < s.size(); ++i) {
                        const int32_t nxt = i + 1 == s.size() ? end : add();
                        states[size_t(cur)].bytes.push_back({s[i].first, s[i].second, nxt});
                        cur = nxt;
                    }
                }
                return end;
            }
            case ExprKind::kSeq: {
                int32_t cur = from;
                for (ExprId c : e.children) cur = build(c, cur);
                return cur;
            }
            case ExprKind::kAlt: {
                const int32_t end = add();
                for (ExprId c : e.children) {
                    const int32_t s = add();
                    states[size_t(from)].eps.push_back(s);
                    const int32_t t = build(c, s);
                    states[size_t(t)].eps.push_back(end);
                }
                return end;
            }
            case ExprKind::kRepeat: {
                int32_t cur = from;
                for (int32_t i = 0; i < e.min; ++i) {
                    const int32_t s = add();
                    states[size_t(cur)].eps.push_back(s);
                    cur = build(e.children[0], s);
                }
                if (e.max < 0) {
                    const int32_t loop = add();
                    states[size_t(cur)].eps.push_back(loop);
                    const int32_t s = add();
                    states[size_t(loop)].eps.push_back(s);
                    const int32_t t = build(e.children[0], s);
                    states[size_t(t)].eps.push_back(loop);
                    return loop;
                }
                const int32_t end = add();
                states[size_t(cur)].eps.push_back(end);
                for (int32_t i = e.min; i < e.max; ++i) {
                    const int32_t s = add();
                    states[size_t(cur)].eps.push_back(s);
                    cur = build(e.children[0], s);
                    states[size_t(cur)].eps.push_back(end);
                }
                return end;
            }
            case ExprKind::kRuleRef: {
                const int32_t end = add();
                states[size_t(from)].rules.emplace_back(e.rule, end);
                return end;
            }
        }
        return from;
    }

private:
    const Grammar& g_;
    int64_t limit_;
    std::string rule_name_;
};

void closure(const std::vector<NfaState>& nfa, std::vector<int32_t>& set, std::vector<uint32_t>& mark, uint32_t stamp) {
    for (int32_t s : set) mark[size_t(s)] = stamp;
    for (size_t i = 0; i < set.size(); ++i)
        for (int32_t t : nfa[size_t(set[i])].eps)
            if (mark[size_t(t)] != stamp) {
                mark[size_t(t)] = stamp;
                set.push_back(t);
            }
    std::sort(set.begin(), set.end());
}


// Merges equivalent states (Moore's partition refinement): same rule, same finality, and
// transitions (bytes and rule edges) into equivalent states. Subset construction leaves many
// equivalent states behind (for example the tails of a key-exclusion trie), and every state
// costs a token-cache walk.
void minimize(Automaton& a) {
    const int32_t S = a.num_states();
    int32_t n_cls = 0;
    const std::vector<int32_t> cls = moore_classes(a, &n_cls);
    const size_t num_classes = size_t(n_cls);
    if (num_classes == size_t(S)) return;
    // Representative per class (the lowest state), in order of first appearance.
    std::vector<int32_t> rep(num_classes, -1), new_id(num_classes, -1);
    int32_t n = 0;
    for (int32_t s = 0; s < S; ++s)
        if (rep[size_t(cls[size_t(s)])] < 0) {
            rep[size_t(cls[size_t(s)])] = s;
            new_id[size_t(cls[size_t(s)])] = n++;
        }
    Automaton m;
    m.root = a.root;
    m.rule_names = a.rule_names;
    for (int32_t st : a.rule_start) m.rule_start.push_back(new_id[size_t(cls[size_t(st)])]);
    m.loops = a.loops;
    m.rule_loop = a.rule_loop;
    for (CountedLoop& l : m.loops) l.state = new_id[size_t(cls[size_t(l.state)])];
    m.next.assign(size_t(n) * 256, -1);
    m.edge_begin.push_back(0);
    std::vector<int32_t> order(static_cast<size_t>(n));
    for (size_t k = 0; k < num_classes; ++k) order[size_t(new_id[k])] = rep[k];
    for (int32_t i = 0; i < n; ++i) {
        const int32_t s = order[size_t(i)];
        m.state_rule.push_back(a.state_rule[size_t(s)]);
        m.state_final.push_back(a.state_final[size_t(s)]);
        m.state_bytes.push_back(a.state_bytes[size_t(s)]);
        m.state_role.push_back(a.state_role[size_t(s)]);
        for (int b = 0; b < 256; ++b) {
            const int32_t t = a.next[size_t(s) * 256 + size_t(b)];
            m.next[size_t(i) * 256 + size_t(b)] = t < 0 ? -1 : new_id[size_t(cls[size_t(t)])];
        }
        for (int32_t e = a.edge_begin[size_t(s)]; e < a.edge_begin[size_t(s) + 1]; ++e)
            m.edges.emplace_back(a.edges[size_t(e)].first, new_id[size_t(cls[size_t(a.edges[size_t(e)].second)])]);
        m.edge_begin.push_back(static_cast<int32_t>(m.edges.size()));
    }
    a = std::move(m);
}


// A rule body  prefix child{min,max} suffix  (a sequence) that may become a counted repetition:
// a large count, nothing that refers to rules, a non-empty suffix.
struct CountedPlan {
    bool ok = false;
    size_t index = 0;  // the repetition among the sequence's children
    int32_t min = 0, max = 0;
};

bool refers_to_rules(const Grammar& g, ExprId id) {
    const Expr& e = g.expr(id);
    if (e.kind == ExprKind::kRuleRef) return true;
    for (ExprId c : e.children)
        if (refers_to_rules(g, c)) return true;
    return false;
}

CountedPlan plan_counted(const Grammar& g, ExprId body, int32_t threshold) {
    CountedPlan p;
    const Expr& e = g.expr(body);
    if (e.kind != ExprKind::kSeq || e.children.size() < 2) return p;
    for (size_t i = 0; i + 1 < e.children.size(); ++i) {
        const Expr& c = g.expr(e.children[i]);
        if (c.kind != ExprKind::kRepeat || (c.max >= 0 ? c.max : c.min) < threshold) continue;
        p.ok = true;
        p.index = i;
        p.min = c.min;
        p.max = c.max;
        break;
    }
    if (p.ok && refers_to_rules(g, body)) p.ok = false;
    return p;
}

// The NFA of a counted rule: prefix states [0, loop), the loop node, the child's states
// (loop, suffix_begin), the suffix's states [suffix_begin, ...).
struct CountedNfa {
    int32_t loop = -1, child_end = -1, suffix_begin = -1;
    CountRole role(const std::vector<int32_t>& set) const {
        bool has_child = false;
        for (int32_t q : set) {
            if (q == loop) return CountRole::kLoop;
            has_child |= q > loop && q < suffix_begin;
        }
        return has_child ? CountRole::kIteration : CountRole::kFixed;
    }
    // Iteration subsets hold only child states; the loop subset no prefix state.
    bool consistent(const std::vector<int32_t>& set) const {
        const CountRole r = role(set);
        for (int32_t q : set) {
            const bool prefix = q < loop, suffix = q >= suffix_begin;
            if (r == CountRole::kIteration && (prefix || suffix)) return false;
            if (r == CountRole::kLoop && prefix) return false;
        }
        return true;
    }
};

}  // namespace

Automaton build_automaton(const Grammar& g, const AutomatonLimits& limits) {
    Automaton a;
    const auto& rules = g.rules();
    DI_ICHECK(g.root() >= 0);
    const int32_t num_rules = static_cast<int32_t>(rules.size());
    a.root = g.root();
    a.rule_start.assign(size_t(num_rules), -1);
    for (const Rule& r : rules) {
        a.rule_names.push_back(r.name);
        if (r.body < 0) throw GrammarError("grammar", "rule '" + r.name + "'", "rule '" + r.name + "' is used but never defined");
    }
    NfaBuilder nb(g, limits.max_nfa_states);
    std::vector<uint32_t> mark;
    uint32_t stamp = 0;
    a.rule_loop.assign(size_t(num_rules), -1);
    for (int32_t r = 0; r < num_rules; ++r) {
        const CountedPlan plan = plan_counted(g, rules[size_t(r)].body, limits.counted_repeat_min);
        // A counted repetition when the plan holds on the automaton, else the unrolled rule.
        for (int attempt = plan.ok ? 0 : 1; attempt < 2; ++attempt) {
            const bool counted = attempt == 0;
            nb.states.clear();
            nb.set_rule_name(rules[size_t(r)].name);
            const int32_t start = nb.add();
            int32_t end = -1;
            CountedNfa cn;
            if (counted) {
                const Expr& body = g.expr(rules[size_t(r)].body);
                int32_t cur = start;
                for (size_t i = 0; i < plan.index; ++i) cur = nb.build(body.children[i], cur);
                cn.loop = nb.add();
                nb.states[size_t(cur)].eps.push_back(cn.loop);
                const ExprId child = g.expr(body.children[plan.index]).children[0];
                cn.child_end = nb.build(child, cn.loop);
                nb.states[size_t(cn.child_end)].eps.push_back(cn.loop);
                cn.suffix_begin = static_cast<int32_t>(nb.states.size());
                cur = cn.loop;
                for (size_t i = plan.index + 1; i < body.children.size(); ++i) cur = nb.build(body.children[i], cur);
                end = cur;
            } else {
                end = nb.build(rules[size_t(r)].body, start);
            }
            const auto& nfa = nb.states;
            mark.assign(nfa.size(), 0);
            stamp = 0;
            if (counted) {  // a nullable child would let iterations consume nothing
                std::vector<int32_t> c = {cn.loop};
                closure(nfa, c, mark, ++stamp);
                if (std::binary_search(c.begin(), c.end(), cn.child_end)) continue;
            }
            // Subset construction. In a counted rule, states that only pass epsilon moves are left
            // out of the subsets (they do not change what a subset does), so that the subset after
            // an iteration is the subset at its start: the loop state.
            std::map<std::vector<int32_t>, int32_t> ids;
            std::vector<std::vector<int32_t>> work;
            const int32_t first = a.num_states();
            auto intern = [&](std::vector<int32_t> set) -> int32_t {
                closure(nfa, set, mark, ++stamp);
                if (counted)
                    set.erase(std::remove_if(set.begin(), set.end(),
                                             [&](int32_t q) {
                                                 return q != end && nfa[size_t(q)].bytes.empty() && nfa[size_t(q)].rules.empty();
                                             }),
                              set.end());
                auto it = ids.find(set);
                if (it != ids.end()) return it->second;
                const int32_t id = a.num_states();
                if (id >= limits.max_dfa_states)
                    throw GrammarError("grammar", "rule '" + rules[size_t(r)].name + "'",
                                       "the grammar is too large (more than " + std::to_string(limits.max_dfa_states) +
                                           " automaton states)");
                a.state_rule.push_back(r);
                a.state_final.push_back(std::binary_search(set.begin(), set.end(), end) ? 1 : 0);
                a.state_bytes.push_back({0, 0, 0, 0});
                a.state_role.push_back(counted ? cn.role(set) : CountRole::kNone);
                a.next.resize(a.next.size() + 256, -1);
                ids.emplace(set, id);
                work.push_back(std::move(set));
                return id;
            };
            std::vector<std::vector<std::pair<int32_t, int32_t>>> rule_edges_of;  // per DFA state, local
            a.rule_start[size_t(r)] = intern({start});
            CountedLoop loop;
            bool ok = true;
            size_t done = 0;
            while (ok && done < work.size()) {
                const std::vector<int32_t> set = work[done];
                const int32_t sid = first + static_cast<int32_t>(done);
                ++done;
                const bool is_loop = counted && a.state_role[size_t(sid)] == CountRole::kLoop;
                if (is_loop) {
                    if (loop.state >= 0) ok = false;  // one loop state per rule
                    loop.state = sid;
                }
                // Byte transitions: split 0..255 at every range boundary.
                std::vector<int32_t> cuts = {0, 256};
                std::map<int32_t, std::vector<int32_t>> by_rule;
                for (int32_t s : set) {
                    for (const auto& br : nfa[size_t(s)].bytes) {
                        cuts.push_back(br[0]);
                        cuts.push_back(br[1] + 1);
                    }
                    for (const auto& [rule, t] : nfa[size_t(s)].rules) by_rule[rule].push_back(t);
                }
                std::sort(cuts.begin(), cuts.end());
                cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
                for (size_t k = 0; k + 1 < cuts.size(); ++k) {
                    const int32_t lo = cuts[k], hi = cuts[k + 1] - 1;
                    std::vector<int32_t> tgt;
                    for (int32_t s : set)
                        for (const auto& br : nfa[size_t(s)].bytes)
                            if (br[0] <= lo && br[1] >= hi) tgt.push_back(br[2]);
                    if (tgt.empty()) continue;
                    std::sort(tgt.begin(), tgt.end());
                    tgt.erase(std::unique(tgt.begin(), tgt.end()), tgt.end());
                    if (is_loop) {  // every byte either starts an iteration or leaves the repetition
                        const bool into_suffix = tgt.front() >= cn.suffix_begin;
                        if (into_suffix != (tgt.back() >= cn.suffix_begin)) ok = false;
                        for (int32_t b = lo; into_suffix && b <= hi; ++b) byteset_add(loop.exit, uint8_t(b));
                    }
                    const int32_t t = intern(std::move(tgt));
                    for (int32_t b = lo; b <= hi; ++b) {
                        a.next[size_t(sid) * 256 + size_t(b)] = t;
                        byteset_add(a.state_bytes[size_t(sid)], uint8_t(b));
                    }
                }
                rule_edges_of.resize(size_t(sid - first + 1));
                for (auto& [rule, tgts] : by_rule) {
                    std::sort(tgts.begin(), tgts.end());
                    tgts.erase(std::unique(tgts.begin(), tgts.end()), tgts.end());
                    const int32_t t = intern(std::move(tgts));
                    rule_edges_of[size_t(sid - first)].emplace_back(rule, t);
                }
            }
            if (counted) {
                // The shape the counted walks and the Earley counts rely on: subsets mix no regions
                // (CountedNfa::role), one loop state, final states after the suffix that scan nothing.
                ok = ok && loop.state >= 0;
                for (int32_t sid = first; ok && sid < a.num_states(); ++sid) {
                    const std::vector<int32_t>& set = work[size_t(sid - first)];
                    if (!cn.consistent(set)) ok = false;
                    if (a.state_final[size_t(sid)] && (a.state_role[size_t(sid)] != CountRole::kFixed || a.has_bytes(sid)))
                        ok = false;
                }
                if (!ok) {  // undo, and unroll the repetition instead
                    a.state_rule.resize(size_t(first));
                    a.state_final.resize(size_t(first));
                    a.state_bytes.resize(size_t(first));
                    a.state_role.resize(size_t(first));
                    a.next.resize(size_t(first) * 256);
                    continue;
                }
                loop.rule = r;
                loop.min = plan.min;
                loop.max = plan.max < 0 ? CountedLoop::kUnbounded : plan.max;
                loop.cap = plan.max < 0 ? plan.min : plan.max;
                a.rule_loop[size_t(r)] = static_cast<int32_t>(a.loops.size());
                a.loops.push_back(loop);
            }
            for (auto& es : rule_edges_of) {
                if (a.edge_begin.empty()) a.edge_begin.push_back(0);
                for (auto& e : es) a.edges.push_back(e);
                a.edge_begin.push_back(static_cast<int32_t>(a.edges.size()));
            }
            break;
        }
    }
    if (a.edge_begin.empty()) a.edge_begin.push_back(0);
    DI_ICHECK(a.edge_begin.size() == size_t(a.num_states()) + 1);

    int32_t S = a.num_states();
    // Productive states can still complete their rule; prune every transition into an unproductive
    // state or through an unproductive rule, so that no live parse ever reaches a dead end.
    {
        std::vector<uint8_t> prod(size_t(S), 0), rprod(size_t(num_rules), 0);
        for (bool changed = true; changed;) {
            changed = false;
            for (int32_t s = S - 1; s >= 0; --s) {
                if (prod[size_t(s)]) continue;
                bool p = a.state_final[size_t(s)];
                for (int b = 0; !p && b < 256; ++b) {
                    const int32_t t = a.next[size_t(s) * 256 + size_t(b)];
                    p = t >= 0 && prod[size_t(t)];
                }
                for (int32_t e = a.edge_begin[size_t(s)]; !p && e < a.edge_begin[size_t(s) + 1]; ++e)
                    p = rprod[size_t(a.edges[size_t(e)].first)] && prod[size_t(a.edges[size_t(e)].second)];
                if (p) {
                    prod[size_t(s)] = 1;
                    changed = true;
                    const int32_t r = a.state_rule[size_t(s)];
                    if (a.rule_start[size_t(r)] == s) rprod[size_t(r)] = 1;
                }
            }
        }
        if (!rprod[size_t(a.root)])
            throw GrammarError("grammar", "rule '" + a.rule_names[size_t(a.root)] + "'", "the grammar admits no complete output");
        for (int32_t s = 0; s < S; ++s) {
            for (int b = 0; b < 256; ++b) {
                int32_t& t = a.next[size_t(s) * 256 + size_t(b)];
                if (t >= 0 && !prod[size_t(t)]) {
                    t = -1;
                    a.state_bytes[size_t(s)][size_t(b >> 6)] &= ~(uint64_t{1} << (b & 63));
                }
            }
        }
        std::vector<std::pair<int32_t, int32_t>> kept;
        std::vector<int32_t> begin = {0};
        for (int32_t s = 0; s < S; ++s) {
            for (int32_t e = a.edge_begin[size_t(s)]; e < a.edge_begin[size_t(s) + 1]; ++e)
                if (rprod[size_t(a.edges[size_t(e)].first)] && prod[size_t(a.edges[size_t(e)].second)]) kept.push_back(a.edges[size_t(e)]);
            begin.push_back(static_cast<int32_t>(kept.size()));
        }
        a.edges = std::move(kept);
        a.edge_begin = std::move(begin);
    }
    minimize(a);
    S = a.num_states();
    // Nullable: a state can reach a final state through nullable rule edges only.
    std::vector<uint8_t> st_null(size_t(S), 0);
    a.rule_nullable.assign(size_t(num_rules), 0);
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t s = S - 1; s >= 0; --s) {
            if (st_null[size_t(s)]) continue;
            bool n = a.state_final[size_t(s)];
            for (int32_t e = a.edge_begin[size_t(s)]; !n && e < a.edge_begin[size_t(s) + 1]; ++e)
                n = a.rule_nullable[size_t(a.edges[size_t(e)].first)] && st_null[size_t(a.edges[size_t(e)].second)];
            if (n) {
                st_null[size_t(s)] = 1;
                changed = true;
                if (a.rule_start[size_t(a.state_rule[size_t(s)])] == s) a.rule_nullable[size_t(a.state_rule[size_t(s)])] = 1;
            }
        }
    }
    // FIRST of states and rules, then FOLLOW of rules.
    std::vector<ByteSet> first(size_t(S), ByteSet{0, 0, 0, 0});
    std::vector<ByteSet> rfirst(size_t(num_rules), ByteSet{0, 0, 0, 0});
    auto merge = [](ByteSet& d, const ByteSet& s) {
        bool ch = false;
        for (int i = 0; i < 4; ++i) {
            const uint64_t v = d[size_t(i)] | s[size_t(i)];
            ch |= v != d[size_t(i)];
            d[size_t(i)] = v;
        }
        return ch;
    };
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t s = S - 1; s >= 0; --s) {
            changed |= merge(first[size_t(s)], a.state_bytes[size_t(s)]);
            for (int32_t e = a.edge_begin[size_t(s)]; e < a.edge_begin[size_t(s) + 1]; ++e) {
                const auto [rule, t] = a.edges[size_t(e)];
                changed |= merge(first[size_t(s)], rfirst[size_t(rule)]);
                if (a.rule_nullable[size_t(rule)]) changed |= merge(first[size_t(s)], first[size_t(t)]);
            }
        }
        for (int32_t r = 0; r < num_rules; ++r) changed |= merge(rfirst[size_t(r)], first[size_t(a.rule_start[size_t(r)])]);
    }
    a.rule_returns.assign(size_t(num_rules), {});
    for (const auto& [rule, t] : a.edges) a.rule_returns[size_t(rule)].push_back(t);
    for (auto& r : a.rule_returns) {
        std::sort(r.begin(), r.end());
        r.erase(std::unique(r.begin(), r.end()), r.end());
    }
    a.rule_follow.assign(size_t(num_rules), ByteSet{0, 0, 0, 0});
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t s = 0; s < S; ++s)
            for (int32_t e = a.edge_begin[size_t(s)]; e < a.edge_begin[size_t(s) + 1]; ++e) {
                const auto [rule, t] = a.edges[size_t(e)];
                changed |= merge(a.rule_follow[size_t(rule)], first[size_t(t)]);
                if (st_null[size_t(t)]) changed |= merge(a.rule_follow[size_t(rule)], a.rule_follow[size_t(a.state_rule[size_t(s)])]);
            }
    }
    return a;
}

}  // namespace deepinfer::grammar
