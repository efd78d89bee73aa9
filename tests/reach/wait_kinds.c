/* tests/reach/wait_kinds.c — one phase per kind of wait a statistics dump
 * tells apart (docs/statistics.md, "Waits"), each of a known length, for
 * check_wait_kinds.py to find in the dump:
 *
 *   mutex   a pthread mutex held 20 ms by one thread while another waits on
 *           it, 10 times: lockswap's own wait (wait_mutex_ns) under a native
 *           variant, invisible under glibc's (its futex is not syscall())
 *   futex   the same with a futex lock of the program's own, sleeping through
 *           syscall(SYS_futex, FUTEX_WAIT_PRIVATE): a `futex` wait site
 *   idle    epoll_wait on a descriptor that never becomes ready, 10 x 10 ms
 *   delay   select(0, NULL, NULL, NULL, 5 ms), 10 times, from a helper (the
 *           site's backtrace names its callers)
 *   cond    a condition wait signalled after 20 ms, 5 times
 *   malloc  two threads allocating for 50 ms (glibc's arena locks: not seen)
 *
 * Prints "phase <name> expected_ns=<n>" for each. The holders' own sleeps
 * are nanosleep (delay sites of their own, told apart by `call`). */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

enum { kRounds = 10, kHoldMs = 20, kIdleMs = 10, kDelayMs = 5, kCondRounds = 5, kCondMs = 20 };

