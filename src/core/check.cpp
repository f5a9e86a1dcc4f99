// SPDX-License-Identifier: Apache-2.0
// Construction of deepinfer::Error: prefixes the message with a short source location.
#include "deepinfer/check.h"

namespace deepinfer {
namespace {
// Keeps the path from "src/" or "include/" on, so messages do not carry the build machine's paths.
std::string_view short_path(std::string_view file) {
    for (std::string_view root : {"src/", "include/", "tools/", "tests/"}) {
        size_t pos = file.rfind(root);
        if (pos != std::string_view::npos) return file.substr(pos);
    }
    return file;
}
}  // namespace

Error::Error(std::string_view file, int line, std::string_view message)
    : std::runtime_error(detail::concat(short_path(file), ":", line, ": ", message)),
      message_(message) {}

namespace detail {
void throw_error(const char* file, int line, const std::string& message) {
    throw Error(file, line, message);
}
}  // namespace detail
}  // namespace deepinfer
