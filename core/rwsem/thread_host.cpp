// core/rwsem/thread_host.cpp — rw_semaphore slow paths (design: core/rwsem/rwsem.h).
//
// The kernel's rules (rwsem_mark_wake(), rwsem_cond_wake_waiter(),
// rwsem_wake(), rwsem_try_write_lock(), the spinning) are core/rwsem/rules.h's,
// shared with the process-shared host; Rules<P> runs them on this host's
// representation (core/rwsem/thread_rep.h). What is left here reads side by
// side with kernel/locking/rwsem.c, in its order: rwsem_del_wake_waiter(),
// up_read()/up_write() with waiters queued, the read slow path, the write
// slow path, the entry points. Each function names the kernel function it stands for. What
// userspace adds lives in core/rwsem/, one header per concern, all included
// by this one translation unit (so the compiler sees what it saw when this was
// one file):
//
//   deadlines.h      the handoff deadline, the CPUs
//   wait_list.h      waiters, fork ghosts, the wait_lock
//   parking.h        the sleep-token protocol, the wake queue, writer sleeps
//   thread_rep.h     the representation the rules run on: owner encoding,
//                    grants, the OSQ behind the spinner seats
//   spinning.h       reader polls, the woken-writer yield
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
#include "core/rwsem/thread_rep.h"
#include "core/rwsem/spinning.h"
#include "core/rwsem/cancel_guards.h"
#include "core/rwsem/reader_pref.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

// ---------------------------------------------------------------------------
// Wakeups (rwsem_mark_wake() is Rules<P>::mark_wake(), core/rwsem/rules.h)
// ---------------------------------------------------------------------------

// rwsem_del_wake_waiter(): a waiter gives up. If it was first and others
// remain, wake them: they may now be eligible, or inherit the handoff.
template <class P>
void del_wake_waiter(const WordRefs& r, WaitList& wl, Waiter* w, WakeQ& q) {
  bool first = first_live(r, wl) == w;
  if (del_waiter(r, wl, w) && first) Rules<P>::mark_wake(r, wl, WakeType::any, q);
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
      Rules<P>::clear_nonspinnable(r);
      if (!wl.empty()) Rules<P>::mark_wake(r, wl, WakeType::any, q);
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
    if ((old & kWriterLocked) && (old & kFlagWaiters) && !wl.empty()) Rules<P>::mark_wake(r, wl, WakeType::any, q);
  }
  q.wake();
  return old & kWriterLocked;
}

// ---------------------------------------------------------------------------
// Read slow path
// ---------------------------------------------------------------------------

// v5.11+ reader lock stealing: the rule is Rules<P>::steal_verdict()
// (core/rwsem/rules.h), with its deviation steal_read_held for default-kind
// locks; the head writer's bounded sleep (write_queue()) sets HANDOFF in
// place of the woken head that stealing readers can starve.
template <class P>
bool read_steal(const WordRefs& r, uint64_t count, bool have_bias, bool reader_pref) {
  const ReaderEntry entry = reader_may_enter(count, have_bias, kReadPlain);
  if (!entry.unqueued) return false;
  uint64_t rcnt = entry.other_readers + 1;  // including us
  std::optional<LockEvent> ev = Rules<P>::steal_verdict(r.owner.load(arch::mo_hint), entry.other_readers, reader_pref);
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
  if (rcnt == 1 && Rules<P>::readers_may_follow(count)) Rules<P>::wake(r, WakeType::read_owned);
  return true;
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
  Rules<P>::cond_wake(r, wl, c, q);  // giving back our bias may have freed the lock
  wl.unlock();
  q.wake();
  return read_wait<P>(r, w, ctx, (flags & kReadReaderPref) != 0);
}

// ---------------------------------------------------------------------------
// Write slow path
// ---------------------------------------------------------------------------

template <class P>
int write_queue(const WordRefs& r, const WaitCtx& ctx, bool disable_rspin) {
  ThreadSlot& me = self_slot();
  WaiterRecord rec(me, WaitType::write, now_ns());
  Waiter& w = rec.get();

  WaitList wl(r);
  wl.add_tail(&w);
  if (first_live(r, wl) != &w) {
    WakeQ q;
    Rules<P>::cond_wake(r, wl, r.count.load(arch::mo_hint), q);
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
    if (Rules<P>::try_write_lock(r, wl, &w)) break;
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
    if (!(w.handoff_set.load(arch::mo_hint) && Rules<P>::handoff_spin(r, spin_deadline))) {
      spin_deadline = 0;
      WriterWake why = writer_sleep(r, me, seen, w, ctx, handoff_timer, polite_ns);
      timed_out = why == WriterWake::timed_out;
      woken = why != WriterWake::handoff_due;
      lockevent_inc(LockEvent::rwsem_sleep_writer);
    }
    wl.lock();
  }
  guard.armed = false;
  if (disable_rspin) Rules<P>::disable_reader_spinning(r);
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
  if (count & kFlagReadFail) Rules<P>::set_nonspinnable(r);  // the kernel WARNs here
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
    if (Rules<P>::read_spin(r, have_bias, last_rowner)) return 0;
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
    return Rules<P>::steal_verdict(o, other_readers, reader_pref).has_value();
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
    if (why == Why::steal && reader_count(c) == 0 && Rules<P>::readers_may_follow(c)) {
      CancelScope cs;
      Rules<P>::wake(r, WakeType::read_owned);
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
    if (Rules<P>::try_write_lock_unqueued(r, false)) return 0;
    lockevent_inc(LockEvent::rwsem_wlock_fail);
    return EBUSY;
  }
  yield_to_woken_writer(r);
  if (tunables().barge && Rules<P>::try_write_lock_unqueued(r, false)) {
    lockevent_inc(LockEvent::rwsem_wlock_barge);
    return 0;
  }
  end_woken_run();  // spinning or queueing
  CancelScope cs;
  int rc = 0;
  if (!(Rules<P>::can_spin_on_owner(r, P::kWrNonspinnable) && Rules<P>::template optimistic_spin<true>(r))) {
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
  Rules<P>::wake(r, WakeType::any);
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
  Rules<P>::wake(r, WakeType::read_owned);
  cs.restore();
}

template struct SlowPaths<RwsemSteal>;
template struct SlowPaths<RwsemRspin>;

// Spinner seats (not in the kernel): at most max_spinners threads of the
// process spin at once, by default the CPUs it may run on minus one (the
// owner needs a CPU to release the lock), at least one. Others queue and
// sleep at once. In the kernel, spinners beyond that would meet
// need_resched() as soon as the tasks they keep off the CPUs are woken or
// ticked in; a userspace spinner never sees that flag, and with more
// runnable threads than CPUs every extra spinner only delays the owner and
// the threads with work to do (docs/rwsem.md, "Spinner seats").
// Reset in a fork child (a thread lost in fork may have held a seat).
namespace {
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
