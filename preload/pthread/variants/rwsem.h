// preload/pthread/variants/rwsem.h — core/rwsem.h laid over pthread objects.
//
// Mutex (LOCKSWAP_MUTEX=rwsem): the rwsem write side alone, so writers get
// optimistic spinning and the handoff rule. Rwlock: the whole rwsem, with the
// v5.11+ (stealing) or v5.10 (reader spinning) policy.
#pragma once
#include <cstddef>

#include "core/read_pref.h"
#include "core/rwsem.h"
#include "preload/abi.h"

namespace lockswap {

// The rwsem's four words at the offsets abi.h reserves for algorithms.
struct RwsemMutexWords {
  static constexpr bool kExclusiveOnly = true;  // RwsemTunables::exclusive_polite_ns
  std::atomic<uint64_t> count;  //  0  word A
  int32_t owner_tid_;           //  8  (abi)
  uint32_t recursion_;          // 12  (abi)
  int32_t kind_;                // 16  (abi)
  std::atomic<uint32_t> osq;    // 20  word B
  std::atomic<uint64_t> owner;  // 24  word C
  std::atomic<uint64_t> waitq;  // 32  word D
};
static_assert(offsetof(RwsemMutexWords, count) == offsetof(abi::MutexObject, word_a));
static_assert(offsetof(RwsemMutexWords, osq) == offsetof(abi::MutexObject, word_b));
static_assert(offsetof(RwsemMutexWords, owner) == offsetof(abi::MutexObject, word_c));
static_assert(offsetof(RwsemMutexWords, waitq) == offsetof(abi::MutexObject, word_d));
static_assert(sizeof(RwsemMutexWords) <= sizeof(abi::MutexObject));

struct RwsemRwlockWords {
  std::atomic<uint64_t> count;  //  0  word A
  std::atomic<uint64_t> owner;  //  8  word B
  std::atomic<uint64_t> waitq;  // 16  word C
  int32_t writer_tid_;          // 24  (abi)
  int32_t shared_;              // 28  (abi)
  std::atomic<uint32_t> osq;    // 32  word D
};
static_assert(offsetof(RwsemRwlockWords, count) == offsetof(abi::RwlockObject, word_a));
static_assert(offsetof(RwsemRwlockWords, owner) == offsetof(abi::RwlockObject, word_b));
static_assert(offsetof(RwsemRwlockWords, waitq) == offsetof(abi::RwlockObject, word_c));
static_assert(offsetof(RwsemRwlockWords, osq) == offsetof(abi::RwlockObject, word_d));
static_assert(sizeof(RwsemRwlockWords) <= sizeof(abi::RwlockObject));

struct RwsemMutexVariant {
  static constexpr bool forwards_to_glibc = false;
  // The process-wide spinner count (shared by every rwsem-based variant):
  // spinners of the parent did not come along.
  static void after_fork_in_child() { rwsem_detail::after_fork_in_child(); }
  using Sem = Rwsem<RwsemSteal, RwsemMutexWords>;
  static RwsemMutexWords& at(abi::MutexObject& o) { return *reinterpret_cast<RwsemMutexWords*>(&o); }
  // The uncontended CAS alone (no event counted on failure).
  static bool try_fast(abi::MutexObject& o) { return Sem::write_fast(at(o)); }
  static bool trylock(abi::MutexObject& o) { return Sem::write_lock(at(o), WaitCtx::try_once()) == 0; }
  // Spinning is built into the rwsem writer, so the adaptive kind needs nothing extra.
  static int lock(abi::MutexObject& o, const WaitCtx& ctx, bool) { return Sem::write_lock(at(o), ctx); }
  // False: the mutex was not locked (see FutexMutexVariant::unlock).
  static bool unlock(abi::MutexObject& o) { return Sem::write_release(at(o)); }
  static bool is_locked(abi::MutexObject& o) { return Sem::write_locked(at(o)); }
};

// Recursive read locks: the rwsem is writer-fair, so a reader may wait behind
// a queued writer, which would deadlock a thread that already holds a read
// lock on the same rwlock (POSIX allows recursive reads on glibc's default
// kinds). Each thread counts the read locks it holds per lock bucket
// (core/read_pref.h: one TLS add per lock/unlock); a thread that holds one of
// this lock (or of a lock in its bucket) takes a read-owned lock at once
// (core: rwsem::kReadHoldsThis). Default kinds also get the reader-preference
// rules of core/read_pref.h; everyone else keeps the kernel's fairness. The
// writer-nonrecursive kind keeps readers behind writers, as glibc does. The
// bucket key is the lock word's address, which core/rwsem/thread_host.cpp also uses.
template <class Policy>
struct RwsemRwlockVariant {
  static constexpr bool forwards_to_glibc = false;
  using Sem = Rwsem<Policy, RwsemRwlockWords>;
  static void after_fork_in_child() { RwsemMutexVariant::after_fork_in_child(); }  // the same spinner count
  static RwsemRwlockWords& at(abi::RwlockObject& o) { return *reinterpret_cast<RwsemRwlockWords*>(&o); }
  static const void* key(abi::RwlockObject& o) { return &at(o).count; }

  static int rdlock(abi::RwlockObject& o, const WaitCtx& ctx, bool writer_preferring) {
    uint64_t c = 0;
    if (__builtin_expect(ctx.mode != WaitCtx::Mode::try_once && Sem::read_fast(at(o), c), 1)) {
      read_pref::note_read_acquired(key(o));
      return 0;
    }
    return rdlock_slow(o, c, ctx, writer_preferring);
  }
  static int wrlock(abi::RwlockObject& o, const WaitCtx& ctx) { return Sem::write_lock(at(o), ctx); }
  static bool write_held(abi::RwlockObject& o) { return Sem::write_locked(at(o)); }
  static void read_unlock(abi::RwlockObject& o) {
    if (__builtin_expect(!Sem::read_release_fast(at(o)), 0)) return read_unlock_last(o);
    read_pref::note_read_released(key(o));  // the address only: the lock may be gone already
  }
  static void write_unlock(abi::RwlockObject& o) { Sem::write_unlock(at(o)); }

 private:
  // The last reader leaving with waiters queued. Out of line with its
  // bookkeeping, so that the fast path keeps nothing alive across a call
  // (and needs no stack frame).
  __attribute__((noinline)) static void read_unlock_last(abi::RwlockObject& o) {
    Sem::read_unlock_last(at(o));
    read_pref::note_read_released(key(o));
  }
  __attribute__((noinline)) static int rdlock_slow(abi::RwlockObject& o, uint64_t c, WaitCtx ctx,
                                                   bool writer_preferring) {
    rwsem::ReadFlags flags = writer_preferring                     ? rwsem::kReadBehindWriters
                             : read_pref::holds_read_of(key(o)) ? rwsem::kReadHoldsThis | rwsem::kReadReaderPref
                                                                : rwsem::kReadReaderPref;
    int rc = ctx.mode == WaitCtx::Mode::try_once ? Sem::read_try(at(o), flags) : Sem::read_slow(at(o), c, ctx, flags);
    if (rc == 0) read_pref::note_read_acquired(key(o));
    return rc;
  }
};
using RwsemStealRwlockVariant = RwsemRwlockVariant<RwsemSteal>;
using RwsemRspinRwlockVariant = RwsemRwlockVariant<RwsemRspin>;

}  // namespace lockswap
