// preload/wtlock/wtlock.h — WiredTiger's rwlocks (LOCKSWAP_WTLOCK) as the
// statistics dump sees them: the per-lock counters of the counts mode
// (preload/wtlock/wtlock.cpp, "Counts"), written as `wtlock` records by
// preload/stats/dump.cpp.
#pragma once
#include <cstddef>
#include <cstdint>

namespace lockswap::wtlock {

struct LockRow {
  uintptr_t addr;        // the WT_RWLOCK
  uintptr_t first_ip;    // where it was initialised, else first taken (0: unknown)
  const char* variant;   // LOCKSWAP_WTLOCK
  uint64_t acq, rd_acq;  // acquisitions (try calls that succeeded too), of them reads
  uint64_t contended, rd_contended;  // the first attempt failed, the call went on
  uint64_t wait_ns, wait_max_ns;     // time in the rest of a contended call
  uint64_t hold_samples, hold_ns;    // write holds, 1 in kHoldSample per lock
};

// Locks with a counted acquisition now (0 unless LOCKSWAP_STATS=counts
// installed the counting table).
size_t counted_locks();
// Each such lock, in table order; async-signal-safe (relaxed loads only).
void for_each_counted_lock(void (*visit)(const LockRow&, void*), void* context);

// After fork(), in the child: the WiredTiger adapters' fork hooks (as
// registry.h's variants_after_fork_in_child for the pthread families).
void after_fork_in_child();

// An export of init or destroy was called from `ra` (preload/wtlock/wtlock.cpp).
void note_caller(void* ra);

}  // namespace lockswap::wtlock
