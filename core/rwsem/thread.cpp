// core/rwsem/thread.cpp — rw_semaphore slow paths (design: core/rwsem/rwsem.h).
//
// What is left here reads side by side with kernel/locking/rwsem.c, in its
// order: rwsem_mark_wake() and its helpers, rwsem_cond_wake_waiter(),
// rwsem_wake(), up_read()/up_write() with waiters queued, the read slow path,
// rwsem_try_write_lock() and the write slow path, the entry points. Each
// function names the kernel function it stands for. What userspace adds
// lives in core/rwsem/, one header per concern, all included by this one
// translation unit (so the compiler sees what it saw when this was one file):
//
//   deadlines.h      the clock, the handoff deadline, the spin cap
//   wait_list.h      waiters, fork ghosts, the wait_lock
//   parking.h        the sleep-token protocol, the wake queue, writer sleeps
//   spinning.h       owner helpers, spinner seats, optimistic and handoff
//                    spin, reader polls, the woken-writer yield
//   cancel_guards.h  how a cancelled waiter leaves
//   reader_pref.h    recursive reads and reader preference
//
// Why each deviation exists, what it costs and the measurements: docs/rwsem.md.
#include "core/rwsem.h"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <new>
#include <optional>

#include "arch/clock.h"
#include "arch/futex.h"
#include "arch/relax.h"
#include "core/backoff.h"
#include "core/cancel.h"
#include "core/oncpu.h"
#include "core/osq_lock.h"
#include "core/read_pref.h"
#include "core/spin_budget.h"

namespace lockswap {

RwsemTunables g_rwsem_tunables;

}  // namespace lockswap

#include "core/rwsem/deadlines.h"
#include "core/rwsem/wait_list.h"
#include "core/rwsem/parking.h"
#include "core/rwsem/spinning.h"
#include "core/rwsem/cancel_guards.h"
#include "core/rwsem/reader_pref.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

// ---------------------------------------------------------------------------
// rwsem_mark_wake() — wait_lock held, list non-empty
// ---------------------------------------------------------------------------

// The head reader's pre-grant lost to a writer: undo it, and if that reader
// has waited too long, ask for HANDOFF in the same atomic add.
void reader_handoff(const WordRefs& r, Waiter* first, uint64_t old) {
  uint64_t undo = kReaderBias;
  if (now_ns() > first->timeout) {
    if (!(old & kFlagHandoff)) {
      undo -= kFlagHandoff;  // count += HANDOFF - BIAS
      lockevent_inc(LockEvent::rwsem_rlock_handoff);
      LOCKSWAP_TRACE_HANDOFF(&r.count, kTraceRead);
    }
    first->handoff_set.store(true, arch::mo_hint);
  }
  r.count.fetch_sub(undo, arch::mo_hint);
}

// Move every queued reader (skipping writers, dropping ghosts) onto a private
// chain, at most kMaxReadersWakeup of them. Returns how many.
uint32_t collect_readers(WaitList& wl, Waiter*& chain) {
  uint32_t woken = 0;
  Waiter** tail = &chain;
  for (Waiter* w = wl.first(); w != nullptr;) {
    Waiter* next = wl.after(w);
    if (ghost(*w)) {
      wl.remove(w);
    } else if (w->type == WaitType::read) {
      wl.remove(w);
      w->next = nullptr;
      *tail = w;
      tail = &w->next;
      if (++woken >= kMaxReadersWakeup) break;
    }
    w = next;
  }
  return woken;
}

