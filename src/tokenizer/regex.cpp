// SPDX-License-Identifier: Apache-2.0
// PCRE2 behind a small interface. Each thread keeps one match-data block and one JIT stack, so a
// compiled pattern is shared read-only by every thread of a batch encode.
#define PCRE2_CODE_UNIT_WIDTH 8
#include "tokenizer/regex.h"

#include <pcre2.h>

#include "deepinfer/check.h"
#include "deepinfer/tokenizer.h"
#include "tokenizer/unicode_compat.h"

namespace deepinfer {

namespace {

// Per-thread scratch: match data sized for one capture pair (the whole match is all we use)
// and a JIT stack large enough for backtracking over very long runs of letters or spaces.
struct MatchScratch {
    pcre2_match_data* data = nullptr;
    pcre2_match_context* context = nullptr;
    pcre2_jit_stack* jit_stack = nullptr;
    MatchScratch() {
        data = pcre2_match_data_create(1, nullptr);
        context = pcre2_match_context_create(nullptr);
        jit_stack = pcre2_jit_stack_create(64 * 1024, 64 * 1024 * 1024, nullptr);
        DI_ICHECK(data != nullptr && context != nullptr && jit_stack != nullptr);
        pcre2_jit_stack_assign(context, nullptr, jit_stack);
    }
    ~MatchScratch() {
        pcre2_jit_stack_free(jit_stack);
        pcre2_match_context_free(context);
        pcre2_match_data_free(data);
    }
};

MatchScratch& scratch() {
    thread_local MatchScratch s;
    return s;
}

std::string pcre2_message(int code) {
    PCRE2_UCHAR buf[256];
    int n = pcre2_get_error_message(code, buf, sizeof(buf));
    return n < 0 ? "unknown PCRE2 error " + std::to_string(code) : std::string(reinterpret_cast<char*>(buf));
}

}  // namespace

Regex::Regex(const std::string& pattern, bool literal) : pattern_(pattern) {
    int error_code = 0;
    PCRE2_SIZE error_offset = 0;
    uint32_t options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK;
    if (literal) options |= PCRE2_LITERAL;
    DI_CHECK(is_valid_utf8(pattern), "regex pattern is not valid UTF-8");
    const std::string source = literal ? pattern : widen_unicode_properties(pattern);
    pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(source.data()), source.size(),
                                     options, &error_code, &error_offset, nullptr);
    DI_CHECK(code != nullptr, "cannot compile regex /", pattern, "/ at offset ", error_offset, ": ",
             pcre2_message(error_code));
    code_ = code;
    jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;
}

Regex::~Regex() {
    if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
}

Regex::Regex(Regex&& other) noexcept
    : pattern_(std::move(other.pattern_)), code_(other.code_), jit_(other.jit_) {
    other.code_ = nullptr;
}

Regex& Regex::operator=(Regex&& other) noexcept {
    if (this != &other) {
        if (code_ != nullptr) pcre2_code_free(static_cast<pcre2_code*>(code_));
        pattern_ = std::move(other.pattern_);
        code_ = other.code_;
        jit_ = other.jit_;
        other.code_ = nullptr;
    }
    return *this;
}

bool Regex::find(std::string_view subject, size_t start, size_t* begin, size_t* end) const {
    MatchScratch& s = scratch();
    auto* code = static_cast<const pcre2_code*>(code_);
    const auto* text = reinterpret_cast<PCRE2_SPTR>(subject.data());
    int rc = jit_ ? pcre2_jit_match(code, text, subject.size(), start, 0, s.data, s.context)
                  : pcre2_match(code, text, subject.size(), start, PCRE2_NO_UTF_CHECK, s.data,
                                s.context);
    if (rc == PCRE2_ERROR_NOMATCH) return false;
    DI_CHECK(rc > 0, "regex /", pattern_, "/ failed: ", pcre2_message(rc));
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(s.data);
    *begin = ov[0];
    *end = ov[1];
    return true;
}

}  // namespace deepinfer
