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

#include "arch/futex.h"
#include "core/cancel.h"

namespace lockswap {

// Every sleep in lockswap goes through WaitCtx::sleep_around, so this is the
// one place to learn "this thread stops running lock code now" (the kernel's
// switch-out). core/cid.cpp installs a hook there for LOCKSWAP_CID=global;
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

struct WaitCtx {
  enum class Mode : uint8_t { forever, try_once, until };
  Mode mode = Mode::forever;
  clockid_t clock = CLOCK_REALTIME;
  const timespec* abs = nullptr;

  static constexpr WaitCtx blocking() { return {}; }
  static constexpr WaitCtx try_once() { return {Mode::try_once, CLOCK_REALTIME, nullptr}; }
  static constexpr WaitCtx until(clockid_t c, const timespec* t) { return {Mode::until, c, t}; }

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
    int rc = around([&] { return arch::futex_wait(word, expected, clock, mode == Mode::until ? abs : nullptr, shared); });
    run_after_sleep_hook();
    return rc;
  }
};

}  // namespace lockswap
