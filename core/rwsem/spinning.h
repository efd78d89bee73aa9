// core/rwsem/spinning.h — the thread host's own spins: reader polls, the woken-writer yield.
//
// Part of core/rwsem/thread_host.cpp's one translation unit: everything here
// has internal linkage, so include it nowhere else.
//
// The kernel's spinning (rwsem_can_spin_on_owner(), rwsem_spin_on_owner(),
// rwsem_optimistic_spin()) is core/rwsem/rules.h's, for both hosts; its OSQ
// (core/osq_lock.h) and the spinner seats are the thread host's
// (core/rwsem/thread_rep.h, spin_enter()). Here are the spins that are not
// in the kernel: the reader's poll of a running writer and the yield to a
// woken writer. Design and reasons: docs/rwsem.md.
#pragma once
#include <sched.h>

#include <atomic>
#include <cstdint>

#include "arch/relax.h"
#include "core/lock_events.h"
#include "core/rwsem/deadlines.h"
#include "core/rwsem/rwsem.h"
#include "core/rwsem/thread_rep.h"
#include "core/spin_budget.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

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
