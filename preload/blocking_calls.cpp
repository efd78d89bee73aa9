// preload/blocking_calls.cpp — the waits a server makes between requests,
// interposed for the concurrency-id switch model (LOCKSWAP_CID_SWITCH=1,
// core/cid.h "Switch model").
//
// A server's threads and processes block mostly outside lock code: in
// epoll_wait on their clients, in poll/select, in nanosleep, in sigwait.
// The kernel's concurrency id changes hands at every such block (the
// scheduler's switch-out and switch-in), so with the model on each of these
// calls runs cid::switch_out() before glibc's function and cid::switch_in()
// after it. PostgreSQL's backends block between queries in epoll_wait on
// their client socket (latch.c's WaitEventSet) and read from it only when
// epoll said it is readable, so blocking accept/recv/read are not
// interposed (docs/cid-switch.md has the trace).
//
// Exact pass-through: every exported function calls glibc's own (found with
// dlsym(RTLD_NEXT) once, before main) with the same arguments and
// returns its value; errno is glibc's (switch_in preserves it); EINTR and
// timeouts are glibc's; a cancellation point stays one, because the
// cancellation is acted on inside glibc's function and unwinds through the
// switching frame (which has unwind information and nothing to clean up: a
// thread cancelled while switched out simply never switches in). Nothing
// allocates.
//
// Cost with the model off: each exported function is a tail call through a
// table entry that holds glibc's function itself, one indirect jump. This
// file's constructor fills the table from the configuration; before it runs
// (a wait in another library's constructor) each entry holds a first-call
// stub that does the same. The configuration parser knows nothing of this
// file.
//
// Statistics (LOCKSWAP_STATS counts or profile) route each call through a
// timing function instead (timing_*, or timing_switching_* with the model
// on), which records the wait at its caller in the wait table
// (preload/stats/waits.h): kind `idle` (waiting for work: descriptors, signals, a
// connection) or `delay` (a timed sleep: nanosleep, clock_nanosleep, select
// or poll without descriptors). It is still glibc's function that sleeps,
// so results, errno and cancellation are glibc's; the timing frame has no
// cleanups, and a cancelled wait is not recorded. The site is the caller of
// the export, which reaches the timing function by a tail jump.
//
// accept/accept4 block between connections the way epoll_wait does between
// requests, so they are listed too: a server whose threads block in accept
// waits for work there (and, with the model on, switches out there).
#undef _FORTIFY_SOURCE  // define poll, select, ... themselves, not glibc's inline checking wrappers
#include <dlfcn.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/socket.h>
#include <time.h>

#include <cerrno>

#include "arch/clock.h"
#include "core/cancel.h"
#include "core/cid.h"
#include "preload/config/config.h"
#include "preload/stats/waits.h"

#define LOCKSWAP_EXPORT extern "C" __attribute__((visibility("default")))

// X(name, return type, parameters, arguments, wait kind (an expression of the
// arguments: idle or delay))
#define LOCKSWAP_BLOCKING_CALLS(X)                                                                          \
  X(epoll_wait, int, (int epfd, epoll_event* events, int max, int timeout), (epfd, events, max, timeout), idle) \
  X(epoll_pwait, int, (int epfd, epoll_event* events, int max, int timeout, const sigset_t* mask),          \
    (epfd, events, max, timeout, mask), idle)                                                               \
  X(epoll_pwait2, int, (int epfd, epoll_event* events, int max, const timespec* timeout, const sigset_t* mask), \
    (epfd, events, max, timeout, mask), idle)                                                               \
  X(poll, int, (pollfd * fds, nfds_t n, int timeout), (fds, n, timeout), (n == 0 ? delay : idle))           \
  X(ppoll, int, (pollfd * fds, nfds_t n, const timespec* timeout, const sigset_t* mask), (fds, n, timeout, mask), \
    (n == 0 ? delay : idle))                                                                                \
  X(select, int, (int n, fd_set* r, fd_set* w, fd_set* e, timeval* timeout), (n, r, w, e, timeout),         \
    no_descriptors(n, r, w, e) ? delay : idle)                                                              \
  X(pselect, int, (int n, fd_set* r, fd_set* w, fd_set* e, const timespec* timeout, const sigset_t* mask),  \
    (n, r, w, e, timeout, mask), no_descriptors(n, r, w, e) ? delay : idle)                                 \
  X(nanosleep, int, (const timespec* req, timespec* rem), (req, rem), delay)                                \
  X(clock_nanosleep, int, (clockid_t clock, int flags, const timespec* req, timespec* rem),                 \
    (clock, flags, req, rem), delay)                                                                        \
  X(sigwait, int, (const sigset_t* set, int* sig), (set, sig), idle)                                        \
  X(sigwaitinfo, int, (const sigset_t* set, siginfo_t* info), (set, info), idle)                            \
  X(sigtimedwait, int, (const sigset_t* set, siginfo_t* info, const timespec* timeout), (set, info, timeout), idle) \
  X(accept, int, (int fd, sockaddr* addr, socklen_t* len), (fd, addr, len), idle)                           \
  X(accept4, int, (int fd, sockaddr* addr, socklen_t* len, int flags), (fd, addr, len, flags), idle)

