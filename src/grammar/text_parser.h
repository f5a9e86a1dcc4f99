// SPDX-License-Identifier: Apache-2.0
// What the EBNF and regex front ends share: a cursor over the constraint's text with the readers
// of hex digits, UTF-8 characters, repetition counts and the control-character escapes. Each front
// end says how an error at the cursor is reported (line and column, or offset).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace deepinfer::grammar {

inline constexpr int32_t kMaxRepeatCount = 10000;  // {m,n} bounds in EBNF and regexes
inline constexpr int kMaxNesting = 200;            // parenthesised groups

class TextParser {
public:
    virtual ~TextParser() = default;

protected:
    explicit TextParser(std::string_view text) : s_(text) {}
    // Throws GrammarError for `reason` at the cursor.
    [[noreturn]] virtual void fail(const std::string& reason) const = 0;

    bool at(char c) const { return pos_ < s_.size() && s_[pos_] == c; }
    // Exactly n hex digits.
    uint32_t hex(int n);
    // One UTF-8 encoded character of the text (well-formed, else an error).
    uint32_t utf8_char();
    // A repetition count: decimal digits, at most kMaxRepeatCount.
    int32_t count();
    // `cp`, when it is a Unicode scalar value (not a surrogate, at most U+10FFFF); else an error.
    uint32_t scalar_value(uint32_t cp) const;
    // At '[': moves past it and an optional '^'; true if the class is negated.
    bool class_start();
    // The character of \n \r \t \f \v (the letter after the backslash), if `e` is one of them.
    static std::optional<uint32_t> control_escape(char e);

    std::string_view s_;
    size_t pos_ = 0;
};

}  // namespace deepinfer::grammar
