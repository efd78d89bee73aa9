// core/rwsem/rules.h — the Linux rw_semaphore's rules, written once for both hosts.
//
// Design
// ------
// The kernel's non-PREEMPT_RT rw_semaphore (kernel/locking/rwsem.c; the
// facts it relies on are in docs/kernel-algorithms.md §1) runs in two hosts:
// a thread's lock (core/rwsem/rwsem.h, slow paths core/rwsem/thread_host.cpp:
// pointers in 64-bit words) and a process-shared lock (core/rwsem/shared.h,
// core/rwsem/shared_host.cpp: process numbers in three 32-bit words). Its rules
// live here once, as Rules<Rep>: templates over a representation trait
// (core/rwsem/thread_rep.h, core/rwsem/shared_rep.h), as the kernel's
// kernel/locking/rwbase_rt.c is one body that rwsem.c and spinlock_rt.c each
// include after defining their rwbase_* hooks. A rule changed here changes in
// both hosts; tests/core/rwsem_agreement_test.cpp runs the same operations
// through both representations and checks that they decide alike.
//
// Two policies (core/rwsem/policy.h) differ only in
// `if constexpr (P::reader_spinning)`:
//   RwsemSteal   Linux >= v5.11: readers never spin; a reader that fails the
//                fast path may steal the lock when no writer holds it and no
//                HANDOFF is pending (1a728dff855a), except when the lock is
//                very likely reader-owned (2f06f702925b): steal_verdict().
//   RwsemRspin   Linux v5.3..v5.10: failed readers spin optimistically like
//                writers, record `last_rowner`, retry once in a new reader
//                phase, and reader spinning is disabled per lock
//                (RD_NONSPINNABLE) when it does not pay: read_spin(). Kept as
//                in v5.10, including the reader stream that can keep a
//                sleeping writer from ever asserting HANDOFF (fixed by
//                2f06f702925b).
// Everything else (handoff, wakeups) follows the current kernel (v5.19 /
// v6.3 rules) for both policies.
//
// The rules (each names the kernel function it stands for):
//   mark_wake     rwsem_mark_wake(), wait_lock held: a head writer is woken
//                 (WAKE_ANY only; it must still win the lock itself); a head
//                 reader is granted the lock with up to kMaxReadersWakeup
//                 queued readers, skipping writers: WAKE_ANY/READERS first
//                 add one bias and back out if a writer got in
//                 (reader_handoff(): the head reader past its deadline then
//                 asks for HANDOFF in the same add), then grant_readers()
//                 makes one count update for all grants and flags, and only
//                 then publishes each grant.
//   cond_wake     rwsem_cond_wake_waiter() (v5.19+): wake what the count
//                 allows (nothing under a writer, readers under readers,
//                 anyone on a free lock).
//   try_write_lock  rwsem_try_write_lock() (v6.3): a queued writer takes a
//                 free lock unless HANDOFF belongs to another (first) waiter
//                 (6eebd5fb2083); past its deadline, any queued writer sets
//                 HANDOFF on a held lock, and the handoff belongs to the first
//                 waiter. Fast paths, stealers and spinners fail on HANDOFF.
//   owner_state, can_spin_on_owner, spin_on_owner, optimistic_spin: the
//                 kernel's spinning, writers only (v5.10: readers too), the
//                 OSQ's place taken by the host's spin_enter()/spin_leave().
//   handoff_spin  the first waiter that owns HANDOFF spins on a running
//                 writer owner instead of sleeping (rwsem_down_write_slowpath).
//
// Memory order: every change of the count is a read-modify-write, so the
// release sequence of an unlock runs through all later changes. Lock RMWs
// are acquire, unlock RMWs release; a grant's first bias is acq_rel (seeing
// the lock free there orders the granted readers after the last writer),
// and so is the one count update of grant_readers(); a granted reader does
// not touch the count itself: the host's publication of the grant (release)
// pairs with the reader's acquire load of it. The owner word is a hint and
// is accessed relaxed; each host documents its wait_lock and its sleeps.
//
// Deviations from the kernel, in the rules themselves (each host lists what
// its representation adds). Userspace has no scheduler hooks: no
// need_resched(), no owner_on_cpu(), no preempt_disable().
//   * owner_on_cpu() is the host's owner_running() (threads: not asleep in
//     lockswap and on a CPU by LOCKSWAP_ONCPU's source; processes: not asleep
//     in lockswap); need_resched() is the host's Budget, a time budget per
//     spin: owner_spin_ns on a writer or no owner (threads: SpinBudget, time
//     on readers credited back and the whole spin capped; processes: no cap)
//     (docs/rwsem.md, "Scheduler stand-ins"). A writer spinning on readers
//     is bounded by the reader phase's threshold, as in the kernel.
//   * The OSQ is the host's: spin_enter() may refuse a spinner (threads: the
//     process's spinner seats, then the OSQ; processes: a seat on the lock).
//   * HANDOFF is requested only on timeout: no rt_task().
//   * The handoff spin is bounded by owner_spin_ns per stretch of spinning
//     (the kernel stops it on need_resched() only).
//   * RwsemRspin uses the current handoff and wake rules, not v5.10's
//     writer_wait_state (docs/rwsem.md, "RwsemRspin").
//   * Thread-only rules (Rep::kThreadRules; docs/rwsem.md names each): a
//     woken head writer is marked WOKEN; READER_FIRST decides whether a
//     reader that got in brings queued readers along; a writer's spin ends
//     when it lost the freed lock to another thread ("One contended lock");
//     a reader-preference batch mark is cleared when its writer is woken; a
//     default-kind reader may steal a read-held lock (steal_read_held). The
//     process-shared host applies the kernel's rules alone, but for:
//   * Back-out wakes (Rep::kBackOutWakes, the process-shared host): a v5.10
//     reader that gives back a bias it added without getting the lock wakes
//     the queue as up_read() would (back_out_bias()).
#pragma once
#include <atomic>
#include <cstdint>
#include <optional>

