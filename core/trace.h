// core/trace.h — what core's USDT probes (arch/usdt.h) say about an
// acquisition: the `op` argument of acquire_begin, acquire_end and handoff.
#pragma once
#include "arch/usdt.h"

namespace lockswap {
inline constexpr int kTraceMutex = 1;
inline constexpr int kTraceRead = 2;
inline constexpr int kTraceWrite = 3;
inline constexpr int kTraceSem = 4;
}  // namespace lockswap
