// SPDX-License-Identifier: Apache-2.0
// Counted repetitions (automaton.h, CountedLoop): a rule  prefix child{min,max} suffix  whose
// iteration count lives in the Earley item. Checked against the same grammar with the repetition
// unrolled into states (the construction every other test covers) and against brute force:
//   - the language: the same strings are complete and the same are prefixes;
//   - masks at random reachable states, the walks running into both bounds (short tokens are
//     preferred part of the time), with escapes and 2- and 3-byte UTF-8 characters that tokens
//     split anywhere: mask == unrolled grammar's mask == the tokens accepted one by one;
//   - rollback: after rolling tokens back, the masks are the ones seen at that point before;
//   - shapes that cannot count (suffix overlapping the child, a child that is not prefix-free or is
//     nullable) fall back to the unrolled automaton;
//   - JSON Schema maxLength strings over the DeepSeek vocabulary: a few states instead of one
//     group per character, and masks equal to the unrolled grammar's.
#include <gtest/gtest.h>

#include <climits>
#include <initializer_list>
#include <string_view>
#include <random>

#include "deepinfer/tokenizer.h"
#include "grammar/automaton.h"
#include "grammar/compiled.h"
#include "grammar/ebnf.h"
#include "grammar/json_schema.h"
#include "grammar/token_cache.h"
#include "test_util.h"

namespace deepinfer {
namespace {

// Compiles `g` with repetitions of at least `counted_min` counted (INT32_MAX: all unrolled).
CompiledGrammar compile_with(const grammar::Grammar& g, std::shared_ptr<const TokenVocabulary> vocab, int32_t counted_min) {
    auto impl = std::make_shared<CompiledGrammar::Impl>();
    grammar::AutomatonLimits limits;
    limits.counted_repeat_min = counted_min;
    impl->vocabulary = vocab;
    impl->automaton = grammar::build_automaton(g, limits);
    impl->tokens = grammar::compute_all_state_tokens(impl->automaton, vocab->impl());
    return CompiledGrammar(std::move(impl));
}

size_t num_loops(const CompiledGrammar& g) { return g.impl().automaton.loops.size(); }

std::vector<uint64_t> mask_of(GrammarMatcher& m, const TokenVocabulary& vocab, int64_t* count = nullptr) {
    std::vector<uint64_t> mask(size_t(vocab.bitmask_words()));
    const int64_t n = m.fill_next_token_bitmask(mask);
    if (count) *count = n;
    return mask;
}

// Random walks through `counted` (checked against `unrolled` and brute force at every step), with
// rollbacks checked against the masks recorded on the way.
void expect_walks_exact(const CompiledGrammar& counted, const CompiledGrammar& unrolled,
                        std::shared_ptr<const TokenVocabulary> vocab, uint64_t seed, int walks, int steps) {
    std::mt19937_64 rng(seed);
    for (int w = 0; w < walks; ++w) {
        GrammarMatcher m(counted), u(unrolled);
        std::vector<std::vector<uint64_t>> seen;  // mask before each accepted token
        std::vector<int32_t> history;             // the accepted tokens
        for (int step = 0; step < steps; ++step) {
            int64_t count = 0;
            const std::vector<uint64_t> mask = mask_of(m, *vocab, &count);
            ASSERT_EQ(mask, mask_of(u, *vocab)) << "walk " << w << " step " << step;
            std::vector<int32_t> allowed;
            for (int32_t t = 0; t < vocab->size(); ++t) {
                GrammarMatcher copy(m);
                ASSERT_EQ(test::bit(mask, t), copy.accept_token(t)) << "walk " << w << " step " << step << " token " << t;
                if (test::bit(mask, t)) allowed.push_back(t);
            }
            ASSERT_EQ(count, static_cast<int64_t>(allowed.size()));
            ASSERT_FALSE(allowed.empty()) << "walk " << w << " step " << step << " after " << [&] {
                std::string text;
                for (int32_t t : history) text += vocab->impl().bytes[size_t(t)] + "|";
                return text;
            }();
            // Short tokens half of the time, so that every count near the bounds is reached.
            std::vector<int32_t> pool;
            if (rng() % 2)
                for (int32_t t : allowed)
                    if (vocab->impl().bytes[size_t(t)].size() <= 2) pool.push_back(t);
            if (pool.empty()) pool = allowed;
            const int32_t pick = pool[rng() % pool.size()];
            seen.push_back(mask);
            ASSERT_TRUE(m.accept_token(pick));
            ASSERT_TRUE(u.accept_token(pick));
            if (m.is_terminated()) break;
            history.push_back(pick);
            if (step % 5 == 4) {  // roll back 1..3 tokens: the masks are those seen there before
                const size_t back = std::min<size_t>(history.size(), 1 + rng() % 3);
                const std::vector<uint64_t> now = mask_of(m, *vocab);
                m.rollback(int64_t(back));
                ASSERT_EQ(mask_of(m, *vocab), seen[seen.size() - back]) << "walk " << w << " rollback at " << step;
                for (size_t k = history.size() - back; k < history.size(); ++k) ASSERT_TRUE(m.accept_token(history[k]));
                ASSERT_EQ(mask_of(m, *vocab), now) << "walk " << w << " replay at " << step;
            }
        }
    }
}

const std::vector<std::string> kCountable = {
    R"J(root ::= "\"" [a-c]{0,12} "\"")J",
    R"J(root ::= q ("," [ab]{2,5} ";")?
        q ::= "\"" ([a-c] | "\\" [n"\\] | "\u00e9" | "\u20ac"){2,9} "\"")J",
    R"J(root ::= x{0,3} "."
        x ::= "<" [ab\u00e9]{1,6} ">")J",
    R"J(root ::= "[" s ("," s){0,4} "]"
        s ::= "'" [a-c\u20ac]{3,} "'")J",
    R"J(root ::= p [0-9]{0,3}
        p ::= "(" ("ab" | "c" | "\\" [0-9] [0-9]){4,7} ")")J",
};

