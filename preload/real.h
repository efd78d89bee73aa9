// preload/real.h — glibc's own implementations, for the `glibc` variant and for
// objects delegated to glibc (robust, PI/PP, process-shared).
//
// Resolved with dlvsym(RTLD_NEXT) on first need, not in a constructor: a lock
// may be taken by another library's constructor before ours has run. The
// condition-variable entry points are bound to GLIBC_2.3.2, the version that
// matches the 48-byte pthread_cond_t (an unversioned lookup may return the
// GLIBC_2.2.5 compatibility functions).
#pragma once
#include <pthread.h>
#include <semaphore.h>
#include <time.h>

namespace lockswap::real {

#define LOCKSWAP_REAL_FUNCTIONS(X)                                                                       \
  X(pthread_mutex_init, int, (pthread_mutex_t*, const pthread_mutexattr_t*))                             \
  X(pthread_mutex_destroy, int, (pthread_mutex_t*))                                                      \
  X(pthread_mutex_lock, int, (pthread_mutex_t*))                                                         \
  X(pthread_mutex_trylock, int, (pthread_mutex_t*))                                                      \
  X(pthread_mutex_timedlock, int, (pthread_mutex_t*, const timespec*))                                   \
  X(pthread_mutex_clocklock, int, (pthread_mutex_t*, clockid_t, const timespec*))                        \
  X(pthread_mutex_unlock, int, (pthread_mutex_t*))                                                       \
  X(pthread_mutex_consistent, int, (pthread_mutex_t*))                                                   \
  X(pthread_rwlock_init, int, (pthread_rwlock_t*, const pthread_rwlockattr_t*))                          \
  X(pthread_rwlock_destroy, int, (pthread_rwlock_t*))                                                    \
  X(pthread_rwlock_rdlock, int, (pthread_rwlock_t*))                                                     \
  X(pthread_rwlock_tryrdlock, int, (pthread_rwlock_t*))                                                  \
  X(pthread_rwlock_timedrdlock, int, (pthread_rwlock_t*, const timespec*))                               \
  X(pthread_rwlock_clockrdlock, int, (pthread_rwlock_t*, clockid_t, const timespec*))                    \
  X(pthread_rwlock_wrlock, int, (pthread_rwlock_t*))                                                     \
  X(pthread_rwlock_trywrlock, int, (pthread_rwlock_t*))                                                  \
  X(pthread_rwlock_timedwrlock, int, (pthread_rwlock_t*, const timespec*))                               \
  X(pthread_rwlock_clockwrlock, int, (pthread_rwlock_t*, clockid_t, const timespec*))                    \
  X(pthread_rwlock_unlock, int, (pthread_rwlock_t*))                                                     \
  X(pthread_cond_init, int, (pthread_cond_t*, const pthread_condattr_t*))                                \
  X(pthread_cond_destroy, int, (pthread_cond_t*))                                                        \
  X(pthread_cond_wait, int, (pthread_cond_t*, pthread_mutex_t*))                                         \
  X(pthread_cond_timedwait, int, (pthread_cond_t*, pthread_mutex_t*, const timespec*))                   \
  X(pthread_cond_clockwait, int, (pthread_cond_t*, pthread_mutex_t*, clockid_t, const timespec*))        \
  X(pthread_cond_signal, int, (pthread_cond_t*))                                                         \
  X(pthread_cond_broadcast, int, (pthread_cond_t*))                                                     \
  X(sem_init, int, (sem_t*, int, unsigned))                                                              \
  X(sem_destroy, int, (sem_t*))                                                                          \
  X(sem_wait, int, (sem_t*))                                                                             \
  X(sem_trywait, int, (sem_t*))                                                                          \
  X(sem_timedwait, int, (sem_t*, const timespec*))                                                       \
  X(sem_clockwait, int, (sem_t*, clockid_t, const timespec*))                                            \
  X(sem_post, int, (sem_t*))                                                                             \
  X(sem_getvalue, int, (sem_t*, int*))

struct Functions {
#define X(name, ret, args) ret(*name) args;
  LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
};

const Functions& resolve_slow();
extern Functions g_functions;
extern bool g_resolved;

// glibc's implementation of every function lockswap interposes.
inline const Functions& glibc() {
  if (__builtin_expect(__atomic_load_n(&g_resolved, __ATOMIC_ACQUIRE), 1)) return g_functions;
  return resolve_slow();
}

}  // namespace lockswap::real
