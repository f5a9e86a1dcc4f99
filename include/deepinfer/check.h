// SPDX-License-Identifier: Apache-2.0
// Errors and checks. Every failed check throws deepinfer::Error whose message starts with the
// source file and line, so a user-facing message always says where it was raised.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace deepinfer {

// The one exception type of the library. `what()` is "file:line: message".
class Error : public std::runtime_error {
public:
    Error(std::string_view file, int line, std::string_view message);
    // The message without the "file:line: " prefix (for users who want only the text).
    const std::string& message() const { return message_; }

private:
    std::string message_;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
    std::ostringstream os;
    (os << ... << args);
    return os.str();
}
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
}  // namespace detail

}  // namespace deepinfer

// Checks a condition that depends on input (user data, files); throws with the message.
#define DI_CHECK(cond, ...)                                                                  \
    do {                                                                                     \
        if (!(cond)) [[unlikely]]                                                            \
            ::deepinfer::detail::throw_error(__FILE__, __LINE__,                             \
                                             ::deepinfer::detail::concat(__VA_ARGS__));      \
    } while (0)

// Throws unconditionally.
#define DI_THROW(...) \
    ::deepinfer::detail::throw_error(__FILE__, __LINE__, ::deepinfer::detail::concat(__VA_ARGS__))

// A broken internal invariant (a bug). Cold code.
#define DI_ICHECK(cond)                                                                      \
    do {                                                                                     \
        if (!(cond)) [[unlikely]]                                                            \
            ::deepinfer::detail::throw_error(__FILE__, __LINE__,                             \
                                             "internal check failed: " #cond);               \
    } while (0)

// Same as DI_ICHECK, debug builds only (hot code).
#ifdef NDEBUG
#define DI_DCHECK(cond) \
    do {                \
    } while (0)
#else
#define DI_DCHECK(cond) DI_ICHECK(cond)
#endif