#include "arch/atomic.h"
#include "arch/clock.h"
#include "arch/relax.h"
#include "core/lock_events.h"
#include "core/rwsem/policy.h"
#include "core/rwsem/tunables.h"
#include "core/spin_budget.h"
#include "core/trace.h"

namespace lockswap::rwsem_rules {

enum class WakeType : uint8_t { any, readers, read_owned };  // RWSEM_WAKE_*
enum class OwnerState : uint8_t { null, writer, reader, nonspinnable };

inline const RwsemTunables& tunables() { return g_rwsem_tunables; }

// jiffies / sched_clock() stand-in.
inline uint64_t now_ns() { return arch::monotonic_ns(); }

// What a representation Rep defines (core/rwsem/thread_rep.h and
// core/rwsem/shared_rep.h say how each does it):
//   Policy                   RwsemSteal or RwsemRspin
//   kThreadRules             the thread-only rules apply (see Deviations)
//   kBackOutWakes            a backed-out reader bias wakes like up_read()
//   kProcessShared           waiters sleep on process-shared futexes (the
//                            host's flush() and sleeps use it)
//   count_t, count(l)        the count word; kWriterLocked, kWaiters, kHandoff,
//                            kReaderBias, kReaderCountMask, kReadFail (0: none);
//                            with kThreadRules also kWoken, kReaderFirst
//   Lock                     the lock as a slow path sees it (its words, and
//                            who is calling)
//   List                     its wait list with the wait_lock held (built
//                            from a Lock, which takes the wait_lock)
//   WakeQ                    the waiters to wake once the wait_lock is dropped
//   Handle, kNoWaiter        a waiter: a record pointer or a process number
//   OwnerRef, kNoOwner       whom an owner value names
//   owner(l), set_owner(l, o), owner_set_bits(l, b), owner_clear_bits(l, b),
//   owner_cas(l, o&, n)      the owner word, decoded (relaxed)
//   owner_ref(o), owner_blocked(l, ref), owner_running(l, ref),
//   self_owner_value(l), owner_value_of(l, w)   owner encode/decode
//   is_reader, ghost, deadline, handoff_set, set_handoff, last_rowner,
//   writer_woken             a waiter's record
//   first(l, wl)             the first waiter that takes the lock (dropping
//                            ghosts); kNoWaiter when none is left
//   head, after, empty, singular, remove, settle_if_empty   the list
//   wake_release_waiters(l, wl, q)   the host's waiters that wait only for a
//                            release, woken by WAKE_ANY
//   chain_next, set_chain_next, grant(l, q, w), wake_writer(l, q, w),
//   flush(l, q)              grants and wakeups
//   Budget, spin_budget(start, write)   need_resched()'s stand-in: a spin's
//                            budget (expired(now, on_writer_or_none),
//                            credit(ns), Budget::until(deadline))
//   spin_enter(l, budget), spin_leave(l), account_spin(l, start)
template <class Rep>
struct Rules {
  using P = typename Rep::Policy;
  using Lock = typename Rep::Lock;
  using List = typename Rep::List;
  using WakeQ = typename Rep::WakeQ;
  using W = typename Rep::Handle;
  using C = typename Rep::count_t;
  using Budget = typename Rep::Budget;

