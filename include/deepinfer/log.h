// SPDX-License-Identifier: Apache-2.0
// Minimal leveled logging to stderr. The threshold is set once by the frontend (CLI or Python)
// at start-up; it is the library's only process-wide setting, read atomically.
#pragma once

#include <fmt/format.h>

#include <string_view>

namespace deepinfer {

enum class LogLevel : int { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3, kOff = 4 };

void set_log_level(LogLevel level);
LogLevel log_level();
LogLevel parse_log_level(std::string_view name);  // "debug" | "info" | "warn" | "error" | "off"
void log_message(LogLevel level, std::string_view message);

template <typename... Args>
void log(LogLevel level, fmt::format_string<Args...> format, Args&&... args) {
    if (static_cast<int>(level) < static_cast<int>(log_level())) return;
    log_message(level, fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace deepinfer

#define DI_LOG_DEBUG(...) ::deepinfer::log(::deepinfer::LogLevel::kDebug, __VA_ARGS__)
#define DI_LOG_INFO(...) ::deepinfer::log(::deepinfer::LogLevel::kInfo, __VA_ARGS__)
#define DI_LOG_WARN(...) ::deepinfer::log(::deepinfer::LogLevel::kWarn, __VA_ARGS__)
#define DI_LOG_ERROR(...) ::deepinfer::log(::deepinfer::LogLevel::kError, __VA_ARGS__)
