// SPDX-License-Identifier: Apache-2.0
// Regex -> grammar expression (see regex.h). Recursive descent over the ECMAScript grammar.
#include "grammar/regex.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <string>

#include "deepinfer/grammar.h"
#include "grammar/text_parser.h"
#include "tokenizer/utf8.h"

namespace deepinfer::grammar {
namespace {

using Ranges = std::vector<std::pair<uint32_t, uint32_t>>;

const Ranges& digit_ranges() {
    static const Ranges r = {{'0', '9'}};
    return r;
}
const Ranges& word_ranges() {
    static const Ranges r = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
    return r;
}
const Ranges& space_ranges() {
    static const Ranges r = {{0x09, 0x0D}, {0x20, 0x20},     {0xA0, 0xA0},     {0x1680, 0x1680}, {0x2000, 0x200A},
                             {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F}, {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
    return r;
}

class RegexParser : public TextParser {
public:
    RegexParser(Grammar& g, std::string_view s, const RegexOptions& o) : TextParser(s), g_(g), o_(o) {}

    ExprId parse() {
        std::vector<ExprId> alts;
        while (true) {
            bool anchored_start = false, anchored_end = false;
            if (pos_ < s_.size() && s_[pos_] == '^') {
                anchored_start = true;
                ++pos_;
            }
            ExprId a = alternative(0, &anchored_end);
            if (o_.search) {
                const ExprId any = g_.star(char_expr({{0, 0x10FFFF}}));
                std::vector<ExprId> parts;
                if (!anchored_start) parts.push_back(any);
                parts.push_back(a);
                if (!anchored_end) parts.push_back(g_.star(char_expr({{0, 0x10FFFF}})));
                a = g_.seq(std::move(parts));
            }
            alts.push_back(a);
            if (pos_ >= s_.size()) break;
            if (s_[pos_] == '|') {
                ++pos_;
                continue;
            }
            if (s_[pos_] == ')') fail("unbalanced ')'");
            fail("unexpected character");
        }
        return g_.alt(std::move(alts));
    }

    ExprId char_expr(const Ranges& ranges) {
        if (o_.encoding == RegexEncoding::kJsonString) return json_char_expr(g_, ranges);
        if (ranges.size() == 1 && ranges[0].first == ranges[0].second) {
            std::string b;
            utf8::append_code_point(ranges[0].first, b);
            return g_.bytes(b);
        }
        return g_.char_class(ranges);
    }

private:
    [[noreturn]] void fail(const std::string& reason) const override {
        throw GrammarError("regex", "offset " + std::to_string(pos_), reason);
    }

    // `end_anchor`: non-null at the top level, where a trailing $ is allowed.
    ExprId alternative(int depth, bool* end_anchor) {
        std::vector<ExprId> items;
        while (pos_ < s_.size() && s_[pos_] != '|' && s_[pos_] != ')') {
            const char c = s_[pos_];
            if (c == '$') {
                ++pos_;
                if (end_anchor && (pos_ == s_.size() || s_[pos_] == '|')) {
                    *end_anchor = true;
                    break;
                }
                --pos_;
                fail("'$' is supported only at the end of the pattern (or of a top-level alternative)");
            }
            if (c == '^') fail("'^' is supported only at the start of the pattern (or of a top-level alternative)");
            ExprId atom_e = atom(depth);
            items.push_back(quantifier(atom_e));
        }
        return g_.seq(std::move(items));
    }

    ExprId disjunction(int depth) {
        if (depth > kMaxNesting) fail("nesting is too deep");
        std::vector<ExprId> alts = {alternative(depth, nullptr)};
        while (pos_ < s_.size() && s_[pos_] == '|') {
            ++pos_;
            alts.push_back(alternative(depth, nullptr));
        }
        return g_.alt(std::move(alts));
    }

    ExprId quantifier(ExprId e) {
        if (pos_ >= s_.size()) return e;
        const char c = s_[pos_];
        int32_t lo = 0, hi = 0;
        if (c == '*') {
            lo = 0, hi = -1;
            ++pos_;
        } else if (c == '+') {
            lo = 1, hi = -1;
            ++pos_;
        } else if (c == '?') {
            lo = 0, hi = 1;
            ++pos_;
        } else if (c == '{' && pos_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) {
            ++pos_;
            lo = hi = count();
            if (pos_ < s_.size() && s_[pos_] == ',') {
                ++pos_;
                hi = pos_ < s_.size() && s_[pos_] == '}' ? -1 : count();
            }
            if (pos_ >= s_.size() || s_[pos_] != '}') fail("expected '}' to close the quantifier");
            ++pos_;
            if (hi >= 0 && hi < lo) fail("quantifier {" + std::to_string(lo) + "," + std::to_string(hi) + "}: max below min");
        } else {
            return e;
        }
        if (pos_ < s_.size() && s_[pos_] == '?') ++pos_;  // lazy: same language
        if (pos_ < s_.size() && (s_[pos_] == '*' || s_[pos_] == '+' || s_[pos_] == '?' || s_[pos_] == '{'))
            fail("nothing to repeat");
        return g_.repeat(e, lo, hi);
    }

    // An escape after '\'; returns the class (a single code point is a one-point range).
    Ranges escape(bool in_class) {
        if (pos_ >= s_.size()) fail("pattern ends with '\\'");
        const char e = s_[pos_++];
        switch (e) {
            case 'd': return digit_ranges();
            case 'D': return normalize_ranges(digit_ranges(), true);
            case 'w': return word_ranges();
            case 'W': return normalize_ranges(word_ranges(), true);
            case 's': return space_ranges();
            case 'S': return normalize_ranges(space_ranges(), true);
            case 't': case 'n': case 'r': case 'f': case 'v': {
                const uint32_t c = *control_escape(e);
                return {{c, c}};
            }
            case '0':
                if (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) fail("octal escapes are not supported");
                return {{0, 0}};
            case 'x': {
                const uint32_t v = hex(2);
                return {{v, v}};
            }
            case 'u': {
                uint32_t v;
                if (pos_ < s_.size() && s_[pos_] == '{') {
                    ++pos_;
                    v = 0;
                    int n = 0;
                    while (pos_ < s_.size() && s_[pos_] != '}') {
                        v = v * 16 + hex(1);
                        if (++n > 6) fail("\\u{...} escape is too long");
                    }
                    if (pos_ >= s_.size() || n == 0) fail("unterminated \\u{...} escape");
                    ++pos_;
                } else {
                    v = hex(4);
                    // A surrogate pair written as two \u escapes.
                    if (v >= 0xD800 && v <= 0xDBFF && s_.compare(pos_, 2, "\\u") == 0) {
                        const size_t save = pos_;
                        pos_ += 2;
                        const uint32_t lo = hex(4);
                        if (lo >= 0xDC00 && lo <= 0xDFFF) v = 0x10000 + ((v - 0xD800) << 10) + (lo - 0xDC00);
                        else pos_ = save;
                    }
                }
                scalar_value(v);
                return {{v, v}};
            }
            case 'c': {
                if (pos_ >= s_.size() || !std::isalpha(static_cast<unsigned char>(s_[pos_]))) fail("invalid \\c escape");
                const uint32_t v = uint32_t(s_[pos_++]) % 32;
                return {{v, v}};
            }
            case 'b':
                if (in_class) return {{8, 8}};
                --pos_;
                fail("word boundaries (\\b) are not supported");
            case 'B': --pos_; fail("word boundaries (\\B) are not supported");
            case 'p': case 'P': --pos_; fail("Unicode property escapes (\\p{...}) are not supported");
            case 'k': --pos_; fail("named backreferences are not supported");
            default:
                if (std::isdigit(static_cast<unsigned char>(e))) {
                    --pos_;
                    fail("backreferences are not supported");
                }
                if (std::isalnum(static_cast<unsigned char>(e))) {
                    --pos_;
                    fail(std::string("unknown escape '\\") + e + "'");
                }
                --pos_;
                {
                    const uint32_t cp = utf8_char();
                    return {{cp, cp}};
                }
        }
    }

    // One member of a class: a character or an escape (a class escape such as \d is several ranges).
    Ranges class_member() {
        if (!at('\\')) {
            const uint32_t cp = utf8_char();
            return {{cp, cp}};
        }
        ++pos_;
        return escape(true);
    }

    ExprId char_class_expr() {
        const bool negated = class_start();
        Ranges ranges;
        while (true) {
            if (pos_ >= s_.size()) fail("unterminated character class");
            if (s_[pos_] == ']') break;
            const Ranges lo = class_member();
            if (lo.size() == 1 && lo[0].first == lo[0].second && pos_ + 1 < s_.size() && s_[pos_] == '-' && s_[pos_ + 1] != ']') {
                ++pos_;
                const Ranges hi = class_member();
                if (hi.size() != 1 || hi[0].first != hi[0].second) fail("a class escape cannot end a range");
                if (hi[0].first < lo[0].first) fail("character class range out of order");
                ranges.emplace_back(lo[0].first, hi[0].first);
            } else {
                ranges.insert(ranges.end(), lo.begin(), lo.end());
            }
        }
        ++pos_;
        Ranges norm = normalize_ranges(std::move(ranges), negated);
        if (norm.empty()) return g_.alt({});  // matches nothing
        return char_expr(norm);
    }

    ExprId atom(int depth) {
        const char c = s_[pos_];
        switch (c) {
            case '(': {
                ++pos_;
                if (s_.compare(pos_, 2, "?:") == 0) {
                    pos_ += 2;
                } else if (s_.compare(pos_, 2, "?=") == 0 || s_.compare(pos_, 2, "?!") == 0 ||
                           s_.compare(pos_, 3, "?<=") == 0 || s_.compare(pos_, 3, "?<!") == 0) {
                    fail("lookaround assertions are not supported");
                } else if (s_.compare(pos_, 2, "?<") == 0) {
                    pos_ += 2;
                    while (pos_ < s_.size() && s_[pos_] != '>') ++pos_;
                    if (pos_ >= s_.size()) fail("unterminated group name");
                    ++pos_;
                } else if (pos_ < s_.size() && s_[pos_] == '?') {
                    fail("unsupported group syntax '(?'");
                }
                const ExprId e = disjunction(depth + 1);
                if (pos_ >= s_.size() || s_[pos_] != ')') fail("missing ')'");
                ++pos_;
                return e;
            }
            case '[': return char_class_expr();
            case '.': ++pos_; return char_expr(normalize_ranges({{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}}, true));
            case '\\': {
                ++pos_;
                return char_expr(escape(false));
            }
            case '*': case '+': case '?': fail("nothing to repeat");
            case '{':
                if (pos_ + 1 < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_ + 1]))) fail("nothing to repeat");
                ++pos_;
                return char_expr({{'{', '{'}});
            case ']': case '}': ++pos_; return char_expr({{uint32_t(c), uint32_t(c)}});
            default: {
                const uint32_t cp = utf8_char();
                return char_expr({{cp, cp}});
            }
        }
    }

