/* tests/wtlock/alloc_wtlock.c — no WiredTiger rwlock path allocates.
 *
 * The program replaces malloc and its family (tests/common/alloc_count.h)
 * and counts every allocator call a thread makes while it is inside one of
 * the __wt_* rwlock functions. Fresh threads (whose first lock calls
 * register them inside lockswap) take a shared lock in every way, contended:
 * read, write, both try functions, the unlocks. Under a swapped variant
 * (rwsem, rwsem-rspin) __wt_rwlock_init and __wt_rwlock_destroy are counted
 * as well and must allocate nothing either; WiredTiger's own init (off, wt)
 * allocates its two condition variables, so there they are left out.
 * Exit 0 when no counted call allocated. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>

#include "tests/common/alloc_count.h"
#include "tests/wtlock/wt_harness.h"

#define THREADS 4
#define ROUNDS 5000

#define INSIDE(call) COUNT_INSIDE(call)

static wt_test_db g_db;
static wt_test_rwlock g_lock;

static void* worker(void* arg) {
  WT_SESSION* s = arg;
  for (int i = 0; i < ROUNDS; ++i) {
    INSIDE(__wt_readlock(s, &g_lock));
    INSIDE(__wt_readunlock(s, &g_lock));
    INSIDE(__wt_writelock(s, &g_lock));
    INSIDE(__wt_writeunlock(s, &g_lock));
    int rc;
    INSIDE(rc = __wt_try_readlock(s, &g_lock));
    if (rc == 0) INSIDE(__wt_readunlock(s, &g_lock));
    INSIDE(rc = __wt_try_writelock(s, &g_lock));
    if (rc == 0) INSIDE(__wt_writeunlock(s, &g_lock));
  }
  return NULL;
}

int main(void) {
  if (wt_test_open(&g_db) != 0) {
    fprintf(stderr, "alloc_wtlock: wiredtiger_open failed\n");
    return 1;
  }
  WT_SESSION* sessions[THREADS];
  for (int i = 0; i < THREADS; ++i)
    if ((sessions[i] = wt_test_session(&g_db)) == NULL) return 1;
  int counted_init = !wt_test_own_algorithm();
  if (counted_init) ++t_inside;
  int rc = __wt_rwlock_init(sessions[0], &g_lock);
  if (counted_init) --t_inside;
  if (rc != 0) return 1;

  pthread_t t[THREADS];
  for (int i = 0; i < THREADS; ++i) pthread_create(&t[i], NULL, worker, sessions[i]);
  for (int i = 0; i < THREADS; ++i) pthread_join(t[i], NULL);

  if (counted_init) ++t_inside;
  __wt_rwlock_destroy(sessions[0], &g_lock);
  if (counted_init) --t_inside;
  long n = atomic_load(&g_inside_allocs);
  wt_test_close(&g_db);
  printf("alloc_wtlock: LOCKSWAP_WTLOCK=%s: %ld allocator call(s) inside the rwlock functions%s\n",
         wt_test_variant(), n, counted_init ? " (init and destroy included)" : "");
  return n == 0 ? 0 : 1;
}
