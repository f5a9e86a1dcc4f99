// SPDX-License-Identifier: Apache-2.0
// EBNF parser: recursive descent over the text, one rule per `name ::= expression`. A rule ends
// where the next `name ::=` begins, so rules may span lines freely.
#include "grammar/ebnf.h"

#include <cctype>
#include <cstdint>
#include <string>

#include "deepinfer/grammar.h"
#include "grammar/text_parser.h"
#include "tokenizer/utf8.h"

namespace deepinfer::grammar {
namespace {

class EbnfParser : public TextParser {
public:
    explicit EbnfParser(std::string_view t) : TextParser(t) {}

    Grammar parse(std::string_view root) {
        skip_ws();
        if (pos_ >= s_.size()) fail("the grammar is empty");
        while (pos_ < s_.size()) {
            const size_t name_pos = pos_;
            std::string name = identifier();
            if (name.empty()) fail("expected a rule name");
            skip_ws();
            if (s_.compare(pos_, 3, "::=") != 0) fail("expected '::=' after the rule name '" + name + "'");
            pos_ += 3;
            const int32_t r = g_.declare(name);
            if (g_.rules()[size_t(r)].body >= 0) {
                pos_ = name_pos;
                fail("rule '" + name + "' is defined twice");
            }
            defined_.push_back(r);
            const ExprId body = alternatives(0);
            g_.define(r, body);
            skip_ws();
        }
        for (size_t r = 0; r < g_.rules().size(); ++r)
            if (g_.rules()[r].body < 0) {
                pos_ = first_use_[r];
                fail("rule '" + g_.rules()[r].name + "' is used but never defined");
            }
        const int32_t root_id = g_.find_rule(root);
        if (root_id < 0) {
            pos_ = 0;
            fail("no root rule '" + std::string(root) + "'");
        }
        g_.set_root(root_id);
        return std::move(g_);
    }

private:
    [[noreturn]] void fail(const std::string& reason) const override {
        size_t line = 1, col = 1;
        for (size_t i = 0; i < pos_ && i < s_.size(); ++i) {
            if (s_[i] == '\n') {
                ++line;
                col = 1;
            } else {
                ++col;
            }
        }
        throw GrammarError("ebnf", "line " + std::to_string(line) + ", column " + std::to_string(col), reason);
    }

    void skip_ws() {
        while (pos_ < s_.size()) {
            const char c = s_[pos_];
            if (c == ' ' || c == '\t' || c == '\n' || c == '\r') ++pos_;
            else if (c == '#') {
                while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
            } else break;
        }
    }

    static bool ident_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
    static bool ident_char(char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
    }

    std::string identifier() {
        const size_t b = pos_;
        if (pos_ < s_.size() && ident_start(s_[pos_]))
            while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
        return std::string(s_.substr(b, pos_ - b));
    }

    // True if a `name ::=` starts here (the end of the current rule).
    bool at_rule_start() {
        const size_t save = pos_;
        const std::string name = identifier();
        skip_ws();
        const bool yes = !name.empty() && s_.compare(pos_, 3, "::=") == 0;
        pos_ = save;
        return yes;
    }

    ExprId alternatives(int depth) {
        if (depth > kMaxNesting) fail("nesting is too deep");
        std::vector<ExprId> alts = {sequence(depth)};
        skip_ws();
        while (pos_ < s_.size() && s_[pos_] == '|') {
            ++pos_;
            alts.push_back(sequence(depth));
            skip_ws();
        }
        return g_.alt(std::move(alts));
    }

    ExprId sequence(int depth) {
        std::vector<ExprId> items;
        while (true) {
            skip_ws();
            if (pos_ >= s_.size()) break;
            const char c = s_[pos_];
            if (c == '|' || c == ')') break;
            if (ident_start(c) && at_rule_start()) break;
            items.push_back(postfix(primary(depth), depth));
        }
        return g_.seq(std::move(items));
    }

    ExprId postfix(ExprId e, int depth) {
        while (pos_ < s_.size()) {
            const char c = s_[pos_];
            if (c == '*') e = g_.star(e);
            else if (c == '+') e = g_.plus(e);
            else if (c == '?') e = g_.opt(e);
            else if (c == '{') {
                ++pos_;
                skip_ws();
                const int32_t lo = count();
                int32_t hi = lo;
                skip_ws();
                if (pos_ < s_.size() && s_[pos_] == ',') {
                    ++pos_;
                    skip_ws();
                    hi = pos_ < s_.size() && s_[pos_] == '}' ? -1 : count();
                    skip_ws();
                }
                if (pos_ >= s_.size() || s_[pos_] != '}') fail("expected '}' to close the repetition");
                if (hi >= 0 && hi < lo) fail("repetition {" + std::to_string(lo) + "," + std::to_string(hi) + "}: max below min");
                e = g_.repeat(e, lo, hi);
            } else break;
            ++pos_;
        }
        (void)depth;
        return e;
    }

