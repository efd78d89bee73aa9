// preload/lwlock/variants.h — the LOCKSWAP_LWLOCK adapters: each core
// algorithm laid over PostgreSQL's LWLock (preload/lwlock/pg15.h).
//
// An adapter has the same static functions; preload/lwlock/lwlock.cpp
// keeps everything else (the list of held locks, interrupt holdoff, the
// errors, the statistics) once for all of them:
//   try_acquire(l, mode)            -> acquired, never waits
//   acquire_slow(l, mode)           -> after a failed try: acquire; true if it slept
//   acquire_or_wait_slow(l, mode)   -> after a failed try: acquired (true), or
//                                      waited until the lock was free (false)
//   wait_for_var(l, var, old, new)  -> LWLockWaitForVar's result
//   update_var(l, var, value)       -> set, wake the variable's waiters
//   set_var(l, var, value)          -> set (before a release)
//   release(l, mode)
// Every lock starts in PostgreSQL's free state (pg15.h), which each adapter
// takes as free. Every sleep is a process-shared futex: the locks live in
// shared memory, mapped at different addresses in different processes.
#pragma once
#include "core/futex_rwlock.h"
#include "core/pg_lwlock.h"
#include "preload/lwlock/host.h"
#include "preload/lwlock/pg15.h"

namespace lockswap::lwlock {

using pglw::Mode;

// LOCKSWAP_LWLOCK=pg: PostgreSQL 15's algorithm (core/pg_lwlock.h) on the
// lock's own words, its waiter records in the side area. The control.
struct LwlockPg {
  using L = pglw::Lock;
  static bool try_acquire(PgLwlock& l, Mode m) { return !L::attempt(pg_words(l), m); }

  // LWLockAcquire's loop after its first attempt failed.
  static bool acquire_slow(PgLwlock& l, Mode m) {
    pglw::Words& w = pg_words(l);
    int32_t me = my_procno();
    for (bool slept = false;; slept = true) {
      L::queue_self(w, g_host.waiters, me, m);
      if (!L::attempt(w, m)) {
        L::dequeue_self(w, g_host.waiters, me, ctx());
        return slept;
      }
      sleep(l, me);
      L::allow_release(w);
      if (!L::attempt(w, m)) return true;
    }
  }

  static bool acquire_or_wait_slow(PgLwlock& l, Mode m) {
    pglw::Words& w = pg_words(l);
    int32_t me = my_procno();
    L::queue_self(w, g_host.waiters, me, pglw::kWaitUntilFree);
    if (L::attempt(w, m)) {
      sleep(l, me);
      return false;
    }
    L::dequeue_self(w, g_host.waiters, me, ctx());
    return true;
  }

  static bool wait_for_var(PgLwlock& l, uint64_t* var, uint64_t old, uint64_t* newval) {
    pglw::Words& w = pg_words(l);
    for (;;) {
      bool result;
      if (!L::conflicts_with_var(w, var, old, newval, result)) return result;
      int32_t me = my_procno();
      L::queue_self(w, g_host.waiters, me, pglw::kWaitUntilFree);
      L::allow_release(w);
      if (!L::conflicts_with_var(w, var, old, newval, result)) {
        L::dequeue_self(w, g_host.waiters, me, ctx());
        return result;
      }
      sleep(l, me);
    }
  }

  static void update_var(PgLwlock& l, uint64_t* var, uint64_t v) { L::update_var(pg_words(l), g_host.waiters, var, v); }
  static void set_var(PgLwlock& l, uint64_t* var, uint64_t v) { L::set_var(pg_words(l), var, v); }
  static void release(PgLwlock& l, Mode m) { L::release(pg_words(l), g_host.waiters, m); }

 private:
  static WaitCtx ctx() { return WaitCtx::blocking(kLwlockWaits); }
  static void sleep(const PgLwlock& l, int32_t me) {
    wait_start(l);
    L::sleep_until_woken(g_host.waiters, me, ctx());
    wait_end();
  }
};

// LOCKSWAP_LWLOCK=futex: core/futex_rwlock.h's reference lock in the state
// word (+4) and its writers-waiting count (+8), counting from PostgreSQL's
// free value. Waiting until free and the variable wait sleep on the same
// word; the variable's update wakes them (BasicFutexRwlock::wake_sleepers).
struct LwlockFutex {
  using F = BasicFutexRwlock<kFreeState>;
  static_assert(sizeof(F) == 8, "the state word and the writers count: +4 and +8 of the LWLock");
  static F& at(PgLwlock& l) { return *reinterpret_cast<F*>(&l.state); }

