// SPDX-License-Identifier: Apache-2.0
// Front ends and the matcher on whole strings: EBNF features, regex against std::regex (an
// independent ECMAScript implementation), error positions, rollback, the compile cache.
#include <gtest/gtest.h>

#include <regex>

#include "grammar/ebnf.h"
#include "grammar/regex.h"
#include "test_util.h"

namespace deepinfer {
namespace {

using test::accepts;
using test::prefix_ok;

struct Fixture : ::testing::Test {
    std::shared_ptr<TokenVocabulary> vocab = test::small_vocab("abc01()[]{}\",: -+.xyz\n\\é", 40, 1);
    GrammarCompiler compiler{vocab};
};

TEST_F(Fixture, EbnfLiteralsClassesRepetitionAndRecursion) {
    auto g = compiler.compile_ebnf(R"J(
        # balanced parentheses around a number list
        root ::= "(" root ")" | list
        list ::= num ("," " "? num)*
        num  ::= "-"? [0-9]+ ("." [0-9]{1,2})?
    )J");
    EXPECT_TRUE(accepts(g, "1"));
    EXPECT_TRUE(accepts(g, "((1, -2.5,3))"));
    EXPECT_TRUE(accepts(g, "0.12"));
    EXPECT_FALSE(accepts(g, "0.123"));
    EXPECT_FALSE(accepts(g, "((1)"));
    EXPECT_TRUE(prefix_ok(g, "((1"));
    EXPECT_FALSE(prefix_ok(g, "(a"));
    EXPECT_FALSE(accepts(g, ""));
}

TEST_F(Fixture, EbnfLeftRecursionEmptyRulesAndUnicode) {
    auto g = compiler.compile_ebnf(R"J(
        root ::= expr
        expr ::= expr "+" term | term
        term ::= opt "x" | [é-ê] | "\u00e9\x41"
        opt  ::= "" | "y"
    )J");
    EXPECT_TRUE(accepts(g, "x+yx+x"));
    EXPECT_TRUE(accepts(g, "\xC3\xA9+x"));
    EXPECT_TRUE(accepts(g, "\xC3\xA9" "A"));
    EXPECT_FALSE(accepts(g, "x+"));
    EXPECT_FALSE(accepts(g, "+x"));
    EXPECT_FALSE(prefix_ok(g, "\xC3\xAB"));  // U+00EB is outside [é-ê]
}

TEST_F(Fixture, EbnfNegatedClassAndBoundedRepeat) {
    auto g = compiler.compile_ebnf(R"J(root ::= "\"" [^"\\]{0,3} "\"")J");
    EXPECT_TRUE(accepts(g, "\"\""));
    EXPECT_TRUE(accepts(g, "\"a\xC3\xA9" "b\""));
    EXPECT_FALSE(accepts(g, "\"abcd\""));
    EXPECT_FALSE(prefix_ok(g, "\"\\"));
}

TEST_F(Fixture, EbnfErrorsNamePositionAndReason) {
    auto expect_error = [&](const std::string& text, const std::string& where, const std::string& reason_part) {
        try {
            compiler.compile_ebnf(text);
            ADD_FAILURE() << "no error for " << text;
        } catch (const GrammarError& e) {
            EXPECT_EQ(e.source(), "ebnf") << text;
            EXPECT_EQ(e.where(), where) << text << " -> " << e.what();
            EXPECT_NE(e.reason().find(reason_part), std::string::npos) << e.reason();
        }
    };
    expect_error("root ::= \"a\" b", "line 1, column 14", "'b' is used but never defined");
    expect_error("root ::= \"a", "line 1, column 12", "unterminated string literal");
    expect_error("root ::= ( \"a\"\n", "line 2, column 1", "expected ')'");
    expect_error("start ::= \"a\"", "line 1, column 1", "no root rule 'root'");
    expect_error("root ::= \"a\"{3,1}", "line 1, column 17", "max below min");
    expect_error("root ::= [b-a]", "line 1, column 14", "out of order");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1", "defined twice");
    // The readers shared with the regex front end: escapes, counts, UTF-8.
    expect_error("root ::= \"\\u12\"", "line 1, column 15", "expected 4 hex digits");
    expect_error("root ::= \"\\ud800\"", "line 1, column 17", "not a Unicode scalar value");
    expect_error("root ::= \"a\"{10001}", "line 1, column 18", "repetition count above 10000");
    expect_error("root ::= \"\xC0\xAF\"", "line 1, column 11", "invalid UTF-8");
    expect_error("root ::= [\xED\xA0\x80]", "line 1, column 11", "invalid UTF-8");
    try {
        compiler.compile_ebnf("root ::= x\nx ::= x \"a\"");
        ADD_FAILURE() << "no error for an empty language";
    } catch (const GrammarError& e) {
        EXPECT_EQ(e.source(), "grammar");
        EXPECT_EQ(e.where(), "rule 'root'");
        EXPECT_NE(e.reason().find("admits no complete output"), std::string::npos);
    }
}

// Regex against std::regex (ECMAScript) on every string over a small alphabet up to length 5.
TEST_F(Fixture, RegexMatchesStdRegex) {
    const std::vector<std::string> patterns = {
        "a*b?", "(ab|c)+", "[a-c]{2,3}", "a(b|)c*", "[^a]x?", "(a|b)*c(a|b)*", "\\d+(\\.\\d{1,2})?",
        "x{0,2}y*z", "(a(b(c)?)?)*", "[abc]+?c", "(?:a|bc){2}", "[\\d,]+", ".a", "a|b|", "\\(a\\)"};
    const std::string alphabet = "abcxyz01.,()";
    std::vector<std::string> strings = {""};
    for (size_t len = 1, begin = 0; len <= 4; ++len) {
        const size_t end = strings.size();
        for (size_t i = begin; i < end; ++i)
            for (char c : alphabet) strings.push_back(strings[i] + c);
        begin = end;
    }
    for (const std::string& p : patterns) {
        auto g = compiler.compile_regex(p);
        const std::regex re(p, std::regex::ECMAScript);
        for (const std::string& s : strings)
            ASSERT_EQ(accepts(g, s), std::regex_match(s, re)) << "pattern " << p << " string '" << s << "'";
    }
}

TEST_F(Fixture, RegexSearchSemanticsAndJsonEncoding) {
    // A schema pattern matches anywhere in the string (search), on the decoded JSON string.
    auto s = compiler.compile_json_schema(R"J({"type": "string", "pattern": "b\"c"})J", {JsonWhitespace::kCompact, 0, true});
    EXPECT_TRUE(accepts(s, "\"ab\\\"cx\""));
    EXPECT_TRUE(accepts(s, "\"b\\\"c\""));
    EXPECT_FALSE(accepts(s, "\"b\"c\""));
    EXPECT_FALSE(accepts(s, "\"abc\""));
    auto anchored = compiler.compile_json_schema(R"J({"type": "string", "pattern": "^a+$"})J", {JsonWhitespace::kCompact, 0, true});
    EXPECT_TRUE(accepts(anchored, "\"aa\""));
    EXPECT_FALSE(accepts(anchored, "\"ba\""));
}

TEST_F(Fixture, RegexErrorsNameOffsetAndReason) {
    auto expect_error = [&](const std::string& p, const std::string& where, const std::string& reason_part) {
        try {
            compiler.compile_regex(p);
            ADD_FAILURE() << "no error for " << p;
        } catch (const GrammarError& e) {
            EXPECT_EQ(e.source(), "regex");
            EXPECT_EQ(e.where(), where) << p << " -> " << e.what();
            EXPECT_NE(e.reason().find(reason_part), std::string::npos) << e.reason();
        }
    };
    expect_error("a(b", "offset 3", "missing ')'");
    expect_error("ab)", "offset 2", "unbalanced ')'");
    expect_error("a(?=b)", "offset 2", "lookaround");
    expect_error("(a)\\1", "offset 4", "backreferences");
    expect_error("*a", "offset 0", "nothing to repeat");
    expect_error("a{2,1}", "offset 6", "max below min");
    expect_error("[z-a]", "offset 4", "out of order");
    expect_error("\\p{L}", "offset 1", "Unicode property");
    expect_error("a\\bc", "offset 2", "word boundaries");
    expect_error("a^b", "offset 1", "'^' is supported only");
    expect_error("\\x4", "offset 3", "expected 2 hex digits");
    expect_error("\\udfff", "offset 6", "not a Unicode scalar value");
    expect_error("a{20000}", "offset 6", "repetition count above 10000");
    expect_error("a\xC0\xAF", "offset 1", "invalid UTF-8");
    expect_error("[a-\xF0\x9F]", "offset 3", "invalid UTF-8");
}

TEST_F(Fixture, RollbackRestoresTheState) {
    auto g = compiler.compile_ebnf(R"J(root ::= "ab" "c"* "x")J");
    GrammarMatcher m(g);
    // Tokens are single bytes here: 'a' has id 1 + index in the alphabet.
    const std::string alphabet = "abc01()[]{}\",: -+.xyz\n\\é";
    auto id = [&](char c) { return int32_t(1 + alphabet.find(c)); };
    ASSERT_TRUE(m.accept_token(id('a')));
    ASSERT_TRUE(m.accept_token(id('b')));
    ASSERT_TRUE(m.accept_token(id('c')));
    EXPECT_FALSE(m.accept_token(id('a')));
    m.rollback(2);
    EXPECT_FALSE(m.accept_token(id('c')));
    ASSERT_TRUE(m.accept_token(id('b')));
    ASSERT_TRUE(m.accept_token(id('x')));
    EXPECT_TRUE(m.can_end());
    EXPECT_TRUE(m.accept_token(0));
    EXPECT_TRUE(m.is_terminated());
    m.rollback(1);
    EXPECT_FALSE(m.is_terminated());
    EXPECT_EQ(m.num_accepted_tokens(), 3);
}

TEST_F(Fixture, CompileCacheReturnsTheSameGrammar) {
    auto a = compiler.compile_regex("a+b");
    auto b = compiler.compile_regex("a+b");
    EXPECT_EQ(&a.impl(), &b.impl());
    EXPECT_EQ(compiler.cache_hits(), 1);
    auto c = compiler.compile_regex("a+c");
    EXPECT_NE(&a.impl(), &c.impl());
}

}  // namespace
}  // namespace deepinfer
