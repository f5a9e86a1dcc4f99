// SPDX-License-Identifier: Apache-2.0
// Linked into every test binary (di_add_test): on a fatal signal (SIGSEGV, SIGBUS, SIGFPE, SIGILL) it
// writes the call stack to stderr (each frame as module(+offset), so `addr2line -f -C -e <unstripped
// binary> <offset>` names it) and re-raises the signal with its default action (the exit status stays
// the signal's). GPU test binaries run on machines without a debugger; a crash then says where it was.
// Not installed under AddressSanitizer, whose own handler reports more.
#include <execinfo.h>
#include <initializer_list>
#include <signal.h>
#include <unistd.h>

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

void on_fatal_signal(int sig) {
    static const char kHead[] = "\n*** fatal signal: the call stack (addr2line -f -C -e BINARY OFFSET) ***\n";
    (void)!write(STDERR_FILENO, kHead, sizeof kHead - 1);
    void* frames[64];
    const int n = backtrace(frames, 64);
    backtrace_symbols_fd(frames, n, STDERR_FILENO);
    signal(sig, SIG_DFL);
    raise(sig);
}

const bool installed = [] {
    if (kSanitized) return false;
    void* warm[1];
    (void)backtrace(warm, 1);  // loads the unwinder now, not inside the handler
    for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL}) signal(sig, on_fatal_signal);
    return true;
}();

}  // namespace
