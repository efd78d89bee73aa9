/* tests/behaviour/c_deadline.h — the C test programs' absolute deadline:
   now plus `ms` on clock `clk`, for timed and clock waits. Header-only: each
   program is one translation unit. */
#pragma once
#include <time.h>

static struct timespec in_ms(clockid_t clk, long ms) {
  struct timespec t;
  clock_gettime(clk, &t);
  t.tv_sec += ms / 1000;
  t.tv_nsec += (ms % 1000) * 1000000L;
  if (t.tv_nsec >= 1000000000L) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000L;
  }
  return t;
}
