// core/backoff.h — waiting for another thread's store without disabling
// preemption.
//
// The kernel spins with preemption off while a neighbour finishes a short
// update (a wait_lock holder, an OSQ neighbour unlinking itself): that
// neighbour is on a CPU, so the store comes within a few hundred cycles.
// In userspace the neighbour may have been preempted, so a plain spin could
// last a whole time slice or, against a lower SCHED_FIFO/RR priority holder on
// our CPU, forever. Backoff therefore spins, then yields (the neighbour is
// probably preempted), then sleeps with a growing pause: never an unbounded
// busy loop. A yield does not let a lower real-time priority thread run on
// our CPU; a sleep does. The sleep is a raw system call, not nanosleep(),
// which is a cancellation point.
#pragma once
#include <sched.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>

#include "arch/relax.h"

namespace lockswap {

struct Backoff {
  static constexpr unsigned kPollsBeforeYield = 64;
  static constexpr unsigned kYieldsBeforeSleep = 64;
  static constexpr long kSleepMinNs = 10'000;
  static constexpr long kSleepMaxNs = 1'000'000;

  unsigned polls = 0;
  long sleep_ns = kSleepMinNs;

  void pause() {
    ++polls;
    if (polls <= kPollsBeforeYield) {
      arch::cpu_relax();
    } else if (polls <= kPollsBeforeYield + kYieldsBeforeSleep) {
      sched_yield();
    } else {
      timespec ts{0, sleep_ns};
      syscall(SYS_nanosleep, &ts, nullptr);
      sleep_ns = std::min(sleep_ns * 2, kSleepMaxNs);
    }
  }
};

}  // namespace lockswap
