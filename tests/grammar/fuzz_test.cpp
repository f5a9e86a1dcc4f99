// SPDX-License-Identifier: Apache-2.0
// Fuzzing the front ends with random and mutated inputs: every input either compiles or raises
// GrammarError (never another exception, a crash or a hang), within a time bound; compiled
// grammars also survive a short random walk.
#include <gtest/gtest.h>

#include <chrono>

#include "test_util.h"

namespace deepinfer {
namespace {

std::string mutate(std::string s, std::mt19937_64& rng, const std::string& alphabet) {
    const int edits = 1 + int(rng() % 4);
    for (int i = 0; i < edits; ++i) {
        const size_t pos = s.empty() ? 0 : rng() % (s.size() + 1);
        switch (rng() % 4) {
            case 0: s.insert(pos, 1, alphabet[rng() % alphabet.size()]); break;
            case 1:
                if (pos < s.size()) s.erase(pos, 1 + rng() % 3);
                break;
            case 2:
                if (pos < s.size()) s[pos] = alphabet[rng() % alphabet.size()];
                break;
            default:
                if (pos < s.size()) s.insert(pos, s.substr(pos, rng() % 8));
        }
    }
    return s;
}

void run_fuzz(const std::vector<std::string>& seeds, const std::string& alphabet, uint64_t seed, int iterations,
              const std::function<CompiledGrammar(const std::string&)>& compile, const TokenVocabulary& vocab) {
    std::mt19937_64 rng(seed);
    int compiled = 0, errors = 0;
    std::vector<uint64_t> mask(size_t(vocab.bitmask_words()));
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < iterations; ++i) {
        std::string input;
        if (i % 4 == 0) {  // fully random
            const size_t n = rng() % 40;
            for (size_t k = 0; k < n; ++k) input.push_back(alphabet[rng() % alphabet.size()]);
        } else {
            input = mutate(seeds[rng() % seeds.size()], rng, alphabet);
        }
        const auto t1 = std::chrono::steady_clock::now();
        try {
            CompiledGrammar g = compile(input);
            ++compiled;
            GrammarMatcher m(g);
            for (int step = 0; step < 12; ++step) {
                const int64_t n = m.fill_next_token_bitmask(mask);
                ASSERT_GT(n, 0) << "dead end in a compiled grammar: " << input;
                std::vector<int32_t> allowed;
                for (int32_t t = 0; t < vocab.size(); ++t)
                    if (test::bit(mask, t)) allowed.push_back(t);
                ASSERT_TRUE(m.accept_token(allowed[rng() % allowed.size()]));
                if (m.is_terminated()) break;
            }
        } catch (const GrammarError& e) {
            ++errors;
            ASSERT_FALSE(e.reason().empty());
        }
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count();
        ASSERT_LT(secs, 2.0) << "slow input: " << input;
    }
    EXPECT_GT(compiled, iterations / 20);
    EXPECT_GT(errors, iterations / 20);
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 60.0);
}

std::shared_ptr<TokenVocabulary> byte_vocab() {
    std::vector<std::string> toks = {"<eos>"};
    for (int b = 1; b < 256; ++b) toks.emplace_back(1, char(b));
    for (const char* s : {"ab", "\":", "\",\"", "{\"", "true", "12", "\\u00", "]}"}) toks.emplace_back(s);
    return std::make_shared<TokenVocabulary>(std::move(toks), std::vector<int32_t>{0});
}

TEST(Fuzz, Ebnf) {
    auto vocab = byte_vocab();
    GrammarCompiler compiler(vocab, 8);
    const std::vector<std::string> seeds = {
        "root ::= \"a\" b* | [x-z]{2,4}\nb ::= \"(\" root \")\"",
        "root ::= item+\nitem ::= [^\\n]{1,3} \"\\n\" | \"\\u00e9\"?",
        "root ::= (\"x\" | y)* y\ny ::= [0-9] | \"\"",
        "root ::= a\na ::= a \"+\" a | \"1\"",
        "root ::= [a-c\"]{3,40} (\",\" [0-9]{1,12})?"};
    run_fuzz(seeds, "root::=ab|()[]{}*+?\"\\^-0129,xyz \n#.'u", 101, 600,
             [&](const std::string& s) { return compiler.compile_ebnf(s); }, *vocab);
}

TEST(Fuzz, Regex) {
    auto vocab = byte_vocab();
    GrammarCompiler compiler(vocab, 8);
    const std::vector<std::string> seeds = {"^[a-z]+(\\.[a-z]+)*@x\\.com$", "(ab|c{2,3})*d?", "\\d{3}-\\w+\\s?",
                                            "[^\\]x-]+|(?:y|z){0,5}", "\\u00e9.\\x41[\\u{1F600}-\\u{1F64F}]"};
    run_fuzz(seeds, "ab()[]{}|*+?^$\\.-,0123dwsuxyz:!=<>", 202, 800,
             [&](const std::string& s) { return compiler.compile_regex(s); }, *vocab);
}

TEST(Fuzz, JsonSchema) {
    auto vocab = byte_vocab();
    GrammarCompiler compiler(vocab, 8);
    const std::vector<std::string> seeds = {
        R"J({"type": "object", "properties": {"a": {"type": "integer", "minimum": 1}, "b": {"type": "array", "items": {"type": "string"}, "maxItems": 3}}, "required": ["a"]})J",
        R"J({"anyOf": [{"type": "string", "pattern": "^x+$"}, {"enum": [1, "two", null]}]})J",
        R"J({"$defs": {"n": {"type": "object", "properties": {"k": {"$ref": "#/$defs/n"}}}}, "$ref": "#/$defs/n"})J",
        R"J({"type": ["number", "null"], "exclusiveMaximum": 10.5, "minimum": -2})J",
        R"J({"allOf": [{"properties": {"x": {"type": "boolean"}}}, {"required": ["x"]}], "type": "object"})J",
        R"J({"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 30}, "t": {"type": "string", "maxLength": 4}}})J"};
    run_fuzz(seeds, "{}[]\":,0123456789 -.abcdefghijklmnopqrstuvwxyz$#/", 303, 800,
             [&](const std::string& s) { return compiler.compile_json_schema(s, {JsonWhitespace::kFlexible, 3, true}); }, *vocab);
}

}  // namespace
}  // namespace deepinfer