  static constexpr C kWriterLocked = Rep::kWriterLocked;
  static constexpr C kWaiters = Rep::kWaiters;
  static constexpr C kHandoff = Rep::kHandoff;
  static constexpr C kReaderBias = Rep::kReaderBias;
  static constexpr C kReadFail = Rep::kReadFail;
  // Like the kernel's RWSEM_READER_MASK this includes READFAIL.
  static constexpr C kReaderMask = Rep::kReaderCountMask | kReadFail;
  static constexpr C kLockMask = kWriterLocked | kReaderMask;
  static constexpr W kNone = Rep::kNoWaiter;
  static constexpr uint64_t kReaderOwned = rwsem::kReaderOwned;
  static_assert((kLockMask & (kWaiters | kHandoff)) == 0, "lock bits and queue flags are disjoint");

  static uint64_t reader_count(C c) { return (c & Rep::kReaderCountMask) / kReaderBias; }

  // -------------------------------------------------------------------------
  // Owner word
  // -------------------------------------------------------------------------

  // rwsem_set_reader_owned(): keeps the bit that tells readers not to spin
  // (v5.11: NONSPINNABLE, v5.10: RD_NONSPINNABLE — bit 1 in both).
  static void set_reader_owned(const Lock& l, uint64_t who) {
    Rep::set_owner(l, who | kReaderOwned | (Rep::owner(l) & P::kRdNonspinnable));
  }

  // rwsem_set_nonspinnable(): only while the lock is still reader-owned.
  // v5.10 too stops when EITHER bit is set (RWSEM_NONSPINNABLE = RD|WR,
  // tested with `owner & RWSEM_NONSPINNABLE`, 5.10.13).
  static void set_nonspinnable(const Lock& l) {
    uint64_t o = Rep::owner(l);
    do {
      if (!(o & kReaderOwned) || (o & P::kNonspinnable) != 0) return;
    } while (!Rep::owner_cas(l, o, o | P::kNonspinnable));
  }

  // clear_nonspinnable() (v5.10: clear_wr_nonspinnable()): the readers are gone.
  static void clear_nonspinnable(const Lock& l) {
    if (Rep::owner(l) & P::kWrNonspinnable) Rep::owner_clear_bits(l, P::kWrNonspinnable);
  }

  // v5.10 rwsem_disable_reader_optspin(): a writer that had seen spinning
  // disabled turns reader spinning off once it owns the lock.
  static void disable_reader_spinning(const Lock& l) {
    Rep::owner_set_bits(l, P::kRdNonspinnable);
    lockevent_inc(LockEvent::rwsem_opt_norspin);
  }

