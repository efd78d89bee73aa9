/* tests/behaviour/sem_peer.c — the "unrelated process" of sem_test's
 * SemUnrelatedProcess tests: a separate program (spawned, not forked, so it
 * shares no address space with the test) that maps the same memory by name
 * and ping-pongs on two process-shared semaphores the test initialised there.
 *
 *   sem_peer shm <shm_open name> <round trips> [post delay us]
 *   sem_peer file <path> <round trips> [post delay us]
 *
 * Layout (kept in sync with sem_test.cpp): `ping` at offset 0, `pong` at
 * offset 64 of a 4096-byte mapping. Each round trip: wait on ping, post pong.
 * Finally one more wait on ping (the test posts it once it sees this process
 * asleep), so a wakeup crossing from the test to a sleeping peer is covered.
 * With a post delay the peer sleeps that long before each post of pong, so
 * the test is asleep on pong when the post comes.
 *
 * It runs under whatever LD_PRELOAD / LOCKSWAP_SEM it inherited, or none
 * (glibc's own semaphore, sharing the semaphores with a lockswap process).
 *
 * Exit status 0 when every step succeeded; failures are listed on stderr.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

enum { MAP_BYTES = 4096, PONG_OFFSET = 64 };

static int wait_bounded(sem_t* s, int round, const char* what) {
  struct timespec d;
  int rc;
  clock_gettime(CLOCK_MONOTONIC, &d);
  d.tv_sec += 20;
  /* Rotate through every kind of wait. */
  switch (round % 3) {
    case 0:
      rc = sem_clockwait(s, CLOCK_MONOTONIC, &d);
      break;
    case 1:
      clock_gettime(CLOCK_REALTIME, &d);
      d.tv_sec += 20;
      rc = sem_timedwait(s, &d);
      break;
    default:
      rc = sem_wait(s); /* bounded by alarm() */
      break;
  }
  if (rc != 0) fprintf(stderr, "sem_peer: round %d: %s: %s\n", round, what, strerrorname_np(errno));
  return rc;
}

int main(int argc, char** argv) {
  if (argc != 4 && argc != 5) {
    fprintf(stderr, "usage: %s shm|file <name or path> <round trips> [post delay us]\n", argv[0]);
    return 2;
  }
  alarm(60);
  int rounds = atoi(argv[3]);
  useconds_t post_delay_us = argc == 5 ? (useconds_t)atoi(argv[4]) : 0;
  int fd = strcmp(argv[1], "shm") == 0 ? shm_open(argv[2], O_RDWR, 0) : open(argv[2], O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    fprintf(stderr, "sem_peer: cannot open %s: %s\n", argv[2], strerrorname_np(errno));
    return 3;
  }
  char* mem = mmap(NULL, MAP_BYTES, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mem == MAP_FAILED) {
    fprintf(stderr, "sem_peer: mmap: %s\n", strerrorname_np(errno));
    return 3;
  }
  sem_t* ping = (sem_t*)mem;
  sem_t* pong = (sem_t*)(mem + PONG_OFFSET);
  int v = -1;
  if (sem_getvalue(pong, &v) != 0 || v < 0) {
    fprintf(stderr, "sem_peer: sem_getvalue(pong) = %d (%s)\n", v, strerrorname_np(errno));
    return 1;
  }
  for (int i = 0; i < rounds; ++i) {
    if (wait_bounded(ping, i, "wait on ping") != 0) return 1;
    if (post_delay_us != 0) usleep(post_delay_us);
    if (sem_post(pong) != 0) {
      fprintf(stderr, "sem_peer: round %d: sem_post(pong): %s\n", i, strerrorname_np(errno));
      return 1;
    }
  }
  if (wait_bounded(ping, 2, "final wait on ping") != 0) return 1;
  if (sem_getvalue(ping, &v) != 0 || v != 0) {
    fprintf(stderr, "sem_peer: ping left at %d\n", v);
    return 1;
  }
  munmap(mem, MAP_BYTES);
  return 0;
}
