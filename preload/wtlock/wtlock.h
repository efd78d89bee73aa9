// preload/wtlock/wtlock.h — WiredTiger's rwlocks (LOCKSWAP_WTLOCK) as the
// rest of the library sees them: the fork hook and the callers' table. The
// counts mode's `wtlock` records are a section of every dump that
// preload/wtlock/wtlock.cpp registers with the statistics ("Counts").
#pragma once
#include <cstdint>

namespace lockswap::wtlock {

// After fork(), in the child: the WiredTiger adapters' fork hooks (as
// registry.h's variants_after_fork_in_child for the pthread families).
void after_fork_in_child();

// An export of init or destroy was called from `ra` (preload/wtlock/wtlock.cpp).
void note_caller(void* ra);

}  // namespace lockswap::wtlock
