// core/spin_guard.h — a test-and-set lock for short, rare critical sections.
//
// For registries and allocators (thread slots, concurrency ids, reader-slot
// blocks), never for a lock's own fast path. The word is 0 when free, 1 when
// held; it may live in memory shared between processes. Waiters poll with a
// relaxed load and yield the CPU after kPollsBeforeYield polls, because the
// holder may have been preempted (userspace cannot disable preemption).
// Acquire on taking, release on dropping.
#pragma once
#include <sched.h>

#include <atomic>
#include <cstdint>

#include "arch/atomic.h"
#include "arch/relax.h"

namespace lockswap {

class SpinGuard {
 public:
  static constexpr unsigned kPollsBeforeYield = 64;

  explicit SpinGuard(std::atomic<uint32_t>& word) : word_(word) {
    if (word_.exchange(1, arch::mo_lock) == 0) return;
    contended_ = true;
    for (unsigned polls = 0;; ++polls) {
      if (word_.load(arch::mo_hint) == 0 && word_.exchange(1, arch::mo_lock) == 0) return;
      if (polls > kPollsBeforeYield)
        sched_yield();
      else
        arch::cpu_relax();
    }
  }
  ~SpinGuard() { word_.store(0, arch::mo_unlock); }
  SpinGuard(const SpinGuard&) = delete;
  SpinGuard& operator=(const SpinGuard&) = delete;

  // The first attempt found the lock held.
  bool contended() const { return contended_; }

 private:
  std::atomic<uint32_t>& word_;
  bool contended_ = false;
};

}  // namespace lockswap
