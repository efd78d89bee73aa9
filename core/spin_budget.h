// core/spin_budget.h — what ends an optimistic spin in userspace.
//
// The kernel's spinners stop on need_resched() (a tick or a wakeup wants the
// CPU) and when the lock owner, or the OSQ predecessor, is not on a CPU
// (owner_on_cpu(), vcpu_is_preempted()). Userspace sees neither, so:
//   * SpinBudget is the need_resched() stand-in: a deadline for spinning on a
//     writer owner or on no owner, a cap on the whole spin in any state, and
//     (LOCKSWAP_ONCPU=rseq) a clock gap between two polls that says this
//     spinner was preempted itself;
//   * slot_running() is the owner_on_cpu() stand-in: the thread is not a fork
//     ghost, not asleep in lockswap, and on a CPU as far as LOCKSWAP_ONCPU's
//     source can tell (core/oncpu.h).
// Both are read every kClockEvery polls, as the kernel reads the clock, so
// that the poll-to-trylock latency stays short.
#pragma once
#include <cstdint>

#include "core/lock_events.h"
#include "core/oncpu.h"
#include "core/thread_registry.h"

namespace lockswap {

inline constexpr unsigned kClockEvery = 16;

inline bool slot_running(ThreadSlot& s) { return !is_ghost(s) && may_be_running(s); }

struct SpinBudget {
  uint64_t deadline;  // writer-owned / ownerless spinning ends here
  uint64_t cap;       // the whole spin ends here
  uint64_t last = 0;  // previous clock reading (oncpu::spinner_was_preempted)

  static SpinBudget until(uint64_t deadline) { return {deadline, deadline}; }

  // True when the spin must stop; `on_writer_or_none`: the deadline applies.
  bool expired(uint64_t now, bool on_writer_or_none) {
    bool preempted = oncpu::spinner_was_preempted(last, now);
    last = now;
    if (preempted) {
      lockevent_inc(LockEvent::rwsem_opt_preempted);
      return true;
    }
    if (now > cap || (on_writer_or_none && now > deadline)) {
      lockevent_inc(LockEvent::rwsem_opt_budget);
      return true;
    }
    return false;
  }
  void credit(uint64_t ns) { deadline += ns; }  // a reader phase spun on
};

}  // namespace lockswap
