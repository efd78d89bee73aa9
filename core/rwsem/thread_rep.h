// core/rwsem/thread_rep.h — the thread host's representation: what
// core/rwsem/rules.h's Rules<Rep> is given to run on a thread's lock.
//
// Part of core/rwsem/thread_host.cpp's one translation unit: everything here has
// internal linkage, so include it nowhere else but in
// tests/core/rwsem_agreement_test.cpp, which drives the rules through this
// representation and core/rwsem/shared_rep.h's.
//
// The words (core/rwsem/rwsem.h): a 64-bit count with the kernel's bits and
// the thread rules' WOKEN and READER_FIRST, an owner word holding a
// ThreadSlot* (type-stable: a stale one is safe to read) with the kernel's
// flag bits below it, the wait list's head with its wait_lock, the OSQ tail.
// A waiter is a Waiter* (core/rwsem/wait_list.h) in its thread's slot; a
// grant is published by storing nullptr into its `task` under the wait_lock,
// and its thread is unparked once the wait_lock is dropped
// (core/rwsem/parking.h). Only spinners that hold one of the process's
// spinner seats enter the OSQ, and the OSQ's head spins.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/lock_events.h"
#include "core/osq_lock.h"
#include "core/rwsem/deadlines.h"
#include "core/rwsem/parking.h"
#include "core/rwsem/rules.h"
#include "core/rwsem/rwsem.h"
#include "core/rwsem/wait_list.h"
#include "core/spin_budget.h"
#include "core/thread_registry.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

template <class P>
ThreadSlot* owner_slot(uint64_t owner) {
  return reinterpret_cast<ThreadSlot*>(owner & ~P::kOwnerFlags);
}

// The wait accounting of a spin (spin_mutex_ns / spin_rwlock_ns): `start`
// is the clock read the spin took anyway for its budget, so a spin costs one
// more read, at its end. The family is the lock's: an rwsem taken only
// exclusively is a mutex (WordRefs::exclusive_only), which is what the
// caller's WaitCtx would say, and the spin helpers are not passed one.
inline void account_spin(const WordRefs& r, uint64_t start) {
  lockevent_add(r.exclusive_only ? LockEvent::spin_mutex_ns : LockEvent::spin_rwlock_ns, now_ns() - start);
}

// The whole of one optimistic spin ends after owner_spin_ns plus this, in
// whatever state: where the kernel's spinner would meet need_resched() at
// the latest at the next tick, ours has no such signal.
constexpr uint64_t kSpinCapExtraNs = 4 * kRspinMaxNs;

template <class P>
struct ThreadRep {
  using Policy = P;
  static constexpr bool kThreadRules = true;
  static constexpr bool kProcessShared = false;
  static constexpr bool kBackOutWakes = false;  // the kernel's plain subtraction

  using count_t = uint64_t;
  static constexpr count_t kWriterLocked = rwsem::kWriterLocked;
  static constexpr count_t kWaiters = kFlagWaiters;
  static constexpr count_t kHandoff = kFlagHandoff;
  static constexpr count_t kReaderBias = rwsem::kReaderBias;
  static constexpr count_t kReaderCountMask = rwsem::kReaderCountMask;
  static constexpr count_t kReadFail = kFlagReadFail;
  static constexpr count_t kWoken = kFlagWoken;
  static constexpr count_t kReaderFirst = kFlagReaderFirst;

  using Lock = WordRefs;
  using List = WaitList;
  using WakeQ = rwsem_detail::WakeQ;
  using Handle = Waiter*;
  static constexpr Handle kNoWaiter = nullptr;
  using OwnerRef = ThreadSlot*;
  static constexpr OwnerRef kNoOwner = nullptr;

  static std::atomic<uint64_t>& count(const Lock& l) { return l.count; }

  // The owner word holds the value itself.
  static uint64_t owner(const Lock& l) { return l.owner.load(arch::mo_hint); }
  static void set_owner(const Lock& l, uint64_t o) { l.owner.store(o, arch::mo_hint); }
  static void owner_set_bits(const Lock& l, uint64_t bits) { l.owner.fetch_or(bits, arch::mo_hint); }
  static void owner_clear_bits(const Lock& l, uint64_t bits) { l.owner.fetch_and(~bits, arch::mo_hint); }
  static bool owner_cas(const Lock& l, uint64_t& expected, uint64_t desired) {
    return l.owner.compare_exchange_weak(expected, desired, arch::mo_hint, arch::mo_hint);
  }
  static OwnerRef owner_ref(uint64_t o) { return owner_slot<P>(o); }
  // A thread asleep in lockswap publishes its sleep token in `blocked`.
  static bool owner_blocked(const Lock&, OwnerRef s) { return s->blocked.load(arch::mo_hint) != 0; }
  static bool owner_running(const Lock&, OwnerRef s) { return slot_running(*s); }
  static uint64_t self_owner_value(const Lock&) { return owner_value(self_slot()); }
  static uint64_t owner_value_of(const Lock&, Handle w) { return owner_value(*w->slot); }

