// preload/wtlock/variants_percid.h — LOCKSWAP_WTLOCK=percid: readers counted
// per concurrency id (core/percid/thread.h) for WiredTiger's rwlocks.
//
// Where the words live. core/percid/thread.h needs 40 bytes (the rwsem's
// count, owner, waitq and osq, a block index, a 64-bit state); a WT_RWLOCK
// leaves 30 to an algorithm (variants.h). So each lock's words are a record
// of a table in lockswap's memory (one 64-byte line each, kRecords of them,
// .bss touched only where used), found by the record number the lock keeps
// in its 2 bytes of padding at 0x12:
//
//   0                no record yet: the first call (init, or the first lock
//                    call of a lock WiredTiger never initialised) takes one;
//                    a number past kRecords (padding that was never ours) too
//   1..kRecords      the record
//   kNoRecord        the table was full: the lock runs WtlockRwsemSteal on
//                    its own words (rwsem, in place) until it is destroyed
//
// A record names the lock that took it (its address, written under the
// table lock): that is what proves ownership, the number in the padding
// alone proves nothing. __wt_rwlock_init of a lock whose record number names
// a record of that address takes it back (a lock re-initialised without
// destroy); any other number is stale padding (memory of another lock
// reused) and a new record is taken. Destroy of an idle lock returns its
// record only if the record names this lock (a busy one keeps it, as glibc's
// destroy is tolerated by the pthread percid); a number naming another
// lock's record (a lock never initialised over a copy of that lock's bytes)
// is cleared and that record, its reader-slot block and its words are left
// alone. A lock freed without destroy keeps its record until a lock is
// initialised at the same address.
//
// Not proved on the lock calls: a lock never initialised whose padding holds
// another lock's in-range number takes that record as its own on its first
// call (the fast path reads the number and nothing else, to keep its cost);
// WiredTiger initialises every lock before use, so only such a foreign lock
// can meet it.
//
// Readers queue behind waiting writers (rwsem::kReadBehindWriters, the
// writer-nonrecursive kind's rule): WiredTiger's ticket lock already makes a
// reader wait behind a writer, so its code never relies on a read passing
// one. Waits are not cancellation points (as WtlockRwsem's).
//
// Deviations from the pthread percid: the words are out of the lock (one
// more cache line per acquisition, the record's).
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/percid/thread.h"
#include "preload/wtlock/variants.h"

namespace lockswap::wtlock {

struct alignas(64) PercidRecord {
  std::atomic<uint64_t> count;
  std::atomic<uint64_t> owner;
  std::atomic<uint64_t> waitq;
  std::atomic<uint32_t> osq;
  std::atomic<uint32_t> index;
  std::atomic<uint64_t> state;
  const void* lock;  // the lock that took it; nullptr = free (under the table lock)
};
static_assert(sizeof(PercidRecord) == 64, "a record is one cache line");

// The record number in the lock's padding.
struct WtPercidWords {
  uint64_t ticket_;
  int16_t stat_offsets_[kStatOffsets];
  std::atomic<uint16_t> record;  // 0x12
};
static_assert(offsetof(WtPercidWords, record) == offsetof(WtRwlockLayout, pad_12));
inline constexpr uint16_t kNoRecord = 0xffff;
inline constexpr uint32_t kRecords = 16384;
static_assert(kRecords < kNoRecord, "every record number fits the 2 bytes, kNoRecord apart");

namespace percid_records {
extern PercidRecord g_table[kRecords];
// Under the table lock: the lock's record number (taken back, new, or
// kNoRecord), written to `w.record`. `at_init`: trust nothing in the padding.
uint16_t take(WtPercidWords& w, const void* lock, bool at_init);
// Destroy, under the table lock: a record owned by `lock` (its `lock` field)
// goes back to the free list if the lock is idle (false, nothing changed:
// busy); any other number in the padding is cleared and nothing else is
// touched. True: the caller clears the in-place words.
bool release(WtPercidWords& w, const void* lock);
void after_fork_in_child();
}  // namespace percid_records

struct WtlockPercid {
  static constexpr bool kThrough = true;
  using Lock = PercidRwlock<PercidRecord>;
  using Plain = WtlockRwsemSteal;
  static WtPercidWords& at(Rwlock* l) { return *reinterpret_cast<WtPercidWords*>(l); }
  static void after_fork_in_child() { percid_records::after_fork_in_child(); }

