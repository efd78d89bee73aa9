/* tests/speed/sem_sleep_round_trip.c — N semaphore round trips in which
 * every sem_wait sleeps in the kernel and every sem_post wakes it: two
 * threads, two semaphores, and each side posts only once the other is asleep
 * (its /proc wchan names a futex wait). The four calls are each in a
 * function of their own, so that callgrind can count them alone
 * (--toggle-collect, sem_sleep_round_trip_test.sh): the sleep paths of
 * sem_wait and sem_post and everything they call, the futex system calls'
 * wrappers included, and nothing of the waiting for the other side.
 *
 *   sem_sleep_round_trip N     prints "rounds=N unforced=U": U waits found
 *                              their partner not asleep in time (0 expected)
 * Exit 77 when /proc/self/task/TID/wchan cannot be read. */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static sem_t g_a, g_b;
static long g_rounds;
static volatile pid_t g_pong_tid;
static pid_t g_ping_tid;
static long g_unforced;

/* 1 when `tid` sleeps in a futex wait, 0 when not, -1 when unreadable. */
static int asleep(pid_t tid) {
  char path[64], buf[64];
  snprintf(path, sizeof path, "/proc/self/task/%d/wchan", (int)tid);
  FILE* f = fopen(path, "r");
  if (f == NULL) return -1;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  return strncmp(buf, "futex", 5) == 0;
}

/* Polls with sched_yield: under valgrind only one thread runs at a time. */
static void until_asleep(pid_t tid) {
  for (long i = 0; i < 200000; ++i) {
    if (asleep(tid) == 1) return;
    sched_yield();
  }
  __atomic_add_fetch(&g_unforced, 1, __ATOMIC_RELAXED);
}

__attribute__((noinline)) static void ping_post(void) { sem_post(&g_a); }
__attribute__((noinline)) static void ping_wait(void) { sem_wait(&g_b); }
__attribute__((noinline)) static void pong_wait(void) { sem_wait(&g_a); }
__attribute__((noinline)) static void pong_post(void) { sem_post(&g_b); }

static void* pong(void* arg) {
  g_pong_tid = (pid_t)syscall(SYS_gettid);
  for (long i = 0; i < g_rounds; ++i) {
    pong_wait();
    until_asleep(g_ping_tid);
    pong_post();
  }
  return arg;
}

int main(int argc, char** argv) {
  g_rounds = argc > 1 ? atol(argv[1]) : 1000;
  g_ping_tid = (pid_t)syscall(SYS_gettid);
  if (asleep(g_ping_tid) < 0) {
    printf("SKIP: /proc/self/task/TID/wchan unreadable\n");
    return 77;
  }
  if (sem_init(&g_a, 0, 0) != 0 || sem_init(&g_b, 0, 0) != 0) return 1;
  pthread_t t;
  if (pthread_create(&t, NULL, pong, NULL) != 0) return 1;
  while (g_pong_tid == 0) sched_yield();
  for (long i = 0; i < g_rounds; ++i) {
    until_asleep(g_pong_tid);
    ping_post();
    ping_wait();
  }
  pthread_join(t, NULL);
  printf("rounds=%ld unforced=%ld\n", g_rounds, g_unforced);
  return 0;
}
