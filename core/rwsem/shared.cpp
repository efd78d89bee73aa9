// core/rwsem/shared.cpp — the slow paths of core/rwsem/shared.h (its design
// block says what each one does and why).
#include "core/rwsem/shared.h"

#include <unistd.h>

#include <algorithm>

#include "arch/clock.h"
#include "arch/futex.h"
#include "arch/relax.h"
#include "core/backoff.h"

namespace lockswap::rwshared {

namespace {

constexpr auto kSeq = std::memory_order_seq_cst;
constexpr uint32_t kOwnerFlagMask = (1u << kOwnerShift) - 1;
// The rspin deadline and the spin budget are read once in 16 polls
// (the kernel's `++loop & 0xf`): a clock read between a release and the
// spinner's attempt delays the attempt.
constexpr unsigned kClockEvery = 16;

const RwsemTunables& tun() { return g_rwsem_tunables; }
uint64_t now() { return arch::monotonic_ns(); }

// ------------------------------------------------------- the wait_lock

void wait_lock(Words& w) {
  for (;;) {
    if (!(w.count.fetch_or(kWaitLock, std::memory_order_acquire) & kWaitLock)) return;
    Backoff backoff;
    while (w.count.load(arch::mo_hint) & kWaitLock) backoff.pause();
  }
}
void wait_unlock(Words& w) { w.count.fetch_and(~kWaitLock, std::memory_order_release); }

// ------------------------------------------- the wait list (under WL)

int32_t head(const Words& w) { return int32_t(w.waitq.load(arch::mo_hint) ^ kStoredXor) - 1; }
void set_head(Words& w, int32_t p) { w.waitq.store(uint32_t(p + 1) ^ kStoredXor, arch::mo_hint); }
bool list_empty(const Words& w) { return head(w) == kNoProc; }

void add_tail(Words& w, const Records& rs, int32_t p) {
  Waiter& x = rs.at(p);
  int32_t h = head(w);
  if (h == kNoProc) {
    x.next = x.prev = p;
    set_head(w, p);
    return;
  }
  int32_t t = rs.at(h).prev;
  x.next = h;
  x.prev = t;
  rs.at(t).next = p;
  rs.at(h).prev = p;
}

void remove(Words& w, const Records& rs, int32_t p) {
  Waiter& x = rs.at(p);
  if (x.next == p) {
    set_head(w, kNoProc);
    return;
  }
  rs.at(x.prev).next = x.next;
  rs.at(x.next).prev = x.prev;
  if (head(w) == p) set_head(w, x.next);
}

// Visit every queued record once, in order; `visit` may remove the one it
// is given (its successor was read before), and returns false to stop.
template <class Visit>
void for_each_queued(const Words& w, const Records& rs, Visit&& visit) {
  int32_t p = head(w);
  if (p == kNoProc) return;
  const int32_t tail = rs.at(p).prev;
  for (;;) {
    const int32_t next = rs.at(p).next;
    const bool last = p == tail;
    if (!visit(p) || last) return;
    p = next;
  }
}

bool takes_lock(Kind k) { return k == Kind::reader || k == Kind::writer; }

// rwsem_first_waiter(), among the waiters that take the lock.
int32_t first_taker(const Words& w, const Records& rs) {
  int32_t first = kNoProc;
  for_each_queued(w, rs, [&](int32_t p) {
    if (takes_lock(rs.at(p).kind)) first = p;
    return first == kNoProc;
  });
  return first;
}

// rwsem_del_waiter()'s flag update: an empty list has no WAITERS, no HANDOFF.
void settle_if_empty(Words& w) {
  if (list_empty(w)) w.count.fetch_and(~(kWaiters | kHandoff), kSeq);
}

// The wake_q: records taken off the list (chained through wake_next, their
// `wait` cleared after WL is dropped) and at most one woken writer, which
// stays on the list (its `wait` cleared under WL).
struct WakeList {
  int32_t chain = kNoProc, last = kNoProc, writer = kNoProc;

