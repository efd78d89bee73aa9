// preload/stats_backtrace.h — the statistics' backtraces (libunwind, loaded
// at start-up only when LOCKSWAP_STATS_BACKTRACE asks for them).
#pragma once
#include <cstdint>

namespace lockswap::stats {

// True once load_unwinder() (preload/stats.h) found libunwind.
bool have_unwinder();
// Return addresses from the caller of this function outwards, innermost
// first; at most `max`. 0 when there is no unwinder. May take libunwind's
// locks: call it with the "inside statistics" flag set.
int unwind_frames(uintptr_t* frames, int max);

}  // namespace lockswap::stats
