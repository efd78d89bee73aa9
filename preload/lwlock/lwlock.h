// preload/lwlock/lwlock.h — the LWLock family as the rest of the library
// sees it: started by load_config, read by the statistics.
#pragma once
#include <cstdint>

#include "preload/config/registry.h"

namespace lockswap::lwlock {

// LOCKSWAP_LWLOCK (and LOCKSWAP_SELECT's lwlock rules): with anything but
// `off` and no rule, nothing happens; otherwise a PostgreSQL that exports
// the LWLock API is redirected (or refused, exit 2) before main.
void start(LwlockVariant chosen);

bool redirected();
const char* build_label();  // the allow-list entry in use

struct TrancheRow {
  const char* name;  // as pg_stat_activity shows it
  int id;            // tranche number; -1: every extension tranche together
  const char* variant;
  uint64_t acquired;   // every acquisition (conditional ones that succeeded too)
  uint64_t missed;     // attempts that did not acquire (conditional, wait-until-free)
  uint64_t waits;      // calls that waited (acquisitions, wait-until-free, variable waits)
  uint64_t wait_ns;    // their time
  uint64_t hold_samples, hold_ns;  // hold time of one acquisition in 64
};
void for_each_tranche(void (*visit)(const TrancheRow&, void*), void* context);

}  // namespace lockswap::lwlock