    Grammar& g_;
    RegexOptions o_;
};

}  // namespace

ExprId json_char_expr(Grammar& g, const Ranges& ranges) {
    Ranges plain;
    std::vector<ExprId> alts;
    for (const auto& [a, b] : ranges)
        for (uint32_t lo = a; lo <= b;) {
            // Pieces: controls (escaped), '"' and '\' (escaped), the rest raw.
            if (lo < 0x20) {
                const uint32_t hi = std::min<uint32_t>(b, 0x1F);
                for (uint32_t c = lo; c <= hi; ++c) {
                    std::string esc;
                    switch (c) {
                        case '\b': esc = "\\b"; break;
                        case '\f': esc = "\\f"; break;
                        case '\n': esc = "\\n"; break;
                        case '\r': esc = "\\r"; break;
                        case '\t': esc = "\\t"; break;
                        default: {
                            char buf[8];
                            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
                            esc = buf;
                        }
                    }
                    alts.push_back(g.bytes(esc));
                }
                lo = hi + 1;
                continue;
            }
            if (lo <= '"' && b >= '"') {
                if (lo < '"') plain.emplace_back(lo, '"' - 1);
                alts.push_back(g.bytes("\\\""));
                lo = '"' + 1;
                continue;
            }
            if (lo <= '\\' && b >= '\\') {
                if (lo < '\\') plain.emplace_back(lo, '\\' - 1);
                alts.push_back(g.bytes("\\\\"));
                lo = '\\' + 1;
                continue;
            }
            const uint32_t hi = lo < '"' ? std::min<uint32_t>(b, '"' - 1) : lo < '\\' ? std::min<uint32_t>(b, '\\' - 1) : b;
            plain.emplace_back(lo, hi);
            if (hi == 0xFFFFFFFFu) break;
            lo = hi + 1;
        }
    if (!plain.empty()) {
        if (plain.size() == 1 && plain[0].first == plain[0].second) {
            std::string s;
            utf8::append_code_point(plain[0].first, s);
            alts.push_back(g.bytes(s));
        } else {
            alts.push_back(g.char_class(plain));
        }
    }
    return g.alt(std::move(alts));
}

ExprId regex_to_expr(Grammar& g, std::string_view regex, const RegexOptions& options) {
    return RegexParser(g, regex, options).parse();
}

Grammar regex_grammar(std::string_view regex) {
    Grammar g;
    const ExprId e = regex_to_expr(g, regex, {});
    g.set_root(g.add_rule("root", e));
    return g;
}

}  // namespace deepinfer::grammar
