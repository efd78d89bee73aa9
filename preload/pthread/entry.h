// preload/pthread/entry.h — what the family entry files (mutex.cpp with the
// condition variable, rwlock.cpp, sem.cpp) share: how a call was asked for,
// timeout checks, and the cancellable futex sleep of condition and semaphore
// waits.
//
// Everything here has internal linkage (an unnamed namespace) on purpose:
// each entry file gets its own copy, and the compiler keeps the freedom it
// has over a file's own functions (inlining, cloning, calling conventions)
// when it builds the fast paths. Only included by those files.
#pragma once
#include <pthread.h>
#include <time.h>

#include <atomic>
#include <cstdint>

#include "core/cancel.h"
#include "core/read_pref.h"
#include "core/wait_ctx.h"

#define LOCKSWAP_LIKELY(x) __builtin_expect(!!(x), 1)
#define LOCKSWAP_INLINE __attribute__((always_inline)) inline

namespace lockswap {
namespace {

// ---------------------------------------------------------------- timeouts

inline bool valid_nsec(const timespec* t) { return t->tv_nsec >= 0 && t->tv_nsec < 1'000'000'000; }
inline bool supported_clock(clockid_t c) { return c == CLOCK_REALTIME || c == CLOCK_MONOTONIC; }

// How an acquisition was asked for (lock, try, timed or clock flavour); also
// what a delegation to glibc replays.
struct Call {
  enum Op : uint8_t { block, trylock, timed, clocked } op;
  clockid_t clock;
  const timespec* abs;
  // `f`: the family whose wait this is (core/wait_ctx.h, the wait events).
  WaitCtx ctx(WaitFamily f) const {
    switch (op) {
      case trylock: return WaitCtx::try_once(f);
      case block: return WaitCtx::blocking(f);
      default: return WaitCtx::until(clock, abs, f);
    }
  }
};

// ------------------------------------------------- cancellable futex sleep

// The futex sleep inside a condition or semaphore wait is the cancellation
// point. Async cancellation is enabled only around the system call itself
// (not around WaitCtx's before-sleep hook, which may hold an allocator lock),
// inside a function that has no cleanups of its own: a cancellation unwinds
// straight out of it into the waiting object's guard (Cond::wait re-takes the
// mutex, a semaphore unregisters its waiter) before the caller's handlers run.
struct AsyncCancelAround {
  template <class FutexCall>
  int operator()(FutexCall&& futex_call) const {
    int old_type;
    cancel::set_type(PTHREAD_CANCEL_ASYNCHRONOUS, &old_type);
    int rc = futex_call();
    cancel::set_type(old_type, &old_type);
    return rc;
  }
};

// A caller that enabled asynchronous cancellation may be cancelled at any
// instruction; inside a wait that must happen only in the futex sleep, where
// the waiting object's guard makes its state consistent (not, say, between
// releasing the mutex and arming Cond::wait's guard). So a wait runs with
// deferred cancellation and CancellableSleeper enables the asynchronous kind
// around the system call alone. The caller's type is restored on a normal
// return only (restoring it acts on a cancellation that arrived meanwhile, at
// a point where the state is consistent); a forced unwind never comes back.
template <class Wait>
__attribute__((noinline)) int with_deferred_cancellation(Wait&& wait) {
  int old_type;
  cancel::set_type(PTHREAD_CANCEL_DEFERRED, &old_type);
  // The wait's guards live in its own frame: this one has no cleanups, so the
  // caller's type may come back here (core/cancel.h restore_async).
  int rc = cancel::call_in_own_frame(wait);
  if (old_type != PTHREAD_CANCEL_DEFERRED) return cancel::restore_async(rc);
  return rc;
}

// The frame in which asynchronous cancellation is enabled must have no
// cleanups: an unwind that starts at an arbitrary instruction of a frame with
// cleanups finds no call-site entry there and terminates the process.
template <class Plain>
struct AsyncCancelSleep {
  __attribute__((noinline)) static int sleep(const std::atomic<uint32_t>* word, uint32_t expected,
                                             const WaitCtx& ctx, bool shared) {
    return Plain::sleep_around(word, expected, ctx, shared, AsyncCancelAround{});
  }
};

template <class Plain>
struct CancellableSleeper {
  __attribute__((noinline)) static int sleep(const std::atomic<uint32_t>* word, uint32_t expected,
                                             const WaitCtx& ctx, bool shared) {
    // A read holder asleep here may be what a reader blocked on its rwlock
    // waits for (core/read_pref.h rule (a)).
    read_pref::ReadHolderSleep holder_asleep;
    return AsyncCancelSleep<Plain>::sleep(word, expected, ctx, shared);
  }
};
}  // namespace
}  // namespace lockswap
