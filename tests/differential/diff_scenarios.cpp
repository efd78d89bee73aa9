// tests/differential/diff_scenarios.cpp — deterministic scenarios that print
// a transcript of return codes, one operation per line. run_differential.sh
// runs a scenario without any preload (plain glibc: the reference) and under
// a lockswap variant, and fails on any difference.
//
// Every multi-threaded step is sequential (start a thread, let it finish or
// park it on a semaphore, join), so the transcript does not depend on timing.
// Timeouts are short and only ever expected to expire.
//
// usage: lockswap_diff_scenarios mutex|rwlock|cond|c11|fork|delegated|sem
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include <functional>
#include <string>

#include "tests/common/test_support.h"

namespace {

// ------------------------------------------------------------- transcript

const char* thrd_code(int r) {
  switch (r) {
    case thrd_success: return "thrd_success";
    case thrd_busy: return "thrd_busy";
    case thrd_error: return "thrd_error";
    case thrd_nomem: return "thrd_nomem";
    case thrd_timedout: return "thrd_timedout";
  }
  return "thrd_?";
}

std::string g_prefix;
void out(const std::string& what, int rc) { printf("%s%s: %s\n", g_prefix.c_str(), what.c_str(), lstest::err_name(rc)); }
void out_thrd(const std::string& what, int rc) { printf("%s%s: %s\n", g_prefix.c_str(), what.c_str(), thrd_code(rc)); }
void out_num(const std::string& what, long n) { printf("%s%s: %ld\n", g_prefix.c_str(), what.c_str(), n); }

#define OUT(call) out(#call, (call))
#define OUT_AS(label, call) out(label, (call))

timespec in_ms(clockid_t clk, long ms) {
  timespec t;
  clock_gettime(clk, &t);
  long long ns = (long long)t.tv_nsec + ms * 1000000LL;
  t.tv_sec += ns / 1000000000LL;
  t.tv_nsec = ns % 1000000000LL;
  return t;
}

// Runs f on a fresh thread and returns its result.
int on_thread(const std::function<int()>& f) {
  int r = -1;
  std::function<void()> body = [&] { r = f(); };
  pthread_t t;
  pthread_create(
      &t, nullptr, [](void* p) -> void* {
        (*static_cast<std::function<void()>*>(p))();
        return nullptr;
      },
      &body);
  pthread_join(t, nullptr);
  return r;
}

// A thread that performs `acquire`, parks until release(), then performs `undo`.
class Parked {
 public:
  Parked(std::function<int()> acquire, std::function<int()> undo) : acquire_(acquire), undo_(undo) {
    sem_init(&ready_, 0, 0);
    sem_init(&go_, 0, 0);
    pthread_create(
        &t_, nullptr,
        [](void* p) -> void* {
          auto* self = static_cast<Parked*>(p);
          self->acquired_rc = self->acquire_();
          sem_post(&self->ready_);
          while (sem_wait(&self->go_) != 0) {
          }
          self->undo_rc = self->undo_();
          return nullptr;
        },
        this);
    while (sem_wait(&ready_) != 0) {
    }
  }
  int release() {
    sem_post(&go_);
    pthread_join(t_, nullptr);
    return undo_rc;
  }
  ~Parked() {
    sem_destroy(&ready_);
    sem_destroy(&go_);
  }
  int acquired_rc = -1, undo_rc = -1;

 private:
  std::function<int()> acquire_, undo_;
  sem_t ready_, go_;
  pthread_t t_;
};

int init_mutex(pthread_mutex_t* m, int type, int robust = PTHREAD_MUTEX_STALLED, int protocol = PTHREAD_PRIO_NONE,
               int pshared = PTHREAD_PROCESS_PRIVATE, int ceiling = -1) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  pthread_mutexattr_settype(&a, type);
  pthread_mutexattr_setrobust(&a, robust);
  pthread_mutexattr_setprotocol(&a, protocol);
  pthread_mutexattr_setpshared(&a, pshared);
  if (ceiling >= 0) pthread_mutexattr_setprioceiling(&a, ceiling);
  int rc = pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
  return rc;
}

// ------------------------------------------------------------------ mutex

void mutex_kind_sequence(pthread_mutex_t* m, int type) {
  bool checked = type == PTHREAD_MUTEX_ERRORCHECK || type == PTHREAD_MUTEX_RECURSIVE;
  timespec d;
  OUT(pthread_mutex_lock(m));
  OUT(pthread_mutex_trylock(m));
  OUT_AS("other thread: trylock", on_thread([m] { return pthread_mutex_trylock(m); }));
  d = in_ms(CLOCK_REALTIME, 10);
  OUT_AS("owner timedlock (+10ms)", pthread_mutex_timedlock(m, &d));
  d = in_ms(CLOCK_MONOTONIC, 10);
  OUT_AS("owner clocklock MONOTONIC (+10ms)", pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &d));
  OUT_AS("owner clocklock CPUTIME", pthread_mutex_clocklock(m, CLOCK_PROCESS_CPUTIME_ID, &d));
  timespec bad = {time(nullptr) + 1, 1000000000L};
  if (checked) {
    OUT_AS("owner timedlock bad nsec", pthread_mutex_timedlock(m, &bad));
    OUT(pthread_mutex_lock(m));
    OUT_AS("other thread: unlock", on_thread([m] { return pthread_mutex_unlock(m); }));
  }
  OUT_AS("destroy while locked", pthread_mutex_destroy(m));
  // Unlock until refused (recursive levels were added above).
  int levels = 0;
  for (int i = 0; i < 10; ++i) {
    int rc = pthread_mutex_unlock(m);
    if (rc != 0) {
      out("unlock after " + std::to_string(levels) + " levels", rc);
      break;
    }
    ++levels;
    if (!checked) break;  // unlocking an unlocked normal mutex is undefined
  }
  out_num("levels released", levels);
  OUT_AS("other thread: trylock after release", on_thread([m] {
           int rc = pthread_mutex_trylock(m);
           if (rc == 0) pthread_mutex_unlock(m);
           return rc;
         }));
  // Timeouts against another owner.
  {
    Parked p([m] { return pthread_mutex_lock(m); }, [m] { return pthread_mutex_unlock(m); });
    out("parked owner lock", p.acquired_rc);
    d = in_ms(CLOCK_REALTIME, 10);
    OUT_AS("timedlock vs other owner", pthread_mutex_timedlock(m, &d));
    d = in_ms(CLOCK_REALTIME, 10);
    OUT_AS("clocklock REALTIME vs other owner", pthread_mutex_clocklock(m, CLOCK_REALTIME, &d));
    OUT_AS("timedlock bad nsec vs other owner", pthread_mutex_timedlock(m, &bad));
    timespec neg = {-1, 0};
    OUT_AS("timedlock negative sec vs other owner", pthread_mutex_timedlock(m, &neg));
    timespec minus = {time(nullptr) + 1, -1};
    OUT_AS("clocklock nsec=-1 vs other owner", pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &minus));
    OUT_AS("clocklock THREAD_CPUTIME vs other owner", pthread_mutex_clocklock(m, CLOCK_THREAD_CPUTIME_ID, &d));
    OUT_AS("clocklock BOOTTIME vs other owner", pthread_mutex_clocklock(m, CLOCK_BOOTTIME, &d));
    if (checked) OUT_AS("unlock by non-owner", pthread_mutex_unlock(m));
    out("parked owner unlock", p.release());
  }
  OUT_AS("uncontended timedlock bad nsec", pthread_mutex_timedlock(m, &bad));
  OUT(pthread_mutex_unlock(m));
  timespec neg = {-1, 0};
  OUT_AS("uncontended timedlock negative sec", pthread_mutex_timedlock(m, &neg));
  OUT(pthread_mutex_unlock(m));
  OUT_AS("consistent (not robust)", pthread_mutex_consistent(m));
  OUT(pthread_mutex_destroy(m));
  d = in_ms(CLOCK_REALTIME, 10);
  OUT_AS("lock destroyed", pthread_mutex_lock(m));
  OUT_AS("trylock destroyed", pthread_mutex_trylock(m));
  OUT_AS("timedlock destroyed", pthread_mutex_timedlock(m, &d));
  OUT_AS("unlock destroyed", pthread_mutex_unlock(m));
  OUT_AS("consistent destroyed", pthread_mutex_consistent(m));
  OUT_AS("destroy destroyed", pthread_mutex_destroy(m));
  OUT_AS("init again", init_mutex(m, type));
  OUT(pthread_mutex_lock(m));
  OUT(pthread_mutex_unlock(m));
  OUT(pthread_mutex_destroy(m));
}

