// SPDX-License-Identifier: Apache-2.0
// State equivalences by partition refinement (see lookahead_classes.h), one depth at a time.
//
// Depth d refines depth d-1: a state's signature is its class at d-1, the classes at d-1 of the
// states its bytes lead to, and the classes at d of its rule edges' targets (a rule may match
// nothing), refined to a fixed point inside the depth. Class ids are stable (a split class keeps
// its id for the part whose signature did not change), so only the states next to a change are
// looked at again: a byte predecessor of a state that changed class at depth d-1, or a rule-edge
// predecessor of one that changed at depth d. A counted repetition then costs a few states per
// depth instead of the whole automaton.
#include "grammar/lookahead_classes.h"

#include <algorithm>
#include <map>

namespace deepinfer::grammar {
namespace {

class Refinement {
public:
    // `by_rule`: depth 0 separates the states of different rules (minimization: merged states are
    // one state of one rule); else only final states, whose completion returns into their rule's
    // callers.
    Refinement(const Automaton& a, bool by_rule) : a_(a), S_(a.num_states()) {
        run_begin_.push_back(0);
        std::vector<std::vector<int32_t>> pb(static_cast<size_t>(S_)), pe(static_cast<size_t>(S_));
        for (int32_t s = 0; s < S_; ++s) {
            int32_t last = -2;
            for (int b = 0; b < 256; ++b) {
                const int32_t t = a.next[size_t(s) * 256 + size_t(b)];
                if (t != last) {
                    runs_.emplace_back(b, t);
                    if (t >= 0 && (pb[size_t(t)].empty() || pb[size_t(t)].back() != s)) pb[size_t(t)].push_back(s);
                }
                last = t;
            }
            run_begin_.push_back(static_cast<int32_t>(runs_.size()));
            for (int32_t e = a.edge_begin[size_t(s)]; e < a.edge_begin[size_t(s) + 1]; ++e) {
                const int32_t t = a.edges[size_t(e)].second;
                if (pe[size_t(t)].empty() || pe[size_t(t)].back() != s) pe[size_t(t)].push_back(s);
            }
        }
        flatten(pb, byte_pred_begin_, byte_pred_);
        flatten(pe, edge_pred_begin_, edge_pred_);
        // Depth 0: finality, and the rule (of every state, or of final states).
        std::map<std::pair<int32_t, int32_t>, int32_t> ids;
        cls_.resize(size_t(S_));
        for (int32_t s = 0; s < S_; ++s) {
            const bool final = a.state_final[size_t(s)];
            const int32_t rule = by_rule || final ? a.state_rule[size_t(s)] : -1;
            // Counted repetitions: the roles stay apart (an item's count means something else in each).
            const int32_t kind = int32_t(final) * 8 + static_cast<int32_t>(a.state_role[size_t(s)]);
            const int32_t c = ids.emplace(std::make_pair(rule, kind), int32_t(ids.size())).first->second;
            cls_[size_t(s)] = c;
            if (size_t(c) >= members_.size()) members_.emplace_back();
            pos_.push_back(static_cast<int32_t>(members_[size_t(c)].size()));
            members_[size_t(c)].push_back(s);
        }
        before_.assign(size_t(S_), -1);
        changed_at_.assign(size_t(S_), -1);
        mark_.assign(size_t(S_), 0);
        for (int32_t s = 0; s < S_; ++s) changed_.push_back(s);  // depth 1 looks at every state
    }

    const std::vector<int32_t>& classes() const { return cls_; }
    int32_t num_classes() const { return static_cast<int32_t>(members_.size()); }

