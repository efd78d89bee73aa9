// tests/stats/stats_guest.c — a host program for tests/stats/stats_output.sh:
// what lockswap's statistics output does next to a program that closes its
// stderr, runs the statistics signal on a small alternate stack or raises
// it in a burst. Every mode takes a few locks, prints one line on stdout
// and exits normally (so the exit dump runs).
//
//   stats_guest                        locks, "main ran"
//   stats_guest host-stderr FILE       closes fd 2, opens FILE there (the
//                                      host's own file), writes "host" to it
//   stats_guest altstack SIG           raises SIG on an alternate signal stack
//                                      with a guard page below; prints how
//                                      much of it the handler used
//   stats_guest raise SIG N            raises SIG N times in a row
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static volatile long g_sink;

static void some_locking(void) {
  for (int i = 0; i < 100; ++i) {
    pthread_mutex_lock(&g_mutex);
    g_sink = g_sink + 1;
    pthread_mutex_unlock(&g_mutex);
  }
}

static int signal_number(const char* name) {
  if (strcmp(name, "USR1") == 0) return SIGUSR1;
  if (strcmp(name, "USR2") == 0) return SIGUSR2;
  return atoi(name);
}

static int host_stderr(const char* path) {
  close(2);
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd != 2) {
    printf("host file opened as fd %d, not 2\n", fd);
    return 1;
  }
  (void)!write(2, "host\n", 5);
  some_locking();
  printf("main ran\n");
  return 0;
}

enum { kAltStackBytes = 16384, kPage = 4096 };

// The alternate stack lies above a PROT_NONE page: a handler that needs more
// than kAltStackBytes faults instead of writing past it. Filled with a
// pattern first; the bytes no longer holding it afterwards were used.
static int altstack(int sig) {
  char* map = mmap(NULL, kPage + kAltStackBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED || mprotect(map, kPage, PROT_NONE) != 0) return 1;
  char* stack = map + kPage;
  memset(stack, 0xa5, kAltStackBytes);
  stack_t ss = {.ss_sp = stack, .ss_size = kAltStackBytes, .ss_flags = 0};
  if (sigaltstack(&ss, NULL) != 0) return 1;
  some_locking();
  raise(sig);
  size_t untouched = 0;
  while (untouched < kAltStackBytes && (unsigned char)stack[untouched] == 0xa5) ++untouched;
  printf("altstack_used=%zu of %d\n", kAltStackBytes - untouched, kAltStackBytes);
  return 0;
}

static int raise_many(int sig, int n) {
  some_locking();
  for (int i = 0; i < n; ++i) raise(sig);
  printf("raised %d\n", n);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 3 && strcmp(argv[1], "host-stderr") == 0) return host_stderr(argv[2]);
  if (argc == 3 && strcmp(argv[1], "altstack") == 0) return altstack(signal_number(argv[2]));
  if (argc == 4 && strcmp(argv[1], "raise") == 0) return raise_many(signal_number(argv[2]), atoi(argv[3]));
  some_locking();
  printf("main ran\n");
  return 0;
}