void scenario_mutex() {
  struct {
    const char* name;
    int type;
    int origin;  // 0 attr, 1 static initializer, 2 zero memory
  } cases[] = {
      {"normal/attr", PTHREAD_MUTEX_NORMAL, 0},         {"normal/static", PTHREAD_MUTEX_NORMAL, 1},
      {"normal/zero", PTHREAD_MUTEX_NORMAL, 2},         {"recursive/attr", PTHREAD_MUTEX_RECURSIVE, 0},
      {"recursive/static", PTHREAD_MUTEX_RECURSIVE, 1}, {"errorcheck/attr", PTHREAD_MUTEX_ERRORCHECK, 0},
      {"errorcheck/static", PTHREAD_MUTEX_ERRORCHECK, 1}, {"adaptive/attr", PTHREAD_MUTEX_ADAPTIVE_NP, 0},
      {"adaptive/static", PTHREAD_MUTEX_ADAPTIVE_NP, 1},
  };
  for (auto& c : cases) {
    g_prefix = std::string("[") + c.name + "] ";
    pthread_mutex_t m;
    static const pthread_mutex_t kNormal = PTHREAD_MUTEX_INITIALIZER;
    static const pthread_mutex_t kRecursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
    static const pthread_mutex_t kErrorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
    static const pthread_mutex_t kAdaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
    if (c.origin == 0) {
      OUT_AS("init", init_mutex(&m, c.type));
    } else if (c.origin == 2) {
      memset(static_cast<void*>(&m), 0, sizeof m);
    } else {
      m = c.type == PTHREAD_MUTEX_RECURSIVE    ? kRecursive
          : c.type == PTHREAD_MUTEX_ERRORCHECK ? kErrorcheck
          : c.type == PTHREAD_MUTEX_ADAPTIVE_NP ? kAdaptive
                                                : kNormal;
    }
    mutex_kind_sequence(&m, c.type);
  }
  g_prefix = "[attr] ";
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  OUT_AS("settype 99", pthread_mutexattr_settype(&a, 99));
  OUT_AS("setrobust 5", pthread_mutexattr_setrobust(&a, 5));
  OUT_AS("setprotocol 9", pthread_mutexattr_setprotocol(&a, 9));
  OUT_AS("setpshared 9", pthread_mutexattr_setpshared(&a, 9));
  pthread_mutexattr_destroy(&a);
  g_prefix = "[recursive depth] ";
  pthread_mutex_t r;
  init_mutex(&r, PTHREAD_MUTEX_RECURSIVE);
  for (int i = 0; i < 100; ++i) pthread_mutex_lock(&r);
  OUT_AS("other thread: trylock at depth 100", on_thread([&r] { return pthread_mutex_trylock(&r); }));
  int ok = 0;
  while (pthread_mutex_unlock(&r) == 0) ++ok;
  out_num("unlocks that succeeded", ok);
  OUT(pthread_mutex_destroy(&r));
}

// ----------------------------------------------------------------- rwlock

