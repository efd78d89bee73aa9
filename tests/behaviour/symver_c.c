/* tests/behaviour/symver_c.c — both symbol versions of the condvar API (and
 * the pre-2.34 versions of the libpthread functions) must reach lockswap.
 *
 * glibc exports pthread_cond_* twice on x86-64: @GLIBC_2.2.5 (old binaries)
 * and @@GLIBC_2.3.2 (current), and since 2.34 most mutex/rwlock functions as
 * @GLIBC_2.2.5 (what binaries linked against libpthread.so.0 reference) and
 * @@GLIBC_2.34. A program reaching glibc's implementation through any of these
 * while lockswap formats the objects would corrupt them, so under a native
 * variant every binding must resolve into liblockswap.so. Under `glibc`
 * resolving into libc is harmless; the wait/signal pair must work either way.
 *
 * Bindings checked: link-time .symver references, dlvsym(RTLD_DEFAULT, ...)
 * with each version, and plain dlsym(RTLD_DEFAULT, ...).
 * Exit status 0 when every check passed; failures are listed on stderr.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "c_deadline.h"

typedef int (*cond_init_fn)(pthread_cond_t*, const pthread_condattr_t*);
typedef int (*cond_destroy_fn)(pthread_cond_t*);
typedef int (*cond_wait_fn)(pthread_cond_t*, pthread_mutex_t*);
typedef int (*cond_timedwait_fn)(pthread_cond_t*, pthread_mutex_t*, const struct timespec*);
typedef int (*cond_signal_fn)(pthread_cond_t*);

/* Link-time bindings to explicit versions: PREFIX_cond_init and the rest,
 * each bound to pthread_cond_*@VERSION. */
