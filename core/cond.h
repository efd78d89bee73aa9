// core/cond.h — condition variable on a sequence futex, safe to destroy early.
//
// Design
// ------
//   field    | role
//   ---------+----------------------------------------------------------------
//   seq      | futex word; every signal/broadcast that finds waiters bumps it
//   waiters  | threads between "registered" and "left"; signal is a no-op at 0
//   refs     | threads still touching this object; bit 31 = a destroyer waits
//   flags    | kMonotonic (clock attribute), kShared (process-shared futexes)
//
// wait:   refs++, waiters++, read seq, release the mutex, sleep while seq is
//         unchanged, waiters--, refs-- (waking a destroyer), re-take the mutex.
//         A signal between "read seq" and "sleep" changes seq, so the futex
//         wait returns at once: no lost wakeup. Waking is never exclusive to
//         one thread (spurious wakeups are allowed by POSIX and callers loop).
//         A sleep that ends with seq unchanged (a signal handler ran: EINTR,
//         or a stray futex wake) sleeps again, on the same absolute
//         deadline: like glibc, only a signal/broadcast or the deadline ends
//         a wait (programs pelted with timer signals rely on it).
// signal: if waiters: seq++, wake one.     broadcast: seq++, wake all.
// destroy: set kDestroying and sleep until refs drops to 0, so that
//         "broadcast; destroy; free" is safe while woken waiters still run
//         their last lines here (glibc gives the same guarantee).
// cancel: the sleep is the only cancellation point. If the thread is
//         cancelled there, WaitGuard's destructor runs during the forced
//         unwind: it leaves, passes on a wakeup it may have absorbed, and
//         re-takes the mutex before the caller's cleanup handlers run.
//
// Memory order: the registration (waiters/refs) and the seq read are seq_cst,
// paired with the signaller's seq_cst waiters load, so a signaller that runs
// after the waiter released the mutex always sees it registered. The mutex
// itself orders the protected data.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <ctime>

#include "arch/atomic.h"
#include "arch/futex.h"
#include "core/thread_registry.h"
#include "core/wait_ctx.h"

namespace lockswap {

// How a condition wait sleeps. preload/ supplies one that is a cancellation
// point; core tests use this plain one.
struct PlainSleeper {
  static int sleep(const std::atomic<uint32_t>* word, uint32_t expected, const WaitCtx& ctx, bool shared) {
    return ctx.sleep(word, expected, shared);
  }
  // With `around(futex_call)` wrapped around the system call alone.
  template <class Around>
  static int sleep_around(const std::atomic<uint32_t>* word, uint32_t expected, const WaitCtx& ctx, bool shared,
                          Around&& around) {
    return ctx.sleep_around(word, expected, shared, around);
  }
};

class Cond {
 public:
  static constexpr uint32_t kMonotonic = 1u << 0;
  static constexpr uint32_t kShared = 1u << 1;
  static constexpr uint32_t kDestroying = 1u << 31;

  void init(bool monotonic, bool shared) {
    seq_.store(0, arch::mo_hint);
    waiters_.store(0, arch::mo_hint);
    refs_.store(0, arch::mo_hint);
    flags_.store((monotonic ? kMonotonic : 0) | (shared ? kShared : 0), arch::mo_unlock);
  }

  clockid_t clock() const { return (flags_.load(arch::mo_hint) & kMonotonic) ? CLOCK_MONOTONIC : CLOCK_REALTIME; }
  bool shared() const { return flags_.load(arch::mo_hint) & kShared; }

  // unlock() -> int releases the caller's mutex (non-zero: error, nothing
  // waited); relock() -> int re-takes it (its error, if any, is returned).
  // Returns 0, ETIMEDOUT, or the mutex's error.
  template <class Sleeper = PlainSleeper, class Unlock, class Relock>
  int wait(Unlock&& unlock, Relock&& relock, const WaitCtx& ctx) {
    lockevent_inc(LockEvent::cond_wait);
    refs_.fetch_add(1, arch::mo_dekker);
    waiters_.fetch_add(1, arch::mo_dekker);
    uint32_t seen = seq_.load(arch::mo_dekker);
    if (int err = unlock()) {
      leave();
      return err;
    }
    int rc;
    {
      WaitGuard<Relock> guard{*this, relock};
      do {
        rc = Sleeper::sleep(&seq_, seen, ctx, shared());
      } while (rc != ETIMEDOUT && seq_.load(arch::mo_hint) == seen);
      guard.armed = false;
    }
    leave();
    int err = relock();
    if (rc == ETIMEDOUT) lockevent_inc(LockEvent::cond_timeout);
    return err != 0 ? err : (rc == ETIMEDOUT ? ETIMEDOUT : 0);
  }

  void signal() { notify(1, LockEvent::cond_signal); }
  void broadcast() { notify(arch::futex_wake_all, LockEvent::cond_broadcast); }

  // Returns once no thread is inside wait() any more.
  void destroy() {
    uint32_t r = refs_.fetch_or(kDestroying, arch::mo_dekker) | kDestroying;
    while (r != kDestroying) {
      arch::futex_wait(&refs_, r, CLOCK_MONOTONIC, nullptr, shared());
      r = refs_.load(arch::mo_dekker);
    }
  }

 private:
  template <class Relock>
  struct WaitGuard {
    Cond& cv;
    Relock& relock;
    bool armed = true;
    ~WaitGuard() {
      if (!armed) return;  // normal return: wait() finishes the job
      // Forced unwind from a cancellation: we may have absorbed a signal meant
      // for another waiter; pass it on (a spurious wakeup is harmless).
      cv.signal();
      cv.leave();
      relock();
    }
  };

  void notify(int how_many, LockEvent ev) {
    if (waiters_.load(arch::mo_dekker) == 0) return;
    lockevent_inc(ev);
    seq_.fetch_add(1, arch::mo_dekker);
    arch::futex_wake(&seq_, how_many, shared());
  }

  void leave() {
    waiters_.fetch_sub(1, arch::mo_hint);
    bool sh = shared();
    if (refs_.fetch_sub(1, arch::mo_unlock) == (kDestroying | 1)) arch::futex_wake(&refs_, arch::futex_wake_all, sh);
  }

  std::atomic<uint32_t> seq_;
  std::atomic<uint32_t> waiters_;
  std::atomic<uint32_t> refs_;
  std::atomic<uint32_t> flags_;
};
static_assert(sizeof(Cond) == 16);

}  // namespace lockswap
