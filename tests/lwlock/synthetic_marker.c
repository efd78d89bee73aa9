/* tests/lwlock/synthetic_marker.c — a shared library that exports the
 * synthetic-target marker of tests/lwlock/fake_postgres.h: loaded beside a
 * program, it must not make lockswap take that program for a test target
 * (preload/lwlock/redirect.cpp accepts the marker from the main program only). */
#include <stdint.h>

__attribute__((visibility("default"))) const uint32_t lockswap_lwlock_synthetic_target = 0x48;