  // -------------------------------------------------------------------------
  // rwsem_mark_wake() — wait_lock held, list non-empty
  // -------------------------------------------------------------------------

  // The head reader's pre-grant lost to a writer: undo it, and if that reader
  // has waited too long, ask for HANDOFF in the same atomic add.
  static void reader_handoff(const Lock& l, W first, C old) {
    C undo = kReaderBias;
    if (now_ns() > Rep::deadline(l, first)) {
      if (!(old & kHandoff)) {
        undo -= kHandoff;  // count += HANDOFF - BIAS
        lockevent_inc(LockEvent::rwsem_rlock_handoff);
        LOCKSWAP_TRACE_HANDOFF(&Rep::count(l), kTraceRead);
      }
      Rep::set_handoff(l, first);
    }
    Rep::count(l).fetch_sub(undo, arch::mo_hint);
  }

  // Grant every queued reader (up to kMaxReadersWakeup, skipping writers and
  // waiters that take no lock, dropping ghosts), in one count update with the
  // flag changes, then publish the grants.
  // `pregranted`: a bias the caller already added for the first of them.
  // `clear_handoff`: readers got the lock, so writers need not be forced any
  // more (mark_wake); the thread host's reader-preference batch keeps the
  // writer's HANDOFF.
  static void grant_readers(const Lock& l, List& wl, C pregranted, bool clear_handoff, WakeQ& q) {
    // First pass: every reader onto a private chain, off the list.
    W chain = kNone, last = kNone;
    uint32_t woken = 0;
    for (W w = Rep::head(wl); w != kNone;) {
      const W next = Rep::after(wl, w);
      if (Rep::ghost(l, w)) {
        Rep::remove(l, wl, w);
      } else if (Rep::is_reader(l, w)) {
        Rep::remove(l, wl, w);
        Rep::set_chain_next(l, w, kNone);
        if (last == kNone)
          chain = w;
        else
          Rep::set_chain_next(l, last, w);
        last = w;
        if (++woken >= rwsem::kMaxReadersWakeup) break;
      }
      w = next;
    }
    lockevent_add(LockEvent::rwsem_wake_reader, woken);

    // One count update for all grants and flags (unsigned wrap-around is the
    // intended two's-complement arithmetic). WAITERS and HANDOFF only change
    // under wait_lock, so reading them here and subtracting later is safe.
    std::atomic<C>& count = Rep::count(l);
    C adjustment = woken * kReaderBias - pregranted;
    const C old = count.load(arch::mo_hint);
    if (Rep::empty(wl)) {
      adjustment -= kWaiters;
      if (old & kHandoff) adjustment -= kHandoff;
      if constexpr (Rep::kThreadRules) {
        if (old & Rep::kReaderFirst) adjustment -= Rep::kReaderFirst;
      }
    } else if (clear_handoff && woken != 0 && (old & kHandoff)) {
      adjustment -= kHandoff;
    }
    if (adjustment != 0) count.fetch_add(adjustment, arch::mo_handover);

    // Second pass, only now that the count covers every granted reader: one of
    // them may run and unlock as soon as it sees its grant.
    for (W w = chain; w != kNone;) {
      const W next = Rep::chain_next(l, w);
      Rep::grant(l, q, w);
      w = next;
    }
  }

