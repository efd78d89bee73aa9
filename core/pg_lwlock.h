// core/pg_lwlock.h — PostgreSQL 15's LWLock algorithm (lwlock.c), as a plain type.
//
// Design
// ------
// A port of the lock PostgreSQL 15 builds its shared memory on, so that
// lockswap can run it in place of the original (preload/lwlock/, the `pg`
// variant): the control beside the unpreloaded server, which tells the cost
// of the redirection apart from the cost of an algorithm.
//
// Words (PostgreSQL's own layout and values, docs/lwlock.md):
//   state (u32)  bits 0-23   shared holders (LW_VAL_SHARED = 1 each)
//                bit 24      an exclusive holder (LW_VAL_EXCLUSIVE)
//                bit 28      LOCKED: the wait-list spinlock
//                bit 29      RELEASE_OK: a release may wake waiters (cleared
//                            while woken waiters have not retried yet)
//                bit 30      HAS_WAITERS
//   head, tail (i32)  the wait list: process numbers (each process has one
//                waiter record, indexed by that number), kNoProc = none.
//   Free: state = RELEASE_OK, head = tail = kNoProc (what PostgreSQL's own
//   initialisation writes, so locks PostgreSQL initialised are free here).
//
// Transitions (as lwlock.c):
//   attempt   CAS: exclusive if no holder, shared if no exclusive holder.
//   queue     under the list lock: HAS_WAITERS, push (tail; wait-until-free
//             waiters at the head), then attempt once more and dequeue
//             ourselves if that succeeded.
//   release   state -= value; if that left no holder and HAS_WAITERS and
//             RELEASE_OK are set: wakeup.
//   wakeup    under the list lock: take every shared and wait-until-free
//             waiter, or the first exclusive one if it comes before any
//             other; clear RELEASE_OK if a lock-taker was woken; clear
//             HAS_WAITERS if the list emptied; drop the list lock; then for
//             each: waiting = 0, wake.
//   variable  (the WAL insertion locks) a wait-until-free waiter also
//             returns when the protected variable changed; the variable is
//             read and written under the list lock.
//
// Deviations from PostgreSQL, each because lockswap is not PostgreSQL:
//   * Sleeping: a waiter sleeps on the `waiting` word of its own record
//     (a process-shared futex) instead of its PGPROC's semaphore. So there
//     are no absorbed wakeups to give back (lwlock.c's extraWaits): a stray
//     futex wake only makes a waiter re-check `waiting` and sleep again.
//   * The waiter records live in lockswap's side area (indexed by the
//     process number, never pointed into), not in PGPROC.
//   * The list-lock backoff is core/backoff.h's (spin, yield, then short
//     sleeps) where PostgreSQL's perform_spin_delay spins and then sleeps
//     from 1 ms upwards with random growth.
//
// Memory order: the state CASes are sequentially consistent, as PostgreSQL's
// pg_atomic_* read-modify-writes are full barriers; the list lock is taken
// by an acquire fetch_or and dropped by a release fetch_and (or the wakeup's
// release CAS). `waiting` is stored with release after the record left the
// list and loaded with acquire by its sleeper.
#pragma once
#include <atomic>
#include <cstdint>

#include "arch/futex.h"
#include "core/backoff.h"
#include "core/wait_ctx.h"

namespace lockswap::pglw {

// LWLockMode.
enum Mode : uint32_t { kExclusive = 0, kShared = 1, kWaitUntilFree = 2 };

inline constexpr uint32_t kValShared = 1;
inline constexpr uint32_t kValExclusive = 1u << 24;
inline constexpr uint32_t kLockMask = (1u << 25) - 1;
inline constexpr uint32_t kFlagLocked = 1u << 28;
inline constexpr uint32_t kFlagReleaseOk = 1u << 29;
inline constexpr uint32_t kFlagHasWaiters = 1u << 30;
inline constexpr int32_t kNoProc = 0x7fffffff;  // INVALID_PGPROCNO
inline constexpr uint32_t kFreeState = kFlagReleaseOk;
static_assert((kLockMask & (kFlagLocked | kFlagReleaseOk | kFlagHasWaiters)) == 0, "holders and flags are disjoint");
static_assert((kValExclusive & kLockMask) == kValExclusive && kValExclusive > (1u << 23) - 1,
              "more shared holders than MAX_BACKENDS fit below the exclusive bit");

// One process's waiter record (lwWaiting, lwWaitMode, lwWaitLink of PGPROC).
struct Waiter {
  std::atomic<uint32_t> waiting;  // 1 while queued or not yet woken; the futex word
  uint32_t mode;
  int32_t next;
  int32_t prev;
};
static_assert(sizeof(Waiter) == 16);

struct Words {
  std::atomic<uint32_t> state;
  std::atomic<int32_t> head;
  std::atomic<int32_t> tail;
};

// The waiter records of every process: a table indexed by process number.
struct Waiters {
  Waiter* table;
  Waiter& at(int32_t proc) const { return table[proc]; }
};

class Lock {
 public:
  // LWLockAttemptLock: true = must wait.
  static bool attempt(Words& w, Mode mode) {
    uint32_t old = w.state.load(std::memory_order_relaxed);
    for (;;) {
      bool free = mode == kExclusive ? (old & kLockMask) == 0 : (old & kValExclusive) == 0;
      if (!free) return true;
      uint32_t desired = old + (mode == kExclusive ? kValExclusive : kValShared);
      if (w.state.compare_exchange_weak(old, desired, std::memory_order_seq_cst, std::memory_order_relaxed)) return false;
    }
  }