static void sleep_ms(int ms) {
  struct timespec ts = {0, ms * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* ------------------------------------------------ a contended pthread mutex */

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static atomic_int g_turn;  /* round number the holder holds (odd: held) */

static void* mutex_holder(void* arg) {
  (void)arg;
  for (int r = 0; r < kRounds; ++r) {
    pthread_mutex_lock(&g_mutex);
    atomic_store(&g_turn, 2 * r + 1);
    sleep_ms(kHoldMs);
    pthread_mutex_unlock(&g_mutex);
    while (atomic_load(&g_turn) != 2 * r + 2) sleep_ms(1); /* the waiter had its turn */
  }
  return NULL;
}

static void mutex_phase(void) {
  pthread_t t;
  atomic_store(&g_turn, 0);
  pthread_create(&t, NULL, mutex_holder, NULL);
  for (int r = 0; r < kRounds; ++r) {
    while (atomic_load(&g_turn) != 2 * r + 1) sched_yield();
    pthread_mutex_lock(&g_mutex); /* waits about kHoldMs */
    pthread_mutex_unlock(&g_mutex);
    atomic_store(&g_turn, 2 * r + 2);
  }
  pthread_join(t, NULL);
  printf("phase mutex expected_ns=%lld\n", (long long)kRounds * kHoldMs * 1000000LL);
}

/* ------------------------------------- the program's own futex lock (syscall) */

static atomic_uint g_futex; /* 0 free, 1 locked, 2 locked with waiters */

static void futex_lock(void) {
  unsigned c = 0;
  if (atomic_compare_exchange_strong(&g_futex, &c, 1)) return;
  if (c != 2) c = atomic_exchange(&g_futex, 2);
  while (c != 0) {
    syscall(SYS_futex, &g_futex, FUTEX_WAIT_PRIVATE, 2, NULL, NULL, 0);
    c = atomic_exchange(&g_futex, 2);
  }
}

static void futex_unlock(void) {
  if (atomic_exchange(&g_futex, 0) == 2) syscall(SYS_futex, &g_futex, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

static void* futex_holder(void* arg) {
  (void)arg;
  for (int r = 0; r < kRounds; ++r) {
    futex_lock();
    atomic_store(&g_turn, 2 * r + 1);
    sleep_ms(kHoldMs);
    futex_unlock();
    while (atomic_load(&g_turn) != 2 * r + 2) sleep_ms(1);
  }
  return NULL;
}

static void futex_phase(void) {
  pthread_t t;
  atomic_store(&g_turn, 0);
  pthread_create(&t, NULL, futex_holder, NULL);
  for (int r = 0; r < kRounds; ++r) {
    while (atomic_load(&g_turn) != 2 * r + 1) sched_yield();
    futex_lock();
    futex_unlock();
    atomic_store(&g_turn, 2 * r + 2);
  }
  pthread_join(t, NULL);
  printf("phase futex expected_ns=%lld\n", (long long)kRounds * kHoldMs * 1000000LL);
}

/* ---------------------------------------------------------- idle, delay */

static void idle_phase(void) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  int ev = eventfd(0, EFD_CLOEXEC);
  struct epoll_event e = {.events = EPOLLIN, .data.fd = ev};
  epoll_ctl(ep, EPOLL_CTL_ADD, ev, &e);
  for (int i = 0; i < kRounds; ++i) {
    struct epoll_event out;
    if (epoll_wait(ep, &out, 1, kIdleMs) != 0) {
      fprintf(stderr, "epoll_wait: unexpected event\n");
      exit(1);
    }
  }
  close(ev);
  close(ep);
  printf("phase idle expected_ns=%lld\n", (long long)kRounds * kIdleMs * 1000000LL);
}

/* A hand-made backoff: the sleep's site is here, its callers in `bt`. */
__attribute__((noinline)) static void backoff(void) {
  struct timeval tv = {0, kDelayMs * 1000};
  select(0, NULL, NULL, NULL, &tv);
  __asm__ volatile("" ::: "memory"); /* keep the call a call, not a tail jump */
}

__attribute__((noinline)) static void delay_phase(void) {
  for (int i = 0; i < kRounds; ++i) backoff();
  printf("phase delay expected_ns=%lld\n", (long long)kRounds * kDelayMs * 1000000LL);
}

/* ------------------------------------------------------------------ cond */

static pthread_mutex_t g_cond_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static int g_signalled;

static void* cond_signaller(void* arg) {
  (void)arg;
  for (int r = 1; r <= kCondRounds; ++r) {
    sleep_ms(kCondMs);
    pthread_mutex_lock(&g_cond_mutex);
    g_signalled = r;
    pthread_cond_signal(&g_cond);
    pthread_mutex_unlock(&g_cond_mutex);
    while (__atomic_load_n(&g_signalled, __ATOMIC_ACQUIRE) != -r) sleep_ms(1);
  }
  return NULL;
}

static void cond_phase(void) {
  pthread_t t;
  pthread_create(&t, NULL, cond_signaller, NULL);
  for (int r = 1; r <= kCondRounds; ++r) {
    pthread_mutex_lock(&g_cond_mutex);
    while (g_signalled != r) pthread_cond_wait(&g_cond, &g_cond_mutex);
    __atomic_store_n(&g_signalled, -r, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&g_cond_mutex);
  }
  pthread_join(t, NULL);
  printf("phase cond expected_ns=%lld\n", (long long)kCondRounds * kCondMs * 1000000LL);
}

/* ---------------------------------------------------------------- malloc */

static atomic_int g_stop;

static void* allocator(void* arg) {
  uintptr_t sum = (uintptr_t)arg;
  while (!atomic_load(&g_stop)) {
    void* p[16];
    for (int i = 0; i < 16; ++i) p[i] = malloc(64 + 16 * (size_t)i);
    for (int i = 0; i < 16; ++i) {
      sum += (uintptr_t)p[i];
      free(p[i]);
    }
  }
  return (void*)sum;
}

static void malloc_phase(void) {
  pthread_t t[2];
  atomic_store(&g_stop, 0);
  for (int i = 0; i < 2; ++i) pthread_create(&t[i], NULL, allocator, NULL);
  sleep_ms(50);
  atomic_store(&g_stop, 1);
  for (int i = 0; i < 2; ++i) pthread_join(t[i], NULL);
  printf("phase malloc expected_ns=0\n");
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  mutex_phase();
  futex_phase();
  idle_phase();
  delay_phase();
  cond_phase();
  malloc_phase();
  return 0;
}