  void take(Words& w, const Records& rs, int32_t p) {
    remove(w, rs, p);
    rs.at(p).wake_next = kNoProc;
    if (last == kNoProc)
      chain = p;
    else
      rs.at(last).wake_next = p;
    last = p;
  }
  void wake_writer(const Records& rs, int32_t p) {
    rs.at(p).wait.store(0, std::memory_order_release);
    writer = p;
  }
  void flush(const Records& rs) {
    if (writer != kNoProc) arch::futex_wake(&rs.at(writer).wait, 1, /*shared=*/true);
    for (int32_t p = chain; p != kNoProc;) {
      Waiter& x = rs.at(p);
      const int32_t next = x.wake_next;  // before the store lets the record be reused
      x.wait.store(0, std::memory_order_release);
      arch::futex_wake(&x.wait, 1, /*shared=*/true);
      p = next;
    }
    chain = last = writer = kNoProc;
  }
};

void arm(Waiter& self, Kind kind) {
  self.kind = kind;
  self.handoff_set = false;
  self.deadline_ns = now() + tun().handoff_ns;
  self.wait.store(1, arch::mo_hint);  // published by the wait_lock's release
}

// A spinner seat on this lock (SPINNERS), the OSQ's stand-in.
bool take_seat(Words& w) {
  const uint32_t limit = max_spinners() << kSpinnerShift;
  uint32_t c = w.count.load(arch::mo_hint);
  do {
    if ((c & kSpinnerMask) >= limit) return false;
  } while (!w.count.compare_exchange_weak(c, c + kSpinnerOne, arch::mo_hint, arch::mo_hint));
  return true;
}
void give_back_seat(Words& w) { w.count.fetch_sub(kSpinnerOne, arch::mo_hint); }

enum OwnerState : unsigned { kOwnerNull = 1, kOwnerWriter = 2, kOwnerReader = 4, kOwnerNonspinnable = 8 };
constexpr unsigned kOwnerSpinnable = kOwnerNull | kOwnerWriter | kOwnerReader;

OwnerState owner_state(uint32_t o, uint32_t nonspinnable) {
  if (o & nonspinnable) return kOwnerNonspinnable;
  if (o & kReaderOwned) return kOwnerReader;
  return owner_proc(o) == kNoProc ? kOwnerNull : kOwnerWriter;
}

bool asleep(const Records& rs, int32_t proc) {
  return proc != kNoProc && rs.at(proc).sleeping.load(arch::mo_hint) != 0;
}

}  // namespace

// ------------------------------------------------------------ sleeping

bool Sleeper::until_woken(Waiter& self) {
  bool now_slept = false;
  while (self.wait.load(std::memory_order_acquire) != 0) {
    if (!slept && first_sleep != nullptr) first_sleep(arg);
    slept = now_slept = true;
    self.sleeping.store(1, arch::mo_hint);
    ctx.sleep(&self.wait, 1, /*shared=*/true);  // a signal ends it early: re-check
    self.sleeping.store(0, arch::mo_hint);
  }
  return now_slept;
}

uint32_t max_spinners() {
  static const uint32_t n = [] {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t want = tun().max_spinners != 0 ? tun().max_spinners : static_cast<uint32_t>(std::max(cpus - 1, 1L));
    return std::clamp<uint32_t>(want, 1, kSpinnerMask >> kSpinnerShift);
  }();
  return n;
}

unsigned queued(Words& w, const Records& rs) {
  unsigned n = 0;
  wait_lock(w);
  for_each_queued(w, rs, [&](int32_t) { return ++n, true; });
  wait_unlock(w);
  return n;
}

// ------------------------------------------------ the policy's slow paths

namespace {

template <class P>
struct Slow {
  using R = SharedRwsem<P>;
  static constexpr uint32_t kRdNonspin = uint32_t{P::kRdNonspinnable};
  static constexpr uint32_t kWrNonspin = uint32_t{P::kWrNonspinnable};
  static constexpr uint32_t kNonspin = uint32_t{P::kNonspinnable};
  enum class WakeType { any, readers, read_owned };

