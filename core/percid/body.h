// core/percid/body.h — the percid lock's rules, once for every host: readers
// counted per concurrency id, a writer drains them.
//
// Design
// ------
// A read-mostly lock in the spirit of the kernel's percpu_rw_semaphore and of
// BRAVO. A reader that meets no writer touches only a counter of its own,
// `slot[key]` (the key: its concurrency id, core/cid.h, or what its host
// derives from it), on a cache line no other running reader writes, and
// reads one word of the lock, `state`. A writer takes an inner rw_semaphore
// for writing (which serialises the writers and gives them the rwsem's
// queueing, spinning and handoff), sets PENDING in `state` so that new
// fast-path readers back off, waits until the counters sum to zero (the
// drain), and owns the lock. A reader that met PENDING waits for the writer
// (on the inner rwsem, or where its host says) and counts itself in.
//
// This file is what the hosts share: the reader slots and their drain flag,
// the read try, the leave, the read behind a writer, and the drain (spin,
// then sleep). A host adds where the words live, its inner rwsem, how a
// writer announces, claims and releases, and its own reader rules:
//   core/percid/thread.h  a thread's lock (pthread rwlocks, WiredTiger's
//                         rwlocks): words in the lock, slots in an arena
//   core/percid/shared.h  a lock several processes map (PostgreSQL's
//                         LWLocks): everything in one side block
// It does so through a representation trait (below, "The representation").
//
// Counters, not flags. A reader increments the slot of its key at lock time
// and decrements the slot of its key at unlock time, which may be another
// slot (the key changed after a sleep, a migration or a scan). Only the sum
// over the block means anything, and it counts the read holders exactly
// (u64, modular).
//
// A reader slot (ReaderSlot, one 64-byte line; a block holds a power of two
// of them):
//   readers (u64)  the counter
//   drain   (u32)  kDrainSleeps while a writer sleeps in the drain (set in
//                  every slot of the block); the first slot's is the futex
//                  word the writer sleeps on
//
// The drain flag. A writer that sleeps while readers drain sets it in every
// slot and futex-waits on the first slot's; a leaving reader, after its
// decrement, reads the flag in its own slot (the line it just wrote) and,
// if set, clears the first slot's and wakes the writer. Never the lock: a
// reader's decrement may be the lock's last hold, after which the writer
// may own, release and destroy the lock and free or unmap its memory. The
// block's memory stays mapped (each host says why); if the block was handed
// to another lock meanwhile, the reader's wake-up is a spurious one for
// that lock's writer, which sums again and sleeps again. The flags are
// cleared on every way out of the sleep (DrainClear, a cancellation's
// unwinding included), so later readers do not wake a writer that no longer
// sleeps.
//
// Transitions (each host's block adds its own)
//   read try     slot[key] += 1 (seq_cst); `state` has a bit of the host's
//                back-off mask (PENDING, and whatever else it keeps readers
//                out with) -> leave, fail.
//   read behind  inner read lock (waits while a writer holds it);
//   a writer     slot[key] += 1; inner read unlock. While a reader holds the
//                inner rwsem for reading no writer can be pending, so its
//                count is safe to add.
//   leave        slot[key'] -= 1 (seq_cst); that slot's drain flag set:
//                exchange the first slot's to kDrainAwake; it was set:
//                FUTEX_WAKE one.
//   drain        (the writer holds the inner rwsem and has set PENDING)
//                look, sum: zero -> the host's claim (it may fail: look and
//                sum again); else spin kDrainPolls sums and, with spinning
//                on, on until the kernel's reader-phase budget
//                (rwsem_rspin_threshold(), rwsem::rspin_budget_ns()) of the
//                holders first counted has passed; then set the drain flags,
//                re-sum, futex-wait on the first; a wake-up spins anew. A
//                host with tries and timeouts gives up in the spin (EBUSY:
//                a try met readers) or after the sleep (ETIMEDOUT); its
//                writer then releases as from a write unlock.
//
// Memory order. Fast readers and the writer are a Dekker pair: the reader's
// slot RMW precedes its state load, the writer's PENDING RMW (or store)
// precedes its slot loads, all seq_cst, so either the writer counts the
// reader or the reader sees PENDING. A sum is not a snapshot, but every
// increment the writer must see is ordered before its scan (a fast
// reader's by the Dekker pair, a reader's behind a writer by the inner
// rwsem it held, any other by its host's own argument), and a decrement is
// only seen after its increment, so a sum of zero means no holders. The
// reader's decrement is a release that the writer's sum (seq_cst loads)
// acquires; the writer's release of `state` orders its critical section
// before readers whose seq_cst state load sees it clear, and the inner
// rwsem orders it before readers that waited there. The writer's stores of
// the drain flags precede its re-sum and a reader's decrement precedes its
// load of its slot's flag (seq_cst), so a wake is never lost: either the
// re-sum sees the decrement or the reader sees the flag.
//
// Deviations from the kernel's percpu_rw_semaphore, and why:
//   - Slots per concurrency id, not per CPU: user space cannot stay on a CPU
//     between its increment and the next instruction. Ids are dense, so a
//     slot is rarely shared; when it is, the RMW keeps the count exact.
//   - No rcu_sync: a kernel reader increments with a plain per-CPU add and
//     the writer waits for a grace period before it counts. Here the reader
//     pays a seq_cst RMW and a load (the Dekker pair) and the writer counts
//     at once.
//   - The writer's wake-up is announced in the reader's own slot (the drain
//     flag), not read from the lock: the lock may be gone after the last
//     decrement, where the kernel's rcuwait lives in the lock.
//   - The writer spins before it sleeps (kDrainPolls, then the reader-phase
//     budget): the kernel's percpu_down_write() sleeps at once, but a futex
//     sleep and wake-up cost more than a reader's critical section while
//     every new reader waits behind the pending writer (docs/percid.md,
//     "The writer's drain spin").
//   - Writers and waiting readers meet in an inner rw_semaphore, as in the
//     kernel's percpu_rw_semaphore before v5.8 (its embedded rw_sem), not in
//     a wait queue of the lock's own: the inner rwsem gives the writers its
//     spinning and handoff.
//
// The representation (the trait Rep of Body<Rep>):
//   Where          how the body names one lock's block of slots, as a
//                  parameter type (a block index; a reference to a Block)
//   Wake           what a leaving reader hands to wake_writer(), its cold
//                  path, from Where (wake_of): as little as it can compute
//                  there, since the hot path must not compute it
//   Sleeper        how a drain sleep sleeps (a WaitCtx; rwshared::Sleeper)
//   kSharedFutex   the futex calls are process-shared
//   kTriesAndTimeouts  the drain may give up (EBUSY, ETIMEDOUT)
//   readers(w), set_drain(w, flag), drain_futex(wake),
//   sleep(sleeper, futex, expected): the sum, the flags, the futex word,
//                  and the sleep with the host's own rules around it
// A writer's claim on a drained lock (drain()'s Claim): `seen = look()`
// before each sum, own(seen) once a sum is zero (false: look and sum
// again). A claim holds no state of its own (what it saw is the body's
// local), so the idle writer keeps it in registers.
#pragma once
#include <atomic>
#include <cerrno>
#include <cstdint>

