// SPDX-License-Identifier: Apache-2.0
// State equivalence by partition refinement: the full (Moore) equivalence used to minimize the
// automaton, and the bounded-lookahead equivalence that lets the token caches share work.
//
// Two states are equivalent at depth d when no byte string of length <= d tells them apart: the
// same bytes lead, one byte at a time, into states equivalent at depth d-1; both are final or
// neither, and final states are of the same rule (where a rule ends, its callers continue); the
// same rule edges lead into states equivalent at depth d (a called rule may consume no byte).
// Depth 0 separates finality and the rules of final states. Every token of at most d bytes then
// gets the same classification (accepted, uncertain, rejected) in the token caches of the two
// states. States of different rules can be equivalent up to the depth where one could end its
// rule: the characters of two bounded strings of different object members, for example.
//
// The positions of a counted repetition (maxLength, {m,n}) are the typical case: the states at
// "k more characters allowed" and "k+1 more allowed" differ only for tokens of more than k
// characters, so the cache of one is the cache of the other outside those tokens.
#pragma once

#include <climits>
#include <cstdint>
#include <vector>

#include "grammar/automaton.h"

namespace deepinfer::grammar {

// The coarsest partition of states (same rule, same finality, equivalent targets on every byte and
// rule edge): equivalent states accept the same continuations in every context.
std::vector<int32_t> moore_classes(const Automaton& a, int32_t* num_classes);

class LookaheadClasses {
public:
    // Classes for depths 0..max_depth (stops early once the partition is stable, or when the
    // table would pass `max_entries` state-depth entries: deeper questions then answer "no").
    LookaheadClasses(const Automaton& a, int32_t max_depth, int64_t max_entries = int64_t{1} << 23);

    // Whether x and y are equivalent at `depth` (conservative: false when not computed that far).
    bool equivalent(int32_t x, int32_t y, int32_t depth) const {
        if (x == y) return true;
        if (depth > last_) {
            if (!stable_) return false;
            depth = last_;
        }
        return cls_[size_t(depth)][size_t(x)] == cls_[size_t(depth)][size_t(y)];
    }
    // The deepest depth at which x and y are equivalent (equivalence at d implies it at every
    // smaller depth: the classes refine with depth); INT32_MAX when at every depth, -1 when at none.
    int32_t equivalence_depth(int32_t x, int32_t y) const {
        if (x == y || (stable_ && same(x, y, last_))) return INT32_MAX;
        if (!same(x, y, 0)) return -1;
        int32_t lo = 0, hi = last_;  // same at lo; hi: not known
        while (lo < hi) {
            const int32_t mid = lo + (hi - lo + 1) / 2;
            if (same(x, y, mid)) lo = mid;
            else hi = mid - 1;
        }
        return lo;
    }
    int32_t last_depth() const { return last_; }  // deepest computed depth
    bool stable() const { return stable_; }        // classes at last_depth() hold at every depth
    // Class of `state` at `depth` (<= last_depth()).
    int32_t class_of(int32_t state, int32_t depth) const { return cls_[size_t(depth)][size_t(state)]; }

private:
    bool same(int32_t x, int32_t y, int32_t depth) const { return cls_[size_t(depth)][size_t(x)] == cls_[size_t(depth)][size_t(y)]; }
    std::vector<std::vector<int32_t>> cls_;  // [depth][state]
    int32_t last_ = 0;
    bool stable_ = false;
};

}  // namespace deepinfer::grammar
