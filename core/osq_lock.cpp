// core/osq_lock.cpp — the optimistic spin queue (design: core/osq_lock.h).
//
// Each function names the kernel function (kernel/locking/osq_lock.c) it
// stands for.
#include "core/osq_lock.h"

#include "arch/atomic.h"
#include "arch/clock.h"
#include "arch/relax.h"
#include "core/backoff.h"
#include "core/lock_events.h"
#include "core/thread_registry.h"

namespace lockswap {
namespace {

// If the tail names a thread that did not survive fork, every queued node is a
// ghost (live spinners only ever queue behind them), so the queue is empty.
void osq_drop_ghost_tail(std::atomic<uint32_t>& tail) {
  uint32_t t = tail.load(arch::mo_hint);
  if (t == 0) return;
  ThreadSlot* s = slot_of(t);
  if (s != nullptr && is_ghost(*s)) tail.compare_exchange_strong(t, 0, arch::mo_hint, arch::mo_hint);
}

// osq_wait_next(): wait until our successor is stable, or move the tail back
// to `prev_id` if we are last. Returns the successor's id, or 0.
uint32_t osq_wait_next(std::atomic<uint32_t>& tail, ThreadSlot& me, uint32_t prev_id) {
  for (Backoff b;; b.pause()) {
    uint32_t t = me.id;
    if (tail.load(arch::mo_hint) == t && tail.compare_exchange_strong(t, prev_id, arch::mo_handover, arch::mo_hint))
      return 0;
    // Take `next` with an exchange, so a successor that is leaving cannot
    // believe we still point at it.
    if (me.osq_next.load(arch::mo_hint) != 0) {
      uint32_t next = me.osq_next.exchange(0, arch::mo_handover);
      if (next != 0) return next;
    }
  }
}

// Spin until our predecessor hands over, or give up on the spin budget or
// when the predecessor cannot be running (vcpu_is_preempted() analogue).
bool osq_wait_turn(ThreadSlot& me, SpinBudget& budget) {
  for (unsigned i = 1;; ++i) {
    if (me.osq_locked.load(arch::mo_lock) != 0) return true;
    if (i % kClockEvery == 0) {
      ThreadSlot* prev = slot_of(me.osq_prev.load(arch::mo_hint));
      if (prev != nullptr && !slot_running(*prev)) {
        lockevent_inc(LockEvent::rwsem_opt_owner_off);
        return false;
      }
      if (budget.expired(arch::monotonic_ns(), true)) return false;
    }
    arch::cpu_relax();
  }
}

// Leave the queue without waiting for our turn: (A) detach from prev,
// (B) stabilise next or retract the tail, (C) link next to prev.
bool osq_unqueue(std::atomic<uint32_t>& tail, ThreadSlot& me) {
  uint32_t prev_id;
  for (Backoff b;; b.pause()) {
    // prev may change under us: a leaving predecessor rewrites it in step C.
    prev_id = me.osq_prev.load(arch::mo_lock);
    ThreadSlot* prev = slot_of(prev_id);
    uint32_t expect = me.id;
    if (prev->osq_next.load(arch::mo_hint) == expect &&
        prev->osq_next.compare_exchange_strong(expect, 0, arch::mo_handover, arch::mo_hint))
      break;
    // The exchange can only fail against an unlock that is handing to us.
    if (me.osq_locked.load(arch::mo_lock) != 0) return true;
  }
  uint32_t next_id = osq_wait_next(tail, me, prev_id);
  if (next_id == 0) return false;
  // prev waits for a new next, next waits in its step A: both are stable.
  slot_of(next_id)->osq_prev.store(prev_id, arch::mo_unlock);
  slot_of(prev_id)->osq_next.store(next_id, arch::mo_unlock);
  return false;
}

}  // namespace

bool osq_lock(std::atomic<uint32_t>& tail, SpinBudget& budget) {
  ThreadSlot& me = self_slot();
  me.osq_locked.store(0, arch::mo_hint);
  me.osq_next.store(0, arch::mo_hint);
  osq_drop_ghost_tail(tail);
  uint32_t old = tail.exchange(me.id, arch::mo_handover);
  if (old == 0) return true;
  me.osq_prev.store(old, arch::mo_hint);
  // Release: our reset node is visible before prev can hand over to it.
  slot_of(old)->osq_next.store(me.id, arch::mo_unlock);
  if (osq_wait_turn(me, budget)) return true;
  return osq_unqueue(tail, me);
}

void osq_unlock(std::atomic<uint32_t>& tail) {
  ThreadSlot& me = self_slot();
  uint32_t expect = me.id;
  if (tail.compare_exchange_strong(expect, 0, arch::mo_unlock, arch::mo_hint)) return;
  uint32_t next = me.osq_next.exchange(0, arch::mo_handover);
  if (next == 0) next = osq_wait_next(tail, me, 0);
  if (next != 0) slot_of(next)->osq_locked.store(1, arch::mo_unlock);
}

}  // namespace lockswap