#include "arch/atomic.h"
#include "arch/clock.h"
#include "arch/futex.h"
#include "arch/relax.h"
#include "core/lock_events.h"
#include "core/rwsem.h"
#include "core/spin_budget.h"

namespace lockswap::percid {

// --- drain flag (ReaderSlot::drain) ---
inline constexpr uint32_t kDrainAwake = 0;
inline constexpr uint32_t kDrainSleeps = 1;
static_assert(kDrainAwake == 0, "a zero-filled drain flag: no writer sleeps");
// Sums a writer always polls before it sleeps. Past these it polls on for the
// kernel's reader-phase spin budget (rwsem::rspin_budget_ns()) when spinning
// is on: a futex sleep and wake-up costs more than a reader's critical
// section, and every new reader waits while the writer drains
// (docs/percid.md, "The writer's drain spin").
inline constexpr unsigned kDrainPolls = 32;

// `drain`: the writer-sleeps flag, in every slot of a block (design block,
// "The drain flag"); the block's first slot's is also the futex word.
struct alignas(64) ReaderSlot {
  std::atomic<uint64_t> readers;
  std::atomic<uint32_t> drain;
};
static_assert(sizeof(ReaderSlot) == 64, "one cache line per slot");

// The read holders: the sum of the counters (seq_cst loads).
inline uint64_t sum_slots(const ReaderSlot* slots, uint32_t n) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < n; ++i) sum += slots[i].readers.load(arch::mo_dekker);
  return sum;
}
// A writer about to sleep (kDrainSleeps) or awake again (kDrainAwake), in every slot.
inline void set_drain_slots(ReaderSlot* slots, uint32_t n, uint32_t value) {
  for (uint32_t i = 0; i < n; ++i) slots[i].drain.store(value, arch::mo_dekker);
}
// Free slots: no holder counted, no writer asleep.
inline void clear_slots(ReaderSlot* slots, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    slots[i].readers.store(0, arch::mo_hint);
    slots[i].drain.store(kDrainAwake, arch::mo_hint);
  }
}

// A writer's drain: kDrainPolls sums, then (spinning on) until
// rwsem::rspin_budget_ns() of the holders first counted has passed; the
// clock is read every kClockEvery polls. `holders` is a racy sum: a wrapped
// (huge) one only takes the budget's maximum.
struct DrainSpin {
  unsigned polls = 0;
  uint64_t deadline = 0;
  bool goes_on(uint64_t holders) {
    ++polls;
    if (polls <= kDrainPolls) return true;
    if (!g_rwsem_tunables.writer_spin) return false;
    if (deadline == 0) deadline = arch::monotonic_ns() + rwsem::rspin_budget_ns(holders);
    return polls % kClockEvery != 0 || arch::monotonic_ns() < deadline;
  }
};

