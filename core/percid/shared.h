// core/percid/shared.h — the percid lock (core/percid/body.h) for locks that
// several processes share (PostgreSQL's LWLocks, preload/lwlock/).
//
// Design
// ------
// The body's lock (core/percid/body.h: the slots, the drain, the memory
// order, the deviations from the kernel). Its inner rwsem is the
// process-shared one (core/rwsem/shared.h: it names processes by number and
// sleeps on shared futexes); the readers that meet PENDING wait for the
// writer there, as percpu_down_read() waits for the kernel's writer. This
// host adds where the words live, a read again, and a write try that never
// disturbs readers.
//
// Where it lives. Everything is in one block of memory that every process
// maps at the same address (a shared mapping made before the processes are
// forked, never unmapped while they run), never in the lock the program
// sees:
//
//   line 0   Control: the inner rwsem (core/rwsem/shared.h, 12 bytes: it
//            names processes by number, sleeps on shared futexes), `state`
//            (bit 0 PENDING)
//   line 1+  S reader slots (percid::ReaderSlot), S a power of two
//
// Which block a lock uses, and when the block is (re)initialised, is the
// adapter's business (preload/lwlock/variants_percid.h); this file is the
// algorithm on a block. A reader's slot is the one of its key, which the
// caller gives (key & (S-1)): a process's key is its own business.
//
// Transitions (the body's, with these words)
//   read try     the body's read try with back-off mask PENDING.
//   read slow    the body's read behind a writer (the inner rwsem sleeps
//                while a writer holds it).
//   read again   the caller holds a counted read hold of this lock: slot += 1
//                at once (the writer cannot reach zero before we leave).
//   read unlock  the body's leave.
//   write        inner write lock; state = PENDING (seq_cst); the body's
//                drain, where a zero sum is ownership (percid::ZeroSumOwns).
//   write try    one sum: not zero -> fail, having written nothing; inner
//                write trylock (fail: fail); PENDING (seq_cst); a second
//                sum: zero -> owned, else as write unlock, fail.
//   write unlock state = 0 (release); inner write unlock (wakes its queue).
//
// The try (LWLockConditionalAcquire; ProcArrayEndTransaction's try of
// ProcArrayLock at every commit) must not disturb the readers it fails on:
// PENDING set for the length of a failing sum sends every reader that meets
// it to the inner rwsem, where it sleeps behind a writer that never owns the
// lock. So the try sums first and sets PENDING only when that sum is zero.
// A successful try excludes every reader by the write lock's own argument:
// it owns the inner rwsem, its PENDING store precedes (in the seq_cst total
// order) the loads of its second sum, and that sum reads zero. A reader
// whose slot increment follows the PENDING store reads PENDING and backs
// out (it never enters); one whose increment precedes it precedes every
// load of the second sum, so that sum sees it unless it has left. The first
// sum decides nothing but an early failure: a reader may arrive between it
// and PENDING, and the second sum sees that reader, which then met PENDING
// only in this narrow window (it waits on the inner rwsem for the back-out
// and is woken there, as before). A reader that holds the lock throughout
// makes every try fail at the first sum: readers arriving then never see
// PENDING (tests/core/percid_shared_test.cpp, tests/lwlock/adapter_test.cpp).
//
// Deviations from core/percid/thread.h, and why:
//   - No reader preference, no recursion flags, no timed waits, no tries of
//     the drain, no cancellation, no epoch: PostgreSQL's LWLocks have none of
//     the pthread rwlock kinds; a process asking again for a lock it holds
//     shared says so (read again), so no reader enters past a pending writer
//     but one already counted.
//   - Only PENDING in `state`: nobody asks whether the lock is write-held
//     but the inner rwsem's users (the variable wait), and the inner rwsem
//     says so for the whole write hold.
//   - Readers waiting for a writer sleep in the inner rwsem's queue, never on
//     `state` (the thread host cannot: glibc's reader-preferring kinds must
//     be let in past a pending writer).
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "arch/atomic.h"
#include "core/lock_events.h"
#include "core/percid/body.h"
#include "core/rwsem/shared.h"
#include "core/wait_ctx.h"

namespace lockswap::percid_shared {

inline constexpr uint32_t kPending = 1u << 0;

struct alignas(64) Control {
  rwshared::Words sem;
  std::atomic<uint32_t> state;
};
static_assert(sizeof(Control) == 64, "the control words take one cache line, the slots follow");
static_assert(offsetof(Control, state) == sizeof(rwshared::Words), "state right after the inner rwsem");

// One lock's block: its control line, then `slot_mask + 1` reader slots.
struct Block {
  Control* control;
  percid::ReaderSlot* slots;
  uint32_t slot_mask;

