/* tests/reach/syscall_cost.c — the cost of one futex wait through syscall()
 * that returns at once (EAGAIN: the word differs), for docs/statistics.md.
 *
 *   syscall_cost loop N     N calls inside cost_loop() (for callgrind:
 *                           --toggle-collect=cost_loop, two N, the difference)
 *   syscall_cost time N R   R runs of N calls; prints the median ns per call
 *
 * Run it plain (glibc's syscall), and under LD_PRELOAD=liblockswap.so with
 * LOCKSWAP_STATS unset and =counts. Not a test: a measurement. */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int g_word = 1;

__attribute__((noinline)) void cost_loop(long n) {
  for (long i = 0; i < n; ++i) syscall(SYS_futex, &g_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0);
}

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int cmp(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char** argv) {
  if (argc >= 3 && argv[1][0] == 'l') {
    cost_loop(atol(argv[2]));
    return 0;
  }
  if (argc >= 4 && argv[1][0] == 't') {
    long n = atol(argv[2]);
    int runs = atoi(argv[3]);
    double per[64];
    if (runs > 64) runs = 64;
    for (int r = 0; r < runs; ++r) {
      double t0 = now_ns();
      cost_loop(n);
      per[r] = (now_ns() - t0) / n;
    }
    qsort(per, runs, sizeof per[0], cmp);
    printf("median %.1f ns per call (min %.1f, max %.1f, %d runs of %ld)\n", per[runs / 2], per[0], per[runs - 1],
           runs, n);
    return 0;
  }
  fprintf(stderr, "usage: %s loop N | time N RUNS\n", argv[0]);
  return 2;
}