  // The owner word is stored XORed: a decoded bit is set by clearing it.
  static void owner_or(Words& w, uint32_t bits) { w.owner.fetch_and(~bits, arch::mo_hint); }
  static void clear_wr_nonspinnable(Words& w) {
    if (R::owner(w) & kWrNonspin) w.owner.fetch_or(kWrNonspin, arch::mo_hint);
  }
  // rwsem_set_nonspinnable(): only while the lock is still reader-owned.
  static void set_nonspinnable(Words& w) {
    uint32_t s = w.owner.load(arch::mo_hint);
    for (;;) {
      uint32_t o = s ^ kStoredXor;
      if (!(o & kReaderOwned) || (o & kNonspin)) return;
      if (w.owner.compare_exchange_weak(s, (o | kNonspin) ^ kStoredXor, arch::mo_hint, arch::mo_hint)) return;
    }
  }

  static bool try_write_if_clear(Words& w, int32_t me, uint32_t fail) {
    uint32_t c = w.count.load(arch::mo_hint);
    while (!(c & fail))
      if (w.count.compare_exchange_weak(c, c | kWriterLocked, arch::mo_lock, arch::mo_hint)) {
        R::set_owner(w, owner_of(me));
        return true;
      }
    return false;
  }
  static bool try_read_if_clear(Words& w, int32_t me, uint32_t fail) {
    uint32_t c = w.count.load(arch::mo_hint);
    while (!(c & fail))
      if (w.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint)) {
        R::set_reader_owned(w, me);
        return true;
      }
    return false;
  }
  // rwsem_try_write_lock_unqueued(): past WAITERS, never past HANDOFF.
  static bool try_write_unqueued(Words& w, int32_t me) {
    return try_write_if_clear(w, me, kLockMask | kHandoff);
  }
  // v5.10 rwsem_try_read_lock_unqueued(): add, back out like up_read().
  static bool try_read_unqueued(Words& w, const Records& rs, int32_t me) {
    if (w.count.load(arch::mo_hint) & (kWriterLocked | kHandoff)) return false;
    uint32_t c = w.count.fetch_add(kReaderBias, arch::mo_lock);
    if (!(c & (kWriterLocked | kHandoff))) {
      R::set_reader_owned(w, me);
      lockevent_inc(LockEvent::rwsem_opt_rlock);
      return true;
    }
    R::read_unlock(w, rs);
    return false;
  }

  // ------------------------------------------------ rwsem_mark_wake()

  // Under WL. A freed lock (WAKE_ANY) first wakes every waiter that only
  // waited for a release.
  static void mark_wake(Words& w, const Records& rs, WakeType type, WakeList& wl) {
    if (type == WakeType::any)
      for_each_queued(w, rs, [&](int32_t p) {
        if (!takes_lock(rs.at(p).kind)) wl.take(w, rs, p);
        return true;
      });
    const int32_t f = first_taker(w, rs);
    if (f == kNoProc) return settle_if_empty(w);
    Waiter& first = rs.at(f);
    if (first.kind == Kind::writer) {
      if (type == WakeType::any) {
        wl.wake_writer(rs, f);
        lockevent_inc(LockEvent::rwsem_wake_writer);
      }
      return;
    }
    uint32_t added = 0;
    if (type != WakeType::read_owned) {
      if (!first_bias_holds(w, first)) return;
      added = kReaderBias;
      R::set_owner(w, owner_of(f) | kReaderOwned | rd_nonspinnable_of(w, first));
    }
    grant_readers(w, rs, wl, added);
  }

