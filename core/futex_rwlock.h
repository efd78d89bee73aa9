// core/futex_rwlock.h — the reference reader-writer lock on one futex word.
//
// Design
// ------
// Deliberately simple (musl-like), the correctness yardstick for core/rwsem.h.
//
//   state (u32)                         | meaning
//   ------------------------------------+--------------------------------------
//   bits 0..30 == 0                     | free
//   bits 0..30 == n, 0 < n < kWriter    | n readers
//   bits 0..30 == kWriter (0x7fffffff)  | write-locked
//   bit 31 (kSleepers)                  | someone may sleep on `state`: the
//                                       | release that frees the lock wakes all
//   writers_waiting (u32)               | writers blocked (only consulted for
//                                       | the writer-preferring kind)
//
// Policies (glibc's two behaviours):
//   * reader-preferring (default kinds): a reader gets in whenever no writer
//     holds the lock — so recursive read locking can never deadlock;
//   * writer-preferring non-recursive: a reader also waits while any writer
//     waits (glibc's PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP).
//
// Transitions (all by CAS on `state`):
//   rdlock  n -> n+1 when allowed;   wrlock 0 -> kWriter
//   unlock  kWriter -> 0, 1 -> 0, n -> n-1; a transition to 0 also clears
//           kSleepers and, if it was set, wakes every sleeper (they re-race).
//   sleep   set kSleepers by CAS, then futex-wait on the value with it set.
// A writer that gives up while readers might be waiting for it (writer-
// preferring kind) wakes everyone, since it may have been their only reason.
// Cancellation: readers sleep without any registration; a writer's count in
// writers_waiting is dropped by an unwind guard if an asynchronous
// cancellation ends it in its sleep.
//
// Memory order: acquire on acquiring CASes, release on releasing ones.
//
// The free value is a template parameter, kFree (0 for pthread objects,
// whose zero-filled memory is free). A lock laid over a word that its owner
// initialises to another constant (PostgreSQL's LWLock starts at 1 << 29,
// preload/lwlock/) counts its readers above that constant: n readers are
// kFree + n, and kWriter stays the all-ones count. Everything else is the
// same code.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>

#include "arch/atomic.h"
#include "arch/futex.h"
#include "core/thread_registry.h"
#include "core/trace.h"
#include "core/wait_ctx.h"

namespace lockswap {

template <uint32_t kFree>
class BasicFutexRwlock {
 public:
  static constexpr uint32_t kSleepers = 1u << 31;
  static constexpr uint32_t kCountMask = kSleepers - 1;
  static constexpr uint32_t kWriter = kCountMask;
  static constexpr uint32_t kMaxReaders = kWriter - 1;  // the stored count: kFree + readers
  static_assert((kWriter & kSleepers) == 0 && kMaxReaders < kWriter);
  static_assert(kFree < kMaxReaders / 2, "room for readers above the free value");

  // 0, EAGAIN (reader count would overflow), or ctx.give_up_code().
  int read_lock(const WaitCtx& ctx, bool writer_preferring, bool shared = false) {
    uint32_t s = state_.load(arch::mo_hint);
    if (__builtin_expect(s < kMaxReaders && !writer_preferring, 1) &&
        state_.compare_exchange_weak(s, s + 1, arch::mo_lock, arch::mo_hint))
      return 0;
    return read_lock_slow(ctx, writer_preferring, shared);
  }

  int write_lock(const WaitCtx& ctx, bool shared = false) {
    uint32_t s = kFree;
    if (state_.compare_exchange_strong(s, kWriter, arch::mo_lock, arch::mo_hint)) return 0;
    return write_lock_slow(ctx, shared);
  }

  // Release a read or write hold (the state says which).
  void unlock(bool shared = false) {
    uint32_t s = state_.load(arch::mo_hint);
    uint32_t next = released(s);
    if (__builtin_expect(!(s & kSleepers), 1) &&
        state_.compare_exchange_weak(s, next, arch::mo_unlock, arch::mo_hint))
      return;
    unlock_slow(shared);
  }

  bool write_locked() const { return (state_.load(arch::mo_hint) & kCountMask) == kWriter; }
  uint32_t readers() const {
    uint32_t n = state_.load(arch::mo_hint) & kCountMask;
    return n == kWriter ? 0 : n - kFree;
  }
  bool held() const { return (state_.load(arch::mo_hint) & kCountMask) != kFree; }

  // Sleep until no one holds the lock, without taking it (PostgreSQL's
  // LW_WAIT_UNTIL_FREE). Returns at once if it is free.
  void wait_until_free(const WaitCtx& ctx, bool shared = false) {
    for (;;) {
      uint32_t s = state_.load(arch::mo_lock);
      if ((s & kCountMask) == kFree) return;
      if (!mark_sleepers(s)) continue;
      sleep(s, ctx, shared);
    }
  }

  // Wake every sleeper to re-check a condition of its own (a variable the
  // holder changed). Clearing kSleepers changes the word, so a sleeper that
  // marked it before reading the condition cannot sleep through this: its
  // futex wait fails, or it read the condition after the change.
  void wake_sleepers(bool shared = false) {
    if (state_.fetch_and(~kSleepers, arch::mo_dekker) & kSleepers) arch::futex_wake(&state_, arch::futex_wake_all, shared);
  }
  // Sleep until woken (by a release or wake_sleepers) unless `still_waiting`,
  // evaluated after this sleeper is registered, says otherwise.
  template <class Cond>
  void sleep_unless(const WaitCtx& ctx, bool shared, Cond&& still_waiting) {
    uint32_t s = state_.load(arch::mo_hint);
    if (!mark_sleepers(s)) return;
    if (!still_waiting()) return;
    sleep(s, ctx, shared);
  }

