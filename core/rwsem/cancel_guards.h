// core/rwsem/cancel_guards.h — how a cancelled waiter leaves the lock as it found it.
//
// Part of core/rwsem/thread_host.cpp's one translation unit: everything here
// has internal linkage, so include it nowhere else.
//
// Lock code runs with deferred cancellation (core/cancel.h). An asynchronous
// cancellation can land only in a queued waiter's futex sleep; these guards
// then leave the queue as a timed-out waiter does, or give back a lock that
// was already granted. Design: core/rwsem/rwsem.h, "Cancellation".
#pragma once
#include "core/cancel.h"
#include "core/lock_events.h"
#include "core/rwsem/parking.h"
#include "core/rwsem/wait_list.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

// The slow paths run with deferred cancellation (core/cancel.h), so an
// asynchronous cancellation can never land while this thread holds the
// wait_lock, is in the OSQ, or is half-way through a list update: only in a
// queued waiter's futex sleep, which WaitCtx::sleep runs in a frame without
// cleanups when the caller had the asynchronous type. Under preload the
// exported call has already made the type deferred and the scope is a no-op.
using CancelScope = cancel::DeferredScope;

// Defined in core/rwsem/thread_host.cpp.
template <class P>
void del_wake_waiter(const WordRefs& r, WaitList& wl, Waiter* w, WakeQ& q);
template <class P>
void read_unlock_ref(const WordRefs& r);
template <class P>
bool write_unlock_ref(const WordRefs& r);

// A queued waiter is being unwound by a cancellation (its futex sleep is the
// only place one can land: see CancelScope). Leave exactly as a timed-out
// waiter does, or, for a reader whose grant was already published, give the
// read lock back. Never called with the wait_lock held.
template <class P>
__attribute__((noinline)) void leave_cancelled(const WordRefs& r, Waiter& w) {
  if (!is_shared(*w.slot)) w.slot->blocked.store(0, arch::mo_hint);
  WakeQ q;
  bool granted;
  {
    WaitList wl(r);
    granted = w.type == WaitType::read && w.task.load(arch::mo_lock) == nullptr;
    if (!granted) del_wake_waiter<P>(r, wl, &w, q);
  }
  q.wake();
  if (granted) read_unlock_ref<P>(r);
  lockevent_inc(LockEvent::rwsem_cancel);
}

// Armed while a waiter is queued and may sleep; its destructor runs only when
// a cancellation unwinds through the wait (every normal exit disarms it).
template <class P>
struct QueueGuard {
  const WordRefs& r;
  Waiter& w;
  bool armed = true;
  ~QueueGuard() {
    if (armed) leave_cancelled<P>(r, w);
  }
};

// The lock is ours and the caller's asynchronous type is being restored: a
// cancellation that arrived while we were deferred acts now, and this guard
// gives the lock back first (as if it had acted while we still waited).
template <class P>
struct HeldGuard {
  const WordRefs& r;
  bool write;
  bool armed = true;
  ~HeldGuard() {
    if (!armed) return;
    if (write)
      write_unlock_ref<P>(r);
    else
      read_unlock_ref<P>(r);
    lockevent_inc(LockEvent::rwsem_cancel);
  }
};

template <class P>
void restore_cancel(const CancelScope& cs, const WordRefs& r, int rc, bool write) {
  if (!cs.async()) return;
  if (rc != 0) {
    cs.restore();
    return;
  }
  HeldGuard<P> g{r, write};
  cs.restore();
  g.armed = false;
}

}  // namespace
}  // namespace rwsem_detail
}  // namespace lockswap
