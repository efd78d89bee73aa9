/* tests/wtlock/idle_pair.c — N idle (uncontended) pairs on one WT_RWLOCK,
 * for counting instructions per pair with callgrind
 * (docs/results/idle-pairs.md):
 *
 *   idle_pair read|write N
 *
 * `pairs` runs the loop; once with one pair first, so that the first-call
 * install is not counted. Count its inclusive instructions
 * (--toggle-collect=pairs) at two values of N: the difference divided by
 * the difference of N is one pair, loop included. */
#define _GNU_SOURCE
#include <stdio.h>

#include "tests/wtlock/wt_harness.h"

__attribute__((noinline)) void pairs(WT_SESSION* s, wt_test_rwlock* l, int write, long n) {
  if (write)
    for (long i = 0; i < n; ++i) __wt_writelock(s, l), __wt_writeunlock(s, l);
  else
    for (long i = 0; i < n; ++i) __wt_readlock(s, l), __wt_readunlock(s, l);
}

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: idle_pair read|write N\n");
    return 2;
  }
  int write = strcmp(argv[1], "write") == 0;
  long n = strtol(argv[2], NULL, 10);
  wt_test_db db;
  static wt_test_rwlock lock;
  WT_SESSION* s;
  if (wt_test_open(&db) != 0 || (s = wt_test_session(&db)) == NULL || __wt_rwlock_init(s, &lock) != 0) return 1;
  pairs(s, &lock, write, 1);
  pairs(s, &lock, write, n);
  __wt_rwlock_destroy(s, &lock);
  wt_test_close(&db);
  return 0;
}
