// SPDX-License-Identifier: Apache-2.0
// Token caches shared between equivalent states (counted repetitions: maxLength, {m,n}) equal the
// caches computed state by state; the bounded-lookahead equivalence is checked against brute force;
// masks stay exact at random reachable states of counted repetitions near their bounds (remaining
// count shorter than the tokens).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <set>

#include "deepinfer/tokenizer.h"
#include "grammar/automaton.h"
#include "grammar/compiled.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/lookahead_classes.h"
#include "grammar/token_cache.h"
#include "test_util.h"

namespace deepinfer {
namespace {

using grammar::Automaton;
using grammar::StateTokens;

// The sharing between states is about repetitions unrolled into states: build them so (counted
// repetitions, the default for large counts, have tests of their own: counted_repetition_test.cpp).
grammar::AutomatonLimits unrolled() {
    grammar::AutomatonLimits l;
    l.counted_repeat_min = INT32_MAX;
    return l;
}

std::set<int32_t> accepted_set(const StateTokens& st) {
    std::set<int32_t> out(st.accepted_ids.begin(), st.accepted_ids.end());
    if (st.accepted_bits)
        for (size_t w = 0; w < st.accepted_bits->size(); ++w)
            for (int b = 0; b < 64; ++b)
                if (((*st.accepted_bits)[w] >> b) & 1) out.insert(int32_t(w * 64 + size_t(b)));
    return out;
}

// Shared computation == one walk per state, for every state; returns how many states scan bytes.
int expect_sharing_exact(const Automaton& a, const TokenVocabulary& vocab) {
    const auto shared = grammar::compute_all_state_tokens(a, vocab.impl(), true);
    const auto alone = grammar::compute_all_state_tokens(a, vocab.impl(), false);
    EXPECT_EQ(shared.size(), alone.size());
    int scanned = 0;
    for (size_t s = 0; s < alone.size(); ++s) {
        EXPECT_EQ(shared[s].computed, alone[s].computed) << "state " << s;
        if (!alone[s].computed) continue;
        ++scanned;
        EXPECT_EQ(shared[s].num_accepted, alone[s].num_accepted) << "state " << s;
        EXPECT_EQ(accepted_set(shared[s]), accepted_set(alone[s])) << "state " << s;
        EXPECT_EQ(shared[s].uncertain, alone[s].uncertain) << "state " << s;
    }
    return scanned;
}

const std::vector<std::string> kCountedEbnf = {
    R"J(root ::= [a-c]{0,12})J",
    R"J(root ::= "\"" [a-c"\\]{3,9} "\"" ("," [ab]{2,5})?)J",
    R"J(root ::= ("ab" | "c" | "\u00e9"){2,11} "." [0-9]{1,4})J",
    R"J(root ::= x{1,6} "." x{0,3}
        x ::= "a" | "b" x? "c")J",
    R"J(root ::= ([ab]{0,3} ",")* [c]{4,8})J",
};

TEST(TokenCacheSharing, CountedRepetitionsSmallVocabulary) {
    // Tokens up to 9 bytes: longer than the remaining counts near the bounds.
    auto vocab = test::small_vocab("abc,.\"\\0123\xc3\xa9", 500, 17, 9);
    for (const std::string& text : kCountedEbnf) {
        SCOPED_TRACE(text);
        const Automaton a = grammar::build_automaton(grammar::parse_ebnf(text), unrolled());
        EXPECT_GT(expect_sharing_exact(a, *vocab), 3);
    }
}

TEST(TokenCacheSharing, JsonSchemaMaxLengthSmallVocabulary) {
    auto vocab = test::small_vocab("abc,{}[]\":0123 -.\\u", 600, 23, 9);
    const std::vector<std::string> schemas = {
        R"J({"type": "string", "minLength": 2, "maxLength": 7})J",
        R"J({"type": "object", "properties": {"a": {"type": "string", "maxLength": 12}, "b": {"type": "string", "maxLength": 3}},
            "required": ["a"], "additionalProperties": false})J",
        R"J({"type": "array", "items": {"type": "string", "maxLength": 5}, "minItems": 1, "maxItems": 6})J",
        R"J({"type": "object", "properties": {"id": {"type": "integer"}, "name": {"type": "string", "maxLength": 8}},
            "required": ["id", "name"]})J",
    };
    for (const std::string& s : schemas) {
        SCOPED_TRACE(s);
        for (JsonWhitespace ws : {JsonWhitespace::kCompact, JsonWhitespace::kFlexible}) {
            const Automaton a = grammar::build_automaton(grammar::json_schema_grammar(s, {ws, 2, false}), unrolled());
            expect_sharing_exact(a, *vocab);
        }
    }
}

