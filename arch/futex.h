// arch/futex.h — the Linux futex calls lockswap needs, and nothing else.
//
// Every blocking wait in lockswap ends here. Timeouts are absolute, on the
// clock the POSIX caller named (FUTEX_WAIT_BITSET takes absolute times, with
// FUTEX_CLOCK_REALTIME selecting the realtime clock), so a wait that is
// interrupted and restarted never stretches its deadline.
#pragma once
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <ctime>

#include "arch/usdt.h"

namespace lockswap::arch {

static_assert(sizeof(std::atomic<uint32_t>) == 4, "futex words are 32-bit");

inline int futex_op(bool shared, int op) { return shared ? op : (op | FUTEX_PRIVATE_FLAG); }

// The futex sleep is where a cancellation may unwind a waiter (asynchronous
// cancellation lands in the syscall; pthread_cond_wait and sem_wait are
// cancellation points). glibc declares syscall() noexcept, so a direct call
// would let the compiler drop the call site from the unwind table of a caller
// that holds a cleanup guard, and the forced unwind would then terminate the
// process. Calling through a pointer of a potentially-throwing type, read
// from a volatile, keeps every caller's guards registered there.
// The call runs with the asynchronous type, so it must not go through a PLT
// stub either (no unwind information there on aarch64, core/cancel.h): the
// indirect call enters glibc's syscall() directly. errno after a failed
// sleep is read the same way, through a pointer to glibc's
// __errno_location, not its stub.
using SyscallFn = long (*)(long, ...);
inline SyscallFn volatile g_sleeping_syscall = &syscall;
using ErrnoLocationFn = int* (*)() noexcept;
inline ErrnoLocationFn volatile g_errno_location = &__errno_location;

// Sleep while *word == expected, until woken or until `abs` (if non-null) on
// `clock` has passed. Returns 0 (woken, or spurious), EAGAIN (*word differed),
// ETIMEDOUT, or EINTR. Callers always re-check their condition.
inline int futex_wait(const std::atomic<uint32_t>* word, uint32_t expected, clockid_t clock,
                      const timespec* abs, bool shared) {
  LOCKSWAP_TRACE_SLEEP(word, expected);
  long rc;
  if (abs == nullptr) {
    rc = g_sleeping_syscall(SYS_futex, word, futex_op(shared, FUTEX_WAIT), expected, nullptr, nullptr, 0);
  } else {
    int op = FUTEX_WAIT_BITSET | (clock == CLOCK_REALTIME ? FUTEX_CLOCK_REALTIME : 0);
    rc = g_sleeping_syscall(SYS_futex, word, futex_op(shared, op), expected, abs, nullptr,
                            FUTEX_BITSET_MATCH_ANY);
  }
  return rc == 0 ? 0 : *g_errno_location();
}

inline int futex_wait(const std::atomic<uint32_t>* word, uint32_t expected) {
  return futex_wait(word, expected, CLOCK_MONOTONIC, nullptr, false);
}

// Wake up to `count` sleepers on `word`. Returns how many were woken.
inline int futex_wake(const std::atomic<uint32_t>* word, int count, bool shared = false) {
  // Before the call: its arguments are in registers already, so an inlined
  // wake keeps nothing alive across the system call for the probe.
  LOCKSWAP_TRACE_WAKE(word, count);
  long rc = syscall(SYS_futex, word, futex_op(shared, FUTEX_WAKE), count, nullptr, nullptr, 0);
  return rc < 0 ? 0 : static_cast<int>(rc);
}

inline constexpr int futex_wake_all = INT_MAX;

}  // namespace lockswap::arch