  // LWLockQueueSelf (the caller checked that it may wait at all).
  static void queue_self(Words& w, const Waiters& ws, int32_t me, Mode mode) {
    list_lock(w);
    w.state.fetch_or(kFlagHasWaiters, std::memory_order_seq_cst);
    Waiter& self = ws.at(me);
    self.waiting.store(1, std::memory_order_relaxed);
    self.mode = mode;
    if (mode == kWaitUntilFree)
      push_head(w, ws, me);
    else
      push_tail(w, ws, me);
    list_unlock(w);
  }

  // LWLockDequeueSelf: after a second attempt succeeded (or the variable
  // changed). If a waker took us off the list first, wait for its wakeup.
  static void dequeue_self(Words& w, const Waiters& ws, int32_t me, const WaitCtx& ctx) {
    list_lock(w);
    bool found = remove_if_listed(w, ws, me);
    if (w.head.load(std::memory_order_relaxed) == kNoProc &&
        (w.state.load(std::memory_order_relaxed) & kFlagHasWaiters) != 0)
      w.state.fetch_and(~kFlagHasWaiters, std::memory_order_seq_cst);
    list_unlock(w);
    if (found) {
      ws.at(me).waiting.store(0, std::memory_order_relaxed);
      return;
    }
    // The waker cleared RELEASE_OK for us; we are not going to retry.
    w.state.fetch_or(kFlagReleaseOk, std::memory_order_seq_cst);
    sleep_until_woken(ws, me, ctx);
  }

  static void sleep_until_woken(const Waiters& ws, int32_t me, const WaitCtx& ctx) {
    Waiter& self = ws.at(me);
    while (self.waiting.load(std::memory_order_acquire) != 0) ctx.sleep(&self.waiting, 1, /*shared=*/true);
  }

  // After a wakeup, before retrying (LWLockAcquire).
  static void allow_release(Words& w) { w.state.fetch_or(kFlagReleaseOk, std::memory_order_seq_cst); }

  // LWLockRelease's state change and wakeup. The mode is the held one.
  static void release(Words& w, const Waiters& ws, Mode mode) {
    uint32_t now = w.state.fetch_sub(mode == kExclusive ? kValExclusive : kValShared, std::memory_order_seq_cst) -
                   (mode == kExclusive ? kValExclusive : kValShared);
    constexpr uint32_t kBoth = kFlagHasWaiters | kFlagReleaseOk;
    if ((now & kBoth) == kBoth && (now & kLockMask) == 0) wakeup(w, ws);
  }

  static bool exclusively_held(const Words& w) { return (w.state.load(std::memory_order_seq_cst) & kValExclusive) != 0; }

  // LWLockConflictsWithVar: true = must wait; otherwise `result` says
  // whether the lock was free (true) or the variable changed (`*newval`).
  static bool conflicts_with_var(Words& w, const uint64_t* var, uint64_t oldval, uint64_t* newval, bool& result) {
    if (!exclusively_held(w)) {
      result = true;
      return false;
    }
    result = false;
    list_lock(w);
    uint64_t value = __atomic_load_n(var, __ATOMIC_RELAXED);
    list_unlock(w);
    if (value == oldval) return true;
    *newval = value;
    return false;
  }

  // LWLockUpdateVar: set the variable and wake the wait-until-free waiters
  // at the head of the list.
  static void update_var(Words& w, const Waiters& ws, uint64_t* var, uint64_t value) {
    list_lock(w);
    __atomic_store_n(var, value, __ATOMIC_RELAXED);
    int32_t woken = kNoProc, last = kNoProc;
    for (int32_t p = w.head.load(std::memory_order_relaxed); p != kNoProc;) {
      Waiter& x = ws.at(p);
      int32_t next = x.next;
      if (x.mode != kWaitUntilFree) break;
      remove(w, ws, p);
      append_chain(ws, woken, last, p);
      p = next;
    }
    list_unlock(w);
    wake_chain(ws, woken);
  }