    // Computes depth `d` (= previous depth + 1); false if nothing changed (stable from here on).
    bool next_depth(int32_t d) {
        std::vector<int32_t> dirty;
        ++stamp_;
        if (d == 1) {
            for (int32_t s = 0; s < S_; ++s) add_dirty(s, dirty);
        } else {
            for (int32_t t : changed_)
                for (int32_t i = byte_pred_begin_[size_t(t)]; i < byte_pred_begin_[size_t(t) + 1]; ++i)
                    add_dirty(byte_pred_[size_t(i)], dirty);
        }
        changed_.clear();
        while (!dirty.empty()) {
            std::vector<int32_t> moved;
            split_dirty(d, dirty, moved);
            // Rule edges read the classes of this depth: their sources look again.
            dirty.clear();
            ++stamp_;
            for (int32_t t : moved)
                for (int32_t i = edge_pred_begin_[size_t(t)]; i < edge_pred_begin_[size_t(t) + 1]; ++i)
                    add_dirty(edge_pred_[size_t(i)], dirty);
            changed_.insert(changed_.end(), moved.begin(), moved.end());
        }
        return !changed_.empty();
    }

private:
    static void flatten(const std::vector<std::vector<int32_t>>& lists, std::vector<int32_t>& begin,
                        std::vector<int32_t>& flat) {
        begin.assign(1, 0);
        for (const auto& l : lists) {
            flat.insert(flat.end(), l.begin(), l.end());
            begin.push_back(static_cast<int32_t>(flat.size()));
        }
    }
    void add_dirty(int32_t s, std::vector<int32_t>& dirty) {
        if (mark_[size_t(s)] == stamp_) return;
        mark_[size_t(s)] = stamp_;
        dirty.push_back(s);
    }
    // Class at depth d-1 while depth d is being computed.
    int32_t prev_class(int32_t s, int32_t d) const {
        return changed_at_[size_t(s)] == d ? before_[size_t(s)] : cls_[size_t(s)];
    }
    void signature(int32_t s, int32_t d, std::vector<int32_t>& sig) const {
        sig.clear();
        sig.push_back(prev_class(s, d));
        int32_t last = -2;
        for (int32_t r = run_begin_[size_t(s)]; r < run_begin_[size_t(s) + 1]; ++r) {
            const auto [lo, t] = runs_[size_t(r)];
            const int32_t c = t < 0 ? -1 : prev_class(t, d);
            if (c == last) continue;  // equivalent targets: one run
            sig.push_back(lo);
            sig.push_back(c);
            last = c;
        }
        sig.push_back(-3);
        const size_t edges_at = sig.size();
        for (int32_t e = a_.edge_begin[size_t(s)]; e < a_.edge_begin[size_t(s) + 1]; ++e) {
            sig.push_back(a_.edges[size_t(e)].first);
            sig.push_back(cls_[size_t(a_.edges[size_t(e)].second)]);
        }
        // Rule edges come sorted by rule (one per rule): already canonical.
        (void)edges_at;
    }
    void move(int32_t s, int32_t to, int32_t d) {
        const int32_t from = cls_[size_t(s)];
        auto& fm = members_[size_t(from)];
        const int32_t p = pos_[size_t(s)];
        fm[size_t(p)] = fm.back();
        pos_[size_t(fm[size_t(p)])] = p;
        fm.pop_back();
        if (changed_at_[size_t(s)] != d) {
            before_[size_t(s)] = from;
            changed_at_[size_t(s)] = d;
        }
        cls_[size_t(s)] = to;
        pos_[size_t(s)] = static_cast<int32_t>(members_[size_t(to)].size());
        members_[size_t(to)].push_back(s);
    }
    // Splits the classes of the dirty states by signature; `moved` gets the states that changed class.
    void split_dirty(int32_t d, std::vector<int32_t>& dirty, std::vector<int32_t>& moved) {
        std::sort(dirty.begin(), dirty.end(), [&](int32_t x, int32_t y) {
            return cls_[size_t(x)] != cls_[size_t(y)] ? cls_[size_t(x)] < cls_[size_t(y)] : x < y;
        });
        std::vector<int32_t> sig, ref_sig;
        std::map<std::vector<int32_t>, std::vector<int32_t>> groups;
        for (size_t i = 0; i < dirty.size();) {
            const int32_t k = cls_[size_t(dirty[i])];
            size_t j = i;
            while (j < dirty.size() && cls_[size_t(dirty[j])] == k) ++j;
            // A member of k that is not dirty: its signature is unchanged, and the same for all such.
            int32_t ref = -1;
            if (j - i < members_[size_t(k)].size())
                for (int32_t m : members_[size_t(k)])
                    if (mark_[size_t(m)] != stamp_) {
                        ref = m;
                        break;
                    }
            groups.clear();
            for (size_t q = i; q < j; ++q) {
                signature(dirty[q], d, sig);
                groups[sig].push_back(dirty[q]);
            }
            bool kept = false;
            if (ref >= 0) {
                signature(ref, d, ref_sig);
                kept = true;  // the non-dirty members keep k
            }
            for (auto& [g_sig, g] : groups) {
                if (ref >= 0 ? g_sig == ref_sig : !kept) {
                    kept = true;  // keeps k
                    continue;
                }
                const int32_t nk = static_cast<int32_t>(members_.size());
                members_.emplace_back();
                for (int32_t s : g) {
                    move(s, nk, d);
                    moved.push_back(s);
                }
            }
            i = j;
        }
    }

    const Automaton& a_;
    const int32_t S_;
    std::vector<int32_t> run_begin_;
    std::vector<std::pair<int32_t, int32_t>> runs_;  // (first byte, target or -1) where the target changes
    std::vector<int32_t> byte_pred_begin_, byte_pred_, edge_pred_begin_, edge_pred_;
    std::vector<int32_t> cls_, pos_;
    std::vector<std::vector<int32_t>> members_;
    std::vector<int32_t> before_, changed_at_;  // class at the previous depth, for states changed at this one
    std::vector<uint32_t> mark_;
    uint32_t stamp_ = 0;
    std::vector<int32_t> changed_;  // states that changed class at the last depth
};

}  // namespace

std::vector<int32_t> moore_classes(const Automaton& a, int32_t* num_classes) {
    Refinement r(a, true);
    for (int32_t d = 1; r.next_depth(d); ++d) {
    }
    *num_classes = r.num_classes();
    return r.classes();
}

LookaheadClasses::LookaheadClasses(const Automaton& a, int32_t max_depth, int64_t max_entries) {
    const int64_t S = a.num_states();
    Refinement r(a, false);
    cls_.push_back(r.classes());
    for (int32_t d = 1; d <= max_depth; ++d) {
        if (static_cast<int64_t>(cls_.size() + 1) * S > max_entries) return;
        const bool changed = r.next_depth(d);
        if (!changed) {
            stable_ = true;
            return;
        }
        cls_.push_back(r.classes());
        last_ = d;
    }
}

}  // namespace deepinfer::grammar