  percid::ReaderSlot& slot(uint32_t key) const { return slots[key & slot_mask]; }
  uint64_t readers() const { return percid::sum_slots(slots, slot_mask + 1); }
  // The futex word a draining writer sleeps on.
  std::atomic<uint32_t>& drain_futex() const { return slots[0].drain; }
  // A free lock: no readers, no writer, the inner rwsem as core/rwsem/shared.h
  // initialises it.
  void reset() const {
    percid::clear_slots(slots, slot_mask + 1);
    control->sem.count.store(rwshared::kFreeCount, arch::mo_hint);
    control->sem.owner.store(rwshared::kStoredXor, arch::mo_hint);
    control->sem.waitq.store(rwshared::kStoredXor, arch::mo_hint);
    control->state.store(0, arch::mo_hint);
  }
};

// The body's representation here (core/percid/body.h): a block is named by
// the Block the caller holds; a leaving reader's cold path gets the drain
// futex itself. Sleeps are shared futex waits of an rwshared::Sleeper that
// runs the host's hook (its wait event) before its first sleep; they never
// time out.
struct SharedRep {
  using Where = const Block&;
  using Wake = std::atomic<uint32_t>*;
  using Sleeper = rwshared::Sleeper;
  static constexpr bool kSharedFutex = true;
  static constexpr bool kTriesAndTimeouts = false;
  static std::atomic<uint32_t>* wake_of(const Block& b) { return &b.drain_futex(); }
  static std::atomic<uint32_t>& drain_futex(std::atomic<uint32_t>* futex) { return *futex; }
  static uint64_t readers(const Block& b) { return b.readers(); }
  static void set_drain(const Block& b, uint32_t value) { percid::set_drain_slots(b.slots, b.slot_mask + 1, value); }
  static int sleep(rwshared::Sleeper& s, const std::atomic<uint32_t>& futex, uint32_t expected) {
    if (!s.slept && s.first_sleep != nullptr) s.first_sleep(s.arg);
    s.slept = true;
    return s.ctx.sleep(&futex, expected, true);
  }
};
using SharedBody = percid::Body<SharedRep>;

// Policy: rwshared's RwsemSteal or RwsemRspin, for the inner rwsem.
template <class Policy>
struct Lock {
  using Sem = rwshared::SharedRwsem<Policy>;
  using Body = SharedBody;

  __attribute__((always_inline)) static bool read_try(const Block& b, uint32_t key) {
    return Body::enter(b, b.slot(key), b.control->state, kPending);
  }
  static void read_slow(const Block& b, uint32_t key, const rwshared::Records& rs, int32_t me, rwshared::Sleeper& s) {
    Body::read_behind_writer(
        [&] {
          Sem::read_lock(b.control->sem, rs, me, s);
          return 0;
        },
        [&]() -> percid::ReaderSlot& { return b.slot(key); }, [&] { Sem::read_unlock(b.control->sem, rs); });
  }
  static void read_again(const Block& b, uint32_t key) { b.slot(key).readers.fetch_add(1, arch::mo_dekker); }
  __attribute__((always_inline)) static void read_unlock(const Block& b, uint32_t key) { Body::leave(b, b.slot(key)); }
  // The same, given the slot (one of b's; a caller that has its address).
  __attribute__((always_inline)) static void read_unlock_slot(const Block& b, percid::ReaderSlot& slot) {
    Body::leave(b, slot);
  }

  // Sum, trylock, PENDING, sum (design block: why the first sum, and why
  // only the second decides).
  static bool write_try(const Block& b, const rwshared::Records& rs, int32_t me) {
    if (b.readers() != 0) return false;  // read-held: fail without a trace readers could meet
    if (!Sem::write_trylock(b.control->sem, me)) return false;
    b.control->state.store(kPending, arch::mo_dekker);
    if (b.readers() == 0) return true;
    write_unlock(b, rs);  // a reader came in between the sums; any that met PENDING are woken here
    return false;
  }
  static void write_lock(const Block& b, const rwshared::Records& rs, int32_t me, rwshared::Sleeper& s) {
    Sem::write_lock(b.control->sem, rs, me, s);
    drain(b, s);
  }
  // LWLockAcquireOrWait, exclusive: the inner rwsem taken at once (then the
  // readers drained: true), or waited for until free without taking (false).
  static bool write_or_wait(const Block& b, const rwshared::Records& rs, int32_t me, rwshared::Sleeper& s) {
    if (!Sem::acquire_or_wait(b.control->sem, rs, me, true, s)) return false;
    drain(b, s);
    return true;
  }
  static void write_unlock(const Block& b, const rwshared::Records& rs) {
    b.control->state.store(0, arch::mo_unlock);
    Sem::write_unlock(b.control->sem, rs);
  }

 private:
  // PENDING, then the body's drain: it cannot fail here (no tries, no
  // deadlines).
  static void drain(const Block& b, rwshared::Sleeper& s) {
    b.control->state.store(kPending, arch::mo_dekker);  // the writer's half of the Dekker pair
    Body::drain(b, s, percid::ZeroSumOwns{});
  }
};

}  // namespace lockswap::percid_shared
