/* tests/behaviour/alloc_free.c — no lock, condition or semaphore call
 * allocates, however many pthread keys the program made before, and a
 * program whose allocator serialises on a pthread mutex still runs.
 *
 * The program replaces malloc and its family (forwarding to glibc's
 * __libc_* entry points, which glibc's own internal calls reach too) and
 * counts every call made while one of its threads is inside an interposed
 * call. Each phase runs in a forked child that first makes K keys (0, 31,
 * 32, 1000: glibc keeps keys 0..31 in the thread descriptor and callocs a
 * block for a thread's first use of a later one) and then starts fresh
 * threads, whose first calls register them inside lockswap. The last phases
 * re-execute the program with 40 keys made before lockswap's constructor
 * (alloc_early_keys.c), once counting and once with an allocator that takes
 * a pthread mutex around every call. Exit 0 when no call allocated. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include "tests/common/alloc_count.h"

extern int alloc_early_keys_made(void); /* alloc_early_keys.c */

/* Every call below is an interposed one, made with t_inside raised. */
#define INSIDE(call) COUNT_INSIDE(call)

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t g_rwlock = PTHREAD_RWLOCK_INITIALIZER;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static sem_t g_sem;
static mtx_t g_mtx;
static cnd_t g_cnd;

static struct timespec soon(void) {
  struct timespec t;
  clock_gettime(CLOCK_REALTIME, &t);
  t.tv_nsec += 200000;
  if (t.tv_nsec >= 1000000000) {
    t.tv_sec++;
    t.tv_nsec -= 1000000000;
  }
  return t;
}

/* A fresh thread's calls: the first ones register it inside lockswap; the
 * shared objects make the later ones contend with the other threads. */
static void* worker(void* arg) {
  (void)arg;
  for (int i = 0; i < 200; ++i) {
    INSIDE(pthread_mutex_lock(&g_mutex));
    INSIDE(pthread_mutex_unlock(&g_mutex));
    INSIDE(pthread_rwlock_rdlock(&g_rwlock));
    INSIDE(pthread_rwlock_unlock(&g_rwlock));
    INSIDE(pthread_rwlock_wrlock(&g_rwlock));
    INSIDE(pthread_rwlock_unlock(&g_rwlock));
    INSIDE(sem_post(&g_sem));
    INSIDE(sem_wait(&g_sem));
    INSIDE(mtx_lock(&g_mtx));
    INSIDE(mtx_unlock(&g_mtx));
    if (i % 50 == 0) {
      struct timespec t = soon();
      INSIDE(pthread_mutex_lock(&g_mutex));
      INSIDE(pthread_cond_timedwait(&g_cond, &g_mutex, &t));
      INSIDE(pthread_cond_broadcast(&g_cond));
      INSIDE(pthread_mutex_unlock(&g_mutex));
      t = soon();
      INSIDE(mtx_lock(&g_mtx));
      INSIDE(cnd_timedwait(&g_cnd, &g_mtx, &t));
      INSIDE(cnd_signal(&g_cnd));
      INSIDE(mtx_unlock(&g_mtx));
    }
  }
  return NULL;
}

/* Rounds of four fresh threads; the count of allocations inside calls. */
static long run_threads(void) {
  sem_init(&g_sem, 0, 0);
  mtx_init(&g_mtx, mtx_plain);
  cnd_init(&g_cnd);
  for (int round = 0; round < 3; ++round) {
    pthread_t t[4];
    for (int i = 0; i < 4; ++i)
      if (pthread_create(&t[i], NULL, worker, NULL) != 0) return -1;
    for (int i = 0; i < 4; ++i) pthread_join(t[i], NULL);
  }
  return atomic_load(&g_inside_allocs);
}

static int phase(int keys, const char* when) {
  for (int i = alloc_early_keys_made(); i < keys; ++i) {
    pthread_key_t k;
    if (pthread_key_create(&k, NULL) != 0) {
      fprintf(stderr, "alloc_free: could not make key %d\n", i);
      return 3;
    }
  }
  long n = run_threads();
  fprintf(stderr, "alloc_free: %d keys made %s%s: %ld allocator calls inside lock calls\n", keys, when,
          g_serialise ? ", allocator serialised on a pthread mutex" : "", n);
  return n == 0 ? 0 : 1;
}

static int in_child(int keys) {
  pid_t pid = fork();
  if (pid == 0) _exit(phase(keys, "in main"));
  int status;
  if (waitpid(pid, &status, 0) != pid) return 4;
  if (WIFSIGNALED(status)) fprintf(stderr, "alloc_free: %d keys: killed by signal %d\n", keys, WTERMSIG(status));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 5;
}

static int reexec_with_early_keys(const char* self, const char* mode) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv("ALLOC_TEST_EARLY_KEYS", "40", 1);
    execl(self, self, mode, (char*)NULL);
    _exit(6);
  }
  int status;
  if (waitpid(pid, &status, 0) != pid) return 4;
  if (WIFSIGNALED(status)) fprintf(stderr, "alloc_free: %s: killed by signal %d\n", mode, WTERMSIG(status));
  return WIFEXITED(status) ? WEXITSTATUS(status) : 5;
}

int main(int argc, char** argv) {
  if (argc > 1) {  /* a re-executed phase, 40 keys made before lockswap's constructor */
    g_serialise = strcmp(argv[1], "serialised") == 0;
    if (alloc_early_keys_made() != 40) {
      fprintf(stderr, "alloc_free: the early library made %d keys, not 40\n", alloc_early_keys_made());
      return 7;
    }
    return phase(40, "before lockswap's constructor");
  }
  static const int kKeys[] = {0, 31, 32, 1000};
  int failed = 0;
  for (size_t i = 0; i < sizeof kKeys / sizeof kKeys[0]; ++i) failed |= in_child(kKeys[i]) != 0;
  failed |= reexec_with_early_keys("/proc/self/exe", "counted") != 0;
  failed |= reexec_with_early_keys("/proc/self/exe", "serialised") != 0;
  return failed;
}