namespace lockswap::blocking {
namespace {

struct Calls {
#define X(name, ret, params, args, kind) ret(*name) params;
  LOCKSWAP_BLOCKING_CALLS(X)
#undef X
};

// Before the configuration: read it (which installs g_route), then go on.
#define X(name, ret, params, args, kind) ret first_##name params;
LOCKSWAP_BLOCKING_CALLS(X)
#undef X

Calls g_glibc;  // glibc's functions
// What each exported function jumps to; constant-initialised (no
// constructor to wait for) to the first-call stubs.
Calls g_route = {
#define X(name, ret, params, args, kind) &first_##name,
    LOCKSWAP_BLOCKING_CALLS(X)
#undef X
};

// The model on: glibc's wait between a switch-out and a switch-in. A thread
// with asynchronous cancellation (core/cancel.h) waits unswitched: a
// cancellation landing inside a switch would leave the cid_lock held by a
// thread that no longer exists, in a process that does.
#define X(name, ret, params, args, kind)                        \
  ret switching_##name params {                           \
    if (cancel::async_caller()) return g_glibc.name args; \
    cid::switch_out();                                    \
    ret rc = g_glibc.name args;                           \
    cid::switch_in();                                     \
    return rc;                                            \
  }
LOCKSWAP_BLOCKING_CALLS(X)
#undef X

// select/pselect that watch no descriptor: a sleep (the classic portable
// sub-second delay, select(0, NULL, NULL, NULL, &tv)).
bool no_descriptors(int n, const fd_set* r, const fd_set* w, const fd_set* e) {
  return n <= 0 || (r == nullptr && w == nullptr && e == nullptr);
}

// Statistics on: the wait between two clock reads, recorded at the caller of
// the export (which tail-jumps here: our return address is its caller's).
// `kind` is evaluated before the call (glibc may change the sets).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define X(name, ret, params, args, kind)                                      \
  ret timing_##name params {                                                  \
    using enum waits::Kind;                                                   \
    const waits::Kind k = kind;                                               \
    const auto ip = reinterpret_cast<uintptr_t>(__builtin_return_address(0)); \
    const uint64_t t0 = arch::monotonic_ns();                                      \
    ret rc = g_glibc.name args;                                               \
    waits::record(k, #name, ip, arch::monotonic_ns() - t0);                        \
    return rc;                                                                \
  }                                                                           \
  ret timing_switching_##name params {                                        \
    using enum waits::Kind;                                                   \
    const waits::Kind k = kind;                                               \
    const auto ip = reinterpret_cast<uintptr_t>(__builtin_return_address(0)); \
    const uint64_t t0 = arch::monotonic_ns();                                      \
    ret rc = switching_##name args;                                           \
    waits::record(k, #name, ip, arch::monotonic_ns() - t0);                        \
    return rc;                                                                \
  }
LOCKSWAP_BLOCKING_CALLS(X)
#undef X
#pragma GCC diagnostic pop

// A function this glibc lacks (epoll_pwait2 before 2.35): what the kernel
// says about a system call it lacks.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-parameter"
#define X(name, ret, params, args, kind) \
  ret missing_##name params {      \
    errno = ENOSYS;                \
    return -1;                     \
  }
LOCKSWAP_BLOCKING_CALLS(X)
#undef X
#pragma GCC diagnostic pop

// Resolves glibc's functions and routes every interposed wait to them
// (switch_model false: one indirect jump) or through the switch-out and
// switch-in around them (true), each through its timing function when
// statistics are on (`timing`). Idempotent. Stored once per entry, before
// main in practice; the exported functions read their entry with a relaxed
// load (a plain move).
void install(bool switch_model, bool timing) {
#define X(name, ret, params, args, kind)                                                            \
  if (g_glibc.name == nullptr) {                                                              \
    auto fn = reinterpret_cast<ret(*) params>(dlsym(RTLD_NEXT, #name));                       \
    g_glibc.name = fn != nullptr ? fn : &missing_##name;                                      \
  }                                                                                           \
  __atomic_store_n(&g_route.name,                                                            \
                   timing ? (switch_model ? &timing_switching_##name : &timing_##name)       \
                          : (switch_model ? &switching_##name : g_glibc.name),               \
                   __ATOMIC_RELEASE);
  LOCKSWAP_BLOCKING_CALLS(X)
#undef X
}

void install_from_config() {
  load_config();
  waits::init();
  install(g_config.cid_switch, waits::on());
}

#define X(name, ret, params, args, kind) \
  ret first_##name params {        \
    install_from_config();         \
    return g_route.name args;      \
  }
LOCKSWAP_BLOCKING_CALLS(X)
#undef X

// Before main, after the configuration (load_config() parses it once).
__attribute__((constructor)) void install_at_start() { install_from_config(); }
}  // namespace

}  // namespace lockswap::blocking

using lockswap::blocking::g_route;

#define X(name, ret, params, args, kind) \
  LOCKSWAP_EXPORT ret name params { return __atomic_load_n(&g_route.name, __ATOMIC_RELAXED) args; }
LOCKSWAP_BLOCKING_CALLS(X)
#undef X
