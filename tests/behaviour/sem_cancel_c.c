/* tests/behaviour/sem_cancel_c.c — cancellation inside sem_wait,
 * sem_timedwait and sem_clockwait from C.
 *
 * In C, pthread_cleanup_push is a setjmp buffer registered with glibc (built
 * without -fexceptions) or an __attribute__((cleanup)) frame (with
 * -fexceptions): both are exercised by building this file twice. The cleanup
 * handler registered here must run, and the semaphore must stay consistent:
 * no unit lost or invented, a later post reaches a later waiter.
 *
 * No semaphore is used for coordination: the test thread polls atomics and
 * /proc to see the waiter asleep.
 *
 * Exit status 0 when every check passed; failures are listed on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../common/task_state.h"
#include "c_cancel_util.h"
enum mode { WAIT, TIMEDWAIT, CLOCKWAIT_MONO, CLOCKWAIT_REAL, NMODES };
static const char* const mode_names[] = {"sem_wait", "sem_timedwait", "sem_clockwait-monotonic",
                                         "sem_clockwait-realtime"};

struct ctx {
  enum mode mode;
  int async;
  sem_t s;
  int tid;              /* atomic */
  int handler_ran;      /* atomic */
  int wait_returned;    /* atomic */
  int wait_rc;          /* atomic */
};

static int wait_once(sem_t* s, enum mode m) {
  struct timespec d;
  switch (m) {
    case WAIT:
      return sem_wait(s);
    case TIMEDWAIT:
      d = in_ms(CLOCK_REALTIME, 60000);
      return sem_timedwait(s, &d);
    case CLOCKWAIT_MONO:
      d = in_ms(CLOCK_MONOTONIC, 60000);
      return sem_clockwait(s, CLOCK_MONOTONIC, &d);
    default:
      d = in_ms(CLOCK_REALTIME, 60000);
      return sem_clockwait(s, CLOCK_REALTIME, &d);
  }
}

static int load(int* p) { return __atomic_load_n(p, __ATOMIC_SEQ_CST); }
static void store(int* p, int v) { __atomic_store_n(p, v, __ATOMIC_SEQ_CST); }

static void handler(void* p) { store(&((struct ctx*)p)->handler_ran, 1); }

static void* waiter(void* p) {
  struct ctx* x = p;
  if (x->async) pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, NULL);
  store(&x->tid, gettid());
  int rc;
  pthread_cleanup_push(handler, x);
  rc = wait_once(&x->s, x->mode);
  if (x->async) pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, NULL);
  store(&x->wait_rc, rc);
  store(&x->wait_returned, 1);
  pthread_cleanup_pop(0);
  pthread_testcancel();
  return (void*)1;
}

/* Bounded: until the thread has started and sleeps in the kernel (not asserted). */
static void settle(struct ctx* x) {
  for (int i = 0; i < 2000 && load(&x->tid) == 0; ++i) usleep(1000);
  for (int i = 0; i < 2000; ++i) {
    if (lstest_thread_state(load(&x->tid)) == 'S') {
      usleep(2000);
      if (lstest_thread_state(load(&x->tid)) == 'S') return;
    }
    usleep(1000);
  }
}

static int value_of(sem_t* s) {
  int v = -12345;
  sem_getvalue(s, &v);
  return v;
}

/* One post reaches a new sleeping waiter; nothing left over. */
static void check_consistent(struct ctx* x) {
  CHECK(value_of(&x->s) == 0, "value %d after the cancellation, expected 0", value_of(&x->s));
  CHECK(sem_trywait(&x->s) == -1 && errno == EAGAIN, "sem_trywait did not fail with EAGAIN");
  CHECK(sem_post(&x->s) == 0, "sem_post");
  CHECK(sem_trywait(&x->s) == 0, "sem_trywait after a post");
  /* Wake a later waiter of the same kind on the same semaphore. */
  store(&x->tid, 0);
  store(&x->wait_returned, 0);
  store(&x->handler_ran, 0);
  x->async = 0;
  pthread_t t;
  pthread_create(&t, NULL, waiter, x);
  settle(x);
  CHECK(sem_post(&x->s) == 0, "sem_post to a later waiter");
  void* ret = join_bounded(t);
  CHECK(ret == (void*)1, "the later waiter did not return normally");
  CHECK(load(&x->wait_returned) && load(&x->wait_rc) == 0, "the later waiter's wait failed (%d)", load(&x->wait_rc));
  CHECK(value_of(&x->s) == 0, "value %d at the end, expected 0", value_of(&x->s));
}

static void cancel_sleeping(enum mode m, int async) {
  struct ctx x;
  memset(&x, 0, sizeof x);
  x.mode = m;
  x.async = async;
  g_scenario = async ? "asynchronous cancel while asleep" : "deferred cancel while asleep";
  sem_init(&x.s, 0, 0);
  pthread_t t;
  pthread_create(&t, NULL, waiter, &x);
  settle(&x);
  pthread_cancel(t);
  void* ret = join_bounded(t);
  CHECK(ret == PTHREAD_CANCELED, "not cancelled");
  CHECK(load(&x.handler_ran), "cleanup handler did not run");
  CHECK(!load(&x.wait_returned), "the wait returned %d", load(&x.wait_rc));
  check_consistent(&x);
  sem_destroy(&x.s);
}

/* sem_wait acts on a request pending at entry even with a unit available,
 * and leaves the unit there. */
static void* pending_waiter(void* p) {
  struct ctx* x = p;
  pthread_cleanup_push(handler, x);
  pthread_cancel(pthread_self());
  store(&x->wait_rc, sem_wait(&x->s));
  store(&x->wait_returned, 1);
  pthread_cleanup_pop(0);
  return (void*)1;
}

static void cancel_pending_at_sem_wait(void) {
  struct ctx x;
  memset(&x, 0, sizeof x);
  g_mode_name = "sem_wait";
  g_scenario = "cancel pending at entry, a unit available";
  sem_init(&x.s, 0, 1);
  pthread_t t;
  pthread_create(&t, NULL, pending_waiter, &x);
  void* ret = join_bounded(t);
  CHECK(ret == PTHREAD_CANCELED, "not cancelled");
  CHECK(load(&x.handler_ran), "cleanup handler did not run");
  CHECK(value_of(&x.s) == 1, "value %d, expected the unit to stay", value_of(&x.s));
  sem_destroy(&x.s);
}

int main(void) {
  alarm(120);
  for (int m = 0; m < NMODES; ++m) {
    g_mode_name = mode_names[m];
    cancel_sleeping((enum mode)m, 0);
    cancel_sleeping((enum mode)m, 1);
  }
  cancel_pending_at_sem_wait();
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  printf("all semaphore cancellation checks passed\n");
  return 0;
}
