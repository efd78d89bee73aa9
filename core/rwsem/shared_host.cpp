// core/rwsem/shared_host.cpp — the slow paths of core/rwsem/shared.h (its design
// block says what each one does and why).
//
// The kernel's rules (rwsem_mark_wake(), rwsem_cond_wake_waiter(),
// rwsem_try_write_lock(), reader stealing, the spinning) are
// core/rwsem/rules.h's, shared with the thread host; Rules<P> runs them on
// this host's representation (core/rwsem/shared_rep.h). Here are the flows
// that queue and sleep, and the waits that take no lock.
#include "core/rwsem/shared.h"

#include <unistd.h>

#include <algorithm>

#include "core/rwsem/shared_rep.h"

namespace lockswap::rwshared {

// ------------------------------------------------------------ sleeping

bool Sleeper::until_woken(Waiter& self) {
  bool now_slept = false;
  while (self.wait.load(std::memory_order_acquire) != 0) {
    if (!slept && first_sleep != nullptr) first_sleep(arg);
    slept = now_slept = true;
    self.sleeping.store(1, arch::mo_hint);
    ctx.sleep(&self.wait, 1, kSharedFutex);  // a signal ends it early: re-check
    self.sleeping.store(0, arch::mo_hint);
  }
  return now_slept;
}

uint32_t max_spinners() {
  static const uint32_t n = [] {
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t want = tunables().max_spinners != 0 ? tunables().max_spinners : static_cast<uint32_t>(std::max(cpus - 1, 1L));
    return std::clamp<uint32_t>(want, 1, kSpinnerMask >> kSpinnerShift);
  }();
  return n;
}

unsigned queued(Words& w, const Records& rs) {
  unsigned n = 0;
  WaitList wl(w, rs);
  for_each_queued(w, rs, [&](int32_t) { return ++n, true; });
  return n;
}

// ------------------------------------------------ the policy's slow paths

namespace {

template <class P>
struct Slow {
  using R = SharedRwsem<P>;
  using K = Rules<P>;
  using WakeType = rwsem_rules::WakeType;

  // ------------------------------------------------------------ writers

  static void write_slow(Words& w, const Records& rs, int32_t me, Sleeper& s) {
    const SharedLock l{w, rs, me};
    if (K::can_spin_on_owner(l, P::kWrNonspinnable) && K::template optimistic_spin<true>(l)) return;
    const bool disable_rspin = P::reader_spinning && (SharedRep<P>::owner(l) & P::kNonspinnable) != 0;
    Waiter& self = rs.at(me);
    arm(self, Kind::writer);
    WakeList q;
    WaitList wl(w, rs);
    add_tail(w, rs, me);
    if (first_taker(w, rs) != me)
      K::cond_wake(l, wl, w.count.load(kSeq), q);
    else
      w.count.fetch_or(kWaiters, kSeq);
    uint64_t spin_deadline = 0;
    while (!K::try_write_lock(l, wl, me)) {
      self.wait.store(1, arch::mo_hint);  // a waker clears it under WL
      wl.unlock();
      q.flush(rs);
      // HANDOFF is ours: spin on a running owner, retry when it lets go.
      if (!(self.handoff_set && K::handoff_spin(l, spin_deadline))) {
        spin_deadline = 0;
        if (s.until_woken(self)) lockevent_inc(LockEvent::rwsem_sleep_writer);
      }
      wl.lock();
    }
    wl.unlock();
    q.flush(rs);
    lockevent_inc(LockEvent::rwsem_wlock);
    if (disable_rspin) K::disable_reader_spinning(l);
  }

  // ------------------------------------------------------------ readers

  static void read_slow(Words& w, const Records& rs, int32_t me, uint32_t c, Sleeper& s) {
    const SharedLock l{w, rs, me};
    bool bias_held = true;
    if constexpr (P::reader_spinning) {
      uint64_t last_rowner = 0;
      const bool taken = K::read_spin(l, bias_held, last_rowner);
      rs.at(me).last_rowner = static_cast<uint32_t>(last_rowner);
      if (taken) return;
    } else if (steal(l, c)) {
      return;
    }
    queue_reader(l, bias_held, s);
  }

