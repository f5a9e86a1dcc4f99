// SPDX-License-Identifier: Apache-2.0
// The compiled form of a grammar: one deterministic automaton per rule over bytes and rule
// references (Thompson NFA of the rule body, then subset construction), all states numbered
// globally. An Earley recognizer (earley.h) runs over these states: an item is (state, origin).
// Also the static analyses the matcher needs: nullable rules and the bytes that may follow a
// rule's completion (FOLLOW), which keep the token caches' "uncertain" sets small.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "grammar/ir.h"

namespace deepinfer::grammar {

using ByteSet = std::array<uint64_t, 4>;
inline bool byteset_has(const ByteSet& s, uint8_t b) { return (s[b >> 6] >> (b & 63)) & 1; }
inline void byteset_add(ByteSet& s, uint8_t b) { s[b >> 6] |= uint64_t{1} << (b & 63); }

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

    int32_t num_states() const { return static_cast<int32_t>(state_rule.size()); }
    int32_t num_rules() const { return static_cast<int32_t>(rule_start.size()); }
    bool has_edges(int32_t s) const { return edge_begin[size_t(s) + 1] != edge_begin[size_t(s)]; }
    bool has_bytes(int32_t s) const {
        const ByteSet& b = state_bytes[size_t(s)];
        return (b[0] | b[1] | b[2] | b[3]) != 0;
    }
};

// Limits that keep a hostile constraint from exhausting memory or time (GrammarError past them).
struct AutomatonLimits {
    int64_t max_nfa_states = 400000;
    int64_t max_dfa_states = 100000;
};

// Throws GrammarError (source "grammar") for undefined rules or a grammar past the limits.
Automaton build_automaton(const Grammar& g, const AutomatonLimits& limits = {});

}  // namespace deepinfer::grammar
