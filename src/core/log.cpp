// SPDX-License-Identifier: Apache-2.0
// Leveled logging: one line per message on stderr, with a timestamp and the level.
#include "deepinfer/log.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>

#include "deepinfer/check.h"

namespace deepinfer {
namespace {
std::atomic<int> g_level{static_cast<int>(LogLevel::kInfo)};  // the one process-wide setting
constexpr const char* kLevelNames[] = {"debug", "info", "warn", "error", "off"};
}  // namespace

void set_log_level(LogLevel level) { g_level.store(static_cast<int>(level)); }
LogLevel log_level() { return static_cast<LogLevel>(g_level.load(std::memory_order_relaxed)); }

LogLevel parse_log_level(std::string_view name) {
    for (int i = 0; i <= static_cast<int>(LogLevel::kOff); ++i)
        if (name == kLevelNames[i]) return static_cast<LogLevel>(i);
    DI_THROW("unknown log level '", name, "' (expected debug, info, warn, error or off)");
}

void log_message(LogLevel level, std::string_view message) {
    auto now = std::chrono::system_clock::now();
    std::time_t t = std::chrono::system_clock::to_time_t(now);
    std::tm tm{};
    gmtime_r(&t, &tm);
    char stamp[32];
    std::strftime(stamp, sizeof(stamp), "%H:%M:%S", &tm);
    std::string line = fmt::format("[{} {}] {}\n", stamp, kLevelNames[static_cast<int>(level)], message);
    std::fwrite(line.data(), 1, line.size(), stderr);
}

}  // namespace deepinfer