  // Set the variable under the list lock (LWLockReleaseClearVar's first half).
  static void set_var(Words& w, uint64_t* var, uint64_t value) {
    list_lock(w);
    __atomic_store_n(var, value, __ATOMIC_RELAXED);
    list_unlock(w);
  }

 private:
  static void list_lock(Words& w) {
    for (;;) {
      uint32_t old = w.state.fetch_or(kFlagLocked, std::memory_order_acquire);
      if ((old & kFlagLocked) == 0) return;
      Backoff backoff;
      while (w.state.load(std::memory_order_relaxed) & kFlagLocked) backoff.pause();
    }
  }
  static void list_unlock(Words& w) { w.state.fetch_and(~kFlagLocked, std::memory_order_release); }

  // LWLockWakeup (out of line: the release's fast path keeps no frame).
  __attribute__((noinline)) static void wakeup(Words& w, const Waiters& ws) {
    bool release_ok = true, woke_taker = false;
    int32_t woken = kNoProc, last = kNoProc;
    list_lock(w);
    for (int32_t p = w.head.load(std::memory_order_relaxed); p != kNoProc;) {
      Waiter& x = ws.at(p);
      int32_t next = x.next;
      if (woke_taker && x.mode == kExclusive) {
        p = next;
        continue;
      }
      remove(w, ws, p);
      append_chain(ws, woken, last, p);
      if (x.mode != kWaitUntilFree) {
        release_ok = false;
        woke_taker = true;
      }
      if (x.mode == kExclusive) break;
      p = next;
    }
    bool empty = w.head.load(std::memory_order_relaxed) == kNoProc;
    uint32_t old = w.state.load(std::memory_order_relaxed);
    for (;;) {
      uint32_t desired = release_ok ? old | kFlagReleaseOk : old & ~kFlagReleaseOk;
      if (empty) desired &= ~kFlagHasWaiters;
      desired &= ~kFlagLocked;  // and the list lock goes with it
      if (w.state.compare_exchange_weak(old, desired, std::memory_order_seq_cst, std::memory_order_relaxed)) break;
    }
    wake_chain(ws, woken);
  }

  // The records taken off the list, chained through `next` until woken.
  static void append_chain(const Waiters& ws, int32_t& first, int32_t& last, int32_t p) {
    ws.at(p).next = kNoProc;
    if (last == kNoProc)
      first = p;
    else
      ws.at(last).next = p;
    last = p;
  }
  static void wake_chain(const Waiters& ws, int32_t p) {
    while (p != kNoProc) {
      Waiter& x = ws.at(p);
      int32_t next = x.next;  // read before the sleeper may reuse its record
      x.waiting.store(0, std::memory_order_release);
      arch::futex_wake(&x.waiting, 1, /*shared=*/true);
      p = next;
    }
  }

  // proclist operations, under the list lock.
  static void push_tail(Words& w, const Waiters& ws, int32_t p) {
    int32_t tail = w.tail.load(std::memory_order_relaxed);
    ws.at(p).next = kNoProc;
    ws.at(p).prev = tail;
    if (tail == kNoProc)
      w.head.store(p, std::memory_order_relaxed);
    else
      ws.at(tail).next = p;
    w.tail.store(p, std::memory_order_relaxed);
  }
  static void push_head(Words& w, const Waiters& ws, int32_t p) {
    int32_t head = w.head.load(std::memory_order_relaxed);
    ws.at(p).prev = kNoProc;
    ws.at(p).next = head;
    if (head == kNoProc)
      w.tail.store(p, std::memory_order_relaxed);
    else
      ws.at(head).prev = p;
    w.head.store(p, std::memory_order_relaxed);
  }
  static void remove(Words& w, const Waiters& ws, int32_t p) {
    Waiter& x = ws.at(p);
    if (x.prev == kNoProc)
      w.head.store(x.next, std::memory_order_relaxed);
    else
      ws.at(x.prev).next = x.next;
    if (x.next == kNoProc)
      w.tail.store(x.prev, std::memory_order_relaxed);
    else
      ws.at(x.next).prev = x.prev;
  }
  static bool remove_if_listed(Words& w, const Waiters& ws, int32_t me) {
    for (int32_t p = w.head.load(std::memory_order_relaxed); p != kNoProc; p = ws.at(p).next) {
      if (p != me) continue;
      remove(w, ws, p);
      return true;
    }
    return false;
  }
};

}  // namespace lockswap::pglw
