// tests/attribute/waits.c — a program that waits in each way `lockswap
// attribute` tells apart, one phase after the other (each about PHASE_MS):
//   mutex  — 4 threads on one pthread mutex, holding it across a short sleep
//   futex  — 4 threads on a lock of our own over syscall(SYS_futex)
//   malloc — 8 threads allocating and freeing in a loop (glibc's arena locks)
//   epoll  — one epoll_wait on an empty set with a 20 ms timeout, repeated
//   select — select(0, NULL, NULL, NULL, 1 ms), repeated (a spin-delay backoff)
// The functions are noinline and named so the test can find them as sites.
#define _GNU_SOURCE
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static int phase_ms = 600;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static atomic_int fword;
static atomic_int stop;
static long counter;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec / 1e9;
}

static void hold(void) {   // a short hold (~50 us): contention without spinning for ever
  struct timespec d = {0, 50000};
  nanosleep(&d, NULL);
}

__attribute__((noinline)) void attr_mutex_section(void) {
  pthread_mutex_lock(&mu);
  counter++;
  hold();
  pthread_mutex_unlock(&mu);
}

static void *mutex_worker(void *arg) {
  (void)arg;
  while (!atomic_load(&stop)) attr_mutex_section();
  return NULL;
}

// The three-state futex lock (Drepper, "Futexes are tricky"), syscall() direct.
__attribute__((noinline)) void attr_futex_lock(void) {
  int c = 0;
  if (atomic_compare_exchange_strong(&fword, &c, 1)) return;
  if (c != 2) c = atomic_exchange(&fword, 2);
  while (c != 0) {
    syscall(SYS_futex, &fword, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    c = atomic_exchange(&fword, 2);
  }
}

__attribute__((noinline)) void attr_futex_unlock(void) {
  if (atomic_fetch_sub(&fword, 1) != 1) {
    atomic_store(&fword, 0);
    syscall(SYS_futex, &fword, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
  }
}

static void *futex_worker(void *arg) {
  (void)arg;
  while (!atomic_load(&stop)) {
    attr_futex_lock();
    counter++;
    hold();
    attr_futex_unlock();
  }
  return NULL;
}

__attribute__((noinline)) void attr_malloc_churn(void) {
  void *p[64];
  for (int i = 0; i < 64; i++) p[i] = malloc(16 + (i * 37) % 4000);
  for (int i = 0; i < 64; i++) free(p[i]);
}

static void *malloc_worker(void *arg) {
  (void)arg;
  while (!atomic_load(&stop)) attr_malloc_churn();
  return NULL;
}

static void run_threads(void *(*fn)(void *), int n) {
  pthread_t t[16];
  atomic_store(&stop, 0);
  for (int i = 0; i < n; i++) pthread_create(&t[i], NULL, fn, NULL);
  struct timespec d = {phase_ms / 1000, (phase_ms % 1000) * 1000000L};
  nanosleep(&d, NULL);
  atomic_store(&stop, 1);
  for (int i = 0; i < n; i++) pthread_join(t[i], NULL);
}

__attribute__((noinline)) void attr_epoll_idle(void) {
  int ep = epoll_create1(0);
  struct epoll_event ev;
  double end = now() + phase_ms / 1000.0;
  while (now() < end) epoll_wait(ep, &ev, 1, 20);
  close(ep);
}

__attribute__((noinline)) void attr_select_delay(void) {
  double end = now() + phase_ms / 1000.0;
  while (now() < end) {
    struct timeval tv = {0, 1000};
    select(0, NULL, NULL, NULL, &tv);
  }
}

int main(int argc, char **argv) {
  if (argc > 1) phase_ms = atoi(argv[1]);
  run_threads(mutex_worker, 4);
  run_threads(futex_worker, 4);
  // M_ARENA_MAX 1: every thread on the main arena, so the arena lock is
  // contended as in a program with more threads than arenas.
  extern int mallopt(int, int);
  mallopt(-8 /* M_ARENA_MAX */, 1);
  run_threads(malloc_worker, 8);
  attr_epoll_idle();
  attr_select_delay();
  printf("counter=%ld\n", counter);
  return 0;
}
