// SPDX-License-Identifier: Apache-2.0
// CompiledGrammar internals (shared by the compiler, the matcher and the constrained decoder),
// and the trigger tables of the constrained decoder's free-text phase.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "deepinfer/grammar.h"
#include "grammar/automaton.h"
#include "grammar/token_cache.h"
#include "grammar/vocabulary.h"

namespace deepinfer {

// A literal watched for in free text (KMP automaton), with, for each partial-match state, the
// tokens that complete it and where (byte offset just after the literal inside the token).
struct TriggerTable {
    std::string text;
    std::vector<int32_t> fail;  // KMP failure function
    std::vector<std::vector<std::pair<int32_t, int32_t>>> completing;  // [state] (token, offset)
    int32_t step(int32_t state, uint8_t b) const;
    // Runs over `bytes` from `state`; returns the offset just after the first completion, or -1
    // (then `state` holds the new partial match).
    int32_t scan(int32_t& state, std::string_view bytes) const;
    static std::shared_ptr<const TriggerTable> build(const TokenVocabulary::Impl& v, std::string text);
};

int64_t count_mask_bits(std::span<const uint64_t> mask);

struct CompiledGrammar::Impl {
    std::shared_ptr<const TokenVocabulary> vocabulary;
    grammar::Automaton automaton;
    std::vector<grammar::StateTokens> tokens;  // [num_states]
    double compile_seconds = 0;
    // ConstrainedDecoder phases (GrammarSpec::start_after / tool_call_prefix).
    std::shared_ptr<const TriggerTable> start_trigger, tool_trigger;
    std::vector<uint64_t> free_mask;  // [bitmask words] every token with text, no end token
};

}  // namespace deepinfer
