// core/osq_lock.h — the optimistic spin queue (kernel/locking/osq_lock.c).
//
// Design
// ------
// Only one thread at a time should spin on a contended lock's words: many
// spinners would bounce its cache line between CPUs and slow down the owner's
// release. The OSQ is an MCS queue of would-be spinners in front of the lock;
// its head spins on the lock, the others each spin on a flag in their own node
// until the node before them hands over. Unlike a plain MCS lock a queued
// spinner may give up (its budget ran out, or its predecessor is not running),
// so it must be able to leave from the middle of the queue.
//
// Words:
//   tail (u32, in the lock)  slot id of the last queued spinner, 0 = empty
//   per thread, in its ThreadSlot (core/thread_registry.h), one cache line:
//     osq_next    successor's slot id, 0 = none (or not yet linked)
//     osq_prev    predecessor's slot id
//     osq_locked  set to 1 by the predecessor: our turn
// Nodes are named by slot id, not by pointer, so that a tail fits a u32 word
// of the pthread object; slots are type-stable, so a stale id always names
// readable memory.
//
// Transitions (as the kernel's):
//   lock    reset own node; tail := me (exchange). Old tail 0 -> head at once;
//           else link prev->next := me (release) and spin on osq_locked.
//   unlock  tail me -> 0 (CAS) if last; else take next (exchange with 0, or
//           wait until it is linked) and set next->osq_locked (release).
//   unqueue (giving up) A: detach from prev (CAS prev->next me -> 0); a
//           failed CAS means prev is handing over to us: take the turn.
//           B: stabilise our next, or move the tail back to prev if last.
//           C: link next and prev to each other.
//
// Memory order: the tail exchange and the node-link exchanges are acq_rel
// (they both publish our node and observe a neighbour's); handing over
// (osq_locked := 1) is a release store that the waiting successor reads with
// acquire, so the new head sees everything its predecessor did while it spun.
//
// Deviations from the kernel (userspace):
//   * vcpu_is_preempted(prev) -> !slot_running(prev) (core/spin_budget.h),
//     and need_resched() -> SpinBudget::expired(), both polled every
//     kClockEvery spins;
//   * waits for a neighbour's store (steps B and C) back off (core/backoff.h)
//     instead of relying on the neighbour being on a CPU;
//   * fork(): a tail naming a thread that did not survive fork means every
//     queued node is a ghost (live spinners only queue behind them), so the
//     queue is taken to be empty and the tail reset.
#pragma once
#include <atomic>
#include <cstdint>

#include "core/spin_budget.h"

namespace lockswap {

// True: this thread is the head of the queue and may spin on the lock; it
// must call osq_unlock() when done. False: it gave up (budget spent or its
// predecessor cannot be running) and is no longer queued.
bool osq_lock(std::atomic<uint32_t>& tail, SpinBudget& budget);
void osq_unlock(std::atomic<uint32_t>& tail);

}  // namespace lockswap
