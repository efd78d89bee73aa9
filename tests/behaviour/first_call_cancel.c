/* A lock call is not a cancellation point, not even the first one.

   The first use of a lock (or of any lock of a kind) in a process may run
   lazy set-up inside lockswap: an arena mapped, a system file read, a thread
   record attached. glibc acts on a pending deferred cancellation inside
   open(2), read(2), close(2) and many more, so set-up that calls them would
   cancel a thread in the middle of a lock call, where glibc never does (the
   torture caught this once under percid: the arena's first use read
   /sys/devices/system/cpu/possible with open/read).

   With no argument the program runs itself once per call in kCalls, each in a
   fresh process (exec), where that call is the process's first lock call,
   made by a new thread with a deferred cancellation already pending; after
   it, the thread makes every other call of the table, then
   pthread_testcancel() must cancel it. A cancellation acting anywhere earlier
   is a failure. The last entry, stats_signal, runs with statistics on and
   raises LOCKSWAP_STATS_SIGNAL in the thread: the dump (open, write, close
   in a signal handler) must not act on the cancellation either. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <threads.h>
#include <unistd.h>

#include "c_cancel_util.h"

static pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t g_recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
static pthread_mutex_t g_errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
static pthread_mutex_t g_adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
static pthread_rwlock_t g_rw = PTHREAD_RWLOCK_INITIALIZER;
static pthread_rwlock_t g_rw_writer = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
static pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
static sem_t g_sem;
static mtx_t g_c11_mutex;
static cnd_t g_c11_cond;

static struct timespec soon(clockid_t clk) { return in_ms(clk, 100); }

static int mutex_lock(void) { return pthread_mutex_lock(&g_mutex) ?: pthread_mutex_unlock(&g_mutex); }
static int mutex_trylock(void) { return pthread_mutex_trylock(&g_mutex) ?: pthread_mutex_unlock(&g_mutex); }
static int mutex_timedlock(void) {
  struct timespec t = soon(CLOCK_REALTIME);
  return pthread_mutex_timedlock(&g_mutex, &t) ?: pthread_mutex_unlock(&g_mutex);
}
static int mutex_clocklock(void) {
  struct timespec t = soon(CLOCK_MONOTONIC);
  return pthread_mutex_clocklock(&g_mutex, CLOCK_MONOTONIC, &t) ?: pthread_mutex_unlock(&g_mutex);
}
static int recursive_lock(void) {
  return pthread_mutex_lock(&g_recursive) ?: pthread_mutex_lock(&g_recursive) ?: pthread_mutex_unlock(&g_recursive)
                                                                              ?: pthread_mutex_unlock(&g_recursive);
}
static int errorcheck_lock(void) {
  return pthread_mutex_lock(&g_errorcheck) ?: pthread_mutex_unlock(&g_errorcheck);
}
static int adaptive_lock(void) { return pthread_mutex_lock(&g_adaptive) ?: pthread_mutex_unlock(&g_adaptive); }
static int mutex_init_destroy(void) {
  pthread_mutex_t m;
  return pthread_mutex_init(&m, NULL) ?: pthread_mutex_lock(&m) ?: pthread_mutex_unlock(&m)
                                                                ?: pthread_mutex_destroy(&m);
}
static int rdlock(void) { return pthread_rwlock_rdlock(&g_rw) ?: pthread_rwlock_unlock(&g_rw); }
static int tryrdlock(void) { return pthread_rwlock_tryrdlock(&g_rw) ?: pthread_rwlock_unlock(&g_rw); }
static int timedrdlock(void) {
  struct timespec t = soon(CLOCK_REALTIME);
  return pthread_rwlock_timedrdlock(&g_rw, &t) ?: pthread_rwlock_unlock(&g_rw);
}
static int clockrdlock(void) {
  struct timespec t = soon(CLOCK_MONOTONIC);
  return pthread_rwlock_clockrdlock(&g_rw, CLOCK_MONOTONIC, &t) ?: pthread_rwlock_unlock(&g_rw);
}
static int wrlock(void) { return pthread_rwlock_wrlock(&g_rw) ?: pthread_rwlock_unlock(&g_rw); }
static int trywrlock(void) { return pthread_rwlock_trywrlock(&g_rw) ?: pthread_rwlock_unlock(&g_rw); }
static int timedwrlock(void) {
  struct timespec t = soon(CLOCK_REALTIME);
  return pthread_rwlock_timedwrlock(&g_rw, &t) ?: pthread_rwlock_unlock(&g_rw);
}
static int clockwrlock(void) {
  struct timespec t = soon(CLOCK_MONOTONIC);
  return pthread_rwlock_clockwrlock(&g_rw, CLOCK_MONOTONIC, &t) ?: pthread_rwlock_unlock(&g_rw);
}
static int writer_pref_rdlock(void) {
  return pthread_rwlock_rdlock(&g_rw_writer) ?: pthread_rwlock_unlock(&g_rw_writer);
}
static int writer_pref_wrlock(void) {
  return pthread_rwlock_wrlock(&g_rw_writer) ?: pthread_rwlock_unlock(&g_rw_writer);
}
static int rwlock_init_destroy(void) {
  pthread_rwlock_t l;
  return pthread_rwlock_init(&l, NULL) ?: pthread_rwlock_rdlock(&l) ?: pthread_rwlock_unlock(&l)
                                                                   ?: pthread_rwlock_destroy(&l);
}
static int cond_signal(void) { return pthread_cond_signal(&g_cond); }
static int cond_broadcast(void) { return pthread_cond_broadcast(&g_cond); }
static int cond_init_destroy(void) {
  pthread_cond_t c;
  return pthread_cond_init(&c, NULL) ?: pthread_cond_signal(&c) ?: pthread_cond_destroy(&c);
}
static int sem_post_trywait(void) {
  int v = -1;
  return sem_post(&g_sem) ?: sem_getvalue(&g_sem, &v) ?: (v == 1 ? 0 : EINVAL) ?: sem_trywait(&g_sem);
}
static int c11_mutex(void) {
  return mtx_lock(&g_c11_mutex) == thrd_success && mtx_unlock(&g_c11_mutex) == thrd_success ? 0 : EINVAL;
}
static int c11_trylock(void) {
  return mtx_trylock(&g_c11_mutex) == thrd_success && mtx_unlock(&g_c11_mutex) == thrd_success ? 0 : EINVAL;
}
static int c11_cond(void) {
  return cnd_signal(&g_c11_cond) == thrd_success && cnd_broadcast(&g_c11_cond) == thrd_success ? 0 : EINVAL;
}

/* Only meaningful in the process run with statistics on (see main). */
static int stats_signal(void) { return raise(SIGUSR2); }

