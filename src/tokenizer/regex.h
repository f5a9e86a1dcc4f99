// SPDX-License-Identifier: Apache-2.0
// A compiled PCRE2 pattern (UTF-8, Unicode properties, JIT) that finds successive matches in a
// subject. The pre-tokenizer's Split rules run through it. Subjects must be valid UTF-8 (the
// tokenizer sanitizes its input first), so matching skips PCRE2's per-call UTF check. General-
// category properties are widened to the reference's newer Unicode tables (unicode_compat.h).
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace deepinfer {

class Regex {
public:
    // `literal`: the pattern is a plain string, not a regular expression. Throws deepinfer::Error
    // with PCRE2's message and offset on a bad pattern.
    explicit Regex(const std::string& pattern, bool literal = false);
    ~Regex();
    Regex(Regex&&) noexcept;
    Regex& operator=(Regex&&) noexcept;
    Regex(const Regex&) = delete;
    Regex& operator=(const Regex&) = delete;

    // First match in subject[start, size) -> true and [*begin, *end). Lookarounds see only the
    // subject, never past its end. Thread-safe (per-thread match state).
    bool find(std::string_view subject, size_t start, size_t* begin, size_t* end) const;

    const std::string& pattern() const { return pattern_; }

private:
    std::string pattern_;
    void* code_ = nullptr;  // pcre2_code_8*
    bool jit_ = false;
};

}  // namespace deepinfer