  static void mark_wake(const Lock& l, List& wl, WakeType type, WakeQ& q) {
    if (type == WakeType::any) Rep::wake_release_waiters(l, wl, q);
    const W first = Rep::first(l, wl);
    if (first == kNone) return Rep::settle_if_empty(l, wl);
    std::atomic<C>& count = Rep::count(l);

    if (!Rep::is_reader(l, first)) {
      // Not a grant: the writer must still win the lock, so a spinner may steal
      // it meanwhile (readers cannot: WAITERS is set).
      if (type == WakeType::any) {
        if constexpr (Rep::kThreadRules) {
          // WOKEN: unlocks need not wake it again until it clears the bit
          // (Dekker pair with the writer's sleep: core/rwsem/parking.h).
          Rep::writer_woken(l, first);
          if (!(count.load(arch::mo_hint) & Rep::kWoken)) count.fetch_or(Rep::kWoken, arch::mo_dekker);
        }
        Rep::wake_writer(l, q, first);
        lockevent_inc(LockEvent::rwsem_wake_writer);
      }
      return;
    }
    if constexpr (kReadFail != 0) {
      if (count.load(arch::mo_hint) & kReadFail) return;  // too many readers already
    }

    // Grant the head reader first, so that a writer that stole the lock is
    // noticed before anything else is done. acq_rel: seeing the lock free here
    // is what orders the granted readers after the previous writer.
    C pregranted = 0;
    if (type != WakeType::read_owned) {
      pregranted = kReaderBias;
      const C old = count.fetch_add(kReaderBias, arch::mo_handover);
      if (old & kWriterLocked) {
        reader_handoff(l, first, old);
        return;
      }
      uint64_t who = Rep::owner_value_of(l, first);
      if constexpr (P::reader_spinning) {
        if (Rep::last_rowner(l, first) & P::kRdNonspinnable) {  // adaptive disabling carries over
          who |= P::kRdNonspinnable;
          lockevent_inc(LockEvent::rwsem_opt_norspin);
        }
      }
      set_reader_owned(l, who);
    }
    grant_readers(l, wl, pregranted, true, q);
  }

  // rwsem_cond_wake_waiter() (v5.19+): wake what the current count allows.
  static void cond_wake(const Lock& l, List& wl, C count, WakeQ& q) {
    if (count & kWriterLocked) return;
    if (count & kReaderMask) {
      mark_wake(l, wl, WakeType::readers, q);
    } else {
      clear_nonspinnable(l);
      mark_wake(l, wl, WakeType::any, q);
    }
  }

  // rwsem_wake() (WAKE_ANY) and rwsem_downgrade_wake() (WAKE_READ_OWNED; also
  // a reader that got in past the queue bringing queued readers along).
  static void wake(const Lock& l, WakeType type) {
    WakeQ q;
    {
      List wl(l);
      if (!Rep::empty(wl)) mark_wake(l, wl, type, q);
    }
    Rep::flush(l, q);
  }

  // -------------------------------------------------------------------------
  // The handoff rule
  // -------------------------------------------------------------------------

  // rwsem_try_write_lock() (v6.3 rules), wait_lock held. Takes the lock, or sets
  // HANDOFF for the first waiter once `w` has waited past its deadline.
  static bool try_write_lock(const Lock& l, List& wl, W w) {
    const W first = Rep::first(l, wl);
    std::atomic<C>& count = Rep::count(l);
    C c = count.load(arch::mo_hint);
    C next;
    int waited_too_long = -1;  // lazily: -1 unknown, 0 no, 1 yes
    do {
      const bool has_handoff = (c & kHandoff) != 0;
      // Yield only to a handoff that the first waiter owns (6eebd5fb2083).
      if (has_handoff && Rep::handoff_set(l, first) && w != first) return false;
      next = c;
      if (c & kLockMask) {
        if (has_handoff) return false;
        if (waited_too_long < 0) waited_too_long = now_ns() > Rep::deadline(l, w);
        if (!waited_too_long) return false;
        next |= kHandoff;
      } else {
        next |= kWriterLocked;
        next &= ~kHandoff;
        if constexpr (Rep::kThreadRules) {
          if (w == first) next &= ~Rep::kWoken;
          if (Rep::singular(wl)) next &= ~Rep::kReaderFirst;
        }
        if (Rep::singular(wl)) next &= ~kWaiters;
      }
    } while (!count.compare_exchange_weak(c, next, arch::mo_lock, arch::mo_hint));

    if (next & kHandoff) {
      Rep::set_handoff(l, first);  // the handoff belongs to the head
      lockevent_inc(LockEvent::rwsem_wlock_handoff);
      LOCKSWAP_TRACE_HANDOFF(&count, kTraceWrite);
      return false;
    }
    Rep::remove(l, wl, w);
    Rep::set_owner(l, Rep::owner_value_of(l, w));
    return true;
  }

