/* tests/behaviour/c_cancel_util.h — what the C cancellation programs
   (cancel_c.c, sem_cancel_c.c, first_call_cancel.c) share: failure counting
   with the current mode and scenario in every message, deadlines
   (c_deadline.h), and a bounded join. Header-only: each program is one
   translation unit. */
#pragma once
#include <pthread.h>
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "c_deadline.h"

static int failures;
static const char* g_mode_name = "";
static const char* g_scenario = "";

#define CHECK(cond, ...)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      fprintf(stderr, "FAIL %s:%d [%s/%s]: ", __FILE__, __LINE__, g_mode_name, g_scenario); \
      fprintf(stderr, __VA_ARGS__);                                                           \
      fputc('\n', stderr);                                                                    \
      ++failures;                                                                             \
    }                                                                                         \
  } while (0)

/* Joins a cancelled thread; one that has not exited within 10 s is a hang:
   the program stops there with the mode and scenario. */
static void* join_bounded(pthread_t t) {
  struct timespec d = in_ms(CLOCK_MONOTONIC, 10000);
  void* ret = NULL;
  if (pthread_clockjoin_np(t, &ret, CLOCK_MONOTONIC, &d) != 0) {
    fprintf(stderr, "FAIL [%s/%s]: the cancelled thread did not exit\n", g_mode_name, g_scenario);
    _exit(1);
  }
  return ret;
}