// Grant every queued reader (up to kMaxReadersWakeup, skipping writers), in
// one count update with the flag changes, then publish the grants.
// `pregranted`: a bias the caller already added for the first of them.
// `clear_handoff`: readers got the lock, so writers need not be forced any
// more (mark_wake); the reader-preference batch keeps the writer's HANDOFF.
void grant_readers(const WordRefs& r, WaitList& wl, uint64_t pregranted, bool clear_handoff, WakeQ& q) {
  Waiter* chain = nullptr;
  uint32_t woken = collect_readers(wl, chain);
  lockevent_add(LockEvent::rwsem_wake_reader, woken);

  // One count update for all grants and flags (unsigned wrap-around is the
  // intended two's-complement arithmetic). WAITERS and HANDOFF only change
  // under wait_lock, so reading them here and subtracting later is safe.
  uint64_t adjustment = woken * kReaderBias - pregranted;
  uint64_t old = r.count.load(arch::mo_hint);
  if (wl.empty()) {
    adjustment -= kFlagWaiters;
    if (old & kFlagHandoff) adjustment -= kFlagHandoff;
    if (old & kFlagReaderFirst) adjustment -= kFlagReaderFirst;
  } else if (clear_handoff && woken != 0 && (old & kFlagHandoff)) {
    adjustment -= kFlagHandoff;
  }
  if (adjustment != 0) r.count.fetch_add(adjustment, arch::mo_handover);

  // Second pass, only now that the count covers every granted reader: one of
  // them may run and unlock as soon as it sees its grant.
  for (Waiter* w = chain; w != nullptr;) {
    Waiter* next = w->next;
    ThreadSlot* s = w->slot;
    w->task.store(nullptr, arch::mo_unlock);  // last touch of *w
    q.add(s);
    w = next;
  }
}

template <class P>
void mark_wake(const WordRefs& r, WaitList& wl, WakeType type, WakeQ& q) {
  Waiter* first = first_live(r, wl);
  if (first == nullptr) return;

  if (first->type == WaitType::write) {
    // Not a grant: the writer must still win the lock, so a spinner may steal
    // it meanwhile (readers cannot: WAITERS is set).
    if (type == WakeType::any) {
      // The lock is free for it now: a reader-preference batch may pass it
      // again only in a later read phase (see read_pref_queued()).
      first->set(Waiter::kPrefBlocked, false);
      first->set(Waiter::kWokenMark, true, arch::mo_dekker);  // Dekker pair with park_sleep()
      if (!(r.count.load(arch::mo_hint) & kFlagWoken)) r.count.fetch_or(kFlagWoken, arch::mo_dekker);
      q.add_writer(first->slot);
      lockevent_inc(LockEvent::rwsem_wake_writer);
    }
    return;
  }
  if (r.count.load(arch::mo_hint) & kFlagReadFail) return;  // too many readers already

  // Grant the head reader first, so that a writer that stole the lock is
  // noticed before anything else is done. acq_rel: seeing the lock free here
  // is what orders the granted readers after the previous writer.
  uint64_t pregranted = 0;
  if (type != WakeType::read_owned) {
    pregranted = kReaderBias;
    uint64_t old = r.count.fetch_add(kReaderBias, arch::mo_handover);
    if (old & kWriterLocked) {
      reader_handoff(r, first, old);
      return;
    }
    uint64_t who = owner_value(*first->slot);
    if constexpr (P::reader_spinning) {
      if (first->last_rowner & P::kRdNonspinnable) {  // adaptive disabling carries over
        who |= P::kRdNonspinnable;
        lockevent_inc(LockEvent::rwsem_opt_norspin);
      }
    }
    set_reader_owned<P>(r.owner, who);
  }
  grant_readers(r, wl, pregranted, true, q);
}

// rwsem_cond_wake_waiter() (v5.19+): wake what the current count allows.
template <class P>
void cond_wake_waiter(const WordRefs& r, WaitList& wl, uint64_t count, WakeQ& q) {
  if (count & kWriterMask) return;
  if (count & kReaderMask) {
    mark_wake<P>(r, wl, WakeType::readers, q);
  } else {
    clear_nonspinnable<P>(r);
    mark_wake<P>(r, wl, WakeType::any, q);
  }
}

// rwsem_del_wake_waiter(): a waiter gives up. If it was first and others
// remain, wake them: they may now be eligible, or inherit the handoff.
template <class P>
void del_wake_waiter(const WordRefs& r, WaitList& wl, Waiter* w, WakeQ& q) {
  bool first = first_live(r, wl) == w;
  if (del_waiter(r, wl, w) && first) mark_wake<P>(r, wl, WakeType::any, q);
}

