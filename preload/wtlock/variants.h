// preload/wtlock/variants.h — the LOCKSWAP_WTLOCK adapters: what each variant
// does with a WiredTiger WT_RWLOCK.
//
// Design
// ------
// WiredTiger 3.2's rwlock (src/include/mutex.h, src/support/mtx_rw.c) is a
// 40-byte struct its callers embed (btree, connection, dhandle, txn global):
//
//   0x00  u64    u.v: ticket lock (current, next, reader, readers_queued,
//                readers_active)
//   0x08  5x i16 statistics offsets; __wt_rwlock_init sets the first four
//                to -1, WT_RWLOCK_INIT_TRACKED writes them after init
//   0x12  2 B    padding
//   0x14  4 B    padding
//   0x18  ptr    cond_readers  (allocated by __wt_rwlock_init, freed by
//   0x20  ptr    cond_writers   __wt_rwlock_destroy)
//
// Only mtx_rw.c's eight functions touch the ticket word and the two condition
// pointers; every caller reaches them through the PLT (docs/wtlock.md, "What
// is swapped"), so a variant that owns all eight owns the whole lock. The
// statistics offsets belong to WiredTiger's callers and are never written
// here except as WiredTiger's own init writes them.
//
// Adapters (one per line of LOCKSWAP_WTLOCK_VARIANTS, preload/config/registry.h):
//   WtlockOff     never reached: `off` installs WiredTiger's functions
//                 themselves (preload/wtlock/wtlock.cpp); here for the registry
//   WtlockWt      WiredTiger's own functions, called through lockswap's
//                 dispatch so that the profiler sees them (the control)
//   WtlockRwsem*  core/rwsem.h over the struct: count over the ticket word,
//                 osq in the free padding word, owner and waitq over the two
//                 condition pointers. Nothing is allocated: init zeroes the
//                 words, destroy zeroes them again.
//   WtlockPercid  core/percid/thread.h, its 40 bytes of words in a record of
//                 lockswap's table: WT_RWLOCK has 30 free to an algorithm
//                 (variants_percid.h)
//
// Readers use the kernel's rules (rwsem::kReadPlain): WiredTiger's ticket
// lock already queues a reader behind a waiting writer, so its code never
// relies on a recursive read passing one.
#pragma once
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "core/lock_events.h"
#include "core/rwsem.h"
#include "core/wait_ctx.h"