  // The grant's first bias, backed out if a writer got in first (then the
  // head reader past its deadline asks for HANDOFF). The writer's release
  // will wake again: WAITERS is set.
  static bool first_bias_holds(Words& w, Waiter& first) {
    uint32_t old = w.count.fetch_add(kReaderBias, kSeq);
    if (!(old & kWriterLocked)) return true;
    uint32_t handoff = 0;
    if (now() > first.deadline_ns) {
      if (!(old & kHandoff)) {
        handoff = kHandoff;
        lockevent_inc(LockEvent::rwsem_rlock_handoff);
      }
      first.handoff_set = true;
    }
    w.count.fetch_add(handoff - kReaderBias, kSeq);
    return false;
  }

  // v5.10: a reader that had seen RD_NONSPINNABLE carries it to the new owner.
  static uint32_t rd_nonspinnable_of(const Words& w, const Waiter& first) {
    if constexpr (P::reader_spinning) {
      if (first.last_rowner & kRdNonspin) {
        lockevent_inc(LockEvent::rwsem_opt_norspin);
        return kRdNonspin;
      }
      return 0;
    } else {
      return R::owner(w) & kRdNonspin;
    }
  }

  static void grant_readers(Words& w, const Records& rs, WakeList& wl, uint32_t added) {
    uint32_t woken = 0;
    for_each_queued(w, rs, [&](int32_t p) {
      if (rs.at(p).kind != Kind::reader) return true;
      wl.take(w, rs, p);
      return ++woken < rwsem::kMaxReadersWakeup;
    });
    if (woken != 0) lockevent_inc(LockEvent::rwsem_wake_reader);
    uint32_t adjustment = woken * kReaderBias - added;
    const uint32_t old = w.count.load(arch::mo_hint);
    if (list_empty(w)) adjustment -= kWaiters;
    if ((list_empty(w) || woken != 0) && (old & kHandoff)) adjustment -= kHandoff;
    if (adjustment != 0) w.count.fetch_add(adjustment, kSeq);
  }

  // rwsem_cond_wake_waiter(), under WL.
  static void cond_wake(Words& w, const Records& rs, uint32_t c, WakeList& wl) {
    if (c & kWriterLocked) return;
    if (c & kReaderMask) return mark_wake(w, rs, WakeType::readers, wl);
    clear_wr_nonspinnable(w);
    mark_wake(w, rs, WakeType::any, wl);
  }

  // rwsem_wake() (WAKE_ANY); WAKE_READ_OWNED: a reader that got in
  // bypassing the queue brings queued readers along.
  static void wake(Words& w, const Records& rs, WakeType type = WakeType::any) {
    WakeList wl;
    wait_lock(w);
    if (!list_empty(w)) mark_wake(w, rs, type, wl);
    wait_unlock(w);
    wl.flush(rs);
  }
  static void bring_readers(Words& w, const Records& rs) { wake(w, rs, WakeType::read_owned); }

  // ------------------------------------------------ optimistic spinning

  static bool can_spin_on_owner(const Words& w, const Records& rs, uint32_t nonspinnable) {
    if (!tun().writer_spin) return false;
    const uint32_t o = R::owner(w);
    if (o & nonspinnable) return false;
    if (!(o & kReaderOwned) && asleep(rs, owner_proc(o))) {
      lockevent_inc(LockEvent::rwsem_opt_owner_off);
      return false;
    }
    return true;
  }

  // rwsem_spin_on_owner(): while the same writer owns the lock and runs.
  static OwnerState spin_on_owner(const Words& w, const Records& rs, uint32_t nonspinnable, uint64_t budget_end) {
    const uint32_t o = R::owner(w);
    const OwnerState state = owner_state(o, nonspinnable);
    if (state != kOwnerWriter) return state;
    for (unsigned i = 1;; ++i) {
      const uint32_t n = R::owner(w);
      if (n != o) return owner_state(n, nonspinnable);
      if (asleep(rs, owner_proc(o))) {
        lockevent_inc(LockEvent::rwsem_opt_owner_off);
        return kOwnerNonspinnable;
      }
      if (i % kClockEvery == 0 && now() > budget_end) {
        lockevent_inc(LockEvent::rwsem_opt_budget);
        return kOwnerNonspinnable;
      }
      arch::cpu_relax();
    }
  }