  // v5.11+ reader lock stealing (Rules::steal_verdict()), the fast path's
  // bias still held.
  static bool steal(const SharedLock& l, uint32_t c) {
    if (c & (kWriterLocked | kHandoff)) return false;
    const uint64_t other_readers = K::reader_count(c) - 1;
    const auto ev = K::steal_verdict(SharedRep<P>::owner(l), other_readers, false);
    if (!ev) return false;
    R::set_reader_owned(l.w, l.me);
    lockevent_inc(*ev);
    if (other_readers == 0 && K::readers_may_follow(c)) K::wake(l, WakeType::read_owned);
    return true;
  }

  static void queue_reader(const SharedLock& l, bool bias_held, Sleeper& s) {
    Words& w = l.w;
    Waiter& self = l.rs.at(l.me);
    arm(self, Kind::reader);
    uint32_t adjustment = bias_held ? 0u - kReaderBias : 0u;
    WakeList q;
    {
      WaitList wl(w, l.rs);
      if (list_empty(w)) {
        // Nothing queued and no writer: the bias already in the count is the lock.
        if (bias_held && !(w.count.load(kSeq) & (kWriterLocked | kHandoff))) {
          wl.unlock();
          R::set_reader_owned(w, l.me);
          lockevent_inc(LockEvent::rwsem_rlock_fast);
          return;
        }
        adjustment += kWaiters;
      }
      add_tail(w, l.rs, l.me);
      const uint32_t c = adjustment != 0 ? w.count.fetch_add(adjustment, kSeq) + adjustment : w.count.load(kSeq);
      K::cond_wake(l, wl, c, q);
    }
    q.flush(l.rs);
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

  // A read lock taken at once when none of `fail` is set (until_free: past
  // WAITERS, as a spinner would).
  static bool try_read_if_clear(Words& w, int32_t me, uint32_t fail) {
    uint32_t c = w.count.load(arch::mo_hint);
    while (!(c & fail))
      if (w.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint)) {
        R::set_reader_owned(w, me);
        return true;
      }
    return false;
  }

  static bool acquire_or_wait(Words& w, const Records& rs, int32_t me, bool exclusive, Sleeper& s) {
    const SharedLock l{w, rs, me};
    Waiter& self = rs.at(me);
    for (;;) {
      if (exclusive ? K::try_write_lock_unqueued(l, false) : try_read_if_clear(w, me, kWriterLocked | kHandoff))
        return true;
      arm(self, Kind::until_free);
      WaitList wl(w, rs);
      // HANDOFF with the lock free: the first waiter is about to take it, and
      // its release will wake us; retrying now would only spin on the list.
      if (queue_if_held(w, rs, me, kLockMask | kHandoff)) break;
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
      {
        WaitList wl(w, rs);
        const uint64_t v = __atomic_load_n(var, __ATOMIC_RELAXED);  // under WL: update_var writes it there
        if (v != old) {
          wl.unlock();
          *newval = v;
          return false;
        }
        if (!queue_if_held(w, rs, me, kWriterLocked)) return true;
      }
      s.until_woken(self);
    }
  }

  static void update_var(Words& w, const Records& rs, uint64_t* var, uint64_t value) {
    WakeList q;
    {
      WaitList wl(w, rs);
      __atomic_store_n(var, value, __ATOMIC_RELAXED);
      for_each_queued(w, rs, [&](int32_t p) {
        if (rs.at(p).kind == Kind::var_wait) q.take(w, rs, p);
        return true;
      });
      settle_if_empty(w);
    }
    q.flush(rs);
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
  Rules<P>::wake(SharedLock{w, rs, kNoProc}, rwsem_rules::WakeType::any);
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
