// SPDX-License-Identifier: Apache-2.0
// Mask exactness: at random reachable states, the mask (cached accepted sets + re-checked
// uncertain tokens + EOS) equals the brute-force set of tokens the matcher accepts one by one.
#include <gtest/gtest.h>

#include <filesystem>

#include "deepinfer/tokenizer.h"
#include "test_util.h"

namespace deepinfer {
namespace {

// Random walk: at each step compare the mask with brute force, then take a random allowed token.
void check_walks(const CompiledGrammar& g, const TokenVocabulary& vocab, int num_walks, int num_steps, uint64_t seed,
                 bool full_brute_force = true, std::vector<int32_t> probe = {}) {
    std::mt19937_64 rng(seed);
    std::vector<uint64_t> mask(size_t(vocab.bitmask_words()));
    for (int w = 0; w < num_walks; ++w) {
        GrammarMatcher m(g);
        for (int step = 0; step < num_steps; ++step) {
            const int64_t count = m.fill_next_token_bitmask(mask);
            std::vector<int32_t> allowed;
            auto check = [&](int32_t t) {
                GrammarMatcher copy(m);
                const bool ok = copy.accept_token(t);
                ASSERT_EQ(test::bit(mask, t), ok) << "walk " << w << " step " << step << " token " << t;
            };
            if (full_brute_force) {
                for (int32_t t = 0; t < vocab.size(); ++t) check(t);
            } else {
                for (int32_t t : probe) check(t);
            }
            for (int32_t t = 0; t < vocab.size(); ++t)
                if (test::bit(mask, t)) allowed.push_back(t);
            ASSERT_EQ(count, static_cast<int64_t>(allowed.size()));
            ASSERT_FALSE(allowed.empty()) << "dead end at step " << step;
            const int32_t pick = allowed[rng() % allowed.size()];
            ASSERT_TRUE(m.accept_token(pick));
            if (m.is_terminated()) break;
        }
    }
}

TEST(MaskExactness, SmallGrammarsSmallVocabulary) {
    auto vocab = test::small_vocab("ab,{}[]\":0123 -.", 300, 7, 6);
    GrammarCompiler compiler(vocab);
    const std::vector<std::string> grammars = {
        R"J(root ::= "a"* "b" | "ab"+ )J",
        R"J(root ::= "[" (num ("," num)*)? "]"
           num ::= "-"? [0-9]+ ("." [0-9]+)?)J",
        R"J(root ::= value
           value ::= "{" ws (pair ("," ws pair)*)? "}" | "[" ws (value ("," ws value)*)? "]" | "\"" [ab]* "\"" | [0-9]+
           pair ::= "\"" [ab]* "\"" ws ":" ws value
           ws ::= " "?)J",
        R"J(root ::= e
           e ::= e "-" t | t
           t ::= "a" | "(" e ")" | empty "b"
           empty ::= "")J",
        R"J(root ::= x x x
           x ::= "a" | "" | "b" x)J",
        R"J(root ::= [0-3]{2,5} ("." | ",") [ab]{0,3})J",
    };
    uint64_t seed = 11;
    for (const std::string& text : grammars) {
        SCOPED_TRACE(text);
        auto g = compiler.compile_ebnf(text);
        check_walks(g, *vocab, 6, 25, seed++);
    }
}

TEST(MaskExactness, JsonSchemaSmallVocabulary) {
    auto vocab = test::small_vocab("abc,{}[]\":0123 -.truefalsn\\", 400, 3, 7);
    GrammarCompiler compiler(vocab);
    const std::vector<std::string> schemas = {
        R"J({"type": "object", "properties": {"a": {"type": "integer", "minimum": -3, "maximum": 120},
            "b": {"type": "array", "items": {"type": "string", "maxLength": 3}, "maxItems": 2}},
            "required": ["a"]})J",
        R"J({"anyOf": [{"type": "number"}, {"type": "boolean"}, {"type": "null"}, {"enum": ["a", "b\""]}]})J",
        R"J({"$defs": {"t": {"type": "object", "properties": {"n": {"type": "string"}, "c": {"type": "array", "items": {"$ref": "#/$defs/t"}}}, "required": ["n"]}},
            "$ref": "#/$defs/t"})J",
    };
    uint64_t seed = 21;
    for (const std::string& s : schemas) {
        SCOPED_TRACE(s);
        for (JsonWhitespace ws : {JsonWhitespace::kCompact, JsonWhitespace::kFlexible}) {
            auto g = compiler.compile_json_schema(s, {ws, 2, true});
            check_walks(g, *vocab, 5, 30, seed++);
        }
    }
}

// The real DeepSeek vocabulary (129,280 ids, multi-byte tokens, added tokens excluded).
TEST(MaskExactness, DeepSeekVocabularyJsonSchema) {
    const std::string path = std::string(DI_TOKENIZER_ASSETS_DIR) + "/deepseek-v4/tokenizer.json";
    Tokenizer tok = Tokenizer::from_file(path);
    auto vocab = std::make_shared<TokenVocabulary>(tok, 129280, std::vector<int32_t>{1});
    GrammarCompiler compiler(vocab);
    auto g = compiler.compile_json_schema(R"J({"type": "object", "properties": {
        "name": {"type": "string"}, "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "tags": {"type": "array", "items": {"enum": ["x", "y z"]}}, "ok": {"type": "boolean"}},
        "required": ["name", "age"]})J");
    // Full brute force over the 129,280 ids at a few states of a couple of walks.
    check_walks(g, *vocab, 2, 6, 5);
    auto r = compiler.compile_regex("[A-Z][a-z]{1,8}( [A-Z][a-z]{1,8})?\\.");
    check_walks(r, *vocab, 2, 4, 9);
}

}  // namespace
}  // namespace deepinfer