  static bool is_reader(const Lock&, Handle w) { return w->type == WaitType::read; }
  static bool ghost(const Lock&, Handle w) { return rwsem_detail::ghost(*w); }
  static uint64_t deadline(const Lock&, Handle w) { return w->timeout; }
  static bool handoff_set(const Lock&, Handle w) { return w->handoff_set.load(arch::mo_hint); }
  static void set_handoff(const Lock&, Handle w) { w->handoff_set.store(true, arch::mo_hint); }
  static uint64_t last_rowner(const Lock&, Handle w) { return w->last_rowner; }
  // The head writer is woken: a reader-preference batch may pass it again
  // only in a later read phase (read_pref_queued()), and its sleep must not
  // miss that WOKEN was set for it (Dekker pair with park_sleep()).
  static void writer_woken(const Lock&, Handle w) {
    w->set(Waiter::kPrefBlocked, false);
    w->set(Waiter::kWokenMark, true, arch::mo_dekker);
  }

  // first_live() drops the ghosts ahead of the first live waiter; its
  // del_waiter() clears the queue flags when that empties the list.
  static Handle first(const Lock& l, List& wl) { return first_live(l, wl); }
  static Handle head(const List& wl) { return wl.first(); }
  static Handle after(const List& wl, Handle w) { return wl.after(w); }
  static bool empty(const List& wl) { return wl.empty(); }
  static bool singular(const List& wl) { return wl.singular(); }
  static void remove(const Lock&, List& wl, Handle w) { wl.remove(w); }
  static void settle_if_empty(const Lock&, List&) {}
  static void wake_release_waiters(const Lock&, List&, WakeQ&) {}  // every waiter takes the lock

  // A granted reader's list link chains the grants; its grant is published
  // (task = nullptr, release: the last touch of *w) under the wait_lock,
  // where a reader giving up looks for it.
  static Handle chain_next(const Lock&, Handle w) { return w->next; }
  static void set_chain_next(const Lock&, Handle w, Handle next) { w->next = next; }
  static void grant(const Lock&, WakeQ& q, Handle w) {
    ThreadSlot* s = w->slot;
    w->task.store(nullptr, arch::mo_unlock);  // last touch of *w
    q.add(s);
  }
  static void wake_writer(const Lock&, WakeQ& q, Handle w) { q.add_writer(w->slot); }
  static void flush(const Lock&, WakeQ& q) { q.wake(); }

  // need_resched()'s stand-in (core/spin_budget.h): owner_spin_ns bounds
  // spinning on a writer owner or on no owner (time in a reader phase is
  // credited back: the rules' rspin_threshold() bounds that, as in the
  // kernel); kSpinCapExtraNs more bounds the whole spin; with
  // LOCKSWAP_ONCPU=rseq a spinner that sees it was preempted stops.
  using Budget = SpinBudget;
  static SpinBudget spin_budget(uint64_t start, bool /*write*/) {
    const uint64_t d = start + tunables().owner_spin_ns;
    return {d, d + kSpinCapExtraNs};
  }

  // The OSQ, entered with one of the process's spinner seats. The OSQ node
  // is per thread: the shared slot's threads never spin.
  static bool spin_enter(const Lock& l, SpinBudget& budget) {
    if (!take_spinner_seat()) {
      lockevent_inc(LockEvent::rwsem_opt_crowded);
      return false;
    }
    if (!is_shared(self_slot()) && osq_lock(l.osq, budget)) return true;
    give_back_spinner_seat();
    return false;
  }
  static void spin_leave(const Lock& l) {
    osq_unlock(l.osq);
    give_back_spinner_seat();
  }
  static void account_spin(const Lock& l, uint64_t start) { rwsem_detail::account_spin(l, start); }
};

// The rules of core/rwsem/rules.h on a thread's lock.
template <class P>
using Rules = rwsem_rules::Rules<ThreadRep<P>>;

}  // namespace
}  // namespace rwsem_detail
}  // namespace lockswap
