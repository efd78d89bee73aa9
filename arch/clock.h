// arch/clock.h — the one monotonic clock lock code reads.
//
// Deadlines, spin budgets, handoff timeouts and hold times are all measured
// on CLOCK_MONOTONIC in nanoseconds: never stepped by settimeofday() or NTP,
// so a budget cannot end early or run forever when the wall clock jumps.
// clock_gettime() is served by the vDSO (no system call) on every ISA we
// build for, which is why spin loops may read it every few polls.
#pragma once
#include <time.h>

#include <cstdint>

namespace lockswap::arch {

inline constexpr uint64_t kNsPerSecond = 1'000'000'000u;

inline uint64_t timespec_ns(const timespec& ts) {
  return static_cast<uint64_t>(ts.tv_sec) * kNsPerSecond + static_cast<uint64_t>(ts.tv_nsec);
}

inline uint64_t clock_ns(clockid_t clock) {
  timespec ts;
  clock_gettime(clock, &ts);
  return timespec_ns(ts);
}

// Nanoseconds on CLOCK_MONOTONIC.
inline uint64_t monotonic_ns() { return clock_ns(CLOCK_MONOTONIC); }

inline timespec timespec_at(uint64_t ns) {
  return timespec{static_cast<time_t>(ns / kNsPerSecond), static_cast<long>(ns % kNsPerSecond)};
}

// Nanoseconds from now until the absolute time `abs` on `clock`; 0 once it
// has passed.
inline uint64_t ns_until(clockid_t clock, const timespec& abs) {
  timespec now;
  clock_gettime(clock, &now);
  int64_t left = (static_cast<int64_t>(abs.tv_sec) - now.tv_sec) * static_cast<int64_t>(kNsPerSecond) +
                 (abs.tv_nsec - now.tv_nsec);
  return left < 0 ? 0 : static_cast<uint64_t>(left);
}

}  // namespace lockswap::arch