void scenario_rwlock() {
  struct {
    const char* name;
    int origin;  // 0 static, 1 zero, 2 init NULL, 3 WNR static, 4.. attr kind
    int kind;
  } cases[] = {
      {"static", 0, 0},
      {"zero", 1, 0},
      {"init-null", 2, 0},
      {"writer-nonrecursive-static", 3, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP},
      {"attr-prefer-reader", 4, PTHREAD_RWLOCK_PREFER_READER_NP},
      {"attr-prefer-writer", 4, PTHREAD_RWLOCK_PREFER_WRITER_NP},
      {"attr-writer-nonrecursive", 4, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP},
  };
  for (auto& c : cases) {
    g_prefix = std::string("[") + c.name + "] ";
    pthread_rwlock_t l;
    pthread_rwlock_t* lp = &l;
    static const pthread_rwlock_t kDefault = PTHREAD_RWLOCK_INITIALIZER;
    static const pthread_rwlock_t kWn = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
    pthread_rwlockattr_t a;
    pthread_rwlockattr_init(&a);
    pthread_rwlockattr_setkind_np(&a, c.kind);
    switch (c.origin) {
      case 0: l = kDefault; break;
      case 1: memset(static_cast<void*>(&l), 0, sizeof l); break;
      case 2: OUT_AS("init NULL", pthread_rwlock_init(&l, nullptr)); break;
      case 3: l = kWn; break;
      default: OUT_AS("init attr", pthread_rwlock_init(&l, &a));
    }
    timespec d, bad = {time(nullptr) + 1, 1000000000L}, neg = {-1, 0};
    OUT(pthread_rwlock_rdlock(lp));
    OUT_AS("rdlock again (recursive, nobody waiting)", pthread_rwlock_rdlock(lp));
    OUT(pthread_rwlock_tryrdlock(lp));
    OUT_AS("trywrlock by reader", pthread_rwlock_trywrlock(lp));
    d = in_ms(CLOCK_REALTIME, 10);
    OUT_AS("timedwrlock by reader +10ms", pthread_rwlock_timedwrlock(lp, &d));
    OUT_AS("other thread: trywrlock", on_thread([lp] { return pthread_rwlock_trywrlock(lp); }));
    OUT_AS("other thread: tryrdlock", on_thread([lp] {
             int rc = pthread_rwlock_tryrdlock(lp);
             if (rc == 0) pthread_rwlock_unlock(lp);
             return rc;
           }));
    d = in_ms(CLOCK_MONOTONIC, 10);
    OUT_AS("other thread: clockwrlock +10ms", on_thread([lp, &d] {
             return pthread_rwlock_clockwrlock(lp, CLOCK_MONOTONIC, &d);
           }));
    OUT_AS("unlock 1", pthread_rwlock_unlock(lp));
    OUT_AS("unlock 2", pthread_rwlock_unlock(lp));
    OUT_AS("unlock 3", pthread_rwlock_unlock(lp));
    OUT(pthread_rwlock_wrlock(lp));
    OUT_AS("writer rdlock", pthread_rwlock_rdlock(lp));
    OUT_AS("writer wrlock", pthread_rwlock_wrlock(lp));
    OUT_AS("writer tryrdlock", pthread_rwlock_tryrdlock(lp));
    OUT_AS("writer trywrlock", pthread_rwlock_trywrlock(lp));
    d = in_ms(CLOCK_REALTIME, 10);
    OUT_AS("writer timedrdlock", pthread_rwlock_timedrdlock(lp, &d));
    OUT_AS("writer timedwrlock", pthread_rwlock_timedwrlock(lp, &d));
    OUT_AS("writer timedrdlock bad nsec", pthread_rwlock_timedrdlock(lp, &bad));
    OUT_AS("writer clockwrlock bad clock", pthread_rwlock_clockwrlock(lp, CLOCK_PROCESS_CPUTIME_ID, &d));
    OUT_AS("other thread: tryrdlock vs writer", on_thread([lp] { return pthread_rwlock_tryrdlock(lp); }));
    d = in_ms(CLOCK_REALTIME, 10);
    OUT_AS("other thread: timedrdlock vs writer", on_thread([lp, &d] { return pthread_rwlock_timedrdlock(lp, &d); }));
    OUT_AS("other thread: timedwrlock negative", on_thread([lp, &neg] {
             return pthread_rwlock_timedwrlock(lp, &neg);
           }));
    OUT_AS("other thread: timedrdlock bad nsec", on_thread([lp, &bad] {
             return pthread_rwlock_timedrdlock(lp, &bad);
           }));
    OUT_AS("writer unlock", pthread_rwlock_unlock(lp));
    OUT_AS("free: timedrdlock bad nsec", pthread_rwlock_timedrdlock(lp, &bad));
    OUT_AS("free: timedwrlock bad nsec", pthread_rwlock_timedwrlock(lp, &bad));
    timespec m1 = {time(nullptr) + 1, -1};
    OUT_AS("free: clockrdlock nsec -1", pthread_rwlock_clockrdlock(lp, CLOCK_MONOTONIC, &m1));
    OUT_AS("free: clockrdlock bad clock", pthread_rwlock_clockrdlock(lp, CLOCK_THREAD_CPUTIME_ID, &d));
    OUT_AS("free: clockwrlock BOOTTIME", pthread_rwlock_clockwrlock(lp, CLOCK_BOOTTIME, &d));
    OUT_AS("free: timedwrlock negative sec", pthread_rwlock_timedwrlock(lp, &neg));
    OUT_AS("unlock", pthread_rwlock_unlock(lp));
    OUT_AS("free: timedrdlock negative sec", pthread_rwlock_timedrdlock(lp, &neg));
    OUT_AS("unlock", pthread_rwlock_unlock(lp));
    {
      Parked p([lp] { return pthread_rwlock_rdlock(lp); }, [lp] { return pthread_rwlock_unlock(lp); });
      out("parked reader rdlock", p.acquired_rc);
      d = in_ms(CLOCK_REALTIME, 10);
      OUT_AS("timedwrlock vs reader", pthread_rwlock_timedwrlock(lp, &d));
      OUT_AS("tryrdlock vs reader", pthread_rwlock_tryrdlock(lp));
      OUT_AS("unlock", pthread_rwlock_unlock(lp));
      out("parked reader unlock", p.release());
    }
    OUT_AS("destroy", pthread_rwlock_destroy(lp));
    OUT_AS("init again", pthread_rwlock_init(lp, &a));
    OUT(pthread_rwlock_rdlock(lp));
    OUT_AS("destroy while read-locked", pthread_rwlock_destroy(lp));
    OUT_AS("init again", pthread_rwlock_init(lp, &a));
    OUT(pthread_rwlock_wrlock(lp));
    OUT(pthread_rwlock_unlock(lp));
    OUT(pthread_rwlock_destroy(lp));
    pthread_rwlockattr_destroy(&a);
  }
  g_prefix = "[attr] ";
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  int k = -1;
  OUT_AS("getkind default", pthread_rwlockattr_getkind_np(&a, &k));
  out_num("default kind value", k);
  OUT_AS("setkind 7", pthread_rwlockattr_setkind_np(&a, 7));
  OUT_AS("setpshared 9", pthread_rwlockattr_setpshared(&a, 9));
  pthread_rwlockattr_destroy(&a);
}

// ------------------------------------------------------------------- cond

