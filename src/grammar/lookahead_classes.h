// SPDX-License-Identifier: Apache-2.0
// State equivalence by partition refinement: the full (Moore) equivalence used to minimize the
// automaton, and the bounded-lookahead equivalence that lets the token caches share work.
//
// Two states of the same rule are equivalent at depth d when no byte string of length <= d tells
// them apart: the same bytes lead, one byte at a time, into states equivalent at depth d-1; both
// are final or neither (so the rule can end at the same places); the same rule edges lead into
// states equivalent at depth d (a called rule may consume no byte). Depth 0 separates only rules
// and finality. Every token of at most d bytes then gets the same classification (accepted,
// uncertain, rejected) in the token caches of the two states, whatever comes before it.
//
// The positions of a counted repetition (maxLength, {m,n}) are the typical case: the states at
// "k more characters allowed" and "k+1 more allowed" differ only for tokens of more than k
// characters, so the cache of one is the cache of the other outside those tokens.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "grammar/automaton.h"

namespace deepinfer::grammar {

// One refinement step over an automaton: the class of a state becomes its signature (its old
// class, the classes its bytes lead to in `byte_cls`, its rule edges' targets in `edge_cls`).
class Refiner {
public:
    explicit Refiner(const Automaton& a);
    // Classes by (rule, finality).
    int32_t initial(std::vector<int32_t>& cls) const;
    // New classes (numbered by first appearance) refining `old`; returns their number.
    int32_t refine(const std::vector<int32_t>& old, const std::vector<int32_t>& byte_cls,
                   const std::vector<int32_t>& edge_cls, std::vector<int32_t>& out);

private:
    const Automaton& a_;
    std::vector<int32_t> run_begin_;                  // [num_states + 1]
    std::vector<std::pair<int32_t, int32_t>> runs_;  // (first byte, target or -1) where the target changes
    std::vector<std::vector<int32_t>> sigs_;
};

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
    int32_t last_depth() const { return last_; }  // deepest computed depth
    bool stable() const { return stable_; }        // classes at last_depth() hold at every depth
    // Class of `state` at `depth` (<= last_depth()).
    int32_t class_of(int32_t state, int32_t depth) const { return cls_[size_t(depth)][size_t(state)]; }

private:
    std::vector<std::vector<int32_t>> cls_;  // [depth][state]
    int32_t last_ = 0;
    bool stable_ = false;
};

}  // namespace deepinfer::grammar
