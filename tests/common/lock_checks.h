/* tests/common/lock_checks.h — call sequences on a free lock whose every
 * return value glibc fixes, shared by the C and the C++ tests. Each call's
 * result goes to check(ctx, what, got, expected), which the caller turns into
 * its own kind of assertion: a gtest expectation (lstest::expect_rc), a check
 * in a forked child (lstest::child_rc), a recorded result (early_lib.c). */
#pragma once
#include <errno.h>
#include <pthread.h>

typedef void (*lstest_check_fn)(void* ctx, const char* what, int got, int expected);

/* One call on a mutex or an rwlock and what glibc returns for it. */
struct lstest_mutex_step {
  const char* what;
  int (*call)(pthread_mutex_t*);
  int expected;
};
struct lstest_rwlock_step {
  const char* what;
  int (*call)(pthread_rwlock_t*);
  int expected;
};

/* A recursive mutex: locked twice by its owner, unlocked twice; one unlock
 * more is EPERM (not the owner any longer). Free again on return. */
static inline void lstest_check_recursive_mutex(pthread_mutex_t* m, lstest_check_fn check, void* ctx) {
  static const struct lstest_mutex_step steps[] = {
      {"recursive lock", pthread_mutex_lock, 0},
      {"recursive lock again", pthread_mutex_lock, 0},
      {"recursive unlock", pthread_mutex_unlock, 0},
      {"recursive unlock again", pthread_mutex_unlock, 0},
      {"unlock once too often", pthread_mutex_unlock, EPERM},
  };
  for (unsigned i = 0; i < sizeof steps / sizeof steps[0]; ++i)
    check(ctx, steps[i].what, steps[i].call(m), steps[i].expected);
}

/* An rwlock of any kind: a reader keeps a writer out (trywrlock: EBUSY), and
 * the write owner's own read lock is EDEADLK. Free again on return. */
static inline void lstest_check_rwlock_owner(pthread_rwlock_t* l, lstest_check_fn check, void* ctx) {
  static const struct lstest_rwlock_step steps[] = {
      {"rdlock", pthread_rwlock_rdlock, 0},
      {"trywrlock while read-held", pthread_rwlock_trywrlock, EBUSY},
      {"unlock (read)", pthread_rwlock_unlock, 0},
      {"wrlock", pthread_rwlock_wrlock, 0},
      {"rdlock by the writer", pthread_rwlock_rdlock, EDEADLK},
      {"unlock (write)", pthread_rwlock_unlock, 0},
  };
  for (unsigned i = 0; i < sizeof steps / sizeof steps[0]; ++i)
    check(ctx, steps[i].what, steps[i].call(l), steps[i].expected);
}
