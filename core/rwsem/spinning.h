// core/rwsem/spinning.h — optimistic spinning, spinner seats, reader polls, the woken-writer yield.
//
// Part of core/rwsem/thread.cpp's one translation unit: everything here has internal
// linkage, so include it nowhere else.
//
// rwsem_can_spin_on_owner(), rwsem_spin_on_owner() and rwsem_optimistic_spin()
// (the OSQ is core/osq_lock.h), with the stand-ins userspace needs for the
// scheduler hooks they use, and the spins that are not in the kernel: the
// spinner seats, the reader's poll of a running writer and the yield to a
// woken writer. Design and reasons: docs/rwsem.md.
#pragma once
#include <sched.h>

#include <atomic>
#include <cstdint>

#include "arch/relax.h"
#include "core/lock_events.h"
#include "core/oncpu.h"
#include "core/osq_lock.h"
#include "core/rwsem/deadlines.h"
#include "core/rwsem/rwsem.h"
#include "core/spin_budget.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

// ---------------------------------------------------------------------------
// Owner word helpers and spinner seats
// ---------------------------------------------------------------------------

template <class P>
ThreadSlot* owner_slot(uint64_t owner) {
  return reinterpret_cast<ThreadSlot*>(owner & ~P::kOwnerFlags);
}

// The budget of one optimistic spin (core/spin_budget.h): owner_spin_ns
// bounds spinning on a writer owner or on no owner (time in a reader phase is
// credited back: rspin_threshold() bounds that, as in the kernel);
// kSpinCapExtraNs more bounds the whole spin.
SpinBudget starting_budget(uint64_t now) {
  uint64_t d = now + tunables().owner_spin_ns;
  return {d, d + kSpinCapExtraNs};
}

// Spinner seats (not in the kernel): at most max_spinners threads of the
// process spin at once, by default the CPUs it may run on minus one (the
// owner needs a CPU to release the lock), at least one. Others queue and
// sleep at once. In the kernel, spinners beyond that would meet
// need_resched() as soon as the tasks they keep off the CPUs are woken or
// ticked in; a userspace spinner never sees that flag, and with more
// runnable threads than CPUs every extra spinner only delays the owner and
// the threads with work to do (docs/rwsem.md, "Spinner seats").
// Reset in a fork child (a thread lost in fork may have held a seat).
std::atomic<uint32_t> g_spinners{0};
uint32_t spinner_limit() {
  if (uint32_t l = tunables().max_spinners) return l;
  uint32_t n = usable_cpus();
  return n > 2 ? n - 1 : 1;
}
}  // namespace

