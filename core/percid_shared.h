// core/percid_shared.h — readers counted per concurrency id, for locks that
// several processes share (PostgreSQL's LWLocks, preload/lwlock/).
//
// Design
// ------
// The same lock as core/percid_rwlock.h, the kernel's percpu_rw_semaphore
// shape: a reader that meets no writer increments a counter of its own
// (`slot[key]`, one cache line) and reads one flag; a writer takes an inner
// rw_semaphore for writing (which serialises writers and makes later
// readers wait), sets PENDING, waits until the counters sum to zero, and
// owns the lock. Readers that meet PENDING take the inner rwsem for reading
// (they wait for the writer there, as percpu_down_read() waits on the
// rcuwait), count themselves, and let the rwsem go.
//
// Where it lives. Everything is in one block of memory that every process
// maps at the same address (a shared mapping made before the processes are
// forked), never in the lock the program sees:
//
//   line 0   Control: the inner rwsem (core/rwsem/shared.h, 12 bytes: it
//            names processes by number, sleeps on shared futexes), `state`
//            (bit 0 PENDING)
//   line 1+  S reader slots (percid::ReaderSlot), S a power of two, each
//            with its counter and the drain flag (core/percid_rwlock.h)
//
// Which block a lock uses, and when the block is (re)initialised, is the
// adapter's business (preload/lwlock/variants_percid.h); this file is the
// algorithm on a block.
//
// Transitions
//   read try     slot[key] += 1 (seq_cst); state has PENDING -> leave, fail.
//   read slow    inner read lock (sleeps while a writer holds it);
//                slot[key] += 1; inner read unlock. While we hold the inner
//                rwsem for reading no writer is pending, so the count is
//                safe to add.
//   read again   the caller holds a counted read hold of this lock: slot += 1
//                at once (the writer cannot reach zero before we leave).
//   read unlock  slot[key'] -= 1 (seq_cst; key' may differ from the key at
//                lock time: only the sum means anything); if that slot's
//                drain flag says the writer sleeps: exchange the first
//                slot's to 0 and wake it.
//   write        inner write lock; state = PENDING (seq_cst); drain: sum the
//                slots; zero -> owned; else percid::DrainSpin, then set
//                the drain flag in every slot, re-sum, futex-wait on the
//                first slot's; a wake-up spins anew.
//   write try    one sum: not zero -> fail, having written nothing; inner
//                write trylock (fail: fail); PENDING (seq_cst); a second
//                sum: zero -> owned, else as write unlock, fail.
//   write unlock state = 0 (release); inner write unlock (wakes its queue).
//
// Memory order: the Dekker pair of core/percid_rwlock.h (a reader's slot RMW
// before its state load, the writer's PENDING store before its slot loads,
// all seq_cst; the writer's drain flag stores before its re-sum, a reader's
// decrement before its load of its own slot's flag). A reader's decrement is a release that
// the writer's seq_cst sum acquires; the writer's release store of `state`
// and the inner rwsem order its section before later readers.
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
// PENDING (tests/lwlock/adapter_test.cpp).
//
// Deviations from core/percid_rwlock.h, and why:
//   - No reader preference, no recursion flags, no timed waits, no epoch:
//     PostgreSQL's LWLocks have none of the pthread rwlock kinds; a process
//     asking again for a lock it holds shared says so (read again).
//   - Only PENDING in `state`: nobody asks whether the lock is write-held
//     but the inner rwsem's users (the variable wait), and the inner rwsem
//     says so for the whole write hold.
//   - Readers waiting for a writer sleep in the inner rwsem's queue, never on
//     `state` (the pthread version cannot: glibc's reader-preferring kinds
//     must be let in past a pending writer).
// Deviations from the kernel's percpu_rw_semaphore: as core/percid_rwlock.h
// (a writer spins before it sleeps; concurrency ids instead of CPUs).
#pragma once
#include <atomic>
#include <cstdint>

#include "arch/atomic.h"
#include "arch/futex.h"
#include "arch/relax.h"
#include "core/lock_events.h"
#include "core/percid_rwlock.h"
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

// Policy: rwshared's RwsemSteal or RwsemRspin, for the inner rwsem.
template <class Policy>
struct Lock {
  using Sem = rwshared::SharedRwsem<Policy>;

  __attribute__((always_inline)) static bool read_try(const Block& b, uint32_t key) {
    percid::ReaderSlot& slot = b.slot(key);
    slot.readers.fetch_add(1, arch::mo_dekker);
    if (__builtin_expect((b.control->state.load(arch::mo_dekker) & kPending) == 0, 1)) return true;
    leave(b, slot);
    return false;
  }
  static void read_slow(const Block& b, uint32_t key, const rwshared::Records& rs, int32_t me, rwshared::Sleeper& s) {
    Sem::read_lock(b.control->sem, rs, me, s);
    b.slot(key).readers.fetch_add(1, arch::mo_dekker);
    Sem::read_unlock(b.control->sem, rs);
    lockevent_inc(LockEvent::percid_rlock_slow);
  }
  static void read_again(const Block& b, uint32_t key) { b.slot(key).readers.fetch_add(1, arch::mo_dekker); }
  __attribute__((always_inline)) static void read_unlock(const Block& b, uint32_t key) { leave(b, b.slot(key)); }
  // The same, given the slot (one of b's; a caller that has its address).
  __attribute__((always_inline)) static void read_unlock_slot(const Block& b, percid::ReaderSlot& slot) { leave(b, slot); }

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
  __attribute__((always_inline)) static void leave(const Block& b, percid::ReaderSlot& slot) {
    slot.readers.fetch_sub(1, arch::mo_dekker);
    if (__builtin_expect(slot.drain.load(arch::mo_dekker) != percid::kDrainAwake, 0)) wake_writer(b.drain_futex());
  }
  __attribute__((noinline)) static void wake_writer(std::atomic<uint32_t>& drain) {
    if (drain.exchange(percid::kDrainAwake, arch::mo_dekker) != percid::kDrainAwake) arch::futex_wake(&drain, 1, true);
  }

  // PENDING, then wait for the readers: spin, then sleep on `drain`.
  static void drain(const Block& b, rwshared::Sleeper& s) {
    b.control->state.store(kPending, arch::mo_dekker);
    percid::DrainSpin spin;
    for (;;) {
      const uint64_t holders = b.readers();
      if (holders == 0) return;
      if (spin.goes_on(holders)) {
        arch::cpu_relax();
        continue;
      }
      sleep_while_readers(b, s);
      spin = percid::DrainSpin{};
    }
  }

  static void sleep_while_readers(const Block& b, rwshared::Sleeper& s) {
    DrainClear clear{b};
    percid::set_drain_slots(b.slots, b.slot_mask + 1, percid::kDrainSleeps);
    if (b.readers() == 0) return;
    if (!s.slept && s.first_sleep != nullptr) s.first_sleep(s.arg);
    s.slept = true;
    lockevent_inc(LockEvent::percid_wlock_sleep);
    s.ctx.sleep(&b.drain_futex(), percid::kDrainSleeps, true);
  }
  // Every way out of the drain sleep, a cancellation's unwinding included.
  struct DrainClear {
    const Block& b;
    ~DrainClear() { percid::set_drain_slots(b.slots, b.slot_mask + 1, percid::kDrainAwake); }
  };
};

}  // namespace lockswap::percid_shared