void scenario_cond() {
  const char* names[] = {"static", "zero", "init-null", "init-monotonic"};
  for (int origin = 0; origin < 4; ++origin) {
    g_prefix = std::string("[") + names[origin] + "] ";
    pthread_cond_t c;
    static const pthread_cond_t kInit = PTHREAD_COND_INITIALIZER;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    clockid_t clk = CLOCK_REALTIME;
    switch (origin) {
      case 0: c = kInit; break;
      case 1: memset(static_cast<void*>(&c), 0, sizeof c); break;
      case 2: OUT_AS("init", pthread_cond_init(&c, nullptr)); break;
      default:
        OUT_AS("setclock MONOTONIC", pthread_condattr_setclock(&ca, CLOCK_MONOTONIC));
        OUT_AS("init", pthread_cond_init(&c, &ca));
        clk = CLOCK_MONOTONIC;
    }
    pthread_mutex_t m;
    init_mutex(&m, PTHREAD_MUTEX_ERRORCHECK);
    timespec d, bad = {time(nullptr) + 1, 1000000000L}, m1 = {time(nullptr) + 1, -1}, neg = {-1, 0};
    OUT_AS("signal, no waiters", pthread_cond_signal(&c));
    OUT_AS("broadcast, no waiters", pthread_cond_broadcast(&c));
    d = in_ms(clk, 10);
    OUT_AS("wait, mutex not held", pthread_cond_wait(&c, &m));
    OUT_AS("timedwait, mutex not held", pthread_cond_timedwait(&c, &m, &d));
    OUT(pthread_mutex_lock(&m));
    d = in_ms(clk, 10);
    OUT_AS("timedwait +10ms on the condvar's clock", pthread_cond_timedwait(&c, &m, &d));
    OUT_AS("other thread: trylock after timeout", on_thread([&m] { return pthread_mutex_trylock(&m); }));
    d = in_ms(CLOCK_MONOTONIC, 10);
    OUT_AS("clockwait MONOTONIC +10ms", pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d));
    d = in_ms(CLOCK_REALTIME, 10);
    OUT_AS("clockwait REALTIME +10ms", pthread_cond_clockwait(&c, &m, CLOCK_REALTIME, &d));
    OUT_AS("clockwait PROCESS_CPUTIME", pthread_cond_clockwait(&c, &m, CLOCK_PROCESS_CPUTIME_ID, &d));
    OUT_AS("clockwait BOOTTIME", pthread_cond_clockwait(&c, &m, CLOCK_BOOTTIME, &d));
    OUT_AS("timedwait nsec 1e9", pthread_cond_timedwait(&c, &m, &bad));
    OUT_AS("timedwait nsec -1", pthread_cond_timedwait(&c, &m, &m1));
    OUT_AS("clockwait nsec 1e9", pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &bad));
    OUT_AS("clockwait bad clock and nsec", pthread_cond_clockwait(&c, &m, CLOCK_PROCESS_CPUTIME_ID, &bad));
    OUT_AS("timedwait negative sec", pthread_cond_timedwait(&c, &m, &neg));
    OUT_AS("clockwait negative sec", pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &neg));
    OUT_AS("unlock (held after all of the above?)", pthread_mutex_unlock(&m));
    pthread_mutex_t r0;
    init_mutex(&r0, PTHREAD_MUTEX_RECURSIVE);
    d = in_ms(clk, 10);
    OUT_AS("timedwait with an unowned recursive mutex", pthread_cond_timedwait(&c, &r0, &d));
    pthread_mutex_destroy(&r0);
    OUT_AS("unlock again", pthread_mutex_unlock(&m));
    // Recursive mutex locked twice: glibc releases one level only.
    pthread_mutex_t r;
    init_mutex(&r, PTHREAD_MUTEX_RECURSIVE);
    pthread_mutex_lock(&r);
    pthread_mutex_lock(&r);
    d = in_ms(clk, 10);
    OUT_AS("timedwait with recursive mutex held twice", pthread_cond_timedwait(&c, &r, &d));
    OUT_AS("other thread: trylock recursive", on_thread([&r] { return pthread_mutex_trylock(&r); }));
    OUT_AS("unlock 1", pthread_mutex_unlock(&r));
    OUT_AS("unlock 2", pthread_mutex_unlock(&r));
    OUT_AS("unlock 3", pthread_mutex_unlock(&r));
    pthread_mutex_destroy(&r);
    // A deterministic wait/signal pair.
    struct Pair {
      pthread_cond_t* c;
      pthread_mutex_t* m;
      int waiting = 0, flag = 0, rc = -1;
      clockid_t clk;
    } pr{&c, &m, 0, 0, -1, clk};
    pthread_t t;
    pthread_create(
        &t, nullptr,
        [](void* p) -> void* {
          auto* x = static_cast<Pair*>(p);
          pthread_mutex_lock(x->m);
          x->waiting = 1;
          while (!x->flag) {
            timespec dd = in_ms(x->clk, 10000);
            x->rc = pthread_cond_timedwait(x->c, x->m, &dd);
            if (x->rc != 0) break;
          }
          pthread_mutex_unlock(x->m);
          return nullptr;
        },
        &pr);
    for (;;) {
      pthread_mutex_lock(&m);
      if (pr.waiting) break;
      pthread_mutex_unlock(&m);
      usleep(1000);
    }
    pr.flag = 1;
    OUT_AS("signal a waiter", pthread_cond_signal(&c));
    pthread_mutex_unlock(&m);
    pthread_join(t, nullptr);
    out("waiter's timedwait", pr.rc);
    OUT_AS("destroy", pthread_cond_destroy(&c));
    OUT_AS("init again", pthread_cond_init(&c, &ca));
    OUT_AS("destroy", pthread_cond_destroy(&c));
    pthread_condattr_destroy(&ca);
    pthread_mutex_destroy(&m);
  }
  g_prefix = "[condattr] ";
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  OUT_AS("setclock PROCESS_CPUTIME", pthread_condattr_setclock(&ca, CLOCK_PROCESS_CPUTIME_ID));
  OUT_AS("setclock BOOTTIME", pthread_condattr_setclock(&ca, CLOCK_BOOTTIME));
  OUT_AS("setpshared 9", pthread_condattr_setpshared(&ca, 9));
  pthread_condattr_destroy(&ca);
}

// -------------------------------------------------------------------- C11