// A claim for a host whose inner rwsem write hold and PENDING are the whole
// writer state: a zero sum is ownership.
struct ZeroSumOwns {
  struct Nothing {};
  Nothing look() const { return {}; }
  bool own(Nothing) const { return true; }
};

template <class Rep>
struct Body {
  using Where = typename Rep::Where;
  using Sleeper = typename Rep::Sleeper;

  // The read try: true = read-held. `back_off`: the bits of `state` that
  // keep fast readers out. Never blocks. The slot RMW before the state
  // load, both seq_cst: the reader's half of the Dekker pair (design block,
  // "Memory order"); the writer's is its PENDING RMW or store, then its sum.
  template <class Word>
  __attribute__((always_inline)) static bool enter(Where w, ReaderSlot& slot, const std::atomic<Word>& state,
                                                   Word back_off) {
    slot.readers.fetch_add(1, arch::mo_dekker);
    if (__builtin_expect((state.load(arch::mo_dekker) & back_off) == 0, 1)) return true;
    leave(w, slot);
    return false;
  }

  // Gives up a read hold (one of w's slots). After the decrement the lock
  // may already be gone (design block, "The drain flag"): only the block's
  // memory is touched. The flag is read in the reader's own slot, the line
  // its decrement holds.
  __attribute__((always_inline)) static void leave(Where w, ReaderSlot& slot) {
    slot.readers.fetch_sub(1, arch::mo_dekker);
    if (__builtin_expect(slot.drain.load(arch::mo_dekker) != kDrainAwake, 0)) wake_writer(Rep::wake_of(w));
  }

  // Read behind a writer: inner_read() waits for it on the inner rwsem (0,
  // or the host's give-up code), then the reader counts itself in the slot
  // of its key as it is now (slot_now(): the key may have moved during the
  // wait) and lets the inner rwsem go.
  template <class InnerRead, class SlotNow, class InnerUnread>
  static int read_behind_writer(InnerRead&& inner_read, SlotNow&& slot_now, InnerUnread&& inner_unread) {
    if (int rc = inner_read()) return rc;
    slot_now().readers.fetch_add(1, arch::mo_dekker);
    inner_unread();
    lockevent_inc(LockEvent::percid_rlock_slow);
    return 0;
  }

  // The writer's drain, after PENDING: 0 = owned. No reader in: own it at
  // once; else wait_for_readers(), out of line (an idle lock's writer does
  // not pay for the spin's state).
  template <class Claim>
  static int drain(Where w, Sleeper& s, Claim claim) {
    auto seen = claim.look();
    if (Rep::readers(w) == 0 && claim.own(seen)) return 0;
    return wait_for_readers(w, s, claim);
  }

 private:
  __attribute__((noinline)) static void wake_writer(typename Rep::Wake wake) {
    std::atomic<uint32_t>& futex = Rep::drain_futex(wake);
    if (futex.exchange(kDrainAwake, arch::mo_dekker) != kDrainAwake) arch::futex_wake(&futex, 1, Rep::kSharedFutex);
  }

  // Spin, then sleep, until the readers are gone. Each sleep starts a new
  // spin, as the kernel's writer spins again once woken.
  template <class Claim>
  __attribute__((noinline)) static int wait_for_readers(Where w, Sleeper& s, Claim claim) {
    DrainSpin spin;
    for (;;) {
      auto seen = claim.look();
      const uint64_t holders = Rep::readers(w);
      if (holders == 0) {
        if (claim.own(seen)) return 0;
        continue;
      }
      if constexpr (Rep::kTriesAndTimeouts)
        if (!s.may_block()) return EBUSY;
      if (spin.goes_on(holders)) {
        arch::cpu_relax();
        continue;
      }
      const int rc = sleep_while_readers(w, s);
      if constexpr (Rep::kTriesAndTimeouts)
        if (rc == ETIMEDOUT) return ETIMEDOUT;
      spin = DrainSpin{};
    }
  }

  // Announce the sleep in every slot's drain flag, re-check (Dekker with
  // leave()), sleep on the first slot's. The flags are cleared on the way
  // out, woken or not (DrainClear).
  static int sleep_while_readers(Where w, Sleeper& s) {
    DrainClear clear{w};
    Rep::set_drain(w, kDrainSleeps);
    if (Rep::readers(w) == 0) return 0;
    lockevent_inc(LockEvent::percid_wlock_sleep);
    return Rep::sleep(s, Rep::drain_futex(Rep::wake_of(w)), kDrainSleeps);
  }

  // Every way out of the drain sleep, a cancellation's unwinding included.
  struct DrainClear {
    Where w;
    ~DrainClear() { Rep::set_drain(w, kDrainAwake); }
  };
};

}  // namespace lockswap::percid