struct Call {
  const char* name;
  int (*run)(void);
};
static const struct Call kCalls[] = {
    {"mutex_lock", mutex_lock},
    {"mutex_trylock", mutex_trylock},
    {"mutex_timedlock", mutex_timedlock},
    {"mutex_clocklock", mutex_clocklock},
    {"recursive_lock", recursive_lock},
    {"errorcheck_lock", errorcheck_lock},
    {"adaptive_lock", adaptive_lock},
    {"mutex_init_destroy", mutex_init_destroy},
    {"rdlock", rdlock},
    {"tryrdlock", tryrdlock},
    {"timedrdlock", timedrdlock},
    {"clockrdlock", clockrdlock},
    {"wrlock", wrlock},
    {"trywrlock", trywrlock},
    {"timedwrlock", timedwrlock},
    {"clockwrlock", clockwrlock},
    {"writer_pref_rdlock", writer_pref_rdlock},
    {"writer_pref_wrlock", writer_pref_wrlock},
    {"rwlock_init_destroy", rwlock_init_destroy},
    {"cond_signal", cond_signal},
    {"cond_broadcast", cond_broadcast},
    {"cond_init_destroy", cond_init_destroy},
    {"sem_post_trywait", sem_post_trywait},
    {"c11_mutex", c11_mutex},
    {"c11_trylock", c11_trylock},
    {"c11_cond", c11_cond},
    {"stats_signal", stats_signal}, /* last: the others skip it */
};
enum { kNumCalls = sizeof kCalls / sizeof kCalls[0] };

static const struct Call* g_first;
static const char* volatile g_in_call; /* the call running; NULL between calls */
static volatile int g_reached_testcancel;

static void on_cancel(void* arg) {
  (void)arg;
  CHECK(g_in_call == NULL, "%s acted on a pending deferred cancellation (a lock call is not a cancellation point)",
        g_in_call);
  CHECK(g_reached_testcancel, "cancelled before pthread_testcancel()");
}

static void run_checked(const struct Call* c) {
  g_scenario = c->name;
  g_in_call = c->name;
  int rc = c->run();
  g_in_call = NULL;
  CHECK(rc == 0, "%s returned %d", c->name, rc);
}

static void* victim(void* arg) {
  (void)arg;
  pthread_cleanup_push(on_cancel, NULL);
  pthread_cancel(pthread_self()); /* deferred: pending until a cancellation point */
  run_checked(g_first);
  for (int i = 0; i < kNumCalls - 1; ++i)
    if (&kCalls[i] != g_first) run_checked(&kCalls[i]);
  g_scenario = "pthread_testcancel";
  g_reached_testcancel = 1;
  pthread_testcancel();
  CHECK(0, "pthread_testcancel() returned with a cancellation pending");
  pthread_cleanup_pop(0);
  return NULL;
}

static int run_first(const char* name) {
  g_mode_name = name;
  for (int i = 0; i < kNumCalls; ++i)
    if (strcmp(kCalls[i].name, name) == 0) g_first = &kCalls[i];
  if (g_first == NULL) {
    fprintf(stderr, "unknown call %s\n", name);
    return 2;
  }
  sem_init(&g_sem, 0, 0);
  mtx_init(&g_c11_mutex, mtx_plain);
  cnd_init(&g_c11_cond);
  pthread_t t;
  if (pthread_create(&t, NULL, victim, NULL) != 0) return 2;
  void* ret = join_bounded(t);
  CHECK(ret == PTHREAD_CANCELED, "the thread was not cancelled (exit value %p)", ret);
  return failures ? 1 : 0;
}

int main(int argc, char** argv) {
  if (argc > 1) return run_first(argv[1]);
  int failed = 0;
  for (int i = 0; i < kNumCalls; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      if (strcmp(kCalls[i].name, "stats_signal") == 0) {
        setenv("LOCKSWAP_STATS", "1", 1);
        setenv("LOCKSWAP_STATS_SIGNAL", "USR2", 1);
        setenv("LOCKSWAP_STATS_FILE", "/dev/null", 1);
      }
      execl("/proc/self/exe", argv[0], kCalls[i].name, (char*)NULL);
      _exit(3);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      fprintf(stderr, "FAIL: first call %s (status 0x%x)\n", kCalls[i].name, status);
      ++failed;
    }
  }
  printf("%d first calls, %d failed\n", kNumCalls, failed);
  return failed ? 1 : 0;
}
