/* tests/torture/victims.c — asynchronous-cancellation victims (see victims.h). */
#define _GNU_SOURCE
#include "victims.h"

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

const char* av_kind_name(int kind) {
  switch (kind) {
    case AV_MUTEX: return "mutex_lock";
    case AV_MUTEX_TIMED: return "mutex_clocklock";
    case AV_MUTEX_SPIN: return "mutex_lock(spinning holder)";
    case AV_MUTEX_MAYBE: return "mutex_lock(released before cancel)";
    case AV_RDLOCK: return "rwlock_rdlock";
    case AV_WRLOCK: return "rwlock_wrlock";
    case AV_COND: return "cond_wait";
    case AV_SEM: return "sem_wait";
  }
  return "?";
}

static void av_cleanup(void* p) {
  struct av_arg* a = (struct av_arg*)p;
  /* A cancelled condition waiter owns the mutex again when its cleanup
     handlers run (POSIX); a victim of AV_MUTEX_MAYBE may or may not own its
     errorcheck mutex: unlock answers 0 or EPERM, never anything else. */
  if (a->kind == AV_COND || a->kind == AV_MUTEX_MAYBE)
    __atomic_store_n(&a->cleanup_rc, pthread_mutex_unlock(a->m), __ATOMIC_SEQ_CST);
  __atomic_store_n(&a->cleanup_ran, 1, __ATOMIC_SEQ_CST);
}

static int blocking_call(struct av_arg* a) {
  switch (a->kind) {
    case AV_MUTEX:
    case AV_MUTEX_SPIN:
    case AV_MUTEX_MAYBE:
      return pthread_mutex_lock(a->m);
    case AV_MUTEX_TIMED:
      return pthread_mutex_clocklock(a->m, CLOCK_MONOTONIC, &a->far_mono);
    case AV_RDLOCK:
      return a->timed ? pthread_rwlock_timedrdlock(a->rw, &a->far_rt) : pthread_rwlock_rdlock(a->rw);
    case AV_WRLOCK:
      return a->timed ? pthread_rwlock_clockwrlock(a->rw, CLOCK_MONOTONIC, &a->far_mono)
                      : pthread_rwlock_wrlock(a->rw);
    case AV_SEM:
      if ((a->timed ? sem_clockwait(a->s, CLOCK_MONOTONIC, &a->far_mono) : sem_wait(a->s)) != 0) return errno;
      return 0;
  }
  return EINVAL;
}

static void warm_up(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
  sem_t s;
  pthread_mutex_lock(&m);
  pthread_mutex_unlock(&m);
  pthread_rwlock_rdlock(&rw);
  pthread_rwlock_unlock(&rw);
  pthread_rwlock_wrlock(&rw);
  pthread_rwlock_unlock(&rw);
  sem_init(&s, 0, 1);
  sem_trywait(&s);
  sem_post(&s);
  sem_destroy(&s);
  pthread_rwlock_destroy(&rw);
  pthread_mutex_destroy(&m);
}

void* av_victim(void* p) {
  struct av_arg* a = (struct av_arg*)p;
  volatile int rc = 0; /* live across the setjmp of pthread_cleanup_push */
  int old;
  __atomic_store_n(&a->tid, (int)syscall(SYS_gettid), __ATOMIC_SEQ_CST);
  if (a->warmup) warm_up();
  pthread_cleanup_push(av_cleanup, a);
  if (a->kind == AV_COND) {
    /* Deferred while taking the mutex: the canceller only cancels once it has
       locked the mutex itself with `waiting` set, i.e. while we are inside the
       wait. */
    __atomic_store_n(&a->started, 1, __ATOMIC_SEQ_CST);
    pthread_mutex_lock(a->m);
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old);
    __atomic_store_n(&a->waiting, 1, __ATOMIC_SEQ_CST);
    while (!__atomic_load_n(&a->pred, __ATOMIC_SEQ_CST)) {
      rc = a->timed ? pthread_cond_clockwait(a->c, a->m, CLOCK_MONOTONIC, &a->far_mono) : pthread_cond_wait(a->c, a->m);
      if (rc != 0) break;
    }
    pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &old);
  } else {
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old);
    __atomic_store_n(&a->started, 1, __ATOMIC_SEQ_CST);
    rc = blocking_call(a);
    pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, &old);
  }
  __atomic_store_n(&a->rc, rc, __ATOMIC_SEQ_CST);
  __atomic_store_n(&a->returned, 1, __ATOMIC_SEQ_CST);
  /* Returned (AV_MUTEX_MAYBE, a semaphore token posted before the
     cancellation, or an error): the canceller cancels in any case, so wait
     for it at cancellation points, with the object held; the cleanup handler
     releases what it covers and the canceller checks `returned`/`rc`. */
  for (;;) {
    struct timespec ms = {0, 1000000};
    pthread_testcancel();
    nanosleep(&ms, NULL);
  }
  pthread_cleanup_pop(0);
  return NULL;
}
