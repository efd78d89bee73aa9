// core/lockref.cpp — the lockref tunables and the lock half's sleeping path
// (design: core/lockref.h).
#include "core/lockref.h"

#include <ctime>

#include "arch/relax.h"
#include "core/wait_ctx.h"

namespace lockswap {

LockrefTunables g_lockref_tunables;

namespace lockref {

// Futex mutex #3 on the lock half: poll a little, then sleep with
// kLockSleepers set; once we have slept we always re-acquire with both bits,
// so the unlock after ours wakes the next sleeper.
void lock_half_slow(std::atomic<uint64_t>& w, bool shared) {
  for (unsigned i = 0; i < kLockSpins; ++i) {
    arch::cpu_relax();
    if ((w.load(arch::mo_hint) & kLocked) == 0 && (w.fetch_or(kLocked, arch::mo_lock) & kLocked) == 0) return;
  }
  for (;;) {
    uint64_t old = w.fetch_or(kLockBits, arch::mo_lock);
    if ((old & kLocked) == 0) return;
    lockevent_inc(LockEvent::lockref_lock_sleep);
    // EAGAIN when any bit of the lock half moved (an unlock, or user bits such
    // as core/sem.h's nwaiters): just try again.
    run_before_sleep_hook();
    arch::futex_wait(lock_futex(w), high_of(old | kLockBits), CLOCK_MONOTONIC, nullptr, shared);
    run_after_sleep_hook();
  }
}

}  // namespace lockref
}  // namespace lockswap