// Relaxed: a seat is a count, not a lock; nothing is published through it.
bool take_spinner_seat() {
  uint32_t n = g_spinners.load(std::memory_order_relaxed);
  do {
    if (n >= spinner_limit()) return false;
  } while (!g_spinners.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
  return true;
}
void give_back_spinner_seat() { g_spinners.fetch_sub(1, std::memory_order_relaxed); }

namespace {

// rwsem_set_nonspinnable(): only while the lock is still reader-owned.
template <class P>
void set_nonspinnable(const WordRefs& r) {
  uint64_t o = r.owner.load(arch::mo_hint);
  do {
    // v5.10 too stops when EITHER bit is set (RWSEM_NONSPINNABLE = RD|WR,
    // tested with `owner & RWSEM_NONSPINNABLE`, 5.10.13).
    if (!(o & kReaderOwned) || (o & P::kNonspinnable) != 0) return;
  } while (!r.owner.compare_exchange_weak(o, o | P::kNonspinnable, arch::mo_hint, arch::mo_hint));
}

// clear_nonspinnable() (v5.10: clear_wr_nonspinnable()): the readers are gone.
template <class P>
void clear_nonspinnable(const WordRefs& r) {
  if (r.owner.load(arch::mo_hint) & P::kWrNonspinnable) r.owner.fetch_and(~P::kWrNonspinnable, arch::mo_hint);
}

// ---------------------------------------------------------------------------
// Optimistic spinning
// ---------------------------------------------------------------------------

enum class OwnerState : uint8_t { null, writer, reader, nonspinnable };

template <class P>
OwnerState owner_state(uint64_t owner, uint64_t nonspinnable) {
  if (owner & nonspinnable) return OwnerState::nonspinnable;
  if (owner & kReaderOwned) return OwnerState::reader;
  return owner_slot<P>(owner) != nullptr ? OwnerState::writer : OwnerState::null;
}

// rwsem_can_spin_on_owner(): a reader-owned or free lock is spinnable; a
// writer-owned one only while that writer may be running.
template <class P>
bool can_spin_on_owner(const WordRefs& r, uint64_t nonspinnable) {
  uint64_t o = r.owner.load(arch::mo_hint);
  bool ok = !(o & nonspinnable);
  if (ok && !(o & kReaderOwned)) {
    ThreadSlot* s = owner_slot<P>(o);
    if (s != nullptr && !slot_running(*s)) {
      ok = false;
      lockevent_inc(LockEvent::rwsem_opt_owner_off);
    }
  }
  if (!ok) lockevent_inc(LockEvent::rwsem_opt_fail);
  return ok;
}

// rwsem_spin_on_owner(): while a writer owns the lock and may be running,
// wait for the owner word to change; report the state it changed to.
template <class P>
OwnerState spin_on_owner(const WordRefs& r, uint64_t nonspinnable, SpinBudget& budget) {
  uint64_t o = r.owner.load(arch::mo_hint);
  OwnerState st = owner_state<P>(o, nonspinnable);
  if (st != OwnerState::writer) return st;
  ThreadSlot& os = *owner_slot<P>(o);  // type-stable: safe even if stale
  for (unsigned i = 1;; ++i) {
    uint64_t now_owner = r.owner.load(arch::mo_hint);
    if (now_owner != o) return owner_state<P>(now_owner, nonspinnable);
    bool off_cpu = os.blocked.load(arch::mo_hint) != 0 || (i % kClockEvery == 0 && !slot_running(os));
    if (off_cpu) {
      lockevent_inc(LockEvent::rwsem_opt_owner_off);
      return OwnerState::nonspinnable;
    }
    if (i % kClockEvery == 0 && budget.expired(now_ns(), true)) return OwnerState::nonspinnable;
    arch::cpu_relax();
  }
}

// rwsem_try_write_lock_unqueued(): take a free lock past queued waiters
// unless HANDOFF reserves it for the first of them.
bool try_write_lock_unqueued(const WordRefs& r, bool spinning) {
  uint64_t c = r.count.load(arch::mo_hint);
  while (!(c & (kLockMask | kFlagHandoff))) {
    if (r.count.compare_exchange_weak(c, c | kWriterLocked, arch::mo_lock, arch::mo_hint)) {
      r.owner.store(owner_value(self_slot()), arch::mo_hint);
      if (spinning) lockevent_inc(LockEvent::rwsem_opt_lock);
      return true;
    }
  }
  return false;
}

// v5.10 rwsem_try_read_lock_unqueued(). Backing out needs no wakeup check:
// every caller afterwards either holds the lock or queues and re-checks.
template <class P>
bool try_read_lock_unqueued(const WordRefs& r) {
  if (r.count.load(arch::mo_hint) & (kWriterLocked | kFlagHandoff)) return false;
  uint64_t c = r.count.fetch_add(kReaderBias, arch::mo_lock);
  if (!(c & (kWriterLocked | kFlagHandoff))) {
    set_reader_owned<P>(r.owner, owner_value(self_slot()));
    lockevent_inc(LockEvent::rwsem_opt_rlock);
    return true;
  }
  r.count.fetch_sub(kReaderBias, arch::mo_unlock);
  return false;
}

// rwsem_rspin_threshold(): the reader phase starting `now` may be spun on
// until the returned time.
uint64_t rspin_threshold(const WordRefs& r, uint64_t now) {
  return now + rspin_budget_ns(reader_count(r.count.load(arch::mo_hint)));
}

// Not in the kernel: the spinner saw the owner let go and still failed to
// take the lock, so another thread re-took it first (typically the releaser,
// through its fast path). Where that keeps happening the lock is passed back
// and forth between CPUs on every acquisition, and each pass moves its cache
// line (and the data it guards) across; a sleeping waiter lets the owner keep
// both in its cache (docs/rwsem.md, "One contended lock").
bool lost_race_ends_spin(unsigned lost) {
  uint32_t limit = tunables().spin_lost_races;
  if (limit == 0 || lost < limit) return false;
  lockevent_inc(LockEvent::rwsem_opt_lost);
  return true;
}

// The body of rwsem_optimistic_spin(), run as head of the OSQ.
template <class P, bool kWrite>
bool spin_for_lock(const WordRefs& r, uint64_t nonspinnable, SpinBudget& budget) {
  OwnerState prev = OwnerState::null;
  uint64_t rspin_start = 0, rspin_deadline = 0;
  unsigned reader_loops = 0, lost = 0;
  for (unsigned i = 1;; ++i) {
    OwnerState st = spin_on_owner<P>(r, nonspinnable, budget);
    if (st == OwnerState::nonspinnable) return false;
    if (kWrite ? try_write_lock_unqueued(r, true) : try_read_lock_unqueued<P>(r)) return true;
    if (kWrite && st == OwnerState::null && lost_race_ends_spin(++lost)) return false;

    // Time-based spinning on a reader-owned lock, bounded by its own
    // threshold (not by owner_spin_ns), which restarts at each new reader
    // phase so a writer can slip in between two phases.
    if (kWrite && st == OwnerState::reader) {
      if (prev != OwnerState::reader) {
        if (r.owner.load(arch::mo_hint) & nonspinnable) return false;
        rspin_start = now_ns();
        rspin_deadline = rspin_threshold(r, rspin_start);
        reader_loops = 0;
      } else if (++reader_loops % kClockEvery == 0 && now_ns() > rspin_deadline) {
        set_nonspinnable<P>(r);
        lockevent_inc(LockEvent::rwsem_opt_nospin);
        return false;
      }
    } else if (kWrite && prev == OwnerState::reader) {
      budget.credit(now_ns() - rspin_start);
    }
    // need_resched() stand-in (a writer owner's time is checked inside
    // spin_on_owner()).
    if (st != OwnerState::writer && i % kClockEvery == 0 && budget.expired(now_ns(), st == OwnerState::null))
      return false;
    prev = st;
    arch::cpu_relax();
  }
}

// The wait accounting of a spin (spin_mutex_ns / spin_rwlock_ns): `start`
// is the clock read the spin took anyway for its budget, so a spin costs one
// more read, at its end. The family is the lock's: an rwsem taken only
// exclusively is a mutex (WordRefs::exclusive_only), which is what the
// caller's WaitCtx would say, and the spin helpers are not passed one.
inline void account_spin(const WordRefs& r, uint64_t start) {
  lockevent_add(r.exclusive_only ? LockEvent::spin_mutex_ns : LockEvent::spin_rwlock_ns, now_ns() - start);
}

// rwsem_optimistic_spin(): only the head of the OSQ spins on the lock.
template <class P, bool kWrite>
bool optimistic_spin(const WordRefs& r) {
  const uint64_t nonspinnable = kWrite ? P::kWrNonspinnable : P::kRdNonspinnable;
  const uint64_t start = now_ns();
  SpinBudget budget = starting_budget(start);
  bool taken = false;
  // The OSQ node is per thread: the shared slot's threads never spin.
  if (!take_spinner_seat()) {
    lockevent_inc(LockEvent::rwsem_opt_crowded);
  } else {
    if (!is_shared(self_slot()) && osq_lock(r.osq, budget)) {
      taken = spin_for_lock<P, kWrite>(r, nonspinnable, budget);
      osq_unlock(r.osq);
    }
    give_back_spinner_seat();
  }
  if (!taken) lockevent_inc(LockEvent::rwsem_opt_fail);
  account_spin(r, start);
  return taken;
}

// The first waiter that owns HANDOFF spins on a running writer owner instead
// of sleeping, and retries at once when the owner lets go (OWNER_NULL).
template <class P>
bool handoff_spin(const WordRefs& r, uint64_t& spin_deadline) {
  if (!tunables().writer_spin) return false;
  uint64_t now = now_ns();
  if (spin_deadline == 0)
    spin_deadline = now + tunables().owner_spin_ns;
  else if (now > spin_deadline)
    return false;
  SpinBudget budget = SpinBudget::until(spin_deadline);
  bool free = spin_on_owner<P>(r, P::kNonspinnable, budget) == OwnerState::null;
  account_spin(r, now);
  return free;
}

// Deviation (reader polls; v5.11+ readers never spin): a reader that met a
// writer owner polls for it to leave, for at most owner_spin_ns and only
// while that writer may be running (a writer spinner's rule, without a seat
// or the OSQ: at most one poller per CPU is running anyway). It keeps its
// bias, so it holds the read lock the moment the writer's release clears
// WRITER_LOCKED, and the acquire load that sees it orders the critical
// section after the writer's. The alternative, queueing, puts the reader to
// sleep and its waker's wake-up places it on the waker's CPU: with more
// threads than CPUs another CPU then sits idle (docs/rwsem.md, "Readers
// poll a running writer"). True when WRITER_LOCKED cleared without HANDOFF;
// `count` then holds what was seen.
template <class P>
bool read_poll_writer(const WordRefs& r, uint64_t& count) {
  if (!tunables().writer_spin) return false;
  const uint64_t o = r.owner.load(arch::mo_hint);
  ThreadSlot* writer = (o & kReaderOwned) ? nullptr : owner_slot<P>(o);  // not yet recorded: poll on
  const uint64_t start = now_ns();
  const uint64_t deadline = start + tunables().owner_spin_ns;
  for (unsigned polls = 1;; ++polls) {
    arch::cpu_relax();
    uint64_t c = r.count.load(arch::mo_lock);
    if (c & kFlagHandoff) break;
    if (!(c & kWriterLocked)) {
      count = c;
      lockevent_inc(LockEvent::rwsem_rlock_writer_poll);
      account_spin(r, start);
      return true;
    }
    if (polls % kClockEvery == 0 && (now_ns() > deadline || (writer != nullptr && !slot_running(*writer))))
      break;
  }
  account_spin(r, start);
  return false;
}

// ---------------------------------------------------------------------------
// Yield to a woken writer (not in the kernel; docs/rwsem.md)
// ---------------------------------------------------------------------------

// A thread's run of slow paths past a woken head writer ends when it sees
// WOKEN clear, spins, queues or yields; the next one starts its clock anew.
inline void end_woken_run() { t_local.woken_seen_ns = 0; }

// Yields once the head writer was woken (WOKEN) and has not taken the lock
// in the woken_yield_ns since this thread's run of writer slow paths that
// found it so began: most likely it is runnable on this thread's CPU, where
// the scheduler placed it (no shared cache exposed), while this thread
// barges and steals through its time slice. One sched_yield() lets it run; with nothing else runnable here it
// returns at once. Rwlocks only: the mutex keeps the lock with the releaser
// on purpose (exclusive_polite_ns).
void yield_to_woken_writer(const WordRefs& r) {
  const uint64_t limit = tunables().woken_yield_ns;
  if (limit == 0 || r.exclusive_only) return;
  if (!(r.count.load(arch::mo_hint) & kFlagWoken)) {
    end_woken_run();
    return;
  }
  const uint64_t now = now_ns();
  if (t_local.woken_seen_ns == 0) {
    t_local.woken_seen_ns = now;
    return;
  }
  if (now - t_local.woken_seen_ns < limit) return;
  end_woken_run();
  lockevent_inc(LockEvent::rwsem_yield_woken);
  sched_yield();
}

}  // namespace
}  // namespace rwsem_detail
}  // namespace lockswap
