/* tests/behaviour/cancel_c.c — cancellation inside pthread_cond_*wait from C.
 *
 * In C, pthread_cleanup_push is a setjmp buffer registered with glibc (built
 * without -fexceptions) or an __attribute__((cleanup)) frame (with
 * -fexceptions): both are exercised by building this file twice. The forced
 * unwind started inside lockswap's wait must run lockswap's own cleanup
 * (re-taking the mutex) before the handler registered here runs.
 *
 * Exit status 0 when every check passed; failures are listed on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "c_cancel_util.h"
enum mode { WAIT, TIMEDWAIT, CLOCKWAIT_MONO, CLOCKWAIT_REAL, NMODES };
static const char* const mode_names[] = {"wait", "timedwait", "clockwait-monotonic", "clockwait-realtime"};

struct ctx {
  enum mode mode;
  pthread_mutex_t m; /* errorcheck */
  pthread_cond_t c;
  int ready, go;     /* under m */
  sem_t started, cancel_sent;
  volatile int handler_ran, handler_unlock_rc, handler_saw_go, waits_returned, last_wait_rc;
  volatile int unlock_after_wait_rc;
};

static int wait_once(struct ctx* x) {
  struct timespec d;
  switch (x->mode) {
    case WAIT:
      return pthread_cond_wait(&x->c, &x->m);
    case TIMEDWAIT:
      d = in_ms(CLOCK_REALTIME, 60000);
      return pthread_cond_timedwait(&x->c, &x->m, &d);
    case CLOCKWAIT_MONO:
      d = in_ms(CLOCK_MONOTONIC, 60000);
      return pthread_cond_clockwait(&x->c, &x->m, CLOCK_MONOTONIC, &d);
    default:
      d = in_ms(CLOCK_REALTIME, 60000);
      return pthread_cond_clockwait(&x->c, &x->m, CLOCK_REALTIME, &d);
  }
}

static void handler(void* p) {
  struct ctx* x = p;
  x->handler_saw_go = x->go;
  x->handler_unlock_rc = pthread_mutex_unlock(&x->m);
  x->handler_ran = 1;
}

static void wait_until_go(struct ctx* x) {
  while (!x->go) {
    x->last_wait_rc = wait_once(x);
    x->waits_returned++;
  }
}

/* A waiter's life, holding m with `handler` as its cleanup handler:
   before(x), the wait until go, after(x) (either may be NULL). */
static void wait_with_cleanup(struct ctx* x, void (*before)(struct ctx*), void (*after)(struct ctx*)) {
  pthread_mutex_lock(&x->m);
  pthread_cleanup_push(handler, x);
  if (before != NULL) before(x);
  wait_until_go(x);
  if (after != NULL) after(x);
  pthread_cleanup_pop(1);
}

static void set_ready(struct ctx* x) { x->ready = 1; }

static void* blocked_waiter(void* p) {
  wait_with_cleanup(p, set_ready, NULL);
  return NULL;
}

/* Started with cancellation disabled; enables it (not a cancellation point)
   once the request is sent, so the request is pending when the wait starts. */
static void enable_once_cancel_sent(struct ctx* x) {
  sem_post(&x->started);
  while (sem_wait(&x->cancel_sent) != 0) {
  }
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
}

static void* pending_waiter(void* p) {
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  wait_with_cleanup(p, enable_once_cancel_sent, NULL);
  return NULL;
}

/* After a wait with cancellation disabled: the mutex is held (unlocking it
   works), and the request still pending is acted on at pthread_testcancel. */
static void check_held_then_testcancel(struct ctx* x) {
  x->unlock_after_wait_rc = pthread_mutex_unlock(&x->m);
  pthread_mutex_lock(&x->m);
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, NULL);
  pthread_testcancel();
}

static void* disabled_waiter(void* p) {
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, NULL);
  wait_with_cleanup(p, set_ready, check_held_then_testcancel);
  return (void*)1;
}

static void setup(struct ctx* x, enum mode mode) {
  memset(x, 0, sizeof *x);
  x->mode = mode;
  x->handler_unlock_rc = x->last_wait_rc = x->unlock_after_wait_rc = -1;
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
  pthread_mutex_init(&x->m, &a);
  pthread_mutexattr_destroy(&a);
  pthread_cond_init(&x->c, NULL);
  sem_init(&x->started, 0, 0);
  sem_init(&x->cancel_sent, 0, 0);
}

