// SPDX-License-Identifier: Apache-2.0
// Readers shared by the EBNF and regex front ends (see text_parser.h).
#include "grammar/text_parser.h"

#include <cctype>

#include "tokenizer/utf8.h"

namespace deepinfer::grammar {

uint32_t TextParser::hex(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
        if (pos_ >= s_.size() || !std::isxdigit(static_cast<unsigned char>(s_[pos_])))
            fail("expected " + std::to_string(n) + " hex digit" + (n > 1 ? "s" : ""));
        const char c = s_[pos_++];
        v = v * 16 + uint32_t(std::isdigit(static_cast<unsigned char>(c)) ? c - '0' : std::tolower(c) - 'a' + 10);
    }
    return v;
}

uint32_t TextParser::utf8_char() {
    const utf8::Step st = utf8::step(reinterpret_cast<const unsigned char*>(s_.data()) + pos_, s_.size() - pos_);
    if (st.kind != utf8::Step::kValid) fail("invalid UTF-8");
    pos_ += st.len;
    return st.code_point;
}

int32_t TextParser::count() {
    const size_t begin = pos_;
    int64_t v = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_]))) {
        v = v * 10 + (s_[pos_] - '0');
        if (v > kMaxRepeatCount) fail("repetition count above " + std::to_string(kMaxRepeatCount));
        ++pos_;
    }
    if (pos_ == begin) fail("expected a number");
    return static_cast<int32_t>(v);
}

uint32_t TextParser::scalar_value(uint32_t cp) const {
    if (cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) fail("escape is not a Unicode scalar value");
    return cp;
}

bool TextParser::class_start() {
    ++pos_;  // [
    if (!at('^')) return false;
    ++pos_;
    return true;
}

std::optional<uint32_t> TextParser::control_escape(char e) {
    switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'f': return '\f';
        case 'v': return '\v';
        default: return std::nullopt;
    }
}

}  // namespace deepinfer::grammar