// rwsem_wake() and rwsem_downgrade_wake().
template <class P>
void wake_queue(const WordRefs& r, WakeType type) {
  WakeQ q;
  {
    WaitList wl(r);
    if (!wl.empty()) mark_wake<P>(r, wl, type, q);
  }
  q.wake();
}

// up_read() / up_write() from inside the slow paths (a cancelled or
// cancellation-pending thread gives back what it was granted).
template <class P>
void read_unlock_ref(const WordRefs& r) {
  uint64_t c = r.count.load(arch::mo_hint);
  while (!last_reader_with_waiters(c))
    if (r.count.compare_exchange_weak(c, c - kReaderBias, arch::mo_unlock, arch::mo_hint)) return;
  // The last reader with waiters queued: release under the wait_lock (see
  // SlowPaths::read_unlock_last()).
  WakeQ q;
  {
    WaitList wl(r);
    c = r.count.fetch_sub(kReaderBias, arch::mo_dekker) - kReaderBias;  // seq_cst: see wake_writer()
    if ((c & (kLockMask | kFlagWaiters)) == kFlagWaiters) {
      clear_nonspinnable<P>(r);
      if (!wl.empty()) mark_wake<P>(r, wl, WakeType::any, q);
    }
  }
  q.wake();
}
// False when no writer held the lock: a mutex unlocked while unlocked (glibc
// tolerates that on its default kinds) is left as it was. Clearing the bit
// instead of subtracting it keeps such a stray unlock from wrapping the count
// into "locked forever".
template <class P>
bool write_unlock_ref(const WordRefs& r) {
  r.owner.store(0, arch::mo_hint);
  uint64_t c = kWriterLocked;
  if (r.count.compare_exchange_strong(c, kUnlocked, arch::mo_unlock, arch::mo_hint)) return true;
  // The head writer is awake (WOKEN): nobody to wake, no wait_lock.
  while ((c & (kWriterLocked | kFlagWoken)) == (kWriterLocked | kFlagWoken))
    if (r.count.compare_exchange_weak(c, c & ~kWriterLocked, arch::mo_unlock, arch::mo_hint)) return true;
  // Waiters queued: release under the wait_lock (see SlowPaths::write_unlock_slow()).
  WakeQ q;
  uint64_t old;
  {
    WaitList wl(r);
    old = r.count.fetch_and(~kWriterLocked, arch::mo_dekker);  // seq_cst: see wake_writer()
    if ((old & kWriterLocked) && (old & kFlagWaiters) && !wl.empty()) mark_wake<P>(r, wl, WakeType::any, q);
  }
  q.wake();
  return old & kWriterLocked;
}

// ---------------------------------------------------------------------------
// Read slow path
// ---------------------------------------------------------------------------

// Queued readers follow a reader that just got the lock (wake type READ_OWNED).
// Only a reader heading the queue can be woken that way (mark_wake()), so a
// reader that got in asks READER_FIRST before taking the wait_lock (a
// deviation: docs/rwsem.md, "READER_FIRST").
bool readers_queued_first(uint64_t count) {
  return (count & (kFlagWaiters | kFlagReaderFirst)) == (kFlagWaiters | kFlagReaderFirst);
}
template <class P>
void wake_readers_behind_me(const WordRefs& r) {
  wake_queue<P>(r, WakeType::read_owned);
}

// v5.11+ reader lock stealing (1a728dff855a) with the anti-starvation rule
// (2f06f702925b): don't steal from a lock that is very likely reader-owned,
// or a stream of stealers would keep the count above 0 and no waiter could
// ever be woken to assert HANDOFF.
// Deviation (steal_read_held, default-kind locks only): the reader steals
// even then, as glibc's reader-preferring default does; the head writer's
// bounded sleep (write_queue()) sets HANDOFF in its place.
// The rule itself, for a reader that did not queue and finds `other_readers`
// readers in besides itself: the event its steal counts, or none when it
// may not steal. read_steal() and the read trylock ask here.
std::optional<LockEvent> steal_verdict(uint64_t owner, uint64_t other_readers, bool reader_pref) {
  if (!((owner & kReaderOwned) && other_readers >= 1)) return LockEvent::rwsem_rlock_steal;
  if (reader_pref && tunables().steal_read_held) return LockEvent::rwsem_rlock_steal_held;
  return std::nullopt;
}