// The real vocabulary (tokens up to 128 bytes) against a maxLength string and a user profile.
TEST(TokenCacheSharing, DeepSeekVocabularyMaxLength) {
    const std::string path = std::string(DI_TOKENIZER_ASSETS_DIR) + "/deepseek-v4/tokenizer.json";
    Tokenizer tok = Tokenizer::from_file(path);
    TokenVocabulary vocab(tok, 129280, {1});
    const Automaton a = grammar::build_automaton(grammar::json_schema_grammar(
        R"J({"type": "object", "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 12},
            "tag": {"type": "string", "maxLength": 3}}, "required": ["name"], "additionalProperties": false})J",
        {JsonWhitespace::kFlexible, -1, false}), unrolled());
    EXPECT_GT(expect_sharing_exact(a, vocab), 30);
}

// Equivalence at depth d means: the same byte strings of length <= d are alive from both states,
// ending in final states alike (all states here are of one rule without rule edges).
TEST(LookaheadClasses, MatchesBruteForceOnCountedRepetition) {
    const Automaton a = grammar::build_automaton(grammar::parse_ebnf(R"J(root ::= "<" [ab]{1,7} ">" "c"?)J"), unrolled());
    const grammar::LookaheadClasses eq(a, 12);
    // Every byte string over the alphabet up to length `d` alive from `s` (final: may end).
    auto language = [&](int32_t s, int d) {
        std::set<std::string> out;
        std::vector<std::pair<int32_t, std::string>> frontier = {{s, ""}};
        for (int k = 0; k <= d; ++k) {
            std::vector<std::pair<int32_t, std::string>> nxt;
            for (const auto& [st, str] : frontier) {
                out.insert(str + (a.state_final[size_t(st)] ? "$" : ""));
                if (k == d) continue;
                for (char c : std::string("<ab>c")) {
                    const int32_t t = a.next[size_t(st) * 256 + uint8_t(c)];
                    if (t >= 0) nxt.emplace_back(t, str + c);
                }
            }
            frontier = std::move(nxt);
        }
        return out;
    };
    int pairs_equal = 0, pairs_differ = 0;
    for (int32_t x = 0; x < a.num_states(); ++x)
        for (int32_t y = 0; y < a.num_states(); ++y)
            for (int d = 0; d <= 9; ++d) {
                const bool same = language(x, d) == language(y, d);
                EXPECT_EQ(eq.equivalent(x, y, d), same) << x << " " << y << " depth " << d;
                EXPECT_EQ(d <= eq.equivalence_depth(x, y), same) << x << " " << y << " depth " << d;
                (same ? pairs_equal : pairs_differ) += x != y;
            }
    EXPECT_GT(pairs_equal, 10);
    EXPECT_GT(pairs_differ, 10);
}

