// preload/pthread/variants/lockref.h — the lockref word (core/lockref.h) laid over
// pthread_rwlock_t and sem_t.
//
// Rwlock (LOCKSWAP_RWLOCK=lockref): core/lockref_rwlock.h in word A (offset
// 0). Readers enter by a bounded lock-free get, writers take the lock half and
// drain the count. Recursive reads keep the foundation's rule, scoped to the
// lock (core/read_pref.h hold buckets, keyed by the object's address like the
// rwsem's): a thread holding a read lock of this rwlock re-enters past a
// draining writer; the writer-nonrecursive kind keeps readers behind writers,
// as glibc does.
//
// Semaphore (LOCKSWAP_SEM=lockref): core/sem.h's LockrefSem over glibc's
// sem_t layout (value in the low half of the word at offset 0, so sem_open's
// semaphores start valid).
#pragma once
#include <semaphore.h>

#include "core/lockref_rwlock.h"
#include "core/read_pref.h"
#include "core/thread_registry.h"
#include "preload/abi.h"
#include "preload/pthread/variants/sem.h"

namespace lockswap {

static_assert(sizeof(LockrefRwlock) <= sizeof(abi::RwlockObject::word_a) + sizeof(abi::RwlockObject::word_b) +
                                           sizeof(abi::RwlockObject::word_c),
              "the lockref rwlock fits the algorithm words before the writer TID");

struct LockrefRwlockVariant {
  static constexpr bool forwards_to_glibc = false;
  static LockrefRwlock& at(abi::RwlockObject& o) { return *reinterpret_cast<LockrefRwlock*>(&o.word_a); }
  static bool writer_preferring(const abi::RwlockObject& o) {
    return o.flags.load(std::memory_order_relaxed) == abi::kRwPreferWriterNonrecursive;
  }

  // The idle pair stays frame-free: the inline part is read_fast() plus the
  // hold count (one TLS add); everything that may call (the rest of the
  // acquisition with its bookkeeping, the drainer's wake) is a tail call.
  static int rdlock(abi::RwlockObject& o, const WaitCtx& ctx, bool writer_pref) {
    LockrefRwlock::FastRead r = at(o).read_fast(writer_pref);
    if (__builtin_expect(r == LockrefRwlock::FastRead::entered, 1)) {
      read_pref::note_read_acquired(&o);
      return 0;
    }
    return rdlock_slow(o, ctx, writer_pref, r);
  }
  static int wrlock(abi::RwlockObject& o, const WaitCtx& ctx) { return at(o).write_lock(ctx); }
  // The dispatcher asks this to tell a write unlock from a read unlock. A
  // writer still draining holds the lock half while readers remain inside,
  // and any of them may be the caller: only a drained lock is write-held.
  static bool write_held(abi::RwlockObject& o) { return at(o).write_locked(); }
  static void read_unlock(abi::RwlockObject& o) {
    if (__builtin_expect(!at(o).read_unlock_fast(), 0)) return read_unlock_last(o);
    read_pref::note_read_released(&o);
  }
  static void write_unlock(abi::RwlockObject& o) { at(o).write_unlock(writer_preferring(o)); }

 private:
  __attribute__((noinline)) static int rdlock_slow(abi::RwlockObject& o, WaitCtx ctx, bool writer_pref,
                                                   LockrefRwlock::FastRead r) {
    bool holds_reads = !writer_pref && read_pref::holds_read_of(&o);
    int rc = at(o).read_lock_slow(ctx, holds_reads, writer_pref, r);
    if (rc == 0) read_pref::note_read_acquired(&o);
    return rc;
  }
  // The last reader out, with a writer asleep draining.
  __attribute__((noinline)) static void read_unlock_last(abi::RwlockObject& o) {
    at(o).wake_drainer();
    read_pref::note_read_released(&o);
  }
};

using LockrefSemVariant = SemVariantOf<LockrefSem>;

}  // namespace lockswap
