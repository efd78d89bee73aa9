// core/rwsem/deadlines.h — the clock, and the handoff deadline the tunables set.
//
// Part of core/rwsem/thread_host.cpp's one translation unit: everything here
// has internal linkage, so include it nowhere else (but core/rwsem/
// thread_rep.h, which tests/core/rwsem_agreement_test.cpp includes too).
//
// The slow paths read RwsemTunables (core/rwsem/tunables.h) through
// tunables() and the clock (the stand-in for jiffies and sched_clock())
// through now_ns(), both core/rwsem/rules.h's.
#pragma once
#include <sched.h>

#include <atomic>
#include <cstdint>

#include "core/rwsem/rules.h"
#include "core/rwsem/rwsem.h"
#include "core/thread_registry.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;
using rwsem_rules::now_ns;
using rwsem_rules::tunables;

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