// Masks equal brute force at random reachable states of counted repetitions (the walks run into
// the bounds, where the remaining count is below the token lengths).
TEST(MaskExactness, CountedRepetitionsNearBounds) {
    auto vocab = test::small_vocab("abc,.\"\\0123\xc3\xa9", 500, 17, 9);
    GrammarCompiler compiler(vocab);
    std::mt19937_64 rng(5);
    std::vector<uint64_t> mask(size_t(vocab->bitmask_words()));
    for (const std::string& text : kCountedEbnf) {
        SCOPED_TRACE(text);
        auto g = compiler.compile_ebnf(text);
        for (int w = 0; w < 8; ++w) {
            GrammarMatcher m(g);
            for (int step = 0; step < 16; ++step) {
                const int64_t count = m.fill_next_token_bitmask(mask);
                std::vector<int32_t> allowed;
                for (int32_t t = 0; t < vocab->size(); ++t) {
                    GrammarMatcher copy(m);
                    ASSERT_EQ(test::bit(mask, t), copy.accept_token(t)) << "walk " << w << " step " << step << " token " << t;
                    if (test::bit(mask, t)) allowed.push_back(t);
                }
                ASSERT_EQ(count, static_cast<int64_t>(allowed.size()));
                ASSERT_FALSE(allowed.empty());
                // Prefer single bytes half the time, so that walks reach the bounds slowly too.
                std::vector<int32_t> pool;
                if (rng() % 2)
                    for (int32_t t : allowed)
                        if (vocab->impl().bytes[size_t(t)].size() == 1) pool.push_back(t);
                if (pool.empty()) pool = allowed;
                ASSERT_TRUE(m.accept_token(pool[rng() % pool.size()]));
                if (m.is_terminated()) break;
            }
        }
    }
}

// JSON strings of bounded length whose remaining count ends below, at and above the longest token
// (9 bytes), with escapes (\" \\ \n \u0e0e) and 2- and 3-byte UTF-8 characters (tokens split them
// anywhere): the shared caches equal the per-state ones, and masks equal brute force at random
// reachable states, the walks running into the bounds.
TEST(MaskExactness, CountedStringsEscapesUtf8AroundTokenLength) {
    auto vocab = test::small_vocab("ab\"\\un0e\xc3\xa9\xe2\x82\xac{}:,", 700, 41, 9);
    GrammarCompiler compiler(vocab);
    std::mt19937_64 rng(77);
    std::vector<uint64_t> mask(size_t(vocab->bitmask_words()));
    for (int max_len : {4, 9, 14}) {
        const std::string schema = R"J({"type": "object", "properties": {"a": {"type": "string", "minLength": 2, "maxLength": )J" +
                                   std::to_string(max_len) + R"J(}, "b": {"type": "string", "maxLength": 3}}, "required": ["a", "b"],
                                   "additionalProperties": false})J";
        SCOPED_TRACE(schema);
        const grammar::Grammar gr = grammar::json_schema_grammar(schema, {JsonWhitespace::kCompact, 0, false});
        EXPECT_GT(expect_sharing_exact(grammar::build_automaton(gr, unrolled()), *vocab), max_len);
        auto g = compiler.compile_json_schema(schema, {JsonWhitespace::kCompact, 0, false});
        for (int w = 0; w < 6; ++w) {
            GrammarMatcher m(g);
            for (int step = 0; step < 24; ++step) {
                const int64_t count = m.fill_next_token_bitmask(mask);
                std::vector<int32_t> allowed;
                for (int32_t t = 0; t < vocab->size(); ++t) {
                    GrammarMatcher copy(m);
                    ASSERT_EQ(test::bit(mask, t), copy.accept_token(t)) << "walk " << w << " step " << step << " token " << t;
                    if (test::bit(mask, t)) allowed.push_back(t);
                }
                ASSERT_EQ(count, static_cast<int64_t>(allowed.size()));
                ASSERT_FALSE(allowed.empty());
                // Prefer short tokens a third of the time, so that walks reach every remaining count.
                std::vector<int32_t> pool;
                if (rng() % 3 == 0)
                    for (int32_t t : allowed)
                        if (vocab->impl().bytes[size_t(t)].size() <= 2) pool.push_back(t);
                if (pool.empty()) pool = allowed;
                ASSERT_TRUE(m.accept_token(pool[rng() % pool.size()]));
                if (m.is_terminated()) break;
            }
        }
    }
}

}  // namespace
}  // namespace deepinfer