template <class P>
bool read_steal(const WordRefs& r, uint64_t count, bool have_bias, bool reader_pref) {
  const ReaderEntry entry = reader_may_enter(count, have_bias, kReadPlain);
  if (!entry.unqueued) return false;
  uint64_t rcnt = entry.other_readers + 1;  // including us
  std::optional<LockEvent> ev = steal_verdict(r.owner.load(arch::mo_hint), entry.other_readers, reader_pref);
  if (!ev) return false;
  if (!have_bias) {  // drop_bias_early: take a bias back, on the same terms
    uint64_t c = r.count.load(arch::mo_hint);
    do {
      if (!reader_may_enter(c, 0, kReadPlain).unqueued) return false;
    } while (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint));
    count = c + kReaderBias;
    rcnt = reader_count(count);
  }
  set_reader_owned<P>(r.owner, owner_value(self_slot()));
  lockevent_inc(*ev);
  // First reader in: bring the queued readers along.
  if (rcnt == 1 && readers_queued_first(count)) wake_readers_behind_me<P>(r);
  return true;
}

// v5.10 reader optimistic spinning, then one retry if a new reader phase
// began meanwhile (rwsem_reader_phase_trylock()).
template <class P>
bool read_spin(const WordRefs& r, bool& have_bias, uint64_t& last_rowner) {
  uint64_t o = r.owner.load(arch::mo_hint);
  last_rowner = (o & kReaderOwned) ? o : (o & P::kRdNonspinnable);
  if (!tunables().writer_spin || !can_spin_on_owner<P>(r, P::kRdNonspinnable)) return false;
  if (have_bias) {  // spinning is done without a bias
    r.count.fetch_sub(kReaderBias, arch::mo_unlock);
    have_bias = false;
  }
  if (optimistic_spin<P, false>(r)) {
    if (readers_queued_first(r.count.load(arch::mo_hint))) wake_readers_behind_me<P>(r);
    return true;
  }
  o = r.owner.load(arch::mo_hint);
  if ((o & kReaderOwned) && ((o ^ last_rowner) & ~P::kOwnerFlags) && try_read_lock_unqueued<P>(r)) {
    lockevent_inc(LockEvent::rwsem_opt_rlock2);
    lockevent_add(LockEvent::rwsem_opt_fail, ~uint64_t{0});  // it was not a failure after all: -1
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// Queued readers
// ---------------------------------------------------------------------------

// Sleep until granted; on timeout leave the queue unless a grant raced in.
template <class P>
int read_wait(const WordRefs& r, Waiter& w, const WaitCtx& ctx, bool pref) {
  ThreadSlot& me = *w.slot;
  QueueGuard<P> guard{r, w};
  read_pref::PrefWaiter watch;
  const uint64_t bound = std::max(tunables().reader_pref_ns, kPrefSliceMinNs);
  uint64_t slice = bound;
  LockEvent got = LockEvent::rwsem_rlock;
  bool timed_out = false;
  for (;;) {
    uint32_t seen = me.park.load(arch::mo_lock);  // before the check: see parking.h
    if (w.task.load(arch::mo_lock) == nullptr) break;
    uint64_t now = 0;
    if (pref) {
      now = now_ns();
      // Register before checking rule (a) (Dekker pair with ReadHolderSleep).
      if (read_held(r.count.load(arch::mo_hint), 0)) watch.register_for(me, &r.count);
      WakeQ q;
      Admit a = read_pref_queued<P>(r, w, now, q);
      q.wake();
      if (a == Admit::granted) break;
      if (a != Admit::none) {
        got = a == Admit::asleep ? LockEvent::rwsem_rlock_reader_pref
              : a == Admit::rt   ? LockEvent::rwsem_rlock_rt
                                 : LockEvent::rwsem_rlock_reader_pref_wait;
        break;
      }
    }
    if (timed_out) {
      WaitList wl(r);
      if (w.task.load(arch::mo_lock) == nullptr) break;  // granted meanwhile: keep it
      WakeQ q;
      del_wake_waiter<P>(r, wl, &w, q);
      wl.unlock();
      q.wake();
      guard.armed = false;
      lockevent_inc(LockEvent::rwsem_rlock_fail);
      return ctx.give_up_code();
    }
    if (pref && (ctx.mode == WaitCtx::Mode::forever || arch::ns_until(ctx.clock, *ctx.abs) > slice)) {
      // A bounded sleep; its end is not the caller's timeout.
      timespec end = arch::timespec_at(now + slice);
      park_sleep(me, seen, WaitCtx::until(CLOCK_MONOTONIC, &end, ctx.family));
      timed_out = ctx.mode == WaitCtx::Mode::until && ctx.expired();
      slice = std::min(slice * 2, bound << kPrefSliceMaxShift);
    } else {
      timed_out = park_sleep(me, seen, ctx) == ETIMEDOUT;
    }
    lockevent_inc(LockEvent::rwsem_sleep_reader);
  }
  guard.armed = false;
  lockevent_inc(got);
  return 0;
}

template <class P>
int read_queue(const WordRefs& r, bool have_bias, uint64_t last_rowner, const WaitCtx& ctx, ReadFlags flags) {
  end_woken_run();
  ThreadSlot& me = self_slot();
  WaiterRecord rec(me, WaitType::read, now_ns());
  Waiter& w = rec.get();
  w.last_rowner = last_rowner;
  uint64_t adjustment = have_bias ? 0 - kReaderBias : 0;

  WaitList wl(r);
  if (wl.empty()) {
    // Nobody queued and no writer: the bias we still hold is a read lock.
    // (HANDOFF is always clear with an empty queue.) An acquire load rather
    // than the kernel's relaxed load + smp_acquire__after_ctrl_dep(): the same
    // code on x86, and visible to TSan, which ignores fences.
    if (have_bias && !(r.count.load(arch::mo_lock) & kWriterMask)) {
      wl.unlock();
      set_reader_owned<P>(r.owner, owner_value(me));
      lockevent_inc(LockEvent::rwsem_rlock_fast);
      return 0;
    }
    adjustment += kFlagWaiters;
  }
  wl.add_tail(&w);
  uint64_t c = adjustment != 0 ? r.count.fetch_add(adjustment, arch::mo_handover) + adjustment
                               : r.count.load(arch::mo_hint);
  WakeQ q;
  cond_wake_waiter<P>(r, wl, c, q);  // giving back our bias may have freed the lock
  wl.unlock();
  q.wake();
  return read_wait<P>(r, w, ctx, (flags & kReadReaderPref) != 0);
}

// ---------------------------------------------------------------------------
// Write slow path
// ---------------------------------------------------------------------------

// rwsem_try_write_lock() (v6.3 rules), wait_lock held. Takes the lock, or sets
// HANDOFF for the first waiter once `w` has waited past its timeout.
template <class P>
bool try_write_lock(const WordRefs& r, WaitList& wl, Waiter& w) {
  Waiter* first = first_live(r, wl);
  uint64_t c = r.count.load(arch::mo_hint);
  uint64_t next;
  int waited_too_long = -1;  // lazily: -1 unknown, 0 no, 1 yes
  do {
    bool has_handoff = (c & kFlagHandoff) != 0;
    // Yield only to a handoff that the first waiter owns (6eebd5fb2083).
    if (has_handoff && first->handoff_set.load(arch::mo_hint) && &w != first) return false;
    next = c;
    if (c & kLockMask) {
      if (has_handoff) return false;
      if (waited_too_long < 0) waited_too_long = now_ns() > w.timeout;
      if (!waited_too_long) return false;
      next |= kFlagHandoff;
    } else {
      next |= kWriterLocked;
      next &= ~kFlagHandoff;
      if (&w == first) next &= ~kFlagWoken;
      if (wl.singular()) next &= ~(kFlagWaiters | kFlagReaderFirst);
    }
  } while (!r.count.compare_exchange_weak(c, next, arch::mo_lock, arch::mo_hint));

  if (next & kFlagHandoff) {
    first->handoff_set.store(true, arch::mo_hint);  // the handoff belongs to the head
    lockevent_inc(LockEvent::rwsem_wlock_handoff);
    LOCKSWAP_TRACE_HANDOFF(&r.count, kTraceWrite);
    return false;
  }
  wl.remove(&w);
  r.owner.store(owner_value(*w.slot), arch::mo_hint);
  return true;
}

template <class P>
int write_queue(const WordRefs& r, const WaitCtx& ctx, bool disable_rspin) {
  ThreadSlot& me = self_slot();
  WaiterRecord rec(me, WaitType::write, now_ns());
  Waiter& w = rec.get();

  WaitList wl(r);
  wl.add_tail(&w);
  if (first_live(r, wl) != &w) {
    WakeQ q;
    cond_wake_waiter<P>(r, wl, r.count.load(arch::mo_hint), q);
    if (!q.empty()) {  // keep wait_lock hold times short while waking many
      wl.unlock();
      q.wake();
      wl.lock();
    }
  } else {
    r.count.fetch_or(kFlagWaiters, arch::mo_handover);
  }

  QueueGuard<P> guard{r, w};  // the wait_lock is never held where it can fire
  const uint64_t polite_ns = polite_ns_of(tunables(), r.exclusive_only);
  bool timed_out = false, woken = false;
  uint64_t spin_deadline = 0;
  for (;;) {
    uint32_t seen = me.park.load(arch::mo_lock);  // before the attempt: see parking.h
    if (try_write_lock<P>(r, wl, w)) break;
    if (woken && ctx.mode == WaitCtx::Mode::forever && polite_ns != 0 && lost_to_the_releaser(r, wl)) {
      wl.unlock();  // WOKEN stays: no unlock needs to wake us meanwhile
      woken = false;
      lost_to_barger(me, polite_ns, ctx.family);
      wl.lock();
      continue;
    }
    if (w.has(Waiter::kWokenMark)) {  // unlocks must wake us again
      w.set(Waiter::kWokenMark, false);
      clear_woken(r);
    }
    const bool handoff_timer = needs_handoff_timer(ctx, w, first_live(r, wl) == &w, r.count.load(arch::mo_hint));
    wl.unlock();
    if (timed_out) {
      wl.lock();
      WakeQ q;
      del_wake_waiter<P>(r, wl, &w, q);
      wl.unlock();
      q.wake();
      guard.armed = false;
      lockevent_inc(LockEvent::rwsem_wlock_fail);
      return ctx.give_up_code();
    }
    if (!(w.handoff_set.load(arch::mo_hint) && handoff_spin<P>(r, spin_deadline))) {
      spin_deadline = 0;
      WriterWake why = writer_sleep(r, me, seen, w, ctx, handoff_timer, polite_ns);
      timed_out = why == WriterWake::timed_out;
      woken = why != WriterWake::handoff_due;
      lockevent_inc(LockEvent::rwsem_sleep_writer);
    }
    wl.lock();
  }
  guard.armed = false;
  if (disable_rspin) {  // v5.10 rwsem_disable_reader_optspin()
    r.owner.fetch_or(P::kRdNonspinnable, arch::mo_hint);
    lockevent_inc(LockEvent::rwsem_opt_norspin);
  }
  wl.unlock();
  lockevent_inc(LockEvent::rwsem_wlock);
  return 0;
}

}  // namespace

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

template <class P>
int read_impl(const WordRefs& r, uint64_t count, const WaitCtx& ctx, ReadFlags flags) {
  bool have_bias = true;
  if (!(count & kFlagWoken)) end_woken_run();
  if (count & kFlagReadFail) set_nonspinnable<P>(r);  // the kernel WARNs here
  if (tunables().drop_bias_early) {
    // 2016 RFC: a writer spinning for a free count should not wait for us.
    count = r.count.fetch_sub(kReaderBias, arch::mo_unlock) - kReaderBias;
    have_bias = false;
    lockevent_inc(LockEvent::rwsem_rlock_bias_drop);
  }
  if ((flags & kReadHoldsThis) && read_recursive<P>(r, count, have_bias)) return 0;

  uint64_t last_rowner = 0;
  // glibc's writer-nonrecursive kind: a queued writer keeps new readers out,
  // so neither v5.11 stealing nor v5.10 spinning may pass the queue.
  if (reader_may_enter(count, have_bias, flags).stays_behind) return read_queue<P>(r, have_bias, last_rowner, ctx, flags);
  if constexpr (P::reader_spinning) {
    if (read_spin<P>(r, have_bias, last_rowner)) return 0;
  } else {
    if (read_steal<P>(r, count, have_bias, flags & kReadReaderPref)) return 0;
    if (have_bias && (count & kWriterLocked) && !(count & kFlagHandoff) && read_poll_writer<P>(r, count) &&
        read_steal<P>(r, count, have_bias, flags & kReadReaderPref))
      return 0;
  }
  if ((flags & kReadReaderPref) && read_pref_arrival<P>(r, count, have_bias)) return 0;
  return read_queue<P>(r, have_bias, last_rowner, ctx, flags);
}

template <class P>
__attribute__((noinline)) int SlowPaths<P>::read(const WordRefs& r, uint64_t count, WaitCtx ctx, ReadFlags flags) {
  if ((count & kReadFailedMask) == 0) {  // granted; the fast path only lacked a slot (read_fast())
    set_reader_owned<P>(r.owner, owner_value(self_slot()));
    return 0;
  }
  CancelScope cs;
  int rc = read_impl<P>(r, count, ctx, flags);
  restore_cancel<P>(cs, r, rc, false);
  return rc;
}

// Would a blocking reader take this lock at once, without queueing? `c` has
// no WRITER, HANDOFF or READFAIL. v5.11: it steals unless the lock is very
// likely reader-owned already; v5.10: it spins, unless reader spinning is off.
template <class P>
bool unqueued_reader_would_get_it(const WordRefs& r, uint64_t other_readers, bool reader_pref) {
  uint64_t o = r.owner.load(arch::mo_hint);
  if constexpr (P::reader_spinning)
    return tunables().writer_spin && !(o & P::kRdNonspinnable);
  else
    return steal_verdict(o, other_readers, reader_pref).has_value();
}

// down_read_trylock() (v5.16+: read the count first). Not in the kernel: it
// succeeds wherever a blocking reader would get in without sleeping —
// recursion, v5.11 stealing / v5.10 spinning past queued waiters, and the
// reader-preference rules (a) and (c) — so a lock nobody holds is not EBUSY
// just because waiters are queued (glibc's default rwlock succeeds there).
template <class P>
__attribute__((noinline)) int SlowPaths<P>::read_try(const WordRefs& r, ReadFlags flags) {
  enum class Why : uint8_t { plain, recursive, steal, asleep, rt };
  const bool pref = flags & kReadReaderPref;
  int pref_rule = -1;  // lazily: 0 none, 1 (a), 2 (c)
  uint64_t c = r.count.load(arch::mo_hint);
  for (;;) {
    Why why;
    const ReaderEntry entry = reader_may_enter(c, 0, flags);
    // Only a recursive reader adds itself to an overflowing count
    // (READFAIL), as the kernel's trylock adds none; a blocking reader that
    // finds READFAIL has added its bias already.
    const bool overflow = c & kFlagReadFail;
    if (!(c & kReadFailedMask)) {
      why = Why::plain;
    } else if (entry.recursive) {
      why = Why::recursive;
    } else if (!overflow && entry.unqueued && unqueued_reader_would_get_it<P>(r, entry.other_readers, pref)) {
      why = Why::steal;
    } else if (!overflow && entry.preference) {
      if (pref_rule < 0)
        pref_rule = read_pref::read_holder_asleep_on(&r.count) ? 1 : rt_reader_beats_writers(r, now_ns()) ? 2 : 0;
      if (pref_rule == 0) break;
      why = pref_rule == 1 ? Why::asleep : Why::rt;
    } else {
      break;
    }
    if (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint)) continue;
    set_reader_owned<P>(r.owner, owner_value(self_slot()));
    switch (why) {
      case Why::plain: break;
      case Why::recursive: lockevent_inc(LockEvent::rwsem_rlock_recursive); break;
      case Why::steal: lockevent_inc(LockEvent::rwsem_rlock_steal); break;
      case Why::asleep: lockevent_inc(LockEvent::rwsem_rlock_reader_pref); break;
      case Why::rt: lockevent_inc(LockEvent::rwsem_rlock_rt); break;
    }
    // First reader in past queued waiters: bring the queued readers along,
    // as a stealing reader does.
    if (why == Why::steal && reader_count(c) == 0 && readers_queued_first(c)) {
      CancelScope cs;
      wake_readers_behind_me<P>(r);
      restore_cancel<P>(cs, r, 0, false);
    }
    return 0;
  }
  lockevent_inc(LockEvent::rwsem_rlock_fail);
  return EBUSY;
}