  // -------------------------------------------------------------------------
  // Readers that did not queue
  // -------------------------------------------------------------------------

  // v5.11+ reader lock stealing (1a728dff855a) with the anti-starvation rule
  // (2f06f702925b): don't steal from a lock that is very likely reader-owned,
  // or a stream of stealers would keep the count above 0 and no waiter could
  // ever be woken to assert HANDOFF. For a reader that did not queue, finds no
  // writer and no HANDOFF, and `other_readers` readers in besides itself: the
  // event its steal counts, or none when it may not steal.
  // Deviation (thread host, steal_read_held, default-kind locks only): the
  // reader steals even then, as glibc's reader-preferring default does
  // (`reader_pref`; the process-shared host has no such kind).
  static std::optional<LockEvent> steal_verdict(uint64_t owner, uint64_t other_readers, bool reader_pref) {
    if (!((owner & kReaderOwned) && other_readers >= 1)) return LockEvent::rwsem_rlock_steal;
    if constexpr (Rep::kThreadRules) {
      if (reader_pref && tunables().steal_read_held) return LockEvent::rwsem_rlock_steal_held;
    }
    return std::nullopt;
  }

  // The first reader in past queued waiters brings the queued readers along
  // (wake type READ_OWNED), as rwsem_down_read_slowpath() does when it sees
  // WAITERS. Deviation (thread rules, READER_FIRST): only a reader heading
  // the queue can be woken that way (mark_wake()), so a thread asks
  // READER_FIRST before it takes the wait_lock for nothing.
  static bool readers_may_follow(C count) {
    if constexpr (Rep::kThreadRules)
      return (count & (kWaiters | Rep::kReaderFirst)) == (kWaiters | Rep::kReaderFirst);
    else
      return (count & kWaiters) != 0;
  }

  // -------------------------------------------------------------------------
  // Optimistic spinning
  // -------------------------------------------------------------------------

  static OwnerState owner_state(uint64_t owner, uint64_t nonspinnable) {
    if (owner & nonspinnable) return OwnerState::nonspinnable;
    if (owner & kReaderOwned) return OwnerState::reader;
    return Rep::owner_ref(owner) != Rep::kNoOwner ? OwnerState::writer : OwnerState::null;
  }

  // rwsem_can_spin_on_owner(): a reader-owned or free lock is spinnable; a
  // writer-owned one only while that writer may be running. Nothing spins
  // with writer_spin off.
  static bool can_spin_on_owner(const Lock& l, uint64_t nonspinnable) {
    if (!tunables().writer_spin) return false;
    const uint64_t o = Rep::owner(l);
    bool ok = !(o & nonspinnable);
    if (ok && !(o & kReaderOwned)) {
      const auto ref = Rep::owner_ref(o);
      if (ref != Rep::kNoOwner && !Rep::owner_running(l, ref)) {
        ok = false;
        lockevent_inc(LockEvent::rwsem_opt_owner_off);
      }
    }
    if (!ok) lockevent_inc(LockEvent::rwsem_opt_fail);
    return ok;
  }