namespace lockswap::wtlock {

// WiredTiger's types, opaque here: a session is only passed on.
struct Session;
struct Rwlock;

// ------------------------------------------------------- WiredTiger's layout

// struct __wt_rwlock of WiredTiger 3.2 as its own code sees it.
struct WtRwlockLayout {
  uint64_t ticket;                  // 0x00 u.v
  int16_t stat_offsets[5];          // 0x08 read, write, app usecs, internal usecs, session usecs
  uint16_t pad_12;                  // 0x12
  uint32_t pad_14;                  // 0x14 the free word
  void* cond_readers;               // 0x18
  void* cond_writers;               // 0x20
};
inline constexpr size_t kTicketAt = 0x00;
inline constexpr size_t kStatOffsetsAt = 0x08;
inline constexpr unsigned kStatOffsets = 5;
inline constexpr unsigned kStatOffsetsSetByInit = 4;  // __wt_rwlock_init: one 8-byte store of -1
inline constexpr size_t kFreeWordAt = 0x14;
inline constexpr size_t kCondReadersAt = 0x18;
inline constexpr size_t kCondWritersAt = 0x20;
inline constexpr size_t kRwlockSize = 0x28;
inline constexpr size_t kRwlockAlign = 8;
static_assert(offsetof(WtRwlockLayout, ticket) == kTicketAt);
static_assert(offsetof(WtRwlockLayout, stat_offsets) == kStatOffsetsAt);
static_assert(offsetof(WtRwlockLayout, pad_14) == kFreeWordAt);
static_assert(offsetof(WtRwlockLayout, cond_readers) == kCondReadersAt);
static_assert(offsetof(WtRwlockLayout, cond_writers) == kCondWritersAt);
static_assert(sizeof(WtRwlockLayout) == kRwlockSize && alignof(WtRwlockLayout) == kRwlockAlign);
static_assert(kStatOffsetsAt + kStatOffsets * sizeof(int16_t) <= kFreeWordAt,
              "the free word lies past the statistics offsets");

// ---------------------------------------------------------- the rwsem words

// core/rwsem.h's four words on the struct; the statistics offsets in between
// stay WiredTiger's.
struct WtRwsemWords {
  std::atomic<uint64_t> count;                // 0x00 over the ticket word
  int16_t stat_offsets_[kStatOffsets];        // 0x08 WiredTiger's
  uint16_t pad_;                              // 0x12
  std::atomic<uint32_t> osq;                  // 0x14 the free word
  std::atomic<uint64_t> owner;                // 0x18 over cond_readers
  std::atomic<uint64_t> waitq;                // 0x20 over cond_writers
};
static_assert(offsetof(WtRwsemWords, count) == kTicketAt);
static_assert(offsetof(WtRwsemWords, stat_offsets_) == kStatOffsetsAt);
static_assert(offsetof(WtRwsemWords, osq) == kFreeWordAt);
static_assert(offsetof(WtRwsemWords, owner) == kCondReadersAt);
static_assert(offsetof(WtRwsemWords, waitq) == kCondWritersAt);
static_assert(sizeof(WtRwsemWords) == kRwlockSize, "the words fill the struct exactly, nothing past it");
static_assert(alignof(WtRwsemWords) <= kRwlockAlign, "every embedded WT_RWLOCK is aligned enough");

// WiredTiger's functions, as the dynamic linker found them after lockswap
// (preload/wtlock/wtlock.cpp).
struct RealFunctions {
  int (*init)(Session*, Rwlock*);
  void (*destroy)(Session*, Rwlock*);
  void (*readlock)(Session*, Rwlock*);
  int (*try_readlock)(Session*, Rwlock*);
  void (*readunlock)(Session*, Rwlock*);
  void (*writelock)(Session*, Rwlock*);
  int (*try_writelock)(Session*, Rwlock*);
  void (*writeunlock)(Session*, Rwlock*);
};
const RealFunctions& real();

// ------------------------------------------------------------------ adapters
// Every adapter has WiredTiger's eight functions, session first.

// Forwards to WiredTiger. `kThroughDispatch`: false = installed as is.
template <bool kThroughDispatch>
struct WtlockForward {
  static constexpr bool kThrough = kThroughDispatch;
  static int init(Session* s, Rwlock* l) { return real().init(s, l); }
  static void destroy(Session* s, Rwlock* l) { real().destroy(s, l); }
  static void readlock(Session* s, Rwlock* l) { real().readlock(s, l); }
  static int try_readlock(Session* s, Rwlock* l) { return real().try_readlock(s, l); }
  static void readunlock(Session* s, Rwlock* l) { real().readunlock(s, l); }
  static void writelock(Session* s, Rwlock* l) { real().writelock(s, l); }
  static int try_writelock(Session* s, Rwlock* l) { return real().try_writelock(s, l); }
  static void writeunlock(Session* s, Rwlock* l) { real().writeunlock(s, l); }
  // The counts-mode split of an acquisition (wtlock.cpp, Counted): a first
  // attempt that never waits, then the rest of the call. WiredTiger's own
  // functions have no such split: its try function, then its blocking one.
  static bool read_first(Session* s, Rwlock* l, uint64_t&) { return real().try_readlock(s, l) == 0; }
  static void read_rest(Session* s, Rwlock* l, uint64_t) { real().readlock(s, l); }
  static bool write_first(Session* s, Rwlock* l) { return real().try_writelock(s, l) == 0; }
  static void write_rest(Session* s, Rwlock* l) { real().writelock(s, l); }
};
using WtlockOff = WtlockForward<false>;
using WtlockWt = WtlockForward<true>;

// 0 or EBUSY, as WiredTiger's try functions return.
inline int wt_busy(int rc) {
  if (rc != 0) lockevent_inc(LockEvent::wtlock_try_busy);
  return rc == 0 ? 0 : EBUSY;
}

template <class Policy>
struct WtlockRwsem {
  static constexpr bool kThrough = true;
  using Sem = Rwsem<Policy, WtRwsemWords>;
  static WtRwsemWords& at(Rwlock* l) { return *reinterpret_cast<WtRwsemWords*>(l); }