static void teardown(struct ctx* x) {
  CHECK(pthread_mutex_trylock(&x->m) == 0, "mutex left locked after the cancellation");
  CHECK(pthread_mutex_unlock(&x->m) == 0, "unlock");
  CHECK(pthread_cond_signal(&x->c) == 0, "signal after cancellation");
  CHECK(pthread_cond_destroy(&x->c) == 0, "cond destroy");
  CHECK(pthread_mutex_destroy(&x->m) == 0, "mutex destroy");
  sem_destroy(&x->started);
  sem_destroy(&x->cancel_sent);
}

static void lock_when_ready(struct ctx* x) {
  for (;;) {
    pthread_mutex_lock(&x->m);
    if (x->ready) return;
    pthread_mutex_unlock(&x->m);
    usleep(1000);
  }
}

/* Sets x up for `mode` and starts `waiter` on it, as scenario `name`. */
static pthread_t start_scenario(struct ctx* x, const char* name, enum mode mode, void* (*waiter)(void*)) {
  pthread_t t;
  g_scenario = name;
  setup(x, mode);
  pthread_create(&t, NULL, waiter, x);
  return t;
}

/* Joins the waiter: cancelled (else `not_cancelled`), with its cleanup
   handler run while it held the mutex again. */
static void expect_cancelled(struct ctx* x, pthread_t t, const char* not_cancelled) {
  CHECK(join_bounded(t) == PTHREAD_CANCELED, "%s", not_cancelled);
  CHECK(x->handler_ran, "cleanup handler did not run");
  CHECK(x->handler_unlock_rc == 0, "handler ran without the mutex (unlock rc %d)", x->handler_unlock_rc);
}

static void cancel_while_blocked(enum mode mode) {
  struct ctx x;
  pthread_t t = start_scenario(&x, "cancel-while-blocked", mode, blocked_waiter);
  lock_when_ready(&x);
  pthread_mutex_unlock(&x.m);
  usleep(20000); /* let it fall asleep in the wait */
  pthread_cancel(t);
  expect_cancelled(&x, t, "thread not cancelled");
  teardown(&x);
}

static void cancel_pending(enum mode mode) {
  struct ctx x;
  pthread_t t = start_scenario(&x, "cancel-pending-before-wait", mode, pending_waiter);
  while (sem_wait(&x.started) != 0) {
  }
  pthread_cancel(t);
  sem_post(&x.cancel_sent);
  expect_cancelled(&x, t, "thread not cancelled");
  CHECK(x.waits_returned == 0, "the wait returned %d times instead of acting on the request", x.waits_returned);
  teardown(&x);
}

static void cancel_disabled(enum mode mode) {
  struct ctx x;
  pthread_t t = start_scenario(&x, "cancel-disabled", mode, disabled_waiter);
  lock_when_ready(&x);
  pthread_mutex_unlock(&x.m);
  pthread_cancel(t);
  usleep(30000);
  CHECK(!x.handler_ran, "cancellation acted on while disabled");
  pthread_mutex_lock(&x.m);
  x.go = 1;
  pthread_cond_signal(&x.c);
  pthread_mutex_unlock(&x.m);
  expect_cancelled(&x, t, "pending request not acted on at pthread_testcancel");
  CHECK(x.last_wait_rc == 0, "wait returned %d", x.last_wait_rc);
  CHECK(x.unlock_after_wait_rc == 0, "wait returned without the mutex (unlock rc %d)", x.unlock_after_wait_rc);
  CHECK(x.handler_saw_go, "handler ran before the signal");
  teardown(&x);
}

int main(void) {
  alarm(120); /* a hang fails the test (SIGALRM) instead of blocking ctest */
  for (int mode = 0; mode < NMODES; ++mode) {
    g_mode_name = mode_names[mode];
    cancel_while_blocked((enum mode)mode);
    cancel_pending((enum mode)mode);
    cancel_disabled((enum mode)mode);
  }
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "cancel_c: all checks passed\n");
  return 0;
}
