// core/rwsem/tunables.h — the rw_semaphore's settings and the pure functions of them.
//
// Set once by preload at start-up (LOCKSWAP_RWSEM_*, preload/config/config.cpp); the
// slow paths read them with plain loads. A setting "not in the kernel" turns a
// deviation on or off (0 or false restores the kernel's rule where one
// exists); docs/rwsem.md gives each deviation's reason and its measurements.
#pragma once
#include <algorithm>
#include <cstdint>

namespace lockswap {

struct RwsemTunables {
  uint64_t handoff_ns = 4'000'000;   // the kernel's RWSEM_WAIT_TIMEOUT
  // Not in the kernel (docs/rwsem.md, "Handoff under oversubscription"):
  // with more threads than CPUs the handoff deadline stretches by threads per
  // CPU, up to this factor (1: the kernel's fixed deadline).
  uint32_t handoff_stretch_max = 16;
  // Spin budget on a writer owner (or on no owner) per optimistic spin: the
  // need_resched() stand-in while that owner looks on-CPU (reader-owned
  // spinning has the kernel's own threshold). Without the eBPF map an
  // owner's preemption is seen only on our own CPU, so the bound must be
  // short (docs/rwsem.md, "Scheduler stand-ins").
  uint64_t owner_spin_ns = 5'000;
  bool writer_spin = true;           // optimistic spinning (and the handoff spin, reader polls) on/off
  uint32_t max_spinners = 0;         // threads of the process spinning at once (0: CPUs - 1, at least 1)
  bool drop_bias_early = false;      // 2016 RFC: failed fast-path reader drops its bias at once
  // Not in the kernel (docs/rwsem.md, "One contended lock"): a writer spin ends once it has seen
  // the lock released and taken by another thread this many times (0: never).
  uint32_t spin_lost_races = 1;
  // Not in the kernel (docs/rwsem.md, "One contended lock"): a writer entering the slow path takes a free lock
  // (no HANDOFF) at once, before spinning or queueing, seat or no seat.
  bool barge = true;
  // Not in the kernel (docs/rwsem.md, "One contended lock"): a queued writer that finds the lock free just before
  // sleeping sleeps this long (or until the next unlock) before retrying.
  uint64_t polite_ns = 50'000;
  // The same for a lock that is only ever taken exclusively (storage that
  // declares kExclusiveOnly: the mutex): longer, since no reader can be
  // kept waiting by it (docs/rwsem.md, "One contended lock").
  uint64_t exclusive_polite_ns = 500'000;
  // Not in the kernel (docs/rwsem.md, "Yield to a woken writer"): a writer
  // entering the slow path that has found the head writer woken and still
  // not holding the lock for this long yields its CPU before it barges
  // (0: never).
  uint64_t woken_yield_ns = 1'000'000;
  // Reader preference bound (core/read_pref.h rule (b), default-kind rwlocks
  // only): a queued reader that waited this long while readers held the lock
  // enters past queued writers. The kernel's RWSEM_WAIT_TIMEOUT.
  uint64_t reader_pref_ns = 4'000'000;
  // Not in the kernel (docs/rwsem.md, "Stealing a read-held lock"): on a default-kind rwlock a reader
  // steals a read-held lock past a queued writer (glibc's reader preference),
  // and the head writer bounds its sleep by its handoff deadline so that it
  // asserts HANDOFF, which ends the stealing, without a waker.
  bool steal_read_held = true;
};
extern RwsemTunables g_rwsem_tunables;

namespace rwsem {
// The handoff deadline's factor: threads per CPU (rounded down), within
// [1, stretch_max] (docs/rwsem.md, "Handoff under oversubscription").
inline constexpr uint64_t handoff_stretch(uint32_t threads, uint32_t cpus, uint32_t stretch_max) {
  const uint64_t per_cpu = cpus == 0 ? 1 : threads / cpus;
  const uint64_t cap = stretch_max < 1 ? 1 : stretch_max;
  return std::clamp<uint64_t>(per_cpu, 1, cap);
}
static_assert(handoff_stretch(2, 2, 16) == 1 && handoff_stretch(64, 2, 16) == 16 && handoff_stretch(16, 2, 16) == 8);
static_assert(handoff_stretch(64, 2, 1) == 1 && handoff_stretch(1, 8, 16) == 1 && handoff_stretch(5, 0, 16) == 1);

// rwsem_rspin_threshold(): how long a writer may spin on a reader-owned
// lock before it sleeps: a base plus a share per reader, up to a cap on the
// readers counted (the kernel's constants). Also the percid writer's drain
// spin (core/percid/thread.h).
inline constexpr uint64_t kRspinBaseNs = 10'000;
inline constexpr uint64_t kRspinPerReaderNs = 500;
inline constexpr uint64_t kRspinMaxReaders = 30;
inline constexpr uint64_t kRspinMaxNs = kRspinBaseNs + kRspinMaxReaders * kRspinPerReaderNs;
inline constexpr uint64_t rspin_budget_ns(uint64_t readers) {
  return kRspinBaseNs + std::min(readers, kRspinMaxReaders) * kRspinPerReaderNs;
}
static_assert(rspin_budget_ns(0) == 10'000 && rspin_budget_ns(1000) == kRspinMaxNs && kRspinMaxNs == 25'000);
}  // namespace rwsem
}  // namespace lockswap