template <class P>
__attribute__((noinline)) int SlowPaths<P>::write(const WordRefs& r, WaitCtx ctx) {
  if (!ctx.may_block()) {  // trylock: never queue, never spin
    if (try_write_lock_unqueued(r, false)) return 0;
    lockevent_inc(LockEvent::rwsem_wlock_fail);
    return EBUSY;
  }
  yield_to_woken_writer(r);
  if (tunables().barge && try_write_lock_unqueued(r, false)) {
    lockevent_inc(LockEvent::rwsem_wlock_barge);
    return 0;
  }
  end_woken_run();  // spinning or queueing
  CancelScope cs;
  int rc = 0;
  if (!(tunables().writer_spin && can_spin_on_owner<P>(r, P::kWrNonspinnable) && optimistic_spin<P, true>(r))) {
    // v5.10: having seen spinning disabled, disable reader spinning once we own it.
    bool disable_rspin = P::reader_spinning && (r.owner.load(arch::mo_hint) & P::kNonspinnable) != 0;
    rc = write_queue<P>(r, ctx, disable_rspin);
  }
  restore_cancel<P>(cs, r, rc, true);
  return rc;
}

template <class P>
__attribute__((noinline)) void SlowPaths<P>::wake(const WordRefs& r) {
  CancelScope cs;
  wake_queue<P>(r, WakeType::any);
  cs.restore();
}

