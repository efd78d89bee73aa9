// core/futex_mutex.h — the reference mutex: three states on one futex word.
//
// Design
// ------
// The classic futex mutex ("Futexes Are Tricky", mutex #3): small enough to be
// obviously correct, which is its job — it is the yardstick the kernel-derived
// algorithms are checked and measured against.
//
//   word | meaning
//   -----+--------------------------------------------------------------
//    0   | unlocked (so zero-filled memory and static initializers work)
//    1   | locked, nobody sleeping
//    2   | locked, sleepers possible: unlock must FUTEX_WAKE one
//
// Transitions
//   lock:    0 -> 1 by CAS (fast path). Otherwise exchange in 2; if the old
//            value was 0 we own the lock (in state 2, costing at worst one
//            spurious wake later); else sleep while the word is 2 and retry.
//   unlock:  exchange in 0; if the old value was 2, wake one sleeper (0: the
//            mutex was not locked; the unlock changed nothing).
//   timeout: leave the word at 2. The next unlock makes one spurious wake.
//
// Memory order: acquire on every RMW that can take the lock (it orders the
// critical section after the acquisition), release on the unlocking exchange.
// Waiters never touch the word after a failed sleep except through the same
// RMWs, so no other ordering is needed.
//
// Adaptive kind: spin (bounded, with cpu_relax) while the word is non-zero
// before sleeping, as glibc's PTHREAD_MUTEX_ADAPTIVE_NP does.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>

#include "arch/atomic.h"
#include "arch/futex.h"
#include "arch/relax.h"
#include "core/thread_registry.h"
#include "core/trace.h"
#include "core/wait_ctx.h"

namespace lockswap {

class FutexMutex {
 public:
  static constexpr uint32_t kUnlocked = 0;
  static constexpr uint32_t kLocked = 1;
  static constexpr uint32_t kContended = 2;
  // Polls before sleeping for the adaptive kind (glibc's default budget is 100).
  static constexpr unsigned kAdaptiveSpins = 100;

  bool try_lock() {
    uint32_t expected = kUnlocked;
    return word_.compare_exchange_strong(expected, kLocked, arch::mo_lock, arch::mo_hint);
  }

  // 0, or ctx.give_up_code() (EBUSY / ETIMEDOUT).
  int lock(const WaitCtx& ctx, bool adaptive = false, bool shared = false) {
    if (try_lock()) return 0;
    return lock_slow(ctx, adaptive, shared);
  }

  // False when the mutex was not locked (an unlock nobody paired with a
  // lock: preload keeps glibc's account of those). Unlocking a mutex another
  // thread holds releases it, as glibc's does.
  bool unlock(bool shared = false) {
    uint32_t old = word_.exchange(kUnlocked, arch::mo_unlock);
    if (__builtin_expect(old == kLocked, 1)) return true;
    if (old == kContended) {
      arch::futex_wake(&word_, 1, shared);
      lockevent_inc(LockEvent::futex_mutex_wake);
    }
    return old != kUnlocked;
  }

  bool is_locked() const { return word_.load(arch::mo_hint) != kUnlocked; }

 private:
  __attribute__((noinline)) int lock_slow(const WaitCtx& ctx, bool adaptive, bool shared) {
    LOCKSWAP_TRACE_ACQUIRE_BEGIN(this, kTraceMutex);
    int rc = lock_wait(ctx, adaptive, shared);
    LOCKSWAP_TRACE_ACQUIRE_END(this, kTraceMutex, rc);
    return rc;
  }

  int lock_wait(const WaitCtx& ctx, bool adaptive, bool shared) {
    if (!ctx.may_block()) return EBUSY;
    if (adaptive) {
      for (unsigned i = 0; i < kAdaptiveSpins; ++i) {
        arch::cpu_relax();
        if (word_.load(arch::mo_hint) == kUnlocked && try_lock()) return 0;
      }
    }
    while (word_.exchange(kContended, arch::mo_lock) != kUnlocked) {
      lockevent_inc(LockEvent::futex_mutex_sleep);
      if (ctx.sleep(&word_, kContended, shared) == ETIMEDOUT) return ETIMEDOUT;
    }
    return 0;
  }

  std::atomic<uint32_t> word_;
};
static_assert(sizeof(FutexMutex) == 4);
static_assert(std::is_standard_layout_v<FutexMutex>);

}  // namespace lockswap