const std::vector<std::string> kNotCountable = {
    R"J(root ::= "a" [ab]{0,5} "b")J",        // the suffix's byte also continues the child
    R"J(root ::= "x" ("a" | "aa"){0,6} ".")J",  // not prefix-free: "aa" is one or two iterations
    R"J(root ::= "x" ("a"?){2,5} ".")J",        // a nullable child
    R"J(root ::= [a-c]{2,9})J",                 // no suffix: the loop state would be final
};

TEST(CountedRepetition, SameLanguageAsUnrolled) {
    auto vocab = test::small_vocab("abc\"\\n", 10, 3);
    std::mt19937_64 rng(11);
    const std::string alphabet = "abc\"\\n,;.<>[]'()0123\xc3\xa9\xe2\x82\xacx";
    for (const auto* list : {&kCountable, &kNotCountable}) {
        for (const std::string& text : *list) {
            SCOPED_TRACE(text);
            const grammar::Grammar gr = grammar::parse_ebnf(text);
            const CompiledGrammar counted = compile_with(gr, vocab, 2), unrolled = compile_with(gr, vocab, INT32_MAX);
            EXPECT_EQ(num_loops(counted) > 0, list == &kCountable);
            EXPECT_EQ(num_loops(unrolled), 0u);
            if (list == &kCountable) {
                EXPECT_LT(counted.num_states(), unrolled.num_states());
            }
            int complete = 0;
            for (int i = 0; i < 4000; ++i) {
                // Random strings, and random prefixes of strings the unrolled grammar accepts.
                std::string s;
                const int len = int(rng() % 16);
                for (int k = 0; k < len; ++k) s.push_back(alphabet[rng() % alphabet.size()]);
                EXPECT_EQ(test::accepts(counted, s), test::accepts(unrolled, s)) << s;
                EXPECT_EQ(test::prefix_ok(counted, s), test::prefix_ok(unrolled, s)) << s;
                GrammarMatcher m(unrolled);
                std::string walk;
                for (int k = 0; k < 24; ++k) {
                    std::string next;
                    for (int tries = 0; tries < 8 && next.empty(); ++tries) {
                        const char c = alphabet[rng() % alphabet.size()];
                        if (m.accept_bytes(std::string(1, c))) next.push_back(c);
                    }
                    if (next.empty()) break;
                    walk += next;
                    EXPECT_TRUE(test::prefix_ok(counted, walk)) << walk;
                    const bool done = test::accepts(unrolled, walk);
                    EXPECT_EQ(test::accepts(counted, walk), done) << walk;
                    complete += done;
                }
            }
            EXPECT_GT(complete, 0);
        }
    }
}