    // One character of a literal or class (after an optional backslash); `raw_byte` is set for \x.
    uint32_t escaped_char(bool& raw_byte) {
        raw_byte = false;
        if (pos_ >= s_.size()) fail("unterminated literal");
        if (s_[pos_] != '\\') return utf8_char();
        ++pos_;
        if (pos_ >= s_.size()) fail("unterminated escape");
        const char e = s_[pos_++];
        if (const auto c = control_escape(e)) return *c;
        switch (e) {
            case 'b': return '\b';
            case 'a': return '\a';
            case 'e': return 0x1B;
            case '0': return 0;
            case 'x': raw_byte = true; return hex(2);
            case 'u': return scalar_value(hex(4));
            case 'U': return scalar_value(hex(8));
            case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.':
            case '(': case ')': case '|': case '*': case '+': case '?': case '{': case '}':
                return static_cast<unsigned char>(e);
            default: --pos_; fail(std::string("unknown escape '\\") + e + "'");
        }
    }

    ExprId primary(int depth) {
        const char c = s_[pos_];
        if (c == '(') {
            ++pos_;
            const ExprId e = alternatives(depth + 1);
            skip_ws();
            if (pos_ >= s_.size() || s_[pos_] != ')') fail("expected ')'");
            ++pos_;
            return e;
        }
        if (c == '"' || c == '\'') {
            ++pos_;
            std::string lit;
            while (true) {
                if (pos_ >= s_.size()) fail("unterminated string literal");
                if (s_[pos_] == c) break;
                bool raw = false;
                const uint32_t cp = escaped_char(raw);
                if (raw || cp < 0x80) lit.push_back(static_cast<char>(cp));
                else utf8::append_code_point(cp, lit);
            }
            ++pos_;
            return g_.bytes(lit);
        }
        if (c == '[') return char_class();
        if (c == '.') {
            ++pos_;
            return g_.char_class({{0, 0x10FFFF}});
        }
        if (ident_start(c)) {
            const size_t at = pos_;
            const std::string name = identifier();
            const int32_t r = g_.declare(name);
            if (first_use_.size() <= size_t(r)) first_use_.resize(size_t(r) + 1, SIZE_MAX);
            if (first_use_[size_t(r)] == SIZE_MAX) first_use_[size_t(r)] = at;
            return g_.ref(r);
        }
        fail(std::string("unexpected character '") + c + "'");
    }

    ExprId char_class() {
        const bool negated = class_start();
        std::vector<std::pair<uint32_t, uint32_t>> ranges;
        bool any_raw = false, any_cp = false;
        while (true) {
            if (pos_ >= s_.size()) fail("unterminated character class");
            if (s_[pos_] == ']') break;
            bool raw = false;
            const uint32_t lo = escaped_char(raw);
            (raw ? any_raw : any_cp) = true;
            uint32_t hi = lo;
            if (pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
                ++pos_;
                bool raw2 = false;
                hi = escaped_char(raw2);
                (raw2 ? any_raw : any_cp) = true;
                if (hi < lo) fail("character range is out of order");
            }
            ranges.emplace_back(lo, hi);
        }
        ++pos_;
        // \xHH in a class means the byte when every member is a byte (e.g. [\x80-\xBF]); else a code point.
        if (any_raw && !any_cp) {
            bool all_high = false;
            for (auto& r : ranges) all_high |= r.second >= 0x80;
            if (all_high) {
                if (negated) return g_.byte_class(normalize_ranges(std::move(ranges), true, 255, false));
                return g_.byte_class(std::move(ranges));
            }
        }
        return g_.char_class(std::move(ranges), negated);
    }

    Grammar g_;
    std::vector<int32_t> defined_;
    std::vector<size_t> first_use_;
};

}  // namespace

Grammar parse_ebnf(std::string_view text, std::string_view root_rule) { return EbnfParser(text).parse(root_rule); }

}  // namespace deepinfer::grammar