 private:
  __attribute__((noinline)) int read_lock_slow(const WaitCtx& ctx, bool writer_preferring, bool shared) {
    LOCKSWAP_TRACE_ACQUIRE_BEGIN(this, kTraceRead);
    int rc = read_lock_wait(ctx, writer_preferring, shared);
    LOCKSWAP_TRACE_ACQUIRE_END(this, kTraceRead, rc);
    return rc;
  }

  int read_lock_wait(const WaitCtx& ctx, bool writer_preferring, bool shared) {
    for (;;) {
      uint32_t s = state_.load(arch::mo_hint);
      uint32_t n = s & kCountMask;
      bool blocked = n == kWriter || (writer_preferring && writers_waiting_.load(arch::mo_hint) != 0);
      if (!blocked) {
        if (n == kMaxReaders) return EAGAIN;
        if (state_.compare_exchange_weak(s, s + 1, arch::mo_lock, arch::mo_hint)) return 0;
        continue;
      }
      if (!ctx.may_block()) return EBUSY;
      if (!mark_sleepers(s)) continue;
      // Dekker pair with write_lock()'s give-up path: either it sees our
      // kSleepers and wakes us, or we see its writers_waiting drop to zero.
      if (n != kWriter && writers_waiting_.load(arch::mo_dekker) == 0) continue;
      if (sleep(s, ctx, shared) == ETIMEDOUT) return ETIMEDOUT;
    }
  }

  __attribute__((noinline)) int write_lock_slow(const WaitCtx& ctx, bool shared) {
    LOCKSWAP_TRACE_ACQUIRE_BEGIN(this, kTraceWrite);
    int rc = write_lock_wait(ctx, shared);
    LOCKSWAP_TRACE_ACQUIRE_END(this, kTraceWrite, rc);
    return rc;
  }

  int write_lock_wait(const WaitCtx& ctx, bool shared) {
    if (!ctx.may_block()) return EBUSY;
    uint32_t s;
    writers_waiting_.fetch_add(1, arch::mo_dekker);
    WaitingWriter registered{*this, shared};
    int rc = 0;
    for (;;) {
      s = state_.load(arch::mo_hint);
      if ((s & kCountMask) == kFree) {
        if (state_.compare_exchange_weak(s, (s & kSleepers) | kWriter, arch::mo_lock, arch::mo_hint)) break;
        continue;
      }
      if (!mark_sleepers(s)) continue;
      if (sleep(s, ctx, shared) == ETIMEDOUT) { rc = ETIMEDOUT; break; }
    }
    registered.armed = false;
    stop_waiting_as_writer(rc != 0, shared);
    return rc;
  }

  // Readers of the writer-preferring kind may be waiting only because we were.
  void stop_waiting_as_writer(bool gave_up, bool shared) {
    if (writers_waiting_.fetch_sub(1, arch::mo_dekker) == 1 && gave_up && (state_.load(arch::mo_dekker) & kSleepers))
      arch::futex_wake(&state_, arch::futex_wake_all, shared);
  }

  // A writer's registration in writers_waiting_; its destructor acts only
  // when an asynchronous cancellation unwinds the sleeping writer.
  struct WaitingWriter {
    BasicFutexRwlock& l;
    bool shared;
    bool armed = true;
    ~WaitingWriter() {
      if (armed) l.stop_waiting_as_writer(true, shared);
    }
  };

  __attribute__((noinline)) void unlock_slow(bool shared) {
    uint32_t s = state_.load(arch::mo_hint);
    for (;;) {
      uint32_t next = released(s);
      if (state_.compare_exchange_weak(s, next, arch::mo_unlock, arch::mo_hint)) {
        if (next == kFree && (s & kSleepers)) {
          lockevent_inc(LockEvent::futex_rwlock_wake);
          arch::futex_wake(&state_, arch::futex_wake_all, shared);
        }
        return;
      }
    }
  }

  // The state after one hold of `s` is released: the last holder frees the
  // lock and clears kSleepers (the release then wakes every sleeper).
  static uint32_t released(uint32_t s) {
    uint32_t n = s & kCountMask;
    return (n == kWriter || n == kFree + 1) ? kFree : s - 1;
  }

  // Make sure a release of state `s` will wake us; false if the state moved.
  bool mark_sleepers(uint32_t s) {
    return (s & kSleepers) || state_.compare_exchange_strong(s, s | kSleepers, arch::mo_dekker, arch::mo_hint);
  }
  int sleep(uint32_t s, const WaitCtx& ctx, bool shared) {
    lockevent_inc(LockEvent::futex_rwlock_sleep);
    return ctx.sleep(&state_, s | kSleepers, shared);
  }

  std::atomic<uint32_t> state_;
  std::atomic<uint32_t> writers_waiting_;
};
using FutexRwlock = BasicFutexRwlock<0>;
static_assert(sizeof(FutexRwlock) == 8);

}  // namespace lockswap