TEST(CountedRepetition, MasksExactNearBoundsEscapesUtf8AndRollback) {
    // Tokens up to 7 bytes over an alphabet with quotes, backslashes, digits and the bytes of é
    // (2 bytes) and € (3 bytes): random tokens split characters and escapes anywhere.
    std::shared_ptr<const TokenVocabulary> vocab =
        test::small_vocab("abc\"\\n,;.<>[]'()01\xc3\xa9\xe2\x82\xac", 600, 29, 7);
    for (const std::string& text : kCountable) {
        SCOPED_TRACE(text);
        const grammar::Grammar gr = grammar::parse_ebnf(text);
        const CompiledGrammar counted = compile_with(gr, vocab, 2), unrolled = compile_with(gr, vocab, INT32_MAX);
        ASSERT_GT(num_loops(counted), 0u);
        expect_walks_exact(counted, unrolled, vocab, 101, 10, 30);
    }
}

TEST(CountedRepetition, RollbackRestoresCounts) {
    std::shared_ptr<const TokenVocabulary> vocab = test::small_vocab("ab\"", 40, 5, 3);
    const grammar::Grammar gr = grammar::parse_ebnf(R"J(root ::= "\"" [ab]{2,6} "\"")J");
    const CompiledGrammar g = compile_with(gr, vocab, 2);
    ASSERT_EQ(num_loops(g), 1u);
    auto id_of = [&](const std::string& s) {
        for (int32_t t = 0; t < vocab->size(); ++t)
            if (vocab->impl().bytes[size_t(t)] == s) return t;
        return -1;
    };
    const int32_t q = id_of("\""), a = id_of("a");
    GrammarMatcher m(g);
    ASSERT_TRUE(m.accept_token(q));
    std::vector<std::vector<uint64_t>> masks = {mask_of(m, *vocab)};
    for (int i = 0; i < 6; ++i) {
        ASSERT_TRUE(m.accept_token(a));
        masks.push_back(mask_of(m, *vocab));
    }
    EXPECT_FALSE(GrammarMatcher(m).accept_token(a));  // six characters: the bound
    EXPECT_TRUE(test::bit(masks[2], q) && !test::bit(masks[1], q));  // the closing quote from two on
    for (int back = 1; back <= 6; ++back) {
        GrammarMatcher r(m);
        r.rollback(back);
        EXPECT_EQ(mask_of(r, *vocab), masks[size_t(6 - back)]) << back;
        for (int i = 0; i < back; ++i) ASSERT_TRUE(r.accept_token(a));
        EXPECT_EQ(mask_of(r, *vocab), masks[6]) << back;
    }
}

TEST(CountedRepetition, JsonSchemaStringsSmallVocabulary) {
    std::shared_ptr<const TokenVocabulary> vocab =
        test::small_vocab("abc\"\\un0e{}[]:,\xc3\xa9\xe2\x82\xac", 700, 43, 8);
    const std::vector<std::string> schemas = {
        R"J({"type": "object", "properties": {"a": {"type": "string", "minLength": 2, "maxLength": 7},
            "b": {"type": "string", "maxLength": 3}, "c": {"type": "string", "minLength": 3}},
            "required": ["a", "b"], "additionalProperties": false})J",
        R"J({"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 4}, "maxItems": 5})J",
    };
    for (const std::string& schema : schemas) {
        SCOPED_TRACE(schema);
        const grammar::Grammar gr = grammar::json_schema_grammar(schema, {JsonWhitespace::kCompact, 0, false});
        const CompiledGrammar counted = compile_with(gr, vocab, 2), unrolled = compile_with(gr, vocab, INT32_MAX);
        ASSERT_GT(num_loops(counted), 0u);
        expect_walks_exact(counted, unrolled, vocab, 202, 8, 30);
    }
}

