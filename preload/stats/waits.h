// preload/stats/waits.h — where a process waits outside lockswap's own locks: the
// per-site wait table of a statistics dump (`lockswap-v1 wait` records).
//
// The lock events (wait_<family>_ns, core/wait_ctx.h) say how long the
// process slept in lockswap's locks. This table says how long it slept
// elsewhere, per call site, so that a reader can tell what share of the
// waiting lockswap reaches:
//   futex  syscall(SYS_futex, FUTEX_WAIT...) from outside lockswap: the
//          program's own futex lock (preload/stats/waits.cpp interposes syscall)
//   cond   a condition wait (pthread_cond_*wait, cnd_*wait), under every
//          variant including glibc: time spent waiting for an event, not for
//          a lock
//   idle   epoll/poll/select with descriptors, sigwait*, accept: waiting
//          for work (preload/blocking_calls.cpp)
//   delay  nanosleep, clock_nanosleep, select/poll with no descriptor: a
//          timed sleep, often a hand-made spin-wait backoff (with the caller's
//          callers, `bt`, as the sleep's direct caller is usually a helper)
//
// Recorded only with statistics on (LOCKSWAP_STATS counts or profile); with
// them off no wait path reads a clock or this table. Everything here is
// async-signal-safe: a fixed static table, lock-free insertion, no
// allocation (a signal handler may nanosleep or poll).
#pragma once
#include <pthread.h>

#include <atomic>
#include <cstdint>

#include "arch/clock.h"

namespace lockswap::waits {

enum class Kind : uint8_t { futex, cond, idle, delay };
inline constexpr unsigned kKinds = 4;
inline constexpr const char* kKindNames[kKinds] = {"futex", "cond", "idle", "delay"};

inline constexpr unsigned kSlots = 1024;  // sites per process; more are counted as dropped
inline constexpr unsigned kBacktraceDepth = 4;

struct Site {
  // (kind + 1) << 56 | ip: 0 while free. ip is a user-space return address
  // (below 2^56 on every supported ISA).
  std::atomic<uint64_t> key{0};
  const char* call = nullptr;         // the interposed function's name (static)
  std::atomic<uint32_t> ready{0};     // call and bt are written
  uint32_t bt_len = 0;
  uintptr_t bt[kBacktraceDepth] = {};
  std::atomic<uint64_t> n{0}, ns{0}, max_ns{0};
};

// True while statistics are on (set by the constructor from the
// configuration; false before it, so an early wait is not counted).
extern std::atomic<bool> g_on;
inline bool on() { return g_on.load(std::memory_order_relaxed); }

// Read once, from the configuration (idempotent): sets g_on and finds
// liblockswap's own text range.
void init();

// Is `ip` in liblockswap's own code? (Its own futex sleeps go through the
// syscall() it exports: they are counted as wait_<family>_ns, not here.)
bool in_own_text(uintptr_t ip);

// One wait of `ns` at `ip` (the return address of the interposed call).
// `call` is a string literal. A delay site's first record takes `bt`.
// Leaves errno as it was.
void record(Kind kind, const char* call, uintptr_t ip, uint64_t ns);

// For the dump: the table (kSlots entries; a site is used when its key is
// non-zero and ready), and the records that found no room.
const Site* sites();
uint64_t dropped();
// Each kind's total (n, ns) over the table, for the human summary lines.
void totals(uint64_t n[kKinds], uint64_t ns[kKinds]);

// A fork child starts with an empty table (statistics are per process).
void after_fork_in_child();

// The condition waits' timing wrappers (installed over the cond slots of
// the dispatch table when statistics are on; preload/pthread/mutex.cpp): the wait
// `wait` of the program's caller `ip`.
template <class Wait>
int timed_cond_wait(const char* call, uintptr_t ip, Wait&& wait) {
  uint64_t t0 = arch::monotonic_ns();
  int rc = wait();
  record(Kind::cond, call, ip, arch::monotonic_ns() - t0);
  return rc;
}

// The caller of cnd_wait/cnd_timedwait, whose pthread_cond_* call comes from
// inside liblockswap (0 otherwise).
extern __thread uintptr_t t_c11_caller __attribute__((tls_model("initial-exec")));

}  // namespace lockswap::waits
