// SPDX-License-Identifier: Apache-2.0
// Per-state token caches (the "adaptive token mask cache" idea of xgrammar, rebuilt here): for
// every automaton state that scans bytes, the tokens a parse at that state accepts without
// looking at the stack (a path inside the state's rule consumes the whole token), and the
// "uncertain" tokens whose fate depends on the parent rules (the rule can end inside the token,
// followed by a byte in the rule's FOLLOW set). Every other token is rejected there. At run time
// the mask is the union of the accepted sets of the live states plus a re-check of the uncertain
// ones against the full parse, which is exact.
#pragma once

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/vocabulary.h"

namespace deepinfer::grammar {

struct StateTokens {
    bool computed = false;
    std::vector<int32_t> accepted_ids;    // token ids, when few
    // [bitmask words] when many; shared between states whose accepted sets are equal.
    std::shared_ptr<const std::vector<uint64_t>> accepted_bits;
    std::vector<int32_t> uncertain;       // sorted-order indices (TokenVocabulary::Impl::sorted), ascending
    int64_t num_accepted = 0;
    // States of a counted repetition in its iterations (CountRole::kIteration, kLoop): the cache
    // depends on the item's count c; it is by_count[count_index[min(c, count_index.size() - 1)]]
    // (the fields above are unused then).
    std::vector<int32_t> count_index;
    std::vector<StateTokens> by_count;
    const StateTokens& for_count(int32_t c) const {
        if (count_index.empty()) return *this;
        return by_count[size_t(count_index[std::min(size_t(c), count_index.size() - 1)])];
    }
};

// Computes the cache of one state alone (thread-safe: only reads its arguments).
StateTokens compute_state_tokens(const Automaton& a, const TokenVocabulary::Impl& v, int32_t state);

// Every state that scans bytes, on the CPU threads. With `share_work`, a state that is equivalent
// to an already computed one up to some token length (lookahead_classes.h; the positions of a
// counted repetition) walks only the parts of the vocabulary trie where the two can differ and
// copies the other's classification elsewhere; the result is the same as without.
std::vector<StateTokens> compute_all_state_tokens(const Automaton& a, const TokenVocabulary::Impl& v,
                                                  bool share_work = true);

}  // namespace deepinfer::grammar
