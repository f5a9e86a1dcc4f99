// SPDX-License-Identifier: Apache-2.0
// The compiled form of a grammar: one deterministic automaton per rule over bytes and rule
// references (Thompson NFA of the rule body, then subset construction), all states numbered
// globally. An Earley recognizer (earley.h) runs over these states: an item is (state, origin).
// Also the static analyses the matcher needs: nullable rules and the bytes that may follow a
// rule's completion (FOLLOW), which keep the token caches' "uncertain" sets small.
#pragma once

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "grammar/ir.h"

namespace deepinfer::grammar {

using ByteSet = std::array<uint64_t, 4>;
inline bool byteset_has(const ByteSet& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }
inline void byteset_add(ByteSet& s, uint8_t b) { s[b >> 6] |= uint64_t{1} << (b & 63); }

// A counted repetition: a rule  prefix child{min,max} suffix  (prefix, child and suffix without
// rule references; the child not nullable and prefix-free) whose automaton loops through one
// state, `loop`, once per iteration of the child. The iteration count lives in the Earley item
// (Item::count) instead of one group of states per count: leaving `loop` on a byte of `exit`
// ends the repetition (needs count >= min, resets the count to 0), on any other byte starts an
// iteration (needs count < max, increments it). The rule's final states come after the suffix and
// scan nothing.
struct CountedLoop {
    int32_t rule = -1, state = -1;
    int32_t min = 0, max = 0;  // max = kUnbounded: no upper bound
    int32_t cap = 0;           // counts saturate here (max, or min when unbounded)
    ByteSet exit{0, 0, 0, 0};  // bytes from `state` into the suffix
    static constexpr int32_t kUnbounded = INT32_MAX;
};

// Where a state sits in a counted repetition: what the count of an item there means.
enum class CountRole : uint8_t {
    kNone,       // not in a counted rule (count 0)
    kFixed,      // prefix or suffix of a counted rule (count 0)
    kIteration,  // inside an iteration (count = iterations started)
    kLoop,       // the loop state (count = iterations done)
};

struct Automaton {
    int32_t root = 0;                      // root rule
    std::vector<std::string> rule_names;   // [num_rules]
    std::vector<int32_t> rule_start;       // [num_rules] start state of each rule
    std::vector<uint8_t> rule_nullable;    // [num_rules]
    std::vector<ByteSet> rule_follow;      // [num_rules] bytes that may follow a completed rule
    std::vector<std::vector<int32_t>> rule_returns;  // [num_rules] states a completed rule returns to
    std::vector<int32_t> state_rule;       // [num_states]
    std::vector<uint8_t> state_final;      // [num_states]
    std::vector<ByteSet> state_bytes;      // [num_states] bytes with an edge
    std::vector<int32_t> next;             // [num_states * 256] byte transitions, -1 = none
    std::vector<int32_t> edge_begin;       // [num_states + 1] CSR offsets into `edges`
    std::vector<std::pair<int32_t, int32_t>> edges;  // (rule, target state)
    std::vector<CountedLoop> loops;        // counted repetitions
    std::vector<int32_t> rule_loop;        // [num_rules] index into `loops`, -1 if none
    std::vector<CountRole> state_role;     // [num_states]

    int32_t num_states() const { return static_cast<int32_t>(state_rule.size()); }
    int32_t num_rules() const { return static_cast<int32_t>(rule_start.size()); }
    bool has_edges(int32_t s) const { return edge_begin[size_t(s) + 1] != edge_begin[size_t(s)]; }
    bool counted(int32_t s) const { return state_role[size_t(s)] != CountRole::kNone; }
    // The state after scanning byte b from state s with an item count `count` (updated), or -1.
    int32_t step(int32_t s, int32_t& count, uint8_t b) const {
        const int32_t t = next[size_t(s) * 256 + b];
        if (t < 0 || state_role[size_t(s)] != CountRole::kLoop) return t;
        const CountedLoop& l = loops[size_t(rule_loop[size_t(state_rule[size_t(s)])])];
        if (byteset_has(l.exit, b)) {
            if (count < l.min) return -1;
            count = 0;
            return t;
        }
        if (count >= l.max) return -1;
        count = std::min(count + 1, l.cap);
        return t;
    }
    bool has_bytes(int32_t s) const {
        const ByteSet& b = state_bytes[size_t(s)];
        return (b[0] | b[1] | b[2] | b[3]) != 0;
    }
};

// Limits that keep a hostile constraint from exhausting memory or time (GrammarError past them).
struct AutomatonLimits {
    int64_t max_nfa_states = 400000;
    int64_t max_dfa_states = 100000;
    // A rule  prefix child{min,max} suffix  becomes a counted repetition (CountedLoop) when max
    // (or min, when unbounded) is at least this; smaller counts are unrolled into states. Counting
    // pays from 2 on (an unrolled JSON string character is ~14 states and a token-cache walk each).
    int32_t counted_repeat_min = 2;
};

// Throws GrammarError (source "grammar") for undefined rules or a grammar past the limits.
Automaton build_automaton(const Grammar& g, const AutomatonLimits& limits = {});

}  // namespace deepinfer::grammar
