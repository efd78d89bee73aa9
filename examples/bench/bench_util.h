// examples/bench/bench_util.h — small helpers the benchmark programs share.
#pragma once
#include <stdlib.h>
#include <time.h>

#include <cstdint>

namespace bench {

inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(ts.tv_nsec);
}

// `n` spin-wait hints: the unit of simulated work in and between critical sections.
inline void pause_n(int n) {
  for (int i = 0; i < n; ++i) __builtin_ia32_pause();
}

// The environment variable, or `dflt` when unset or empty (for report lines).
inline const char* env_or(const char* name, const char* dflt) {
  const char* v = getenv(name);
  return (v && *v) ? v : dflt;
}

}  // namespace bench