  // rwsem_optimistic_spin(), with a SPINNERS seat for the OSQ.
  template <bool kWrite>
  static bool optimistic_spin(Words& w, const Records& rs, int32_t me) {
    if (!take_seat(w)) {
      lockevent_inc(LockEvent::rwsem_opt_fail);
      return false;
    }
    const uint32_t nonspinnable = kWrite ? kWrNonspin : kRdNonspin;
    const uint64_t budget_end = now() + tun().owner_spin_ns;
    uint64_t rspin_end = 0;
    unsigned prev = 0, loop = 0;
    bool taken = false;
    for (;;) {
      const OwnerState state = spin_on_owner(w, rs, nonspinnable, budget_end);
      if (!(state & kOwnerSpinnable)) break;
      taken = kWrite ? try_write_unqueued(w, me) : try_read_unqueued(w, rs, me);
      if (taken) break;
      if (kWrite && state == kOwnerReader) {  // v5.10 too: only writers have the rspin threshold
        if (prev != kOwnerReader) {
          if (R::owner(w) & nonspinnable) break;
          rspin_end = now() + rwsem::rspin_budget_ns(R::readers(w));
          loop = 0;
        } else if (++loop % kClockEvery == 0 && now() > rspin_end) {
          set_nonspinnable(w);
          lockevent_inc(LockEvent::rwsem_opt_nospin);
          break;
        }
      } else if (state != kOwnerWriter && ++loop % kClockEvery == 0 && now() > budget_end) {
        lockevent_inc(LockEvent::rwsem_opt_budget);  // need_resched()
        break;
      }
      prev = state;
      arch::cpu_relax();
    }
    give_back_seat(w);
    lockevent_inc(taken ? (kWrite ? LockEvent::rwsem_opt_lock : LockEvent::rwsem_opt_rlock) : LockEvent::rwsem_opt_fail);
    return taken;
  }

  // ------------------------------------------------------------ writers

  // rwsem_try_write_lock(), under WL: the lock, or HANDOFF past the deadline.
  static bool try_write_lock(Words& w, const Records& rs, int32_t me) {
    Waiter& self = rs.at(me);
    const bool first = first_taker(w, rs) == me;
    uint32_t c = w.count.load(arch::mo_hint), n;
    do {
      const bool has_handoff = c & kHandoff;
      if (has_handoff && !first) return false;
      n = c;
      if (c & kLockMask) {
        if (has_handoff || !first || now() <= self.deadline_ns) return false;
        n |= kHandoff;
      } else {
        n = (n | kWriterLocked) & ~kHandoff;
        if (self.next == me) n &= ~kWaiters;  // alone on the list
      }
    } while (!w.count.compare_exchange_weak(c, n, kSeq, arch::mo_hint));
    if (n & kHandoff) {
      self.handoff_set = true;
      lockevent_inc(LockEvent::rwsem_wlock_handoff);
      return false;
    }
    remove(w, rs, me);
    R::set_owner(w, owner_of(me));
    return true;
  }

  static void write_slow(Words& w, const Records& rs, int32_t me, Sleeper& s) {
    if (can_spin_on_owner(w, rs, kWrNonspin) && optimistic_spin<true>(w, rs, me)) return;
    const bool disable_rspin = P::reader_spinning && (R::owner(w) & kNonspin) != 0;
    Waiter& self = rs.at(me);
    arm(self, Kind::writer);
    WakeList wl;
    wait_lock(w);
    add_tail(w, rs, me);
    if (first_taker(w, rs) != me)
      cond_wake(w, rs, w.count.load(kSeq), wl);
    else
      w.count.fetch_or(kWaiters, kSeq);
    while (!try_write_lock(w, rs, me)) {
      self.wait.store(1, arch::mo_hint);  // a waker clears it under WL
      wait_unlock(w);
      wl.flush(rs);
      // HANDOFF is ours: spin on a running owner, retry when it lets go.
      const bool retry = self.handoff_set &&
                         spin_on_owner(w, rs, kWrNonspin, now() + tun().owner_spin_ns) == kOwnerNull;
      if (!retry && s.until_woken(self)) lockevent_inc(LockEvent::rwsem_sleep_writer);
      wait_lock(w);
    }
    wait_unlock(w);
    wl.flush(rs);
    lockevent_inc(LockEvent::rwsem_wlock);
    if (disable_rspin) owner_or(w, kRdNonspin);  // v5.10 rwsem_disable_reader_optspin()
  }

