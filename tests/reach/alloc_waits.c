/* tests/reach/alloc_waits.c — the interposed syscall() and the timed waits
 * allocate nothing, with statistics on (the first wait at a site inserts it
 * into the wait table, and a delay site's first wait takes its backtrace)
 * and off. The program replaces malloc and its family (forwarding to
 * glibc's __libc_* entry points: tests/common/alloc_count.h) and
 * counts every call made while it is inside one of these calls; each call
 * is made twice, from two sites. Exit 0 when nothing allocated. */
#define _GNU_SOURCE
#include <errno.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/select.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/alloc_count.h"

#define INSIDE(what, call)                                              \
  do {                                                                  \
    long before = atomic_load(&g_inside_allocs);                        \
    t_inside = 1;                                                       \
    (void)(call);                                                       \
    t_inside = 0;                                                       \
    long n = atomic_load(&g_inside_allocs) - before;                    \
    printf("%-24s %ld allocation(s)\n", what, n);                       \
  } while (0)

static int g_word = 1;
static pthread_mutex_t g_m = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_c = PTHREAD_COND_INITIALIZER;

__attribute__((noinline)) static void round_of_waits(void) {
  struct timespec ms = {0, 1000000L}, zero = {0, 0};
  struct timeval tv = {0, 1000};
  INSIDE("syscall futex EAGAIN", syscall(SYS_futex, &g_word, FUTEX_WAIT_PRIVATE, 0, NULL, NULL, 0));
  INSIDE("syscall futex timeout", syscall(SYS_futex, &g_word, FUTEX_WAIT_PRIVATE, 1, &ms, NULL, 0));
  INSIDE("syscall getpid", syscall(SYS_getpid));
  INSIDE("select, no descriptors", select(0, NULL, NULL, NULL, &tv));
  INSIDE("poll, no descriptors", poll(NULL, 0, 1));
  struct pollfd p = {.fd = 0, .events = 0};
  INSIDE("poll, one descriptor", poll(&p, 1, 1));
  INSIDE("nanosleep", nanosleep(&ms, NULL));
  INSIDE("clock_nanosleep", clock_nanosleep(CLOCK_MONOTONIC, 0, &ms, NULL));
  int ep = epoll_create1(EPOLL_CLOEXEC);
  struct epoll_event e;
  INSIDE("epoll_wait", epoll_wait(ep, &e, 1, 1));
  close(ep);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  INSIDE("sigtimedwait", sigtimedwait(&set, NULL, &zero));
  struct timespec abs;
  clock_gettime(CLOCK_REALTIME, &abs);
  abs.tv_nsec += 1000000L;
  if (abs.tv_nsec >= 1000000000L) {
    abs.tv_sec += 1;
    abs.tv_nsec -= 1000000000L;
  }
  pthread_mutex_lock(&g_m);
  INSIDE("pthread_cond_timedwait", pthread_cond_timedwait(&g_c, &g_m, &abs));
  pthread_mutex_unlock(&g_m);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGUSR2);
  pthread_sigmask(SIG_BLOCK, &set, NULL);
  round_of_waits(); /* first use of every site */
  round_of_waits(); /* and again */
  long total = atomic_load(&g_inside_allocs);
  printf("%ld allocation(s) inside the waits\n", total);
  return total == 0 ? 0 : 1;
}
