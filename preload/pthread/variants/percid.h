// preload/pthread/variants/percid.h — core/percid/thread.h laid over pthread_rwlock_t.
//
// LOCKSWAP_RWLOCK=percid: readers count themselves in the slot of their
// concurrency id (LOCKSWAP_CID picks the allocator, core/cid.h); writers
// drain them through the lock's own rwsem words. The block index and the
// writer state live in bytes glibc's layout leaves free (abi.h: 36..47).
#pragma once
#include <cstddef>

#include "core/percid/thread.h"
#include "core/read_pref.h"
#include "preload/abi.h"

namespace lockswap {

struct PercidRwlockWords {
  std::atomic<uint64_t> count;  //  0  word A  (rwsem)
  std::atomic<uint64_t> owner;  //  8  word B  (rwsem)
  std::atomic<uint64_t> waitq;  // 16  word C  (rwsem)
  int32_t writer_tid_;          // 24  (abi)
  int32_t shared_;              // 28  (abi)
  std::atomic<uint32_t> osq;    // 32  word D  (rwsem)
  std::atomic<uint32_t> index;  // 36  free byte range: reader-slot block
  std::atomic<uint64_t> state;  // 40  free byte range: writer bits + epoch (futex: its low half)
};
static_assert(offsetof(PercidRwlockWords, count) == offsetof(abi::RwlockObject, word_a));
static_assert(offsetof(PercidRwlockWords, owner) == offsetof(abi::RwlockObject, word_b));
static_assert(offsetof(PercidRwlockWords, waitq) == offsetof(abi::RwlockObject, word_c));
static_assert(offsetof(PercidRwlockWords, osq) == offsetof(abi::RwlockObject, word_d));
static_assert(offsetof(PercidRwlockWords, index) == offsetof(abi::RwlockObject, unused_36));
static_assert(offsetof(PercidRwlockWords, state) + sizeof(uint64_t) <= offsetof(abi::RwlockObject, flags),
              "both words stay in the free bytes before __flags");
static_assert(offsetof(PercidRwlockWords, state) % alignof(std::atomic<uint64_t>) == 0 &&
                  alignof(pthread_rwlock_t) >= alignof(std::atomic<uint64_t>),
              "the 64-bit state word is naturally aligned in every pthread_rwlock_t");

// Recursive reads follow RwsemRwlockVariant's rule (see there): a thread that
// holds a read lock of this rwlock (core/read_pref.h hold buckets, keyed by
// the object's address) may pass a pending writer, except on the
// writer-nonrecursive kind; on the default kinds, readers held off by a
// draining writer, and readers that fall back to the rwsem, get the
// reader-preference rules (core/percid/thread.h read-slow case (e)).
struct PercidRwlockVariant {
  static constexpr bool forwards_to_glibc = false;
  using Lock = PercidRwlock<PercidRwlockWords>;
  // The reader-slot block table's spin lock: a thread that did not survive
  // the fork may have held it.
  static void after_fork_in_child() { percid::after_fork_in_child(); }
  static PercidRwlockWords& at(abi::RwlockObject& o) { return *reinterpret_cast<PercidRwlockWords*>(&o); }

  // Inlined into the entry points (as Lock's fast paths are): ctx is then a
  // constant there and nothing is spilled around the fast path.
  __attribute__((always_inline)) static int rdlock(abi::RwlockObject& o, const WaitCtx& ctx, bool writer_preferring) {
    if (__builtin_expect(Lock::read_fast(at(o)), 1)) {
      read_pref::note_read_acquired(&o);
      return 0;
    }
    return rdlock_slow(o, ctx, writer_preferring);
  }
  static int wrlock(abi::RwlockObject& o, const WaitCtx& ctx) { return Lock::write_lock(at(o), ctx); }
  static bool write_held(abi::RwlockObject& o) { return Lock::write_locked(at(o)); }
  __attribute__((always_inline)) static void read_unlock(abi::RwlockObject& o) {
    Lock::read_unlock(at(o));
    read_pref::note_read_released(&o);
  }
  static void write_unlock(abi::RwlockObject& o) { Lock::write_unlock(at(o)); }
  static void destroy(abi::RwlockObject& o) { Lock::destroy(at(o)); }

 private:
  __attribute__((noinline)) static int rdlock_slow(abi::RwlockObject& o, WaitCtx ctx, bool writer_preferring) {
    bool holds_reads = !writer_preferring && read_pref::holds_read_of(&o);
    int rc = Lock::read_slow(at(o), ctx,
                             (holds_reads ? rwsem::kReadHoldsThis : rwsem::kReadPlain) |
                                 (writer_preferring ? rwsem::kReadBehindWriters : rwsem::kReadReaderPref));
    if (rc == 0) read_pref::note_read_acquired(&o);
    return rc;
  }
};

}  // namespace lockswap