  // ------------------------------------------------------------ readers

  static void read_slow(Words& w, const Records& rs, int32_t me, uint32_t c, Sleeper& s) {
    bool bias_held = true;
    if constexpr (P::reader_spinning) {
      Waiter& self = rs.at(me);
      const uint32_t o = R::owner(w);
      self.last_rowner = (o & kReaderOwned) ? o : (o & kRdNonspin);
      if (can_spin_on_owner(w, rs, kRdNonspin)) {
        R::read_unlock(w, rs);  // undo the fast path's bias, waking as up_read() would
        bias_held = false;
        if (optimistic_spin<false>(w, rs, me)) {
          if (w.count.load(arch::mo_hint) & kWaiters) bring_readers(w, rs);
          return;
        }
        if (reader_phase_trylock(w, rs, me, self.last_rowner)) return;
      }
    } else if (steal(w, rs, me, c)) {
      return;
    }
    queue_reader(w, rs, me, bias_held, s);
  }

  // v5.11+ reader lock stealing, the fast path's bias still held.
  static bool steal(Words& w, const Records& rs, int32_t me, uint32_t c) {
    const uint32_t rcnt = (c & kReaderMask) >> kReaderShift;
    if ((R::owner(w) & kReaderOwned) && rcnt > 1 && !(c & kWriterLocked)) return false;
    if (c & (kWriterLocked | kHandoff)) return false;
    R::set_reader_owned(w, me);
    lockevent_inc(LockEvent::rwsem_rlock_steal);
    if (rcnt == 1 && (c & kWaiters)) bring_readers(w, rs);
    return true;
  }

  // v5.10 rwsem_reader_phase_trylock(): a new reader phase began while spinning.
  static bool reader_phase_trylock(Words& w, const Records& rs, int32_t me, uint32_t last_rowner) {
    const uint32_t o = R::owner(w);
    if (!(o & kReaderOwned)) return false;
    if (((o ^ last_rowner) & ~kOwnerFlagMask) == 0 || !try_read_unqueued(w, rs, me)) return false;
    lockevent_inc(LockEvent::rwsem_opt_rlock2);
    return true;
  }

  static void queue_reader(Words& w, const Records& rs, int32_t me, bool bias_held, Sleeper& s) {
    Waiter& self = rs.at(me);
    arm(self, Kind::reader);
    uint32_t adjustment = bias_held ? 0u - kReaderBias : 0u;
    WakeList wl;
    wait_lock(w);
    if (list_empty(w)) {
      // Nothing queued and no writer: the bias already in the count is the lock.
      if (bias_held && !(w.count.load(kSeq) & (kWriterLocked | kHandoff))) {
        wait_unlock(w);
        R::set_reader_owned(w, me);
        lockevent_inc(LockEvent::rwsem_rlock_fast);
        return;
      }
      adjustment += kWaiters;
    }
    add_tail(w, rs, me);
    const uint32_t c = adjustment != 0 ? w.count.fetch_add(adjustment, kSeq) + adjustment : w.count.load(kSeq);
    cond_wake(w, rs, c, wl);
    wait_unlock(w);
    wl.flush(rs);
    if (s.until_woken(self)) lockevent_inc(LockEvent::rwsem_sleep_reader);
    lockevent_inc(LockEvent::rwsem_rlock);
  }

  // ------------------------------------------- waiting without taking