// up_write() + rwsem_wake() with the release inside the wait_lock: a queued
// waiter can only take the lock through the wait_lock (spinners that take it
// meanwhile are not its last user while waiters are queued), so nobody can
// destroy the lock before the store that drops the wait_lock, this thread's
// last access to it. The wakeups go to thread slots afterwards.
template <class P>
__attribute__((noinline)) bool SlowPaths<P>::write_unlock_slow(const WordRefs& r) {
  CancelScope cs;
  bool held = write_unlock_ref<P>(r);
  cs.restore();
  return held;
}

// up_read() + rwsem_wake() of the last reader, with the release inside the
// wait_lock for the reason given at write_unlock_slow().
template <class P>
__attribute__((noinline)) void SlowPaths<P>::read_unlock_last(const WordRefs& r) {
  CancelScope cs;
  read_unlock_ref<P>(r);
  cs.restore();
}

template <class P>
__attribute__((noinline)) void SlowPaths<P>::downgrade_wake(const WordRefs& r) {
  CancelScope cs;
  wake_queue<P>(r, WakeType::read_owned);
  cs.restore();
}

template struct SlowPaths<RwsemSteal>;
template struct SlowPaths<RwsemRspin>;

void after_fork_in_child() { g_spinners.store(0, std::memory_order_relaxed); }

std::size_t queued_waiters(std::atomic<uint64_t>& waitq, std::atomic<uint64_t>* count) {
  CancelScope cs;
  WaitList wl(waitq, count);
  std::size_t n = 0;
  for (Waiter* w = wl.first(); w != nullptr; w = wl.after(w)) ++n;
  wl.unlock();
  cs.restore();
  return n;
}

}  // namespace rwsem_detail
}  // namespace lockswap
