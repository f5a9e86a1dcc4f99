// SPDX-License-Identifier: Apache-2.0
// UTF-8 primitives shared by the tokenizer and the chat parser: stepping over one character with
// the Unicode "maximal subpart" rule for ill-formed input (what Python's errors="replace" and
// Rust's from_utf8_lossy do), and GPT-2's byte <-> printable-character map used by byte-level BPE.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::utf8 {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

// What starts at a position of a byte string.
struct Step {
    enum Kind : uint8_t {
        kValid,       // `len` bytes form one character (`code_point`)
        kInvalid,     // `len` bytes form one maximal ill-formed subpart (-> one U+FFFD)
        kIncomplete,  // the input ends inside a character that could still be completed
    };
    Kind kind;
    uint8_t len;
    uint32_t code_point;
};

// Classifies the bytes at p[0..n), n >= 1.
Step step(const unsigned char* p, size_t n);

// Length of the longest prefix of `s` that is valid UTF-8.
size_t valid_prefix_length(std::string_view s);

// Appends `s` to `out`, each maximal ill-formed subpart replaced by U+FFFD; an incomplete
// character at the end is replaced too.
void append_sanitized(std::string_view s, std::string& out);

void append_code_point(uint32_t cp, std::string& out);

// Unicode White_Space (what Rust's and Oniguruma's `\s` match).
bool is_white_space(uint32_t cp);

// GPT-2's bytes_to_unicode(): byte -> the printable code point that stands for it in the
// vocabulary, and back (-1 for code points that stand for no byte).
const std::array<uint16_t, 256>& byte_to_code_point();
int code_point_to_byte(uint32_t cp);

}  // namespace deepinfer::utf8