  static bool try_acquire(PgLwlock& l, Mode m) {
    return (m == pglw::kExclusive ? at(l).write_lock(WaitCtx::try_once(kLwlockWaits), true)
                                  : at(l).read_lock(WaitCtx::try_once(kLwlockWaits), false, true)) == 0;
  }
  // The reference lock's own slow path, taken a step at a time so that the
  // adapter knows whether it slept: PostgreSQL's LWLockAcquire returns true
  // when it got the lock without sleeping, even after its first attempt
  // failed, and WALInsertLockAcquire moves to another insertion lock only
  // after a real wait. A try fails only while the lock is held against
  // `m` (a reader-preferring try never fails otherwise, a writer's fails on
  // anything but the free word); sleep_unless registers this process as a
  // sleeper, re-checks, and sleeps only if the lock is still held, as
  // write_lock()/read_lock() do. The writers-waiting count they keep serves
  // the writer-preferring kind only, never an LWLock. The wait event is
  // published just before the first sleep, as PostgreSQL publishes it
  // around its semaphore sleep.
  static bool acquire_slow(PgLwlock& l, Mode m) {
    check_may_wait();
    const bool exclusive = m == pglw::kExclusive;
    bool slept = false;
    while (!try_acquire(l, m)) {
      if (exclusive && !at(l).held()) {
        // Free, with the sleepers bit: a sleeper (sleep_unless here or in
        // a variable wait) marked the word as its holder let go. The
        // writer's try takes the bare free word only; nobody sleeps on a
        // free lock, so the bit goes (and any sleeper just marking it
        // wakes to re-check).
        at(l).wake_sleepers(true);
        continue;
      }
      at(l).sleep_unless(ctx(), true, [&] {
        if (!(exclusive ? at(l).held() : at(l).write_locked())) return false;
        if (!slept) wait_start(l);
        slept = true;
        return true;
      });
    }
    if (slept) wait_end();
    return slept;
  }
  static bool acquire_or_wait_slow(PgLwlock& l, Mode) {
    check_may_wait();
    wait_start(l);
    at(l).wait_until_free(ctx(), true);
    wait_end();
    return false;
  }
  static bool wait_for_var(PgLwlock& l, uint64_t* var, uint64_t old, uint64_t* newval) {
    bool waited = false, result;
    for (;;) {
      if (!at(l).write_locked()) {
        result = true;
        break;
      }
      uint64_t v = __atomic_load_n(var, __ATOMIC_ACQUIRE);
      if (v != old) {
        *newval = v;
        result = false;
        break;
      }
      if (!waited) {
        check_may_wait();
        wait_start(l);
        waited = true;
      }
      at(l).sleep_unless(ctx(), true, [&] { return at(l).write_locked() && __atomic_load_n(var, __ATOMIC_ACQUIRE) == old; });
    }
    if (waited) wait_end();
    return result;
  }
  static void update_var(PgLwlock& l, uint64_t* var, uint64_t v) {
    __atomic_store_n(var, v, __ATOMIC_RELEASE);
    at(l).wake_sleepers(true);
  }
  static void set_var(PgLwlock&, uint64_t* var, uint64_t v) { __atomic_store_n(var, v, __ATOMIC_RELEASE); }
  static void release(PgLwlock& l, Mode) { at(l).unlock(true); }

 private:
  static WaitCtx ctx() { return WaitCtx::blocking(kLwlockWaits); }
};

}  // namespace lockswap::lwlock

// The process-shared rw_semaphore adapters (LwlockRwsemSteal, LwlockRwsemRspin)
// and percid on the same rwsem (LwlockPercid).
#include "preload/lwlock/variants_rwsem.h"
#include "preload/lwlock/variants_percid.h"

namespace lockswap::lwlock {

// Unselected tranches of a redirected server run PostgreSQL's algorithm.
using LwlockOff = LwlockPg;

}  // namespace lockswap::lwlock