// Random grammars  root ::= head? q tail?  with q ::= prefix (child){m,n} suffix  built from
// random literals and classes (some shapes count, some fall back): counted and unrolled
// compilations give the same masks along random walks, which equal brute force.
TEST(CountedRepetition, RandomGrammarsMatchUnrolled) {
    std::shared_ptr<const TokenVocabulary> vocab = test::small_vocab("abc\"\\,.\xc3\xa9", 300, 51, 5);
    std::mt19937_64 rng(123);
    const std::vector<std::string> pieces = {"\"a\"", "\"b\"", "\"ab\"", "\"\\\\\" [ab]", "[a-c]", "[^,.\\\"]",
                                             "\"\\u00e9\"", "(\"a\" | \"bc\")", "[ab] [c.]", "\",\"", "\".\""};
    auto piece = [&] { return pieces[rng() % pieces.size()]; };
    int counted_grammars = 0;
    for (int i = 0; i < 80; ++i) {
        const int m = int(rng() % 4), n = m + int(rng() % 6);
        // (Appended piece by piece: GCC 12 warns falsely on chains of string temporaries.)
        std::string child, text;
        auto add = [](std::string& s, std::initializer_list<std::string_view> parts) {
            for (std::string_view p : parts) s.append(p);
        };
        if (rng() % 2) add(child, {piece()});
        else add(child, {"(", piece(), " | ", piece(), ")"});
        add(text, {"root ::= "});
        if (rng() % 2) add(text, {piece(), " "});
        add(text, {"q"});
        if (rng() % 2) add(text, {" ", piece()});
        const std::string lo = std::to_string(m), hi = rng() % 4 ? std::to_string(std::max(n, 1)) : "";
        add(text, {"\nq ::= ", piece(), " (", child, "){", lo, ",", hi, "} ", piece()});
        if (rng() % 3 == 0) add(text, {" ", piece()});
        SCOPED_TRACE(text);
        const grammar::Grammar gr = grammar::parse_ebnf(text);
        const CompiledGrammar counted = compile_with(gr, vocab, 1), unrolled = compile_with(gr, vocab, INT32_MAX);
        counted_grammars += num_loops(counted) > 0;
        expect_walks_exact(counted, unrolled, vocab, 300 + uint64_t(i), 4, 20);
    }
    EXPECT_GT(counted_grammars, 30);
}

TEST(CountedRepetition, DeepSeekVocabularyMaxLength) {
    auto tok = Tokenizer::from_file(std::string(DI_TOKENIZER_ASSETS_DIR) + "/deepseek-v4/tokenizer.json");
    std::shared_ptr<const TokenVocabulary> vocab = std::make_shared<TokenVocabulary>(tok, 129280, std::vector<int32_t>{1});
    const std::string schema = R"J({"type": "object", "properties": {"s": {"type": "string", "minLength": 3, "maxLength": 40},
        "t": {"type": "string", "maxLength": 20}}, "required": ["s", "t"], "additionalProperties": false})J";
    const grammar::Grammar gr = grammar::json_schema_grammar(schema, {JsonWhitespace::kFlexible, -1, false});
    const CompiledGrammar counted = compile_with(gr, vocab, 16), unrolled = compile_with(gr, vocab, INT32_MAX);
    EXPECT_EQ(num_loops(counted), 2u);
    EXPECT_LT(counted.num_states() * 4, unrolled.num_states());
    // Masks equal along random walks that fill both strings to their bounds (short tokens often).
    std::mt19937_64 rng(9);
    for (int w = 0; w < 6; ++w) {
        GrammarMatcher m(counted), u(unrolled);
        for (int step = 0; step < 80; ++step) {
            const std::vector<uint64_t> mask = mask_of(m, *vocab);
            ASSERT_EQ(mask, mask_of(u, *vocab)) << "walk " << w << " step " << step;
            std::vector<int32_t> allowed, short_ones;
            for (int32_t t = 0; t < vocab->size(); ++t)
                if (test::bit(mask, t) && t != 1) {
                    allowed.push_back(t);
                    if (vocab->impl().bytes[size_t(t)].size() <= 2) short_ones.push_back(t);
                }
            if (allowed.empty()) break;
            const auto& pool = (rng() % 3 && !short_ones.empty()) ? short_ones : allowed;
            const int32_t pick = pool[rng() % pool.size()];
            // Spot-check tokens one by one around the pick (the whole vocabulary is too slow here).
            for (int32_t t = std::max(0, pick - 200); t < std::min(vocab->size(), pick + 200); ++t) {
                GrammarMatcher copy(m);
                ASSERT_EQ(test::bit(mask, t), copy.accept_token(t)) << "walk " << w << " step " << step << " token " << t;
            }
            ASSERT_TRUE(m.accept_token(pick));
            ASSERT_TRUE(u.accept_token(pick));
        }
    }
}

}  // namespace
}  // namespace deepinfer