void scenario_c11() {
  g_prefix = "[c11] ";
  int types[] = {mtx_plain, mtx_timed, mtx_plain | mtx_recursive, mtx_timed | mtx_recursive, 99, -1};
  for (int type : types) {
    mtx_t m;
    std::string t = "type " + std::to_string(type) + ": ";
    int rc = mtx_init(&m, type);
    out_thrd(t + "mtx_init", rc);
    if (rc != thrd_success) continue;
    out_thrd(t + "mtx_lock", mtx_lock(&m));
    out_thrd(t + "mtx_trylock by owner", mtx_trylock(&m));
    timespec d = in_ms(CLOCK_REALTIME, 10);
    out_thrd(t + "other thread: mtx_timedlock", on_thread([&m, &d] { return mtx_timedlock(&m, &d); }));
    // Unlocking a plain mutex one does not hold is undefined: only the
    // recursive ones are probed for it.
    bool recursive = type == (mtx_plain | mtx_recursive) || type == (mtx_timed | mtx_recursive);
    if (recursive) {
      out_thrd(t + "other thread: mtx_unlock", on_thread([&m] { return mtx_unlock(&m); }));
      for (int i = 0; i < 3; ++i) out_thrd(t + "mtx_unlock", mtx_unlock(&m));
    } else {
      out_thrd(t + "mtx_unlock", mtx_unlock(&m));
    }
    timespec bad = {time(nullptr) + 1, -1};
    out_thrd(t + "mtx_timedlock bad nsec, free", mtx_timedlock(&m, &bad));
    out_thrd(t + "mtx_unlock", mtx_unlock(&m));
    mtx_destroy(&m);
  }
  cnd_t c;
  mtx_t m;
  out_thrd("cnd_init", cnd_init(&c));
  mtx_init(&m, mtx_plain);
  out_thrd("cnd_signal", cnd_signal(&c));
  out_thrd("cnd_broadcast", cnd_broadcast(&c));
  mtx_lock(&m);
  timespec d = in_ms(CLOCK_REALTIME, 10);
  out_thrd("cnd_timedwait +10ms", cnd_timedwait(&c, &m, &d));
  timespec bad = {time(nullptr) + 1, 1000000000L};
  out_thrd("cnd_timedwait bad nsec", cnd_timedwait(&c, &m, &bad));
  out_thrd("other thread: mtx_trylock", on_thread([&m] { return mtx_trylock(&m); }));
  out_thrd("mtx_unlock", mtx_unlock(&m));
  cnd_destroy(&c);
  mtx_destroy(&m);
}

// ------------------------------------------------------------------- fork