  // WiredTiger's init clears the ticket word and sets four statistics
  // offsets to -1 (its callers may then set them); the condition pointers
  // become the rwsem's owner and queue, empty.
  static int init(Session*, Rwlock* l) {
    lockevent_inc(LockEvent::wtlock_init);
    WtRwsemWords& w = at(l);
    zero_words(w);
    for (unsigned i = 0; i < kStatOffsetsSetByInit; ++i) w.stat_offsets_[i] = -1;
    return 0;
  }
  // WiredTiger's destroy clears the ticket word and frees the condition
  // variables; there is nothing to free here.
  static void destroy(Session*, Rwlock* l) { zero_words(at(l)); }

  static void readlock(Session*, Rwlock* l) {
    uint64_t c;
    if (__builtin_expect(Sem::read_fast(at(l), c), 1)) return;
    read_slow(at(l), c);
  }
  static int try_readlock(Session*, Rwlock* l) { return wt_busy(Sem::read_try(at(l))); }
  static void readunlock(Session*, Rwlock* l) { Sem::read_unlock(at(l)); }
  static void writelock(Session*, Rwlock* l) {
    if (__builtin_expect(Sem::write_fast(at(l)), 1)) return;
    write_slow(at(l));
  }
  static int try_writelock(Session*, Rwlock* l) {
    return wt_busy(Sem::write_lock(at(l), WaitCtx::try_once(WaitFamily::rwlock)));
  }
  static void writeunlock(Session*, Rwlock* l) { Sem::write_unlock(at(l)); }

  // The counts-mode split (wtlock.cpp, Counted): the fast path, then the
  // slow path it falls into (a reader's count `c` is already raised).
  static bool read_first(Session*, Rwlock* l, uint64_t& c) { return Sem::read_fast(at(l), c); }
  static void read_rest(Session*, Rwlock* l, uint64_t c) { read_slow(at(l), c); }
  static bool write_first(Session*, Rwlock* l) { return Sem::write_fast(at(l)); }
  static void write_rest(Session*, Rwlock* l) { write_slow(at(l)); }

 private:
  static void zero_words(WtRwsemWords& w) {
    w.count.store(0, std::memory_order_relaxed);
    w.osq.store(0, std::memory_order_relaxed);
    w.owner.store(0, std::memory_order_relaxed);
    w.waitq.store(0, std::memory_order_relaxed);
  }
  // WiredTiger's waits are not cancellation points: the plain blocking wait,
  // counted as an rwlock family wait (core/wait_ctx.h).
  __attribute__((noinline)) static void read_slow(WtRwsemWords& w, uint64_t c) {
    lockevent_inc(LockEvent::wtlock_read_slow);
    Sem::read_slow(w, c, WaitCtx::blocking(WaitFamily::rwlock));
  }
  __attribute__((noinline)) static void write_slow(WtRwsemWords& w) {
    lockevent_inc(LockEvent::wtlock_write_slow);
    Sem::write_lock(w, WaitCtx::blocking(WaitFamily::rwlock));
  }
};
using WtlockRwsemSteal = WtlockRwsem<RwsemSteal>;
using WtlockRwsemRspin = WtlockRwsem<RwsemRspin>;

}  // namespace lockswap::wtlock