  // rwsem_spin_on_owner(): while a writer owns the lock and may be running,
  // wait for the owner word to change; report the state it changed to. Whether
  // the owner sleeps is asked on every poll (a load), whether it may be
  // running at all with the clock.
  static OwnerState spin_on_owner(const Lock& l, uint64_t nonspinnable, Budget& budget) {
    const uint64_t o = Rep::owner(l);
    const OwnerState st = owner_state(o, nonspinnable);
    if (st != OwnerState::writer) return st;
    const auto ref = Rep::owner_ref(o);  // type-stable slot / record: safe even if stale
    for (unsigned i = 1;; ++i) {
      const uint64_t now_owner = Rep::owner(l);
      if (now_owner != o) return owner_state(now_owner, nonspinnable);
      const bool off_cpu = Rep::owner_blocked(l, ref) || (i % kClockEvery == 0 && !Rep::owner_running(l, ref));
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
  static bool try_write_lock_unqueued(const Lock& l, bool spinning) {
    std::atomic<C>& count = Rep::count(l);
    C c = count.load(arch::mo_hint);
    while (!(c & (kLockMask | kHandoff))) {
      if (count.compare_exchange_weak(c, c | kWriterLocked, arch::mo_lock, arch::mo_hint)) {
        Rep::set_owner(l, Rep::self_owner_value(l));
        if (spinning) lockevent_inc(LockEvent::rwsem_opt_lock);
        return true;
      }
    }
    return false;
  }

  // A reader gives back a bias it added without getting the lock (v5.10:
  // before it spins, or after a failed attempt while spinning). The kernel
  // subtracts it and needs no wakeup check: every such reader afterwards
  // either holds the lock or queues, and queueing re-checks (cond_wake()).
  // Deviation (Rep::kBackOutWakes, the process-shared host): the bias goes
  // as up_read() would, waking the queue if that leaves only WAITERS, so that
  // no backed-out bias hides a release from the wait list: otherwise a stream
  // of spinning v5.10 readers, each backing out while the others hold, keeps
  // a queued writer asleep and HANDOFF unasserted.
  static void back_out_bias(const Lock& l) {
    const C c = Rep::count(l).fetch_sub(kReaderBias, arch::mo_unlock) - kReaderBias;
    if constexpr (Rep::kBackOutWakes) {
      if ((c & (kLockMask | kWaiters)) == kWaiters) wake(l, WakeType::any);
    }
  }

  // v5.10 rwsem_try_read_lock_unqueued().
  static bool try_read_lock_unqueued(const Lock& l) {
    std::atomic<C>& count = Rep::count(l);
    if (count.load(arch::mo_hint) & (kWriterLocked | kHandoff)) return false;
    const C c = count.fetch_add(kReaderBias, arch::mo_lock);
    if (!(c & (kWriterLocked | kHandoff))) {
      set_reader_owned(l, Rep::self_owner_value(l));
      lockevent_inc(LockEvent::rwsem_opt_rlock);
      return true;
    }
    back_out_bias(l);
    return false;
  }

  // rwsem_rspin_threshold(): the reader phase starting `now` may be spun on
  // until the returned time.
  static uint64_t rspin_threshold(const Lock& l, uint64_t now) {
    return now + rwsem::rspin_budget_ns(reader_count(Rep::count(l).load(arch::mo_hint)));
  }

  // Not in the kernel (thread rules): the spinner saw the owner let go and
  // still failed to take the lock, so another thread re-took it first
  // (typically the releaser, through its fast path). Where that keeps
  // happening the lock is passed back and forth between CPUs on every
  // acquisition, and each pass moves its cache line (and the data it guards)
  // across; a sleeping waiter lets the owner keep both in its cache
  // (docs/rwsem.md, "One contended lock").
  static bool lost_race_ends_spin(unsigned lost) {
    const uint32_t limit = tunables().spin_lost_races;
    if (limit == 0 || lost < limit) return false;
    lockevent_inc(LockEvent::rwsem_opt_lost);
    return true;
  }

  // The body of rwsem_optimistic_spin(), run by the one spinner the host lets in.
  template <bool kWrite>
  static bool spin_for_lock(const Lock& l, uint64_t nonspinnable, Budget& budget) {
    OwnerState prev = OwnerState::null;
    uint64_t rspin_start = 0, rspin_deadline = 0;
    unsigned reader_loops = 0, lost = 0;
    for (unsigned i = 1;; ++i) {
      const OwnerState st = spin_on_owner(l, nonspinnable, budget);
      if (st == OwnerState::nonspinnable) return false;
      if (kWrite ? try_write_lock_unqueued(l, true) : try_read_lock_unqueued(l)) return true;
      if constexpr (kWrite && Rep::kThreadRules) {
        if (st == OwnerState::null && lost_race_ends_spin(++lost)) return false;
      }

      // Time-based spinning on a reader-owned lock, bounded by its own
      // threshold (not by owner_spin_ns), which restarts at each new reader
      // phase so a writer can slip in between two phases.
      if (kWrite && st == OwnerState::reader) {
        if (prev != OwnerState::reader) {
          if (Rep::owner(l) & nonspinnable) return false;
          rspin_start = now_ns();
          rspin_deadline = rspin_threshold(l, rspin_start);
          reader_loops = 0;
        } else if (++reader_loops % kClockEvery == 0 && now_ns() > rspin_deadline) {
          set_nonspinnable(l);
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
    (void)lost;
  }

  // rwsem_optimistic_spin(): only the spinner the host lets in (the OSQ's
  // head, or a spinner seat's holder) spins on the lock.
  template <bool kWrite>
  static bool optimistic_spin(const Lock& l) {
    const uint64_t nonspinnable = kWrite ? P::kWrNonspinnable : P::kRdNonspinnable;
    const uint64_t start = now_ns();
    Budget budget = Rep::spin_budget(start, kWrite);
    bool taken = false;
    if (Rep::spin_enter(l, budget)) {
      taken = spin_for_lock<kWrite>(l, nonspinnable, budget);
      Rep::spin_leave(l);
    }
    if (!taken) lockevent_inc(LockEvent::rwsem_opt_fail);
    Rep::account_spin(l, start);
    return taken;
  }

  // v5.10 rwsem_down_read_slowpath() up to its queueing: spin optimistically
  // (without a bias: `have_bias` is dropped first), then retry once if a new
  // reader phase began meanwhile (rwsem_reader_phase_trylock()). True: the
  // read lock is held. `last_rowner` gets the owner seen on entry, for the
  // waiter record should the reader queue.
  static bool read_spin(const Lock& l, bool& have_bias, uint64_t& last_rowner) {
    uint64_t o = Rep::owner(l);
    last_rowner = (o & kReaderOwned) ? o : (o & P::kRdNonspinnable);
    if (!can_spin_on_owner(l, P::kRdNonspinnable)) return false;
    if (have_bias) {  // spinning is done without a bias
      back_out_bias(l);
      have_bias = false;
    }
    if (optimistic_spin<false>(l)) {
      if (readers_may_follow(Rep::count(l).load(arch::mo_hint))) wake(l, WakeType::read_owned);
      return true;
    }
    o = Rep::owner(l);
    if ((o & kReaderOwned) && ((o ^ last_rowner) & ~P::kOwnerFlags) && try_read_lock_unqueued(l)) {
      lockevent_inc(LockEvent::rwsem_opt_rlock2);
      lockevent_add(LockEvent::rwsem_opt_fail, ~uint64_t{0});  // it was not a failure after all: -1
      return true;
    }
    return false;
  }

  // The first waiter that owns HANDOFF spins on a running writer owner instead
  // of sleeping, and retries at once when the owner lets go (OWNER_NULL).
  // `spin_deadline`: 0 on the first call of a stretch of spinning, which
  // owner_spin_ns then bounds; the caller resets it when it sleeps.
  static bool handoff_spin(const Lock& l, uint64_t& spin_deadline) {
    if (!tunables().writer_spin) return false;
    const uint64_t now = now_ns();
    if (spin_deadline == 0)
      spin_deadline = now + tunables().owner_spin_ns;
    else if (now > spin_deadline)
      return false;
    Budget budget = Budget::until(spin_deadline);
    const bool free = spin_on_owner(l, P::kNonspinnable, budget) == OwnerState::null;
    Rep::account_spin(l, now);
    return free;
  }
};

}  // namespace lockswap::rwsem_rules
