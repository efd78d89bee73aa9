// preload/stats/backtrace.h — the statistics' backtraces (libunwind, loaded
// at start-up only when LOCKSWAP_STATS_BACKTRACE asks for them).
#pragma once
#include <cstdint>

namespace lockswap::stats {

// Statistics with backtraces: dlopen libunwind (RTLD_LOCAL, see
// preload/CMakeLists.txt). Called by the library's constructor, never on a
// lock path; until then contended sites get no backtrace.
void load_unwinder();

// True once load_unwinder() found libunwind.
bool have_unwinder();
// Return addresses from the caller of this function outwards, innermost
// first; at most `max`. 0 when there is no unwinder. May take libunwind's
// locks: call it with the "inside statistics" flag set.
int unwind_frames(uintptr_t* frames, int max);

}  // namespace lockswap::stats