  static int init(Session* s, Rwlock* l) {
    Plain::init(s, l);  // WiredTiger's -1s, and the in-place rwsem words free for the full-table case
    percid_records::take(at(l), l, true);
    return 0;
  }
  // Ownership is proved under the table lock (percid_records::release), never
  // taken from the padding alone. Cold: destroy is once per lock.
  static void destroy(Session* s, Rwlock* l) {
    if (!percid_records::release(at(l), l)) return;  // busy: the lock keeps working (the record stays its)
    Plain::destroy(s, l);
  }

  static void readlock(Session* s, Rwlock* l) {
    PercidRecord* r = record_of(l);
    if (r == nullptr) return Plain::readlock(s, l);
    if (__builtin_expect(Lock::read_fast(*r), 1)) return;
    read_slow(*r);
  }
  static int try_readlock(Session* s, Rwlock* l) {
    PercidRecord* r = record_of(l);
    if (r == nullptr) return Plain::try_readlock(s, l);
    return wt_busy(Lock::read_lock(*r, WaitCtx::try_once(WaitFamily::rwlock), rwsem::kReadBehindWriters));
  }
  static void readunlock(Session* s, Rwlock* l) {
    PercidRecord* r = record_of(l);
    if (r == nullptr) return Plain::readunlock(s, l);
    Lock::read_unlock(*r);
  }
  static void writelock(Session* s, Rwlock* l) {
    PercidRecord* r = record_of(l);
    if (r == nullptr) return Plain::writelock(s, l);
    Lock::write_lock(*r, WaitCtx::blocking(WaitFamily::rwlock));
  }
  static int try_writelock(Session* s, Rwlock* l) {
    PercidRecord* r = record_of(l);
    if (r == nullptr) return Plain::try_writelock(s, l);
    return wt_busy(Lock::write_lock(*r, WaitCtx::try_once(WaitFamily::rwlock)));
  }
  static void writeunlock(Session* s, Rwlock* l) {
    PercidRecord* r = record_of(l);
    if (r == nullptr) return Plain::writeunlock(s, l);
    Lock::write_unlock(*r);
  }

  // The counts-mode split (wtlock.cpp, Counted).
  static bool read_first(Session* s, Rwlock* l, uint64_t& c) {
    PercidRecord* r = record_of(l);
    if (r == nullptr) return Plain::read_first(s, l, c);
    return Lock::read_fast(*r);
  }
  static void read_rest(Session* s, Rwlock* l, uint64_t c) {
    PercidRecord* r = record_of(l);
    if (r == nullptr) return Plain::read_rest(s, l, c);
    read_slow(*r);
  }
  static bool write_first(Session* s, Rwlock* l) {
    PercidRecord* r = record_of(l);
    if (r == nullptr) return Plain::write_first(s, l);
    return Lock::write_lock(*r, WaitCtx::try_once(WaitFamily::rwlock)) == 0;
  }
  static void write_rest(Session* s, Rwlock* l) { writelock(s, l); }

 private:
  // The lock's record; nullptr: the table was full (the in-place rwsem).
  // `take`: a lock WiredTiger never initialised takes one at its first call.
  __attribute__((always_inline)) static PercidRecord* record_of(Rwlock* l, bool take = true) {
    uint16_t n = at(l).record.load(std::memory_order_acquire);
    if (__builtin_expect(uint16_t(n - 1) >= kRecords, 0)) {  // 0, kNoRecord, or padding never ours
      if (n == kNoRecord || !take) return nullptr;
      n = percid_records::take(at(l), l, false);
      if (n == kNoRecord) return nullptr;
    }
    return &percid_records::g_table[n - 1];
  }
  __attribute__((noinline)) static void read_slow(PercidRecord& r) {
    lockevent_inc(LockEvent::wtlock_read_slow);
    Lock::read_slow(r, WaitCtx::blocking(WaitFamily::rwlock), rwsem::kReadBehindWriters);
  }
};

}  // namespace lockswap::wtlock
