/* tests/torture/victims.h — threads that are cancelled ASYNCHRONOUSLY while
 * blocked (or spinning) in an interposed call. They live in a C file compiled
 * without -fexceptions: pthread_cleanup_push is then glibc's setjmp-based
 * cleanup, so a cancellation that lands in the victim's own code (not inside
 * a library call) is still well defined. The C++ side (torture.cpp) owns the
 * objects, starts the victim, cancels it and checks what is left. */
#pragma once
#include <pthread.h>
#include <semaphore.h>
#include <time.h>

#ifdef __cplusplus
extern "C" {
#endif

enum av_kind {
  AV_MUTEX,        /* pthread_mutex_lock on a mutex the canceller holds throughout */
  AV_MUTEX_TIMED,  /* pthread_mutex_clocklock (MONOTONIC, far deadline), same */
  AV_MUTEX_SPIN,   /* as AV_MUTEX, but the holder keeps running (optimistic spinners spin) */
  AV_MUTEX_MAYBE,  /* errorcheck mutex the canceller releases before cancelling: may be acquired */
  AV_RDLOCK,       /* rdlock (or timedrdlock, far) on a write-held rwlock */
  AV_WRLOCK,       /* wrlock (or clockwrlock, far) on a read- or write-held rwlock */
  AV_COND,         /* pthread_cond_wait (or clockwait, far) on a private cond + errorcheck mutex */
  AV_SEM,          /* sem_wait (or sem_clockwait, far) on a private semaphore of value 0 */
  AV_KINDS
};

struct av_arg {
  int kind;
  int timed;                 /* use the timed form with a far deadline */
  pthread_mutex_t* m;
  pthread_rwlock_t* rw;
  pthread_cond_t* c;
  sem_t* s;
  struct timespec far_rt;    /* absolute CLOCK_REALTIME deadline, seconds away */
  struct timespec far_mono;  /* absolute CLOCK_MONOTONIC deadline, seconds away */
  /* Written by the victim, read with __atomic builtins by the canceller. */
  int started;      /* set just before the blocking call (AV_COND: before locking) */
  int waiting;      /* AV_COND: set while holding m, just before the wait */
  int returned;     /* the blocking call returned (rc below) */
  int rc;           /* its result (errno value for sem_*) */
  int cleanup_ran;  /* the cleanup handler ran */
  int cleanup_rc;   /* AV_COND, AV_MUTEX_MAYBE: pthread_mutex_unlock's result in the cleanup */
  int pred;         /* AV_COND: the predicate, never set */
  int warmup;       /* take and release a private mutex, rwlock and semaphore first,
                       so the cancellation cannot land in a first-use set-up */
  int tid;          /* the victim's kernel thread id, set at its start */
};

const char* av_kind_name(int kind);
void* av_victim(void* arg);

#ifdef __cplusplus
}
#endif