  // Queue `me` (armed) and set WAITERS; false (dequeued again) when that
  // RMW shows the lock no longer held in the way `held` tests.
  static bool queue_if_held(Words& w, const Records& rs, int32_t me, uint32_t held) {
    add_tail(w, rs, me);
    if (w.count.fetch_or(kWaiters, kSeq) & held) return true;
    remove(w, rs, me);
    settle_if_empty(w);
    return false;
  }

  static bool acquire_or_wait(Words& w, const Records& rs, int32_t me, bool exclusive, Sleeper& s) {
    Waiter& self = rs.at(me);
    for (;;) {
      if (exclusive ? try_write_unqueued(w, me) : try_read_if_clear(w, me, kWriterLocked | kHandoff)) return true;
      arm(self, Kind::until_free);
      wait_lock(w);
      // HANDOFF with the lock free: the first waiter is about to take it, and
      // its release will wake us; retrying now would only spin on the list.
      const bool queued = queue_if_held(w, rs, me, kLockMask | kHandoff);
      wait_unlock(w);
      if (queued) break;
    }
    s.until_woken(self);
    return false;
  }

  static bool wait_for_var(Words& w, const Records& rs, int32_t me, const uint64_t* var, uint64_t old,
                           uint64_t* newval, Sleeper& s) {
    Waiter& self = rs.at(me);
    for (;;) {
      if (!(w.count.load(arch::mo_lock) & kWriterLocked)) return true;
      arm(self, Kind::var_wait);
      wait_lock(w);
      const uint64_t v = __atomic_load_n(var, __ATOMIC_RELAXED);  // under WL: update_var writes it there
      if (v != old) {
        wait_unlock(w);
        *newval = v;
        return false;
      }
      const bool queued = queue_if_held(w, rs, me, kWriterLocked);
      wait_unlock(w);
      if (!queued) return true;
      s.until_woken(self);
    }
  }

  static void update_var(Words& w, const Records& rs, uint64_t* var, uint64_t value) {
    WakeList wl;
    wait_lock(w);
    __atomic_store_n(var, value, __ATOMIC_RELAXED);
    for_each_queued(w, rs, [&](int32_t p) {
      if (rs.at(p).kind == Kind::var_wait) wl.take(w, rs, p);
      return true;
    });
    settle_if_empty(w);
    wait_unlock(w);
    wl.flush(rs);
  }
};

}  // namespace

template <class P>
void SharedRwsem<P>::read_slow(Words& w, const Records& rs, int32_t me, uint32_t c, Sleeper& s) {
  Slow<P>::read_slow(w, rs, me, c, s);
}
template <class P>
void SharedRwsem<P>::write_slow(Words& w, const Records& rs, int32_t me, Sleeper& s) {
  Slow<P>::write_slow(w, rs, me, s);
}
template <class P>
void SharedRwsem<P>::wake(Words& w, const Records& rs) {
  Slow<P>::wake(w, rs);
}
template <class P>
bool SharedRwsem<P>::acquire_or_wait(Words& w, const Records& rs, int32_t me, bool exclusive, Sleeper& s) {
  return Slow<P>::acquire_or_wait(w, rs, me, exclusive, s);
}
template <class P>
bool SharedRwsem<P>::wait_for_var(Words& w, const Records& rs, int32_t me, const uint64_t* var, uint64_t old,
                                  uint64_t* newval, Sleeper& s) {
  return Slow<P>::wait_for_var(w, rs, me, var, old, newval, s);
}
template <class P>
void SharedRwsem<P>::update_var(Words& w, const Records& rs, uint64_t* var, uint64_t value) {
  Slow<P>::update_var(w, rs, var, value);
}
template <class P>
void SharedRwsem<P>::set_var(Words& w, uint64_t* var, uint64_t value) {
  wait_lock(w);
  __atomic_store_n(var, value, __ATOMIC_RELAXED);
  wait_unlock(w);
}

template struct SharedRwsem<RwsemSteal>;
template struct SharedRwsem<RwsemRspin>;

}  // namespace lockswap::rwshared
