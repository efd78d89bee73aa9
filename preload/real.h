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

#include <string_view>

// Every function lockswap interposes, one line each:
//   X(name, return type, (parameters), (arguments), sleeps | returns, family)
// `sleeps`: the call may block (a lock, a condition or semaphore wait);
// `returns`: it never sleeps. `family`: its ApiFamily. The dispatch table
// type, glibc's table, the exported forwarders (preload/exports.cpp), the
// statistics wrappers (preload/stats/stats.cpp) and every list of one family's
// functions (for_each_function) are all generated from this list.
namespace lockswap {

enum class ApiFamily : unsigned char { mutex, rwlock, cond, sem };

#define LOCKSWAP_REAL_FUNCTIONS(X)                                                                                                    \
  X(pthread_mutex_init, int, (pthread_mutex_t* m, const pthread_mutexattr_t* a), (m, a), returns, mutex)                              \
  X(pthread_mutex_destroy, int, (pthread_mutex_t* m), (m), returns, mutex)                                                            \
  X(pthread_mutex_lock, int, (pthread_mutex_t* m), (m), sleeps, mutex)                                                                \
  X(pthread_mutex_trylock, int, (pthread_mutex_t* m), (m), returns, mutex)                                                            \
  X(pthread_mutex_timedlock, int, (pthread_mutex_t* m, const timespec* t), (m, t), sleeps, mutex)                                     \
  X(pthread_mutex_clocklock, int, (pthread_mutex_t* m, clockid_t k, const timespec* t), (m, k, t), sleeps, mutex)                     \
  X(pthread_mutex_unlock, int, (pthread_mutex_t* m), (m), returns, mutex)                                                             \
  X(pthread_mutex_consistent, int, (pthread_mutex_t* m), (m), returns, mutex)                                                         \
  X(pthread_rwlock_init, int, (pthread_rwlock_t* l, const pthread_rwlockattr_t* a), (l, a), returns, rwlock)                          \
  X(pthread_rwlock_destroy, int, (pthread_rwlock_t* l), (l), returns, rwlock)                                                         \
  X(pthread_rwlock_rdlock, int, (pthread_rwlock_t* l), (l), sleeps, rwlock)                                                           \
  X(pthread_rwlock_tryrdlock, int, (pthread_rwlock_t* l), (l), returns, rwlock)                                                       \
  X(pthread_rwlock_timedrdlock, int, (pthread_rwlock_t* l, const timespec* t), (l, t), sleeps, rwlock)                                \
  X(pthread_rwlock_clockrdlock, int, (pthread_rwlock_t* l, clockid_t k, const timespec* t), (l, k, t), sleeps, rwlock)                \
  X(pthread_rwlock_wrlock, int, (pthread_rwlock_t* l), (l), sleeps, rwlock)                                                           \
  X(pthread_rwlock_trywrlock, int, (pthread_rwlock_t* l), (l), returns, rwlock)                                                       \
  X(pthread_rwlock_timedwrlock, int, (pthread_rwlock_t* l, const timespec* t), (l, t), sleeps, rwlock)                                \
  X(pthread_rwlock_clockwrlock, int, (pthread_rwlock_t* l, clockid_t k, const timespec* t), (l, k, t), sleeps, rwlock)                \
  X(pthread_rwlock_unlock, int, (pthread_rwlock_t* l), (l), returns, rwlock)                                                          \
  X(pthread_cond_init, int, (pthread_cond_t* c, const pthread_condattr_t* a), (c, a), returns, cond)                                  \
  X(pthread_cond_destroy, int, (pthread_cond_t* c), (c), returns, cond)                                                               \
  X(pthread_cond_wait, int, (pthread_cond_t* c, pthread_mutex_t* m), (c, m), sleeps, cond)                                            \
  X(pthread_cond_timedwait, int, (pthread_cond_t* c, pthread_mutex_t* m, const timespec* t), (c, m, t), sleeps, cond)                 \
  X(pthread_cond_clockwait, int, (pthread_cond_t* c, pthread_mutex_t* m, clockid_t k, const timespec* t), (c, m, k, t), sleeps, cond) \
  X(pthread_cond_signal, int, (pthread_cond_t* c), (c), returns, cond)                                                                \
  X(pthread_cond_broadcast, int, (pthread_cond_t* c), (c), returns, cond)                                                             \
  X(sem_init, int, (sem_t* s, int pshared, unsigned value), (s, pshared, value), returns, sem)                                        \
  X(sem_destroy, int, (sem_t* s), (s), returns, sem)                                                                                  \
  X(sem_wait, int, (sem_t* s), (s), sleeps, sem)                                                                                      \
  X(sem_trywait, int, (sem_t* s), (s), returns, sem)                                                                                  \
  X(sem_timedwait, int, (sem_t* s, const timespec* t), (s, t), sleeps, sem)                                                           \
  X(sem_clockwait, int, (sem_t* s, clockid_t k, const timespec* t), (s, k, t), sleeps, sem)                                           \
  X(sem_post, int, (sem_t* s), (s), returns, sem)                                                                                     \
  X(sem_getvalue, int, (sem_t* s, int* value), (s, value), returns, sem)

// One pointer per interposed function: the type of every ops table (the
// dispatch table, glibc's functions, the statistics wrappers).
struct OpsTable {
#define X(name, ret, params, args, sleeps, family) ret(*name) params;
  LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
};

// Calls fn.template operator()<&OpsTable::NAME>() for each function of
// family F, its initialiser (NAME ending in _init) only when kWithInit.
template <ApiFamily F, bool kWithInit, class Fn>
void for_each_function(Fn&& fn) {
#define X(name, ret, params, args, sleeps, family)                                                   \
  if constexpr (ApiFamily::family == F && (kWithInit || !std::string_view(#name).ends_with("_init"))) \
    fn.template operator()<&OpsTable::name>();
  LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
}

namespace real {

const OpsTable& resolve_slow();
extern OpsTable g_functions;
extern bool g_resolved;

// glibc's implementation of every function lockswap interposes.
inline const OpsTable& glibc() {
  if (__builtin_expect(__atomic_load_n(&g_resolved, __ATOMIC_ACQUIRE), 1)) return g_functions;
  return resolve_slow();
}

}  // namespace real
}  // namespace lockswap