#define COND_API_AT(prefix, version)                                                          \
  extern int prefix##_cond_init(pthread_cond_t*, const pthread_condattr_t*);                  \
  extern int prefix##_cond_destroy(pthread_cond_t*);                                          \
  extern int prefix##_cond_wait(pthread_cond_t*, pthread_mutex_t*);                           \
  extern int prefix##_cond_timedwait(pthread_cond_t*, pthread_mutex_t*, const struct timespec*); \
  extern int prefix##_cond_signal(pthread_cond_t*);                                           \
  extern int prefix##_cond_broadcast(pthread_cond_t*);                                        \
  __asm__(".symver " #prefix "_cond_init, pthread_cond_init@" version);                       \
  __asm__(".symver " #prefix "_cond_destroy, pthread_cond_destroy@" version);                 \
  __asm__(".symver " #prefix "_cond_wait, pthread_cond_wait@" version);                       \
  __asm__(".symver " #prefix "_cond_timedwait, pthread_cond_timedwait@" version);             \
  __asm__(".symver " #prefix "_cond_signal, pthread_cond_signal@" version);                   \
  __asm__(".symver " #prefix "_cond_broadcast, pthread_cond_broadcast@" version);
COND_API_AT(old, "GLIBC_2.2.5")
COND_API_AT(new, "GLIBC_2.3.2")
#undef COND_API_AT

/* What a binary linked against glibc < 2.34's libpthread.so.0 references. */
extern int old_mutex_trylock(pthread_mutex_t*);
extern int old_rwlock_rdlock(pthread_rwlock_t*);
extern int old_rwlock_wrlock(pthread_rwlock_t*);
extern int old_rwlock_unlock(pthread_rwlock_t*);
extern int old_mutex_timedlock(pthread_mutex_t*, const struct timespec*);
__asm__(".symver old_mutex_trylock, pthread_mutex_trylock@GLIBC_2.2.5");
__asm__(".symver old_mutex_timedlock, pthread_mutex_timedlock@GLIBC_2.2.5");
__asm__(".symver old_rwlock_rdlock, pthread_rwlock_rdlock@GLIBC_2.2.5");
__asm__(".symver old_rwlock_wrlock, pthread_rwlock_wrlock@GLIBC_2.2.5");
__asm__(".symver old_rwlock_unlock, pthread_rwlock_unlock@GLIBC_2.2.5");

static int failures;
static int native_mutex, native_rwlock;

#define CHECK(cond, ...)                                    \
  do {                                                      \
    if (!(cond)) {                                          \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);  \
      fprintf(stderr, __VA_ARGS__);                         \
      fputc('\n', stderr);                                  \
      ++failures;                                           \
    }                                                       \
  } while (0)

static int env_native(const char* var) {
  const char* v = getenv(var);
  return v != NULL && *v != '\0' && strcmp(v, "glibc") != 0 && getenv("LD_PRELOAD") != NULL;
}

/* Which object the code at `fn` belongs to. */
static const char* object_of(void* fn) {
  Dl_info info;
  if (fn == NULL) return "(null)";
  if (dladdr(fn, &info) == 0 || info.dli_fname == NULL) return "(unknown)";
  return info.dli_fname;
}
static int in_lockswap(void* fn) { return strstr(object_of(fn), "liblockswap") != NULL; }

/* Under a native variant the function must be lockswap's; under glibc either is fine. */
static int check_binding(const char* what, void* fn, int native) {
  if (fn == NULL) {
    CHECK(0, "%s: not resolved", what);
    return 0;
  }
  if (native) {
    CHECK(in_lockswap(fn), "%s resolves into %s, not liblockswap.so", what, object_of(fn));
    return in_lockswap(fn);
  }
  fprintf(stderr, "info: %s -> %s\n", what, object_of(fn));
  return 1;
}

struct api {
  const char* name;
  cond_init_fn init;
  cond_destroy_fn destroy;
  cond_wait_fn wait;
  cond_timedwait_fn timedwait;
  cond_signal_fn signal, broadcast;
};

struct pair {
  const struct api* api;
  pthread_mutex_t m;
  pthread_cond_t c;
  int waiting, flag, rc;
};

static void* waiter(void* p) {
  struct pair* x = p;
  pthread_mutex_lock(&x->m);
  x->waiting = 1;
  while (!x->flag) x->rc = x->api->wait(&x->c, &x->m);
  pthread_mutex_unlock(&x->m);
  return NULL;
}

/* A wait/signal pair and a timed-out wait through one set of bindings. */
static void exercise(const struct api* a) {
  struct pair x;
  memset(&x, 0, sizeof x);
  x.api = a;
  x.rc = -1;
  pthread_mutex_init(&x.m, NULL);
  CHECK(a->init(&x.c, NULL) == 0, "%s: init", a->name);
  pthread_t t;
  pthread_create(&t, NULL, waiter, &x);
  for (;;) {
    pthread_mutex_lock(&x.m);
    if (x.waiting) break;
    pthread_mutex_unlock(&x.m);
    usleep(1000);
  }
  x.flag = 1;
  CHECK(a->signal(&x.c) == 0, "%s: signal", a->name);
  pthread_mutex_unlock(&x.m);
  struct timespec d = in_ms(CLOCK_MONOTONIC, 10000);
  if (pthread_clockjoin_np(t, NULL, CLOCK_MONOTONIC, &d) != 0) {
    fprintf(stderr, "FAIL: %s: signalled waiter never woke\n", a->name);
    _exit(1);
  }
  CHECK(x.rc == 0, "%s: wait returned %d", a->name, x.rc);

  pthread_mutex_lock(&x.m);
  d = in_ms(CLOCK_REALTIME, 20);
  CHECK(a->timedwait(&x.c, &x.m, &d) == ETIMEDOUT, "%s: timedwait did not time out", a->name);
  CHECK(pthread_mutex_trylock(&x.m) == EBUSY, "%s: mutex not re-acquired after the timeout", a->name);
  pthread_mutex_unlock(&x.m);
  CHECK(a->broadcast(&x.c) == 0, "%s: broadcast", a->name);
  CHECK(a->destroy(&x.c) == 0, "%s: destroy", a->name);
  pthread_mutex_destroy(&x.m);
}

static void check_api(const struct api* a) {
  char what[128];
  int ok = 1;
#define BIND(field)                                                   \
  snprintf(what, sizeof what, "%s pthread_cond_" #field, a->name);     \
  ok &= check_binding(what, (void*)a->field, native_mutex);
  BIND(init) BIND(destroy) BIND(wait) BIND(timedwait) BIND(signal) BIND(broadcast)
#undef BIND
  if (ok) exercise(a);  /* never mix glibc's condvar with lockswap's objects */
}

static void* sym(const char* name, const char* version) {
  return version ? dlvsym(RTLD_DEFAULT, name, version) : dlsym(RTLD_DEFAULT, name);
}

static void check_dl_api(const char* label, const char* version) {
  struct api a = {label,
                  (cond_init_fn)sym("pthread_cond_init", version),
                  (cond_destroy_fn)sym("pthread_cond_destroy", version),
                  (cond_wait_fn)sym("pthread_cond_wait", version),
                  (cond_timedwait_fn)sym("pthread_cond_timedwait", version),
                  (cond_signal_fn)sym("pthread_cond_signal", version),
                  (cond_signal_fn)sym("pthread_cond_broadcast", version)};
  check_api(&a);
}

static void check_plain_dlsym(void) {
  /* Plain lookups: the first definition in the global scope is lockswap's. */
  static const char* const names[] = {"pthread_mutex_lock", "pthread_mutex_unlock", "pthread_rwlock_rdlock",
                                      "pthread_cond_wait", "pthread_cond_signal", "mtx_lock", "cnd_wait"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
    void* f = dlsym(RTLD_DEFAULT, names[i]);
    CHECK(in_lockswap(f), "dlsym(RTLD_DEFAULT, %s) -> %s", names[i], object_of(f));
  }
  check_dl_api("dlsym", NULL);
  /* glibc's compatibility aliases, reached by name. */
  static const char* const aliases[] = {"__pthread_mutex_lock", "__pthread_mutex_unlock", "__pthread_mutex_trylock",
                                        "__pthread_mutex_init", "__pthread_mutex_destroy",
                                        "__pthread_rwlock_rdlock", "__pthread_rwlock_wrlock",
                                        "__pthread_rwlock_unlock", "__pthread_rwlock_tryrdlock",
                                        "__pthread_rwlock_trywrlock", "__pthread_rwlock_init",
                                        "__pthread_rwlock_destroy"};
  for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; ++i) {
    void* f = dlsym(RTLD_DEFAULT, aliases[i]);
    int native = strstr(aliases[i], "mutex") ? native_mutex : native_rwlock;
    if (native) CHECK(in_lockswap(f), "dlsym(%s) -> %s", aliases[i], object_of(f));
  }
}

static void check_link_time_versions(void) {
  struct api old_api = {"@GLIBC_2.2.5 (symver)", old_cond_init, old_cond_destroy, old_cond_wait,
                        old_cond_timedwait, old_cond_signal, old_cond_broadcast};
  struct api new_api = {"@GLIBC_2.3.2 (symver)", new_cond_init, new_cond_destroy, new_cond_wait,
                        new_cond_timedwait, new_cond_signal, new_cond_broadcast};
  /* Link-time references are interposed under every variant. */
  CHECK(in_lockswap((void*)old_cond_wait), "pthread_cond_wait@GLIBC_2.2.5 -> %s", object_of((void*)old_cond_wait));
  CHECK(in_lockswap((void*)new_cond_wait), "pthread_cond_wait@GLIBC_2.3.2 -> %s", object_of((void*)new_cond_wait));
  check_api(&old_api);
  check_api(&new_api);

  /* Pre-2.34 libpthread references to the mutex/rwlock API. */
  CHECK(in_lockswap((void*)old_mutex_trylock), "pthread_mutex_trylock@GLIBC_2.2.5 -> %s",
        object_of((void*)old_mutex_trylock));
  CHECK(in_lockswap((void*)old_rwlock_rdlock), "pthread_rwlock_rdlock@GLIBC_2.2.5 -> %s",
        object_of((void*)old_rwlock_rdlock));
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
  struct timespec d = in_ms(CLOCK_REALTIME, 20);
  CHECK(old_mutex_trylock(&m) == 0, "old trylock");
  CHECK(old_mutex_trylock(&m) == EBUSY, "old trylock on a held mutex");
  CHECK(old_mutex_timedlock(&m, &d) == ETIMEDOUT, "old timedlock on a held mutex");
  CHECK(pthread_mutex_unlock(&m) == 0, "unlock");
  CHECK(old_rwlock_wrlock(&l) == 0, "old wrlock");
  CHECK(old_rwlock_rdlock(&l) == EDEADLK, "old rdlock by the writer");
  CHECK(old_rwlock_unlock(&l) == 0, "old unlock");
  CHECK(pthread_rwlock_rdlock(&l) == 0 && old_rwlock_unlock(&l) == 0, "mixed rdlock/unlock");
}

/* argv[1]: "link" (.symver references), "dlvsym", or "dlsym". */
int main(int argc, char** argv) {
  alarm(60);
  native_mutex = env_native("LOCKSWAP_MUTEX");
  native_rwlock = env_native("LOCKSWAP_RWLOCK");
  const char* what = argc > 1 ? argv[1] : "link";
  if (strcmp(what, "link") == 0) {
    check_link_time_versions();
  } else if (strcmp(what, "dlvsym") == 0) {
    check_dl_api("dlvsym(RTLD_DEFAULT, GLIBC_2.2.5)", "GLIBC_2.2.5");
    check_dl_api("dlvsym(RTLD_DEFAULT, GLIBC_2.3.2)", "GLIBC_2.3.2");
  } else if (strcmp(what, "dlsym") == 0) {
    check_plain_dlsym();
  } else {
    fprintf(stderr, "usage: %s link|dlvsym|dlsym\n", argv[0]);
    return 2;
  }
  if (failures != 0) {
    fprintf(stderr, "%d check(s) failed\n", failures);
    return 1;
  }
  fprintf(stderr, "symver_c %s: all checks passed\n", what);
  return 0;
}
