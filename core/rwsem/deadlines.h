// core/rwsem/deadlines.h — the clock and the deadlines the tunables set.
//
// Part of core/rwsem/thread.cpp's one translation unit: everything here has internal
// linkage, so include it nowhere else.
//
// The slow paths read RwsemTunables (core/rwsem/tunables.h) through
// tunables(); the clock stands in for jiffies and sched_clock().
#pragma once
#include <sched.h>

#include <atomic>
#include <cstdint>

#include "arch/clock.h"
#include "core/rwsem/rwsem.h"
#include "core/thread_registry.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

const RwsemTunables& tunables() { return g_rwsem_tunables; }

// jiffies / sched_clock() stand-in.
uint64_t now_ns() { return arch::monotonic_ns(); }

// The whole of one optimistic spin ends after owner_spin_ns plus this, in
// whatever state: where the kernel's spinner would meet need_resched() at
// the latest at the next tick, ours has no such signal.
constexpr uint64_t kSpinCapExtraNs = 4 * kRspinMaxNs;

// The CPUs this process may run on, read once (sched_getaffinity is a system
// call); 2 when it cannot be read.
uint32_t usable_cpus() {
  static std::atomic<uint32_t> cpus{0};
  uint32_t n = cpus.load(std::memory_order_relaxed);
  if (__builtin_expect(n == 0, 0)) {
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<uint32_t>(CPU_COUNT(&set)) : 2;
    cpus.store(n, std::memory_order_relaxed);
  }
  return n;
}

// When a waiter queued at `now` may ask for HANDOFF: handoff_ns, stretched
// by threads per CPU (docs/rwsem.md, "Handoff under oversubscription").
uint64_t handoff_deadline(uint64_t now) {
  const RwsemTunables& t = g_rwsem_tunables;
  uint64_t stretch = rwsem::handoff_stretch(thread_registry::g_attached_threads.load(std::memory_order_relaxed),
                                            usable_cpus(), t.handoff_stretch_max);
  return now + t.handoff_ns * stretch;
}

}  // namespace
}  // namespace rwsem_detail
}  // namespace lockswap
