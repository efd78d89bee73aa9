// core/wait_ctx.h — one description of "how long may this acquisition wait".
//
// POSIX has four flavours of every acquisition (lock, trylock, timedlock,
// clocklock). lockswap writes each algorithm's slow path once and passes a
// WaitCtx: `forever` blocks, `try_once` never blocks (EBUSY), `until` blocks
// until an absolute time on a named clock (ETIMEDOUT).
//
// Argument validation (EINVAL for a bad clock or tv_nsec) is the caller's job:
// glibc checks at different moments for different objects, and preload/
// reproduces each one exactly. By the time a WaitCtx exists it is valid.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>

#include "arch/clock.h"
#include "arch/futex.h"
#include "core/cancel.h"
#include "core/lock_events.h"
#include "core/thread_registry.h"

namespace lockswap {

// Every sleep in lockswap goes through WaitCtx::sleep_around, so this is the
// one place to learn "this thread stops running lock code now" (the kernel's
// switch-out). core/cid/common.cpp installs a hook there for LOCKSWAP_CID=global;
// otherwise it is null and costs a load and a branch next to a system call.
// Without the switch model nothing is needed after the wake-up: the next
// lock code that wants a concurrency id takes one lazily. With it
// (LOCKSWAP_CID_SWITCH=1) the after-sleep hook is the switch-in.
inline std::atomic<void (*)()> g_before_sleep_hook{nullptr};
inline std::atomic<void (*)()> g_after_sleep_hook{nullptr};

inline void run_before_sleep_hook() {
  if (void (*hook)() = g_before_sleep_hook.load(std::memory_order_relaxed)) hook();
}

inline void run_after_sleep_hook() {
  if (void (*hook)() = g_after_sleep_hook.load(std::memory_order_relaxed)) hook();
}

// Which API family a sleep serves, for the wait_<family>_ns/_n events: the
// answer to "how much of this process's lock waiting went through lockswap,
// and of which kind". preload sets it where it builds the WaitCtx of a call;
// a sleep of lockswap's own (the global id allocator's lock, a sleep whose
// caller has no acquisition's WaitCtx) keeps the default, `internal`. It
// fits in the padding after `mode`, so a WaitCtx stays 16 bytes (two
// registers) and a constant one stays a constant: no fast path gains an
// instruction (see `reserved`).
enum class WaitFamily : uint8_t { internal, mutex, rwlock, cond, sem };

// The event pair (ns, count) of each family, indexed by WaitFamily.
inline constexpr LockEvent kWaitNsEvent[] = {LockEvent::wait_internal_ns, LockEvent::wait_mutex_ns,
                                             LockEvent::wait_rwlock_ns, LockEvent::wait_cond_ns,
                                             LockEvent::wait_sem_ns};
inline constexpr LockEvent kWaitCountEvent[] = {LockEvent::wait_internal_n, LockEvent::wait_mutex_n,
                                                LockEvent::wait_rwlock_n, LockEvent::wait_cond_n,
                                                LockEvent::wait_sem_n};

struct WaitCtx {
  enum class Mode : uint8_t { forever, try_once, until };
  Mode mode = Mode::forever;
  WaitFamily family = WaitFamily::internal;
  // Written, never read: with the padding initialised the compiler stores
  // mode, family and clock as one word when a fast path builds a WaitCtx on
  // its stack for the slow path it may call (the two bytes alone would cost
  // one more store than `mode` did before the family existed).
  uint16_t reserved = 0;
  clockid_t clock = CLOCK_REALTIME;
  const timespec* abs = nullptr;

  static constexpr WaitCtx blocking(WaitFamily f = WaitFamily::internal) {
    return {Mode::forever, f, 0, CLOCK_REALTIME, nullptr};
  }
  static constexpr WaitCtx try_once(WaitFamily f = WaitFamily::internal) {
    return {Mode::try_once, f, 0, CLOCK_REALTIME, nullptr};
  }
  static constexpr WaitCtx until(clockid_t c, const timespec* t, WaitFamily f = WaitFamily::internal) {
    return {Mode::until, f, 0, c, t};
  }
  // The same wait on behalf of another family (an rwsem's own timer sleep
  // inside a mutex acquisition is that mutex's wait).
  constexpr WaitCtx of(WaitFamily f) const { return {mode, f, 0, clock, abs}; }

  bool may_block() const { return mode != Mode::try_once; }
  // What a failed acquisition reports: EBUSY for try, ETIMEDOUT otherwise.
  int give_up_code() const { return mode == Mode::try_once ? EBUSY : ETIMEDOUT; }

  bool expired() const {
    if (mode != Mode::until) return mode == Mode::try_once;
    if (abs->tv_sec < 0) return true;
    timespec now;
    clock_gettime(clock, &now);
    return now.tv_sec > abs->tv_sec || (now.tv_sec == abs->tv_sec && now.tv_nsec >= abs->tv_nsec);
  }

  // Sleep on `word` while it equals `expected`, honouring the deadline.
  // Returns 0 (woken or value changed: re-check) or ETIMEDOUT.
  // A lock sleep of a caller with asynchronous cancellation (core/cancel.h)
  // is where that cancellation may land: only the system call, in a frame
  // without cleanups.
  int sleep(const std::atomic<uint32_t>* word, uint32_t expected, bool shared = false) const {
    if (__builtin_expect(cancel::t_async_sleeps, 0))
      return sleep_around(word, expected, shared, [](auto&& futex_call) { return cancel::async_sleep_frame(futex_call); });
    return sleep_around(word, expected, shared, [](auto&& futex_call) { return futex_call(); });
  }

  // The same, with `around(futex_call)` wrapped around the system call alone
  // (preload makes only the syscall a cancellation point). The before-sleep
  // hook runs first, outside `around`.
  template <class Around>
  int sleep_around(const std::atomic<uint32_t>* word, uint32_t expected, bool shared, Around&& around) const {
    int rc = sleep_raw_around(word, expected, shared, around);
    return rc == ETIMEDOUT ? ETIMEDOUT : 0;
  }

  // The futex result itself: 0, EAGAIN (value differed), ETIMEDOUT or EINTR
  // (a handler without SA_RESTART: semaphores report it).
  template <class Around>
  int sleep_raw_around(const std::atomic<uint32_t>* word, uint32_t expected, bool shared, Around&& around) const {
    if (mode == Mode::try_once) return ETIMEDOUT;
    if (mode == Mode::until && abs->tv_sec < 0) return ETIMEDOUT;  // kernel would say EINVAL
    run_before_sleep_hook();
    // Two vDSO clock reads (no system call) next to a futex sleep: the
    // wait accounting, counted always like every lock event. The reads are
    // outside `around`, so no asynchronous cancellation lands between them
    // and the count; a cancelled sleep (a forced unwind out of `around`) is
    // not counted, as it never returns.
    const uint64_t t0 = arch::monotonic_ns();
    int rc = around([&] { return arch::futex_wait(word, expected, clock, mode == Mode::until ? abs : nullptr, shared); });
    const uint64_t slept = arch::monotonic_ns() - t0;
    const auto f = static_cast<uint8_t>(family);
    lockevent_add(kWaitNsEvent[f], slept);
    lockevent_inc(kWaitCountEvent[f]);
    run_after_sleep_hook();
    return rc;
  }
};

}  // namespace lockswap
