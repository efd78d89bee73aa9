// core/rwsem/reader_pref.h — readers that get in past queued writers: recursion and reader preference.
//
// Part of core/rwsem/thread_host.cpp's one translation unit: everything here
// has internal linkage, so include it nowhere else.
//
// Neither rule is in the kernel. A thread that holds a read lock re-enters
// it past queued writers (POSIX recursive reads), and on glibc's default
// rwlock kinds a reader enters a read-held lock past queued writers when
// core/read_pref.h's rules say a program could otherwise deadlock or a
// real-time reader outranks them. Design and reasons: docs/rwsem.md.
#pragma once
#include <sys/types.h>

#include <algorithm>
#include <climits>
#include <cstdint>

#include "core/lock_events.h"
#include "core/read_pref.h"
#include "core/rwsem/cancel_guards.h"
#include "core/rwsem/deadlines.h"
#include "core/rwsem/parking.h"
#include "core/rwsem/thread_rep.h"
#include "core/rwsem/wait_list.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

// Not in the kernel: a thread that already holds read locks must not wait
// behind a queued writer for a lock that readers hold (POSIX recursive reads).
template <class P>
bool read_recursive(const WordRefs& r, uint64_t count, bool have_bias) {
  if (have_bias) {
    if (!reader_may_enter(count, 1, kReadHoldsThis).recursive) return false;
  } else {
    uint64_t c = r.count.load(arch::mo_hint);
    do {
      if (!reader_may_enter(c, 0, kReadHoldsThis).recursive) return false;
    } while (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint));
  }
  set_reader_owned<P>(r.owner, owner_value(self_slot()));
  lockevent_inc(LockEvent::rwsem_rlock_recursive);
  return true;
}

// ---------------------------------------------------------------------------
// Reader preference (not in the kernel; core/read_pref.h), default kind only
// ---------------------------------------------------------------------------

// Read-held: no writer, and readers besides `own_bias` of ours.
bool read_held(uint64_t c, uint64_t own_bias) { return !(c & kWriterLocked) && reader_count(c) > own_bias; }

// The highest SCHED_FIFO/RR priority among the queued (blocked) writers, 0 if
// none is real-time; INT_MAX when there are too many to ask (conservative).
// Asked only for a real-time reader; the priorities are read outside the
// wait_lock (two system calls per writer).
int max_queued_writer_rt_priority(const WordRefs& r) {
  constexpr unsigned kMaxAsked = 16;
  pid_t tids[kMaxAsked];
  unsigned n = 0;
  {
    WaitList wl(r);
    for (Waiter* w = wl.first(); w != nullptr; w = wl.after(w)) {
      if (w->type != WaitType::write || ghost(*w)) continue;
      // Too many to ask, or a writer on the shared slot (no tid): assume it outranks us.
      if (n == kMaxAsked || w->slot->tid <= 0) return INT_MAX;
      tids[n++] = w->slot->tid;
    }
  }
  int max = 0;
  for (unsigned i = 0; i < n; ++i) max = std::max(max, read_pref::rt_priority_of_tid(tids[i]));  // -1: gone
  return max;
}

// Rule (c): a real-time reader above every queued writer. A normal-policy
// thread pays one compare (the policy is cached per thread).
bool rt_reader_beats_writers(const WordRefs& r, uint64_t now) {
  int me = read_pref::self_rt_priority(now);
  if (me <= 0) return false;
  CancelScope cs;  // takes the wait_lock (read_try runs without a scope)
  int writers = max_queued_writer_rt_priority(r);
  cs.restore();
  return me > writers;
}

// A reader about to queue (no record yet): rules (a) and (c). With our bias
// still in the count and no writer in it we already hold a read lock; without
// one (drop_bias_early, v5.10 spinners) take it back by CAS while read-held.
template <class P>
bool read_pref_arrival(const WordRefs& r, uint64_t count, bool have_bias) {
  if (!reader_may_enter(have_bias ? count : r.count.load(arch::mo_hint), have_bias, kReadReaderPref).preference)
    return false;
  LockEvent ev;
  if (read_pref::read_holder_asleep_on(&r.count))
    ev = LockEvent::rwsem_rlock_reader_pref;
  else if (rt_reader_beats_writers(r, now_ns()))
    ev = LockEvent::rwsem_rlock_rt;
  else
    return false;
  if (!have_bias) {
    uint64_t c = r.count.load(arch::mo_hint);
    do {
      if (!reader_may_enter(c, 0, kReadReaderPref).preference) return false;
    } while (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint));
  }
  set_reader_owned<P>(r.owner, owner_value(self_slot()));
  lockevent_inc(ev);
  return true;
}

// The first queued writer that is not a ghost, or nullptr.
Waiter* first_writer(const WaitList& wl) {
  for (Waiter* w = wl.first(); w != nullptr; w = wl.after(w))
    if (w->type == WaitType::write && !ghost(*w)) return w;
  return nullptr;
}

enum class Admit : uint8_t { none, granted, asleep, waited, rt };

// A queued reader re-checks rules (a), (b) and (c). On success it has left the
// queue holding a read lock. Rule (b) also lets in every other queued reader
// (the program may wait for more than one), and then no further batch until
// the lock has been free for the first queued writer (pref_blocked, cleared
// when mark_wake() wakes that writer): one batch per read phase. A writer
// that then loses the free lock to a stealing reader sets HANDOFF once it is
// overdue, and takes the lock the next time it is free.
template <class P>
Admit read_pref_queued(const WordRefs& r, Waiter& w, uint64_t now, WakeQ& q) {
  if (!read_held(r.count.load(arch::mo_hint), 0)) return Admit::none;
  Admit why = Admit::none;
  if (read_pref::read_holder_asleep_on(&r.count))
    why = Admit::asleep;
  else if (rt_reader_beats_writers(r, now))
    why = Admit::rt;
  else if (now - w.queued_at >= tunables().reader_pref_ns)
    why = Admit::waited;
  if (why == Admit::none) return Admit::none;

  WaitList wl(r);
  if (w.task.load(arch::mo_lock) == nullptr) return Admit::granted;
  if (why == Admit::waited) {
    Waiter* fw = first_writer(wl);
    if (fw != nullptr && fw->has(Waiter::kPrefBlocked)) return Admit::none;
  }
  uint64_t c = r.count.load(arch::mo_hint);
  do {
    if (!read_held(c, 0)) return Admit::none;
  } while (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint));
  bool was_first = first_live(r, wl) == &w;
  if (why == Admit::waited) {
    wl.remove(&w);
    if (Waiter* fw = first_writer(wl)) fw->set(Waiter::kPrefBlocked, true);
    Rules<P>::grant_readers(r, wl, 0, false, q);  // clears WAITERS (and HANDOFF) if the queue empties
  } else if (del_waiter(r, wl, &w) && was_first) {
    Rules<P>::mark_wake(r, wl, WakeType::read_owned, q);
  }
  set_reader_owned<P>(r.owner, owner_value(*w.slot));
  return why;
}

// Queued default-kind readers sleep at most this long at a time, to re-check
// the rules (rule (a) also unparks them at once when a holder falls asleep).
constexpr uint64_t kPrefSliceMinNs = 100'000;
constexpr unsigned kPrefSliceMaxShift = 4;  // slices double up to 16 bounds

}  // namespace
}  // namespace rwsem_detail
}  // namespace lockswap
