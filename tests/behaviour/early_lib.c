/* tests/behaviour/early_lib.c — a shared library whose constructor takes
 * locks before liblockswap.so's own constructor has run.
 *
 * The test program links this library, so the dynamic loader initialises it
 * before the LD_PRELOADed liblockswap.so (dependencies of the program are
 * initialised first; `LD_DEBUG=files` shows the order). Every result is
 * recorded and checked later by early_ctor_test.cpp; two objects stay locked
 * across the constructor/main boundary and are released by main.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "tests/common/lock_checks.h"

#define MAX_RESULTS 64

struct early_result {
  const char* what;
  int got, expected;
};

static struct early_result results[MAX_RESULTS];
static int n_results;
static int ctor_ran;

pthread_mutex_t early_held_mutex = PTHREAD_MUTEX_INITIALIZER;
pthread_rwlock_t early_held_rwlock = PTHREAD_RWLOCK_INITIALIZER;
pthread_mutex_t early_recursive;
pthread_cond_t early_cond;

static void record(const char* what, int got, int expected) {
  if (n_results < MAX_RESULTS) {
    results[n_results].what = what;
    results[n_results].got = got;
    results[n_results].expected = expected;
    n_results++;
  }
}
#define R(call, expected) record(#call, (call), (expected))
static void record_check(void* ctx, const char* what, int got, int expected) {
  (void)ctx;
  record(what, got, expected);
}

static pthread_mutex_t cm = PTHREAD_MUTEX_INITIALIZER;
static int flag, waiting, waiter_rc = -1;

static void* waiter(void* arg) {
  (void)arg;
  pthread_mutex_lock(&cm);
  waiting = 1;
  while (!flag) {
    struct timespec d;
    clock_gettime(CLOCK_REALTIME, &d);
    d.tv_sec += 10;
    waiter_rc = pthread_cond_timedwait(&early_cond, &cm, &d);
    if (waiter_rc != 0) break;
  }
  pthread_mutex_unlock(&cm);
  return NULL;
}

__attribute__((constructor)) static void early_ctor(void) {
  ctor_ran = 1;
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  R(pthread_mutex_lock(&m), 0);
  R(pthread_mutex_trylock(&m), EBUSY);
  R(pthread_mutex_unlock(&m), 0);

  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE);
  R(pthread_mutex_init(&early_recursive, &a), 0);
  pthread_mutexattr_destroy(&a);
  lstest_check_recursive_mutex(&early_recursive, record_check, NULL);

  pthread_mutex_t ec = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
  R(pthread_mutex_lock(&ec), 0);
  R(pthread_mutex_lock(&ec), EDEADLK);
  R(pthread_mutex_unlock(&ec), 0);

  pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
  lstest_check_rwlock_owner(&l, record_check, NULL);

  /* Condvar: a timeout, then a wait/signal pair with a thread started here. */
  R(pthread_cond_init(&early_cond, NULL), 0);
  R(pthread_mutex_lock(&cm), 0);
  struct timespec d;
  clock_gettime(CLOCK_REALTIME, &d);
  d.tv_nsec += 5 * 1000 * 1000;
  if (d.tv_nsec >= 1000000000L) {
    d.tv_sec++;
    d.tv_nsec -= 1000000000L;
  }
  R(pthread_cond_timedwait(&early_cond, &cm, &d), ETIMEDOUT);
  R(pthread_mutex_trylock(&cm), EBUSY);
  R(pthread_mutex_unlock(&cm), 0);
  pthread_t t;
  R(pthread_create(&t, NULL, waiter, NULL), 0);
  for (;;) {
    pthread_mutex_lock(&cm);
    if (waiting) break;
    pthread_mutex_unlock(&cm);
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
  }
  flag = 1;
  R(pthread_cond_signal(&early_cond), 0);
  R(pthread_mutex_unlock(&cm), 0);
  R(pthread_join(t, NULL), 0);
  record("waiter's pthread_cond_timedwait", waiter_rc, 0);

  /* Held across the constructor/main boundary; released by main. */
  R(pthread_mutex_lock(&early_held_mutex), 0);
  R(pthread_rwlock_rdlock(&early_held_rwlock), 0);
}

/* Number of mismatches; a description of each is written to `out`. */
int early_report(char* out, size_t size) {
  int bad = 0;
  size_t used = 0;
  out[0] = '\0';
  if (!ctor_ran) {
    snprintf(out, size, "constructor did not run\n");
    return 1;
  }
  for (int i = 0; i < n_results; ++i) {
    if (results[i].got == results[i].expected) continue;
    ++bad;
    if (used < size) {
      int n = snprintf(out + used, size - used, "%s returned %d, expected %d\n", results[i].what, results[i].got,
                       results[i].expected);
      if (n > 0) used += (size_t)n;
    }
  }
  return bad;
}

int early_result_count(void) { return n_results; }
