// SPDX-License-Identifier: Apache-2.0
// An Earley recognizer over bytes whose rules are automata (automaton.h): an item is (state,
// origin set). Sets are kept on a stack, so a byte is pushed and popped in O(set size): the token
// mask walks the vocabulary trie by pushing and popping. Nullable rules use the Aycock-Horspool
// rule (a nullable prediction also advances its predictor), left recursion costs nothing extra.
//
// Two start modes: the grammar's root (the matcher), or one automaton state whose rule instance
// has an unknown parent (origin kOutside; the token caches), where completing that instance is
// recorded as a "pop" instead of being completed into a parent.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "grammar/automaton.h"

namespace deepinfer::grammar {

struct Item {
    int32_t state;
    int32_t origin;     // index of the set where the rule instance started; kOutside: unknown parent
    int32_t count = 0;  // iterations of a counted repetition (CountedLoop; CountRole says which)
};
inline constexpr int32_t kOutside = -1;

// Not thread-safe; one per matcher (or per cache computation). Copyable.
class Earley {
public:
    explicit Earley(const Automaton* a) : a_(a) {}
    void start_root();
    void start_at(int32_t state);  // isolated: {(state, kOutside)} and its closure
    // "Any context" mode (token caches): items of unknown parents (origin kOutside) that complete
    // continue in every state their rule can return to, an over-approximation of all stacks.
    // Starts with {(s, kOutside) : s in seeds}; sets may be empty.
    void start_any_context(std::span<const int32_t> seeds);
    // Scans `b` (any context mode) and adds the seeds; always pushes a set. False if it is empty.
    bool push_seeded(uint8_t b, std::span<const int32_t> seeds);

    // Scans byte `b` into a new set; false (and no new set) if nothing accepts it.
    bool push(uint8_t b);
    void pop();                      // removes the newest set (never the first)
    void truncate(size_t num_sets);  // keeps the first num_sets sets
    size_t num_sets() const { return set_begin_.size(); }

    std::span<const Item> top() const {
        return {items_.data() + set_begin_.back(), items_.size() - set_begin_.back()};
    }
    bool can_end() const { return flags_.back() & kCanEnd; }
    bool popped() const { return flags_.back() & kPopped; }
    // Union of the bytes some item of the newest set can scan.
    ByteSet top_bytes() const;

private:
    static constexpr uint8_t kCanEnd = 1, kPopped = 2;
    void add(int32_t state, int32_t origin, int32_t count = 0);
    void close(size_t set_idx);
    const Automaton* a_;
    bool any_context_ = false;
    std::vector<Item> items_;
    std::vector<uint32_t> set_begin_;
    std::vector<uint8_t> flags_;
};

}  // namespace deepinfer::grammar