void scenario_fork() {
  g_prefix = "[fork] ";
  pthread_mutex_t normal = PTHREAD_MUTEX_INITIALIZER, ec, rec, free_m = PTHREAD_MUTEX_INITIALIZER;
  init_mutex(&ec, PTHREAD_MUTEX_ERRORCHECK);
  init_mutex(&rec, PTHREAD_MUTEX_RECURSIVE);
  pthread_rwlock_t free_l = PTHREAD_RWLOCK_INITIALIZER;
  pthread_cond_t free_c = PTHREAD_COND_INITIALIZER;
  pthread_mutex_lock(&normal);
  pthread_mutex_lock(&ec);
  pthread_mutex_lock(&rec);
  pthread_mutex_lock(&rec);
  fflush(stdout);
  pid_t pid = fork();
  if (pid == 0) {
    alarm(20);
    g_prefix = "[fork child] ";
    timespec d;
    OUT_AS("normal held by parent thread: trylock", pthread_mutex_trylock(&normal));
    OUT_AS("normal: unlock", pthread_mutex_unlock(&normal));
    OUT_AS("normal: lock", pthread_mutex_lock(&normal));
    OUT_AS("normal: unlock", pthread_mutex_unlock(&normal));
    OUT_AS("errorcheck held by parent thread: unlock", pthread_mutex_unlock(&ec));
    OUT_AS("errorcheck: trylock", pthread_mutex_trylock(&ec));
    d = in_ms(CLOCK_REALTIME, 10);
    OUT_AS("errorcheck: timedlock", pthread_mutex_timedlock(&ec, &d));
    OUT_AS("errorcheck: destroy", pthread_mutex_destroy(&ec));
    OUT_AS("recursive held twice by parent thread: unlock", pthread_mutex_unlock(&rec));
    OUT_AS("recursive: trylock", pthread_mutex_trylock(&rec));
    d = in_ms(CLOCK_MONOTONIC, 10);
    OUT_AS("recursive: clocklock", pthread_mutex_clocklock(&rec, CLOCK_MONOTONIC, &d));
    OUT_AS("free mutex: lock", pthread_mutex_lock(&free_m));
    d = in_ms(CLOCK_REALTIME, 10);
    OUT_AS("free cond: timedwait", pthread_cond_timedwait(&free_c, &free_m, &d));
    OUT_AS("free mutex: unlock", pthread_mutex_unlock(&free_m));
    OUT_AS("free rwlock: wrlock", pthread_rwlock_wrlock(&free_l));
    OUT_AS("free rwlock: rdlock by writer", pthread_rwlock_rdlock(&free_l));
    OUT_AS("free rwlock: unlock", pthread_rwlock_unlock(&free_l));
    fflush(stdout);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  out("child exit status", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  OUT_AS("parent: errorcheck relock", pthread_mutex_lock(&ec));
  OUT_AS("parent: unlock errorcheck", pthread_mutex_unlock(&ec));
  OUT_AS("parent: unlock recursive", pthread_mutex_unlock(&rec));
  OUT_AS("parent: unlock recursive", pthread_mutex_unlock(&rec));
  OUT_AS("parent: unlock normal", pthread_mutex_unlock(&normal));
}

// ------------------------------------------------------------- delegated

void scenario_delegated() {
  // Robust: the owner thread exits holding it.
  for (int type : {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK}) {
    g_prefix = "[robust type " + std::to_string(type) + "] ";
    pthread_mutex_t m;
    OUT_AS("init", init_mutex(&m, type, PTHREAD_MUTEX_ROBUST));
    OUT_AS("consistent while consistent", pthread_mutex_consistent(&m));
    OUT(pthread_mutex_lock(&m));
    // (relocking a robust normal mutex blocks forever in glibc)
    if (type != PTHREAD_MUTEX_NORMAL) OUT_AS("relock", pthread_mutex_lock(&m));
    OUT_AS("trylock", pthread_mutex_trylock(&m));
    OUT_AS("other thread: trylock", on_thread([&m] { return pthread_mutex_trylock(&m); }));
    OUT_AS("other thread: unlock", on_thread([&m] { return pthread_mutex_unlock(&m); }));
    int n = 0;
    while (n < 4 && pthread_mutex_unlock(&m) == 0) ++n;
    out_num("unlocks that succeeded", n);
    OUT_AS("destroy", pthread_mutex_destroy(&m));
    OUT_AS("init again", init_mutex(&m, type, PTHREAD_MUTEX_ROBUST));
    OUT_AS("owner thread dies holding it", on_thread([&m] { return pthread_mutex_lock(&m); }));
    OUT_AS("lock", pthread_mutex_lock(&m));
    OUT_AS("consistent", pthread_mutex_consistent(&m));
    OUT_AS("unlock", pthread_mutex_unlock(&m));
    OUT_AS("owner thread dies again", on_thread([&m] { return pthread_mutex_trylock(&m); }));
    timespec d = in_ms(CLOCK_REALTIME, 10);
    OUT_AS("timedlock", pthread_mutex_timedlock(&m, &d));
    OUT_AS("unlock without consistent", pthread_mutex_unlock(&m));
    OUT_AS("lock", pthread_mutex_lock(&m));
    OUT_AS("trylock", pthread_mutex_trylock(&m));
    OUT_AS("destroy", pthread_mutex_destroy(&m));
  }
  // Priority inheritance.
  for (int type : {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK}) {
    g_prefix = "[PI type " + std::to_string(type) + "] ";
    pthread_mutex_t m;
    OUT_AS("init", init_mutex(&m, type, PTHREAD_MUTEX_STALLED, PTHREAD_PRIO_INHERIT));
    OUT(pthread_mutex_lock(&m));
    OUT_AS("trylock by owner", pthread_mutex_trylock(&m));
    if (type != PTHREAD_MUTEX_NORMAL) OUT_AS("relock", pthread_mutex_lock(&m));
    OUT_AS("other thread: trylock", on_thread([&m] { return pthread_mutex_trylock(&m); }));
    timespec d = in_ms(CLOCK_MONOTONIC, 10);
    OUT_AS("other thread: clocklock", on_thread([&m, &d] { return pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &d); }));
    OUT_AS("destroy while locked", pthread_mutex_destroy(&m));
    int n = 0;
    while (n < 4 && pthread_mutex_unlock(&m) == 0) ++n;
    out_num("unlocks that succeeded", n);
    OUT_AS("destroy", pthread_mutex_destroy(&m));
  }
  // Priority protect, on fresh threads (glibc keeps per-thread ceiling state).
  for (int type : {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK}) {
    g_prefix = "[PP type " + std::to_string(type) + "] ";
    pthread_mutex_t m;
    OUT_AS("init", init_mutex(&m, type, PTHREAD_MUTEX_STALLED, PTHREAD_PRIO_PROTECT, PTHREAD_PROCESS_PRIVATE,
                              sched_get_priority_min(SCHED_FIFO)));
    OUT_AS("fresh thread: lock", on_thread([&m] { return pthread_mutex_lock(&m); }));
    OUT_AS("fresh thread: trylock", on_thread([&m] { return pthread_mutex_trylock(&m); }));
    int a = -1, b = -1, c = -1;
    on_thread([&] {
      a = pthread_mutex_lock(&m);
      b = pthread_mutex_trylock(&m);
      c = pthread_mutex_unlock(&m);
      return 0;
    });
    out("fresh thread: lock", a);
    out("same thread: trylock after the failed lock", b);
    out("same thread: unlock", c);
    OUT_AS("destroy", pthread_mutex_destroy(&m));
  }
  // Process-shared objects, used within the process.
  g_prefix = "[pshared] ";
  pthread_mutex_t pm;
  OUT_AS("mutex init", init_mutex(&pm, PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_STALLED, PTHREAD_PRIO_NONE,
                                  PTHREAD_PROCESS_SHARED));
  OUT(pthread_mutex_lock(&pm));
  OUT_AS("relock", pthread_mutex_lock(&pm));
  OUT_AS("other thread: trylock", on_thread([&pm] { return pthread_mutex_trylock(&pm); }));
  pthread_cond_t pc;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setpshared(&ca, PTHREAD_PROCESS_SHARED);
  OUT_AS("cond init", pthread_cond_init(&pc, &ca));
  timespec d = in_ms(CLOCK_REALTIME, 10);
  OUT_AS("cond timedwait", pthread_cond_timedwait(&pc, &pm, &d));
  OUT_AS("unlock", pthread_mutex_unlock(&pm));
  OUT_AS("unlock again", pthread_mutex_unlock(&pm));
  OUT_AS("cond timedwait without the mutex", pthread_cond_timedwait(&pc, &pm, &d));
  OUT_AS("cond destroy", pthread_cond_destroy(&pc));
  OUT_AS("mutex destroy", pthread_mutex_destroy(&pm));
  pthread_rwlock_t pl;
  pthread_rwlockattr_t ra;
  pthread_rwlockattr_init(&ra);
  pthread_rwlockattr_setpshared(&ra, PTHREAD_PROCESS_SHARED);
  OUT_AS("rwlock init", pthread_rwlock_init(&pl, &ra));
  OUT(pthread_rwlock_wrlock(&pl));
  OUT_AS("writer tryrdlock", pthread_rwlock_tryrdlock(&pl));
  OUT_AS("writer rdlock", pthread_rwlock_rdlock(&pl));
  OUT_AS("unlock", pthread_rwlock_unlock(&pl));
  OUT_AS("rwlock destroy", pthread_rwlock_destroy(&pl));
  // A condition wait whose mutex owner dies while the waiter sleeps: the
  // re-acquisition reports EOWNERDEAD through the wait.
  for (int type : {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK}) {
    g_prefix = "[robust cond type " + std::to_string(type) + "] ";
    pthread_mutex_t rm;
    pthread_cond_t rc = PTHREAD_COND_INITIALIZER;
    OUT_AS("init", init_mutex(&rm, type, PTHREAD_MUTEX_ROBUST));
    OUT(pthread_mutex_lock(&rm));
    pthread_t t;
    pthread_create(
        &t, nullptr,
        [](void* p) -> void* {
          pthread_mutex_lock(static_cast<pthread_mutex_t*>(p));  // taken during the wait, then dies
          return nullptr;
        },
        &rm);
    int w = 0, rounds = 0;
    do {
      timespec dd = in_ms(CLOCK_REALTIME, 20);
      w = pthread_cond_timedwait(&rc, &rm, &dd);
    } while ((w == 0 || w == ETIMEDOUT) && ++rounds < 500);
    out("wait result once the other owner died", w);
    pthread_join(t, nullptr);
    OUT_AS("consistent", pthread_mutex_consistent(&rm));
    OUT_AS("unlock", pthread_mutex_unlock(&rm));
    OUT_AS("cond destroy", pthread_cond_destroy(&rc));
    OUT_AS("destroy", pthread_mutex_destroy(&rm));
  }
  g_prefix = "[non-robust] ";
  pthread_mutex_t n = PTHREAD_MUTEX_INITIALIZER;
  OUT_AS("consistent", pthread_mutex_consistent(&n));
}

// ------------------------------------------------------------------ sem
// POSIX semaphores: every error path of glibc 2.36's sem_* in a fixed order,
// then a two-thread handshake, a pshared handshake across fork and a named
// (sem_open) semaphore. Lines print "0" or "-1 <errno name>"; values print as
// numbers.

void out_sem(const std::string& what, int rc, int err) {
  const char* name = strerrorname_np(err);
  if (rc == 0)
    printf("%s%s: 0\n", g_prefix.c_str(), what.c_str());
  else
    printf("%s%s: %d %s\n", g_prefix.c_str(), what.c_str(), rc, name != nullptr ? name : "errno-?");
}
// errno is read right after the call, before anything else can touch it.
#define SEM_OUT(label, call)   \
  do {                         \
    int rc_ = (call);          \
    int e_ = errno;            \
    out_sem(label, rc_, e_);   \
  } while (0)

long sem_value(sem_t* s) {
  int v = -12345;
  if (sem_getvalue(s, &v) != 0) return -99999;
  return v;
}

struct SemPending {
  sem_t* s;
  int which;
  int rc = -7, err = 0;
  bool returned = false;
};

// A deferred cancellation is pending when the call starts.
void* sem_call_with_cancel_pending(void* p) {
  auto* x = static_cast<SemPending*>(p);
  pthread_cancel(pthread_self());
  timespec d;
  switch (x->which) {
    case 0: x->rc = sem_wait(x->s); break;
    case 1: d = in_ms(CLOCK_REALTIME, 60'000); x->rc = sem_timedwait(x->s, &d); break;
    case 2: d = in_ms(CLOCK_MONOTONIC, 60'000); x->rc = sem_clockwait(x->s, CLOCK_MONOTONIC, &d); break;
    case 3: x->rc = sem_trywait(x->s); break;
    case 4: d = {time(nullptr) + 1, 1'000'000'000}; x->rc = sem_timedwait(x->s, &d); break;
    case 5: d = in_ms(CLOCK_MONOTONIC, 60'000); x->rc = sem_clockwait(x->s, CLOCK_PROCESS_CPUTIME_ID, &d); break;
    default: x->rc = sem_post(x->s); break;
  }
  x->err = errno;
  x->returned = true;
  return nullptr;  // returning is not a cancellation point
}

void scenario_sem() {
  sem_t s;
  timespec d;

  g_prefix = "[sem init] ";
  SEM_OUT("init 0", sem_init(&s, 0, 0));
  out_num("value", sem_value(&s));
  SEM_OUT("init SEM_VALUE_MAX", sem_init(&s, 0, SEM_VALUE_MAX));
  out_num("value", sem_value(&s));
  SEM_OUT("post at SEM_VALUE_MAX", sem_post(&s));
  out_num("value", sem_value(&s));
  SEM_OUT("trywait", sem_trywait(&s));
  SEM_OUT("post", sem_post(&s));
  out_num("value", sem_value(&s));
  SEM_OUT("init 5", sem_init(&s, 0, 5));
  SEM_OUT("init SEM_VALUE_MAX+1", sem_init(&s, 0, (unsigned)SEM_VALUE_MAX + 1));
  SEM_OUT("init UINT_MAX, pshared 1", sem_init(&s, 1, UINT_MAX));
  out_num("value after the failed inits", sem_value(&s));
  for (int pshared : {1, 2, -1}) {
    SEM_OUT("init pshared " + std::to_string(pshared), sem_init(&s, pshared, 1));
    SEM_OUT("trywait", sem_trywait(&s));
    SEM_OUT("trywait", sem_trywait(&s));
    SEM_OUT("destroy", sem_destroy(&s));
  }

  g_prefix = "[sem zero-filled] ";
  memset(&s, 0, sizeof s);
  out_num("value", sem_value(&s));
  SEM_OUT("trywait", sem_trywait(&s));
  SEM_OUT("post", sem_post(&s));
  out_num("value", sem_value(&s));
  SEM_OUT("wait", sem_wait(&s));
  SEM_OUT("destroy", sem_destroy(&s));

  g_prefix = "[sem reinit] ";
  SEM_OUT("init 3", sem_init(&s, 0, 3));
  SEM_OUT("trywait", sem_trywait(&s));
  SEM_OUT("destroy", sem_destroy(&s));
  SEM_OUT("init 1", sem_init(&s, 0, 1));
  out_num("value", sem_value(&s));
  SEM_OUT("trywait", sem_trywait(&s));
  SEM_OUT("trywait", sem_trywait(&s));

  g_prefix = "[sem timedwait] ";
  SEM_OUT("post", sem_post(&s));
  d = {time(nullptr) + 1, 1'000'000'000};
  SEM_OUT("tv_nsec 1e9 with a unit", sem_timedwait(&s, &d));
  d = {time(nullptr) + 1, -1};
  SEM_OUT("tv_nsec -1 with a unit", sem_timedwait(&s, &d));
  d = {-1, -1};
  SEM_OUT("tv_sec -1 tv_nsec -1 with a unit", sem_timedwait(&s, &d));
  out_num("value", sem_value(&s));
  d = {-1, 0};
  SEM_OUT("tv_sec -1 with a unit", sem_timedwait(&s, &d));
  SEM_OUT("tv_sec -1 at 0", sem_timedwait(&s, &d));
  d = {0, 0};
  SEM_OUT("epoch at 0", sem_timedwait(&s, &d));
  d = in_ms(CLOCK_REALTIME, 10);
  SEM_OUT("10 ms at 0", sem_timedwait(&s, &d));
  d = {time(nullptr) + 1, 1'000'000'000};
  SEM_OUT("tv_nsec 1e9 at 0", sem_timedwait(&s, &d));
  SEM_OUT("post", sem_post(&s));
  d = {0, 0};
  SEM_OUT("epoch with a unit", sem_timedwait(&s, &d));
  out_num("value", sem_value(&s));

  g_prefix = "[sem clockwait] ";
  for (clockid_t ck : {CLOCK_MONOTONIC, CLOCK_REALTIME}) {
    std::string c = ck == CLOCK_MONOTONIC ? "MONOTONIC" : "REALTIME";
    d = in_ms(ck, 10);
    SEM_OUT(c + " 10 ms at 0", sem_clockwait(&s, ck, &d));
    d = {-1, 0};
    SEM_OUT(c + " tv_sec -1 at 0", sem_clockwait(&s, ck, &d));
    SEM_OUT("post", sem_post(&s));
    d = {time(nullptr) + 1, 1'000'000'000};
    SEM_OUT(c + " tv_nsec 1e9 with a unit", sem_clockwait(&s, ck, &d));
    d = {0, 0};
    SEM_OUT(c + " expired with a unit", sem_clockwait(&s, ck, &d));
  }
  SEM_OUT("post", sem_post(&s));
  const std::pair<clockid_t, const char*> bad_clocks[] = {{CLOCK_PROCESS_CPUTIME_ID, "PROCESS_CPUTIME_ID"},
                                                         {CLOCK_THREAD_CPUTIME_ID, "THREAD_CPUTIME_ID"},
                                                         {CLOCK_MONOTONIC_RAW, "MONOTONIC_RAW"},
                                                         {CLOCK_REALTIME_COARSE, "REALTIME_COARSE"},
                                                         {CLOCK_BOOTTIME, "BOOTTIME"},
                                                         {-1, "-1"}};
  for (const auto& [ck, name] : bad_clocks) {
    d = in_ms(CLOCK_MONOTONIC, 10);
    SEM_OUT(std::string(name) + " with a unit", sem_clockwait(&s, ck, &d));
    d = {0, -1};
    SEM_OUT(std::string(name) + " and tv_nsec -1", sem_clockwait(&s, ck, &d));
  }
  out_num("value", sem_value(&s));
  SEM_OUT("trywait", sem_trywait(&s));
  SEM_OUT("trywait", sem_trywait(&s));
  SEM_OUT("destroy", sem_destroy(&s));

  g_prefix = "[sem cancel pending] ";
  const char* calls[] = {"sem_wait", "sem_timedwait", "sem_clockwait", "sem_trywait",
                         "sem_timedwait bad tv_nsec", "sem_clockwait bad clock", "sem_post"};
  for (int which = 0; which < 7; ++which) {
    for (unsigned initial : {0u, 1u}) {
      sem_init(&s, 0, initial);
      SemPending x{&s, which};
      pthread_t t;
      void* ret = nullptr;
      pthread_create(&t, nullptr, sem_call_with_cancel_pending, &x);
      pthread_join(t, &ret);
      std::string what = std::string(calls[which]) + " at " + std::to_string(initial);
      if (ret == PTHREAD_CANCELED)
        printf("%s%s: cancelled\n", g_prefix.c_str(), what.c_str());
      else
        out_sem(what + ": returned", x.rc, x.err);
      out_num(what + ": value", sem_value(&s));
      sem_destroy(&s);
    }
  }

  g_prefix = "[sem handshake] ";
  {
    sem_t a, b;
    sem_init(&a, 0, 0);
    sem_init(&b, 0, 0);
    constexpr int kRounds = 200;
    int failures = 0;
    std::function<void()> body = [&] {
      for (int i = 0; i < kRounds; ++i) {
        timespec dd = in_ms(CLOCK_MONOTONIC, 10'000);
        int rc = i % 2 ? sem_wait(&a) : sem_clockwait(&a, CLOCK_MONOTONIC, &dd);
        if (rc != 0) ++failures;
        if (sem_post(&b) != 0) ++failures;
      }
    };
    pthread_t t;
    pthread_create(
        &t, nullptr,
        [](void* p) -> void* {
          (*static_cast<std::function<void()>*>(p))();
          return nullptr;
        },
        &body);
    int main_failures = 0;
    for (int i = 0; i < kRounds; ++i) {
      if (i % 50 == 0) usleep(5000);  // now and then the other thread is asleep first
      if (sem_post(&a) != 0) ++main_failures;
      timespec dd = in_ms(CLOCK_REALTIME, 10'000);
      if (sem_timedwait(&b, &dd) != 0) ++main_failures;
    }
    pthread_join(t, nullptr);
    out_num("round trips", kRounds);
    out_num("failures in the thread", failures);
    out_num("failures in main", main_failures);
    out_num("value a", sem_value(&a));
    out_num("value b", sem_value(&b));
    SEM_OUT("destroy a", sem_destroy(&a));
    SEM_OUT("destroy b", sem_destroy(&b));
  }

  g_prefix = "[sem pshared fork] ";
  {
    void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    sem_t* ping = static_cast<sem_t*>(mem);
    sem_t* pong = ping + 2;
    SEM_OUT("init ping", sem_init(ping, 1, 0));
    SEM_OUT("init pong", sem_init(pong, 1, 0));
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
      alarm(20);
      int bad = 0;
      for (int i = 0; i < 100; ++i) {
        if (sem_wait(ping) != 0) ++bad;
        if (sem_post(pong) != 0) ++bad;
      }
      _exit(bad == 0 ? 0 : 1);
    }
    int bad = 0;
    for (int i = 0; i < 100; ++i) {
      if (sem_post(ping) != 0) ++bad;
      d = in_ms(CLOCK_REALTIME, 10'000);
      if (sem_timedwait(pong, &d) != 0) ++bad;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    out_num("parent failures", bad);
    out_num("child exit status", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
    out_num("value ping", sem_value(ping));
    out_num("value pong", sem_value(pong));
    munmap(mem, 4096);
  }

  g_prefix = "[sem named] ";
  {
    std::string name = "/lockswap-diff-" + std::to_string(getpid());
    sem_t* n = sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, 2);
    printf("%ssem_open: %s\n", g_prefix.c_str(), n == SEM_FAILED ? "SEM_FAILED" : "ok");
    if (n != SEM_FAILED) {
      SEM_OUT("unlink", sem_unlink(name.c_str()));
      out_num("value", sem_value(n));
      SEM_OUT("trywait", sem_trywait(n));
      SEM_OUT("wait", sem_wait(n));
      SEM_OUT("trywait", sem_trywait(n));
      d = in_ms(CLOCK_REALTIME, 10);
      SEM_OUT("timedwait 10 ms", sem_timedwait(n, &d));
      d = {time(nullptr) + 1, -1};
      SEM_OUT("timedwait tv_nsec -1", sem_timedwait(n, &d));
      SEM_OUT("post", sem_post(n));
      d = in_ms(CLOCK_MONOTONIC, 10);
      SEM_OUT("clockwait MONOTONIC", sem_clockwait(n, CLOCK_MONOTONIC, &d));
      SEM_OUT("clockwait THREAD_CPUTIME_ID", sem_clockwait(n, CLOCK_THREAD_CPUTIME_ID, &d));
      out_num("value", sem_value(n));
      SEM_OUT("close", sem_close(n));
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  alarm(120);  // a hang fails the test instead of blocking ctest
  setvbuf(stdout, nullptr, _IOLBF, 0);
  const char* s = argc > 1 ? argv[1] : "";
  if (!strcmp(s, "mutex")) scenario_mutex();
  else if (!strcmp(s, "rwlock")) scenario_rwlock();
  else if (!strcmp(s, "cond")) scenario_cond();
  else if (!strcmp(s, "c11")) scenario_c11();
  else if (!strcmp(s, "fork")) scenario_fork();
  else if (!strcmp(s, "delegated")) scenario_delegated();
  else if (!strcmp(s, "sem")) scenario_sem();
  else {
    fprintf(stderr, "usage: %s mutex|rwlock|cond|c11|fork|delegated|sem\n", argv[0]);
    return 2;
  }
  return 0;
}
