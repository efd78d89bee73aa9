// tests/torture/torture.cpp — a locktorture-style randomized torture test of
// every primitive lockswap interposes: pthread mutexes of every kind, rwlocks,
// condition variables, C11 mtx/cnd and POSIX unnamed semaphores, with thread
// cancellation (deferred and asynchronous), fork, and destroy-and-unmap in
// the middle. It uses only the plain pthread / C11 / sem API, so it tortures
// whatever is preloaded (or glibc itself when nothing is).
//
// Each worker draws its operations from a generator seeded from --seed (always
// printed), so a failing run prints the command that repeats its operation
// mix; the interleaving is the scheduler's.
//
// The harness never coordinates through a primitive under test: the checks
// are atomics, the watchdog reads atomics (and sem_getvalue), joins are
// pthread_clockjoin_np. Two helpers do use the primitives, as any program
// would: a feeder posts to (produces on) a shared semaphore (condvar) whose
// waiters found it empty twice in a row, so that random waits always end;
// and the stop sequence broadcasts every condvar.
//
// Run: torture [--seed S] [--seconds T] [--threads N] [--no-fork]
//      [--no-cancel] [--no-async-cancel] [--only CLASSES] [--verbose]
// Under a variant: build/bin/lockswap --variant rwsem -- build/tests/torture/torture --seconds 3600
// It prints ops=<total> and per-class counts, one line per check (ok, FAILED
// or skipped), the reproduction command, and last "N passed, M failed"
// (N, M: checks); the exit status is non-zero on any failure. A fatal signal
// prints the seed and the reproduction command before the process dies.
// Self-test of the harness (not for CI): --inject lost-signal (drops some
// cond/handshake wake-ups: the watchdog reports the stuck handshake),
// lost-post (counts sem posts it skips: sem_token_conservation fails),
// no-lock (skips some mutex acquisitions: mutual_exclusion fails).
//
// Checks (each one line of the closing summary, "N passed, M failed"):
//   mutual_exclusion          an owner word set/cleared inside every critical
//                             section (mutexes, C11 mtx, condvar mutexes)
//   reader_writer_exclusion   reader count vs writer word, torn writes
//   protected_counters        plain counters under the lock == atomic shadows
//   cond_no_lost_wakeup       token protocol on condvars: produced ==
//                             consumed + left, reservations all honoured
//   sem_token_conservation    value == init + posted - consumed, exact final
//                             values, "a reserved token can be taken at once"
//   handshake_rounds          ping-pong pairs (cond, C11 cnd, sem) in step
//   return_codes              every call returns what glibc documents
//   timeouts                  no ETIMEDOUT before the deadline, no wait
//                             past it (watchdog)
//   progress                  watchdog: no thread blocked past --stall-seconds
//                             while the object it waits for is free (owner
//                             words, reader/writer words); no wait past 6x
//                             that bound at all; every object free at the end
//   destroy_and_unmap         the last user destroys and munmaps at once:
//                             no crash, no late write into the page
//   deferred_cancel           cancelled waiters: cleanup sees a consistent
//                             state, lock calls are not cancellation points
//   async_cancel              asynchronous cancellation while blocked or
//                             spinning in a lock call; the lock stays usable
//                             (not checked for glibc's own rwlock, which an
//                             async-cancelled waiter leaves unusable)
//   fork                      the child uses locks the forker held or that
//                             were free, with ghost waiters from the parent
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <threads.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "arch/relax.h"
#include "tests/common/test_support.h"
#include "victims.h"

extern char** environ;

namespace {

// ------------------------------------------------------------------ basics

using lstest::now_ns;
int64_t mono() { return now_ns(CLOCK_MONOTONIC); }
timespec to_ts(int64_t ns) {
  if (ns < 0) ns = 0;
  timespec t;
  t.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  t.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return t;
}
void sleep_ns(int64_t ns) {
  if (ns <= 0) return;
  timespec t = to_ts(ns);
  while (nanosleep(&t, &t) != 0 && errno == EINTR) {
  }
}
using lockswap::arch::cpu_relax;
using lstest::current_tid;

// splitmix64: small, fast, good enough to pick operations.
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed = 1) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t below(uint32_t n) { return n ? static_cast<uint32_t>(((next() >> 32) * n) >> 32) : 0; }
  bool chance(uint32_t one_in) { return below(one_in) == 0; }
};

// ------------------------------------------------------------ op classes

enum Class { K_MUTEX, K_C11, K_RWLOCK, K_COND, K_SEM, K_LIFETIME, K_CANCEL, K_ASYNC, K_FORK, K_HANDSHAKE, NCLASS };
const char* const kClassName[NCLASS] = {"mutex",    "c11",    "rwlock",       "cond", "sem",
                                        "lifetime", "cancel", "async_cancel", "fork", "handshake"};
// Relative weights of the operations a worker draws (handshake: 0 = no
// ping-pong threads, otherwise on). The expensive classes (they start threads
// or fork) are also rate-limited globally, see kMinIntervalNs.
const unsigned kDefaultWeight[NCLASS] = {300, 100, 250, 250, 200, 20, 20, 10, 5, 1};
const int64_t kMinIntervalNs[NCLASS] = {0, 0, 0, 0, 0, 2'000'000, 2'000'000, 4'000'000, 25'000'000, 0};

enum Check {
  CK_MUTEX_EXCL, CK_RW_EXCL, CK_COUNTERS, CK_COND, CK_SEM, CK_HANDSHAKE, CK_ERRNO, CK_TIMEOUTS,
  CK_PROGRESS, CK_LIFETIME, CK_CANCEL, CK_ASYNC, CK_FORK, NCHECK
};
const char* const kCheckName[NCHECK] = {
    "mutual_exclusion", "reader_writer_exclusion", "protected_counters", "cond_no_lost_wakeup",
    "sem_token_conservation", "handshake_rounds", "return_codes", "timeouts", "progress",
    "destroy_and_unmap", "deferred_cancel", "async_cancel", "fork"};

struct Options {
  uint64_t seed = 0;
  double seconds = 10;
  int threads = 0;
  double stall_s = 10;
  bool verbose = false;
  std::string inject;  // harness self-test: lost-signal, lost-post, no-lock
  unsigned weight[NCLASS];
  std::string argv0;
  std::string extra;  // options to repeat in the reproduction line
} g_opt;

std::atomic<uint64_t> g_fail[NCHECK];
std::atomic<int> g_msgs{0};
std::atomic<bool> g_stop{false};
std::atomic<bool> g_go{false};
std::atomic<int> g_next_id{1000};
std::atomic<uint64_t> g_busy{0}, g_timeouts{0}, g_feeds{0}, g_rec_busy{0}, g_notes{0};
std::atomic<uint64_t> g_ops_total[NCLASS];
std::atomic<int64_t> g_last_dump{0};
bool g_native_mutex = false, g_native_rwlock = false, g_native_sem = false;
char g_repro[2048];

// The variant in force, from the variables lockswap itself reads.
bool env_native(const char* var) {
  const char* v = getenv(var);
  const char* pre = getenv("LD_PRELOAD");
  return v != nullptr && *v != '\0' && strcmp(v, "glibc") != 0 && pre != nullptr && strstr(pre, "lockswap") != nullptr;
}

void fail(Check c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
void fail(Check c, const char* fmt, ...) {
  int old;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);  // stdio is a cancellation point
  g_fail[c].fetch_add(1);
  if (g_msgs.fetch_add(1) < 40) {
    char buf[640];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    fprintf(stderr, "torture[%d]: FAIL [%s] %s\n", getpid(), kCheckName[c], buf);
  }
  pthread_setcancelstate(old, &old);
}

void note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void note(const char* fmt, ...) {
  g_notes.fetch_add(1, std::memory_order_relaxed);
  if (!g_opt.verbose) return;
  int old;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  char buf[640];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf, sizeof buf, fmt, ap);
  va_end(ap);
  fprintf(stderr, "torture: note: %s\n", buf);
  pthread_setcancelstate(old, &old);
}

// ------------------------------------------------------- thread states

// What a thread is blocked in, for the watchdog. The object kinds (W_MUTEX:
// MutexObj, W_CMUTEX/W_COND: CondObj, W_RWLOCK: RwObj, W_SEM: SemObj, W_HS:
// HsPair) are read by the watchdog; W_BOUNDED objects (in pages that may be
// unmapped) are never dereferenced, only timed.
enum WaitKind { W_NONE, W_MUTEX, W_CMUTEX, W_RWLOCK, W_COND, W_SEM, W_HS, W_BOUNDED };
const char* const kWaitName[] = {"-", "mutex", "cond-mutex", "rwlock", "cond", "sem", "handshake", "bounded"};

struct alignas(64) TState {
  std::atomic<int> used{0};  // 0 free, 2 being set up, 1 live
  std::atomic<int64_t> progress{0};
  std::atomic<const char*> op{"start"};
  std::atomic<int> wkind{W_NONE};
  std::atomic<int> wmode{0};  // W_RWLOCK: 0 write, 1 read, 2 recursive read; W_HS: side
  std::atomic<const void*> wobj{nullptr};
  std::atomic<const char*> wwhat{""};
  std::atomic<int64_t> wsince{0}, wlimit{0};
  std::atomic<uint64_t> ops[NCLASS] = {};
  std::atomic<pid_t> tid{0};
  int id = 0;  // the value written into owner words
  char name[28] = {};
  // watchdog-private
  int64_t seen_wsince = -1, free_since = 0, reported_wsince = -1, reported_idle = -1, reported_late = -1;
};

constexpr int kMaxStates = 1024;
TState g_states[kMaxStates];
thread_local TState* t_ts = nullptr;
thread_local int t_me = 0;

// A slot for a new thread (workers, helpers, victims: slots are recycled).
TState* alloc_state(const char* fmt, int i) {
  for (int n = 0; n < kMaxStates; ++n) {
    TState* s = &g_states[n];
    int expect = 0;
    if (!s->used.compare_exchange_strong(expect, 2)) continue;
    snprintf(s->name, sizeof s->name, fmt, i);
    s->id = g_next_id.fetch_add(1);
    s->op.store("start");
    s->wkind.store(W_NONE);
    s->tid.store(0);
    for (auto& o : s->ops) o.store(0, std::memory_order_relaxed);
    s->progress.store(mono());
    s->used.store(1, std::memory_order_release);
    return s;
  }
  return nullptr;
}
void release_state(TState* s) {
  if (!s) return;
  for (int c = 0; c < NCLASS; ++c) g_ops_total[c].fetch_add(s->ops[c].load(std::memory_order_relaxed));
  s->wkind.store(W_NONE);
  s->used.store(0, std::memory_order_release);
}
void adopt_state(TState* s) {
  t_ts = s;
  t_me = s ? s->id : g_next_id.fetch_add(1);
  if (s) s->tid.store(current_tid());
}

void count_op(int c) {
  if (!t_ts) return;
  t_ts->ops[c].store(t_ts->ops[c].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  t_ts->progress.store(mono(), std::memory_order_relaxed);
}
void set_op(const char* what) {
  if (t_ts) t_ts->op.store(what, std::memory_order_relaxed);
}

int64_t bound_ns() { return static_cast<int64_t>(g_opt.stall_s * 1e9); }

// Published while a thread waits, for the watchdog: what for, since when,
// and for timed waits the deadline (on CLOCK_MONOTONIC).
struct WaitScope {
  TState* ts;
  WaitScope(int kind, const void* obj, const char* what, int64_t limit = 0, int mode = 0) : ts(t_ts) {
    if (!ts) return;
    ts->wobj.store(obj, std::memory_order_relaxed);
    ts->wwhat.store(what, std::memory_order_relaxed);
    ts->wlimit.store(limit, std::memory_order_relaxed);
    ts->wmode.store(mode, std::memory_order_relaxed);
    ts->wsince.store(mono(), std::memory_order_relaxed);
    ts->wkind.store(kind, std::memory_order_release);
  }
  ~WaitScope() {
    if (!ts) return;
    ts->wkind.store(W_NONE, std::memory_order_release);
    ts->progress.store(mono(), std::memory_order_relaxed);
  }
  WaitScope(const WaitScope&) = delete;
  WaitScope& operator=(const WaitScope&) = delete;
};

// ------------------------------------------------------------- deadlines

struct Deadline {
  clockid_t clk = CLOCK_REALTIME;
  int64_t ns = 0;
  timespec ts{};
  // The same instant on CLOCK_MONOTONIC (what the watchdog compares with).
  int64_t mono_limit() const { return mono() + (ns - now_ns(clk) > 0 ? ns - now_ns(clk) : 0); }
  bool reached() const { return now_ns(clk) >= ns; }
  double early_ms() const { return (ns - now_ns(clk)) / 1e6; }
};

// Short deadlines, already-expired ones included; `long_ok` adds 0.1–0.3 s.
Deadline make_deadline(Rng& r, clockid_t clk, bool long_ok = false) {
  int64_t now = now_ns(clk), d;
  switch (r.below(long_ok ? 9 : 8)) {
    case 0: d = 0; break;                                                     // the epoch
    case 1: d = now - static_cast<int64_t>(r.below(1'000'000'000)); break;   // expired
    case 2: d = now; break;                                                   // expiring
    case 3: case 4: d = now + r.below(200'000); break;                        // < 0.2 ms
    case 5: case 6: d = now + r.below(3'000'000); break;                      // < 3 ms
    case 7: d = now + r.below(20'000'000); break;                             // < 20 ms
    default: d = now + 100'000'000 + r.below(200'000'000); break;
  }
  Deadline out;
  out.clk = clk;
  out.ns = d < 0 ? 0 : d;
  out.ts = to_ts(out.ns);
  return out;
}
Deadline far_deadline(clockid_t clk, int64_t ms) {
  Deadline out;
  out.clk = clk;
  out.ns = now_ns(clk) + ms * 1'000'000;
  out.ts = to_ts(out.ns);
  return out;
}

// How a lock is taken.
enum How { H_LOCK, H_TRY, H_TIMED, H_CLOCK_RT, H_CLOCK_MONO, NHOW };
const char* const kMutexHow[NHOW] = {"mutex_lock", "mutex_trylock", "mutex_timedlock", "mutex_clocklock(RT)",
                                     "mutex_clocklock(MONO)"};
const char* const kRdHow[NHOW] = {"rwlock_rdlock", "rwlock_tryrdlock", "rwlock_timedrdlock",
                                  "rwlock_clockrdlock(RT)", "rwlock_clockrdlock(MONO)"};
const char* const kWrHow[NHOW] = {"rwlock_wrlock", "rwlock_trywrlock", "rwlock_timedwrlock",
                                  "rwlock_clockwrlock(RT)", "rwlock_clockwrlock(MONO)"};
bool how_timed(int h) { return h >= H_TIMED; }
clockid_t how_clock(int h) { return h == H_CLOCK_MONO ? CLOCK_MONOTONIC : CLOCK_REALTIME; }

// The result of a lock attempt that did not acquire.
void check_not_acquired(const char* call, const char* obj, int how, int rc, const Deadline& d) {
  if (how == H_TRY && rc == EBUSY) {
    g_busy.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (how_timed(how) && rc == ETIMEDOUT) {
    g_timeouts.fetch_add(1, std::memory_order_relaxed);
    if (!d.reached()) fail(CK_TIMEOUTS, "%s on %s returned ETIMEDOUT %.3f ms before its deadline", call, obj, d.early_ms());
    return;
  }
  fail(CK_ERRNO, "%s on %s returned %s", call, obj, lstest::err_name(rc));
}

// Owner words: set right after acquiring, cleared right before releasing.
void enter(std::atomic<int>& owner, int me, const char* what, const char* name) {
  int prev = owner.exchange(me, std::memory_order_acq_rel);
  if (prev != 0) fail(CK_MUTEX_EXCL, "%s: acquired %s while its owner word says thread %d holds it", what, name, prev);
}
void leave(std::atomic<int>& owner, int me, const char* what, const char* name) {
  int prev = owner.exchange(0, std::memory_order_acq_rel);
  if (prev != me) fail(CK_MUTEX_EXCL, "%s: releasing %s, but its owner word says thread %d (not %d)", what, name, prev, me);
}

// ----------------------------------------------------------------- mutexes

enum MKind {
  MK_DEFAULT_STATIC, MK_DEFAULT, MK_NORMAL, MK_RECURSIVE, MK_ERRORCHECK, MK_ADAPTIVE, MK_RECURSIVE_STATIC,
  MK_ERRORCHECK_STATIC, MK_ADAPTIVE_STATIC, MK_C11_PLAIN, MK_C11_TIMED, MK_C11_RECURSIVE, MK_C11_TIMED_RECURSIVE,
  MK_COUNT
};
const char* const kMKindName[MK_COUNT] = {
    "default(static)", "default", "normal", "recursive", "errorcheck", "adaptive", "recursive(static)",
    "errorcheck(static)", "adaptive(static)", "mtx_plain", "mtx_timed", "mtx_plain|recursive", "mtx_timed|recursive"};
bool mk_c11(int k) { return k >= MK_C11_PLAIN; }
bool mk_recursive(int k) {
  return k == MK_RECURSIVE || k == MK_RECURSIVE_STATIC || k == MK_C11_RECURSIVE || k == MK_C11_TIMED_RECURSIVE;
}
bool mk_errorcheck(int k) { return k == MK_ERRORCHECK || k == MK_ERRORCHECK_STATIC; }
bool mk_c11_timed(int k) { return k == MK_C11_TIMED || k == MK_C11_TIMED_RECURSIVE; }
// No owner check on unlock: a child of fork can unlock what its forker held.
bool mk_plain_pthread(int k) {
  return k == MK_DEFAULT_STATIC || k == MK_DEFAULT || k == MK_NORMAL || k == MK_ADAPTIVE || k == MK_ADAPTIVE_STATIC;
}

int c11rc(int r) {
  switch (r) {
    case thrd_success: return 0;
    case thrd_busy: return EBUSY;
    case thrd_timedout: return ETIMEDOUT;
    case thrd_nomem: return ENOMEM;
  }
  return -1;
}

int mx_init(void* p, int kind) {
  auto* m = static_cast<pthread_mutex_t*>(p);
  switch (kind) {
    case MK_DEFAULT_STATIC: { pthread_mutex_t i = PTHREAD_MUTEX_INITIALIZER; memcpy(m, &i, sizeof i); return 0; }
    case MK_RECURSIVE_STATIC: { pthread_mutex_t i = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP; memcpy(m, &i, sizeof i); return 0; }
    case MK_ERRORCHECK_STATIC: { pthread_mutex_t i = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP; memcpy(m, &i, sizeof i); return 0; }
    case MK_ADAPTIVE_STATIC: { pthread_mutex_t i = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP; memcpy(m, &i, sizeof i); return 0; }
    case MK_DEFAULT: return pthread_mutex_init(m, nullptr);
    case MK_C11_PLAIN: return c11rc(mtx_init(static_cast<mtx_t*>(p), mtx_plain));
    case MK_C11_TIMED: return c11rc(mtx_init(static_cast<mtx_t*>(p), mtx_timed));
    case MK_C11_RECURSIVE: return c11rc(mtx_init(static_cast<mtx_t*>(p), mtx_plain | mtx_recursive));
    case MK_C11_TIMED_RECURSIVE: return c11rc(mtx_init(static_cast<mtx_t*>(p), mtx_timed | mtx_recursive));
  }
  int type = kind == MK_RECURSIVE    ? PTHREAD_MUTEX_RECURSIVE
             : kind == MK_ERRORCHECK ? PTHREAD_MUTEX_ERRORCHECK
             : kind == MK_ADAPTIVE   ? PTHREAD_MUTEX_ADAPTIVE_NP
                                     : PTHREAD_MUTEX_NORMAL;
  return lstest::init_mutex_of_type(m, type);
}
// For C11 mutexes a timed `how` on a non-timed mutex becomes a plain lock,
// and every timed form is mtx_timedlock (TIME_UTC, i.e. CLOCK_REALTIME).
int mx_fix_how(int kind, int how) {
  if (!mk_c11(kind)) return how;
  if (how_timed(how)) return mk_c11_timed(kind) ? H_TIMED : H_LOCK;
  return how;
}
int mx_acquire(void* p, int kind, int how, const Deadline& d) {
  if (mk_c11(kind)) {
    auto* m = static_cast<mtx_t*>(p);
    switch (how) {
      case H_TRY: return c11rc(mtx_trylock(m));
      case H_TIMED: return c11rc(mtx_timedlock(m, &d.ts));
      default: return c11rc(mtx_lock(m));
    }
  }
  auto* m = static_cast<pthread_mutex_t*>(p);
  switch (how) {
    case H_LOCK: return pthread_mutex_lock(m);
    case H_TRY: return pthread_mutex_trylock(m);
    case H_TIMED: return pthread_mutex_timedlock(m, &d.ts);
    default: return pthread_mutex_clocklock(m, d.clk, &d.ts);
  }
}
int mx_release(void* p, int kind) {
  if (mk_c11(kind)) return c11rc(mtx_unlock(static_cast<mtx_t*>(p)));
  return pthread_mutex_unlock(static_cast<pthread_mutex_t*>(p));
}

struct alignas(64) MutexObj {
  union {
    pthread_mutex_t pm;
    mtx_t cm;
  };
  int kind = 0;
  char name[48] = {};
  std::atomic<int> owner{0};
  uint64_t counter = 0;  // protected by the lock
  std::atomic<uint64_t> shadow{0};
  MutexObj() { memset(&pm, 0, sizeof pm); }
  void* obj() { return &pm; }
};


// ----------------------------------------------------------------- rwlocks

enum RKind { RK_DEFAULT_STATIC, RK_DEFAULT, RK_PREFER_READER, RK_WRITER_NONREC, RK_WRITER_NONREC_STATIC, RK_COUNT };
const char* const kRKindName[RK_COUNT] = {"default(static)", "default", "prefer-reader",
                                          "writer-nonrecursive", "writer-nonrecursive(static)"};
// The default kind prefers readers: a thread may take a read lock again while
// it holds one, whatever writers wait (glibc; POSIX allows recursive reads).
bool rk_default(int k) { return k == RK_DEFAULT_STATIC || k == RK_DEFAULT || k == RK_PREFER_READER; }

int rw_init(pthread_rwlock_t* l, int kind) {
  if (kind == RK_DEFAULT_STATIC) {
    pthread_rwlock_t i = PTHREAD_RWLOCK_INITIALIZER;
    memcpy(l, &i, sizeof i);
    return 0;
  }
  if (kind == RK_WRITER_NONREC_STATIC) {
    pthread_rwlock_t i = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
    memcpy(l, &i, sizeof i);
    return 0;
  }
  if (kind == RK_DEFAULT) return pthread_rwlock_init(l, nullptr);
  pthread_rwlockattr_t a;
  pthread_rwlockattr_init(&a);
  pthread_rwlockattr_setkind_np(
      &a, kind == RK_PREFER_READER ? PTHREAD_RWLOCK_PREFER_READER_NP : PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
  int rc = pthread_rwlock_init(l, &a);
  pthread_rwlockattr_destroy(&a);
  return rc;
}

int rw_acquire(pthread_rwlock_t* l, bool rd, int how, const Deadline& d) {
  if (rd) {
    switch (how) {
      case H_LOCK: return pthread_rwlock_rdlock(l);
      case H_TRY: return pthread_rwlock_tryrdlock(l);
      case H_TIMED: return pthread_rwlock_timedrdlock(l, &d.ts);
      default: return pthread_rwlock_clockrdlock(l, d.clk, &d.ts);
    }
  }
  switch (how) {
    case H_LOCK: return pthread_rwlock_wrlock(l);
    case H_TRY: return pthread_rwlock_trywrlock(l);
    case H_TIMED: return pthread_rwlock_timedwrlock(l, &d.ts);
    default: return pthread_rwlock_clockwrlock(l, d.clk, &d.ts);
  }
}

struct alignas(64) RwObj {
  pthread_rwlock_t rw;
  int kind = 0;
  char name[48] = {};
  std::atomic<int> readers{0};
  std::atomic<int> writer{0};
  std::atomic<uint64_t> data[4] = {};  // written only under the write lock, all four equal
  uint64_t counter = 0;                // protected by the write lock
  std::atomic<uint64_t> shadow{0};
};

// Reader/writer bookkeeping inside the critical sections.
uint64_t rd_enter(RwObj& o, const char* what) {
  o.readers.fetch_add(1);
  int w = o.writer.load();
  if (w != 0) fail(CK_RW_EXCL, "%s: read-acquired %s while its writer word says thread %d writes", what, o.name, w);
  uint64_t v = o.data[0].load(std::memory_order_relaxed);
  for (int i = 1; i < 4; ++i)
    if (o.data[i].load(std::memory_order_relaxed) != v)
      fail(CK_RW_EXCL, "%s: torn data under a read lock of %s (a writer inside)", what, o.name);
  return v;
}
void rd_leave(RwObj& o, uint64_t v, const char* what) {
  for (int i = 0; i < 4; ++i)
    if (o.data[i].load(std::memory_order_relaxed) != v) {
      fail(CK_RW_EXCL, "%s: data of %s changed while read-locked", what, o.name);
      break;
    }
  int w = o.writer.load();
  if (w != 0) fail(CK_RW_EXCL, "%s: thread %d writes %s while it is read-locked", what, w, o.name);
  o.readers.fetch_sub(1);
}
void wr_enter(RwObj& o, int me, const char* what) {
  int prev = o.writer.exchange(me);
  if (prev != 0) fail(CK_RW_EXCL, "%s: write-acquired %s while thread %d writes", what, o.name, prev);
  int r = o.readers.load();
  if (r != 0) fail(CK_RW_EXCL, "%s: write-acquired %s while %d readers hold it", what, o.name, r);
  if (o.counter != o.shadow.load(std::memory_order_relaxed))
    fail(CK_COUNTERS, "%s: counter of %s is %llu, its shadow %llu", what, o.name, (unsigned long long)o.counter,
         (unsigned long long)o.shadow.load());
  o.counter++;
  o.shadow.fetch_add(1, std::memory_order_relaxed);
  for (auto& d : o.data) d.store(o.counter, std::memory_order_relaxed);
}
void wr_leave(RwObj& o, int me, const char* what) {
  int r = o.readers.load();
  if (r != 0) fail(CK_RW_EXCL, "%s: %d readers inside %s while it is write-locked", what, r, o.name);
  int prev = o.writer.exchange(0);
  if (prev != me) fail(CK_RW_EXCL, "%s: releasing %s, but its writer word says thread %d (not %d)", what, o.name, prev, me);
}

// ------------------------------------------------------------ condvars

struct alignas(64) CondObj {
  bool c11 = false;
  union {
    pthread_mutex_t pm;
    mtx_t cm;
  };
  union {
    pthread_cond_t pc;
    cnd_t cc;
  };
  int mkind = MK_DEFAULT;
  clockid_t clock = CLOCK_REALTIME;  // the clock of pthread_cond_timedwait (C11: TIME_UTC)
  char name[64] = {};
  std::atomic<int> owner{0};
  uint64_t tokens = 0;  // protected by the mutex
  int waiters = 0;      // protected by the mutex
  std::atomic<uint64_t> tokens_a{0}, produced{0}, consumed{0};
  std::atomic<int> waiters_a{0}, untimed_a{0};
  bool feed_seen = false;  // feeder-private
  CondObj() {
    memset(&pm, 0, sizeof pm);
    memset(&pc, 0, sizeof pc);
  }
  void* mtx() { return &pm; }
  // A waiter counts itself in and out (holding the mutex); the untimed ones
  // are those the feeder must not leave without a token.
  void waiter_in(bool untimed) {
    waiters++;
    waiters_a.fetch_add(1);
    if (untimed) untimed_a.fetch_add(1);
  }
  void waiter_out(bool untimed) {
    waiters--;
    waiters_a.fetch_sub(1);
    if (untimed) untimed_a.fetch_sub(1);
  }
  // A waiter that leaves takes a token if there is one, whatever woke it.
  void take_token_if_any() {
    if (tokens == 0) return;
    tokens--;
    tokens_a.store(tokens);
    consumed.fetch_add(1);
  }
};

void cond_lock(CondObj& c, const char* what) {
  int rc;
  {
    WaitScope ws(W_CMUTEX, &c, what);
    rc = mx_acquire(c.mtx(), c.mkind, H_LOCK, Deadline{});
  }
  if (rc != 0) fail(CK_ERRNO, "%s: locking the mutex of %s returned %s", what, c.name, lstest::err_name(rc));
  enter(c.owner, t_me, what, c.name);
}
void cond_unlock(CondObj& c, const char* what) {
  leave(c.owner, t_me, what, c.name);
  int rc = mx_release(c.mtx(), c.mkind);
  if (rc != 0) fail(CK_ERRNO, "%s: unlocking the mutex of %s returned %s", what, c.name, lstest::err_name(rc));
}
// form: 0 wait, 1 timedwait (the cond's clock), 2 clockwait (d.clk)
int cv_wait(CondObj& c, int form, const Deadline& d) {
  if (c.c11) {
    if (form == 0) return c11rc(cnd_wait(&c.cc, &c.cm));
    return c11rc(cnd_timedwait(&c.cc, &c.cm, &d.ts));
  }
  switch (form) {
    case 0: return pthread_cond_wait(&c.pc, &c.pm);
    case 1: return pthread_cond_timedwait(&c.pc, &c.pm, &d.ts);
    default: return pthread_cond_clockwait(&c.pc, &c.pm, d.clk, &d.ts);
  }
}
int cv_wake(CondObj& c, bool all) {
  if (c.c11) return c11rc(all ? cnd_broadcast(&c.cc) : cnd_signal(&c.cc));
  return all ? pthread_cond_broadcast(&c.pc) : pthread_cond_signal(&c.pc);
}
// One wait of `form` by the mutex owner `call`, as the checker sees it: the
// mutex is not owned during the wait, and owned again after it.
int cv_wait_owned(CondObj& c, int form, const Deadline& d, const char* call, bool timed) {
  leave(c.owner, t_me, call, c.name);
  int rc;
  {
    WaitScope ws(W_COND, &c, call, timed ? d.mono_limit() : 0);
    rc = cv_wait(c, form, d);
  }
  enter(c.owner, t_me, call, c.name);
  return rc;
}
const char* cv_form_name(const CondObj& c, int form) {
  if (c.c11) return form == 0 ? "cnd_wait" : "cnd_timedwait";
  return form == 0 ? "cond_wait" : form == 1 ? "cond_timedwait" : "cond_clockwait";
}

// ------------------------------------------------------------ semaphores

struct alignas(64) SemObj {
  sem_t s;
  unsigned init = 0;
  char name[40] = {};
  std::atomic<uint64_t> posted{0}, consumed{0};
  std::atomic<int> blocked{0};
  bool feed_seen = false;  // feeder-private
};
// Deferred-cancel victims wait on the shared semaphores only when the
// semaphore is lockswap's own. glibc 2.36's own sem_wait can swallow a
// sem_post's wake-up when the waiter is cancelled as it wakes, leaving the
// token to waiters that are never woken (docs/glibc-versions.md, "A cancelled
// sem_wait can swallow a wake-up"): with glibc's semaphore, victims wait on
// this one, which nobody posts, so the lost-wakeup checks judge lockswap's
// locks and not that glibc defect.
SemObj* g_victim_sem = nullptr;
int sem_rc(int r) { return r == 0 ? 0 : errno; }
int sem_value(sem_t* s) {
  int v = -1;
  sem_getvalue(s, &v);
  return v;
}

// ------------------------------------------------------------ handshakes

enum { HS_COND, HS_C11, HS_SEM, HS_COUNT };
const char* const kHsName[HS_COUNT] = {"handshake(cond)", "handshake(cnd)", "handshake(sem)"};
struct alignas(64) HsPair {
  int type = HS_COND;
  pthread_mutex_t m;
  pthread_cond_t c;
  mtx_t cm;
  cnd_t cc;
  sem_t s[2];
  int turn = 0;  // protected by the mutex
  std::atomic<int> turn_a{0};
  std::atomic<int> owner{0};
  std::atomic<uint64_t> rounds[2] = {};
};

// ------------------------------------------------------------ the objects

std::vector<MutexObj*> g_mutex;  // pthread kinds
std::vector<MutexObj*> g_c11m;   // C11 kinds
std::vector<RwObj*> g_rw;
std::vector<CondObj*> g_cond;  // pthread
std::vector<CondObj*> g_c11c;  // C11
std::vector<SemObj*> g_sem;
sem_t* g_psem = nullptr;  // process-shared, in MAP_SHARED memory (fork)
int* g_child_step = nullptr;  // same page: the step a child of fork is in
HsPair g_hs[HS_COUNT];
std::atomic<bool> g_fork_busy{false};

template <class T>
T* pick(Rng& r, std::vector<T*>& v) {
  // Half the time one of the first three objects: high contention there.
  if (r.chance(2)) return v[r.below(v.size() < 3 ? static_cast<uint32_t>(v.size()) : 3)];
  return v[r.below(static_cast<uint32_t>(v.size()))];
}

void must(int rc, const char* what) {
  if (rc != 0) {
    fprintf(stderr, "torture: set-up failed: %s: %s\n", what, lstest::err_name(rc));
    exit(2);
  }
}

void make_objects() {
  for (int copy = 0; copy < 2; ++copy)
    for (int k = 0; k < MK_COUNT; ++k) {
      auto* o = new MutexObj;
      o->kind = k;
      snprintf(o->name, sizeof o->name, "%s#%d", kMKindName[k], copy);
      must(mx_init(o->obj(), k), o->name);
      (mk_c11(k) ? g_c11m : g_mutex).push_back(o);
    }
  // Hot objects first (see pick): one default, one recursive, one errorcheck.
  std::swap(g_mutex[1], g_mutex[MK_RECURSIVE]);
  std::swap(g_mutex[2], g_mutex[MK_ERRORCHECK]);
  for (int copy = 0; copy < 2; ++copy)
    for (int k = 0; k < RK_COUNT; ++k) {
      auto* o = new RwObj;
      o->kind = k;
      snprintf(o->name, sizeof o->name, "rwlock %s#%d", kRKindName[k], copy);
      must(rw_init(&o->rw, k), o->name);
      g_rw.push_back(o);
    }
  // pthread condvars: (mutex kind, cond clock); C11: mtx_plain / mtx_timed.
  struct { int mk; clockid_t clk; bool stat; } pc[] = {
      {MK_DEFAULT, CLOCK_REALTIME, false}, {MK_ERRORCHECK, CLOCK_MONOTONIC, false},
      {MK_ADAPTIVE, CLOCK_MONOTONIC, false}, {MK_DEFAULT_STATIC, CLOCK_REALTIME, true}};
  for (auto& p : pc) {
    auto* c = new CondObj;
    c->mkind = p.mk;
    c->clock = p.clk;
    must(mx_init(c->mtx(), p.mk), "cond mutex");
    if (p.stat) {
      pthread_cond_t i = PTHREAD_COND_INITIALIZER;
      memcpy(&c->pc, &i, sizeof i);
    } else {
      pthread_condattr_t a;
      pthread_condattr_init(&a);
      pthread_condattr_setclock(&a, p.clk);
      must(pthread_cond_init(&c->pc, &a), "cond");
      pthread_condattr_destroy(&a);
    }
    snprintf(c->name, sizeof c->name, "cond(%s,%s%s)#%zu", kMKindName[p.mk],
             p.clk == CLOCK_MONOTONIC ? "MONOTONIC" : "REALTIME", p.stat ? ",static" : "", g_cond.size());
    g_cond.push_back(c);
  }
  for (int k : {MK_C11_PLAIN, MK_C11_TIMED}) {
    auto* c = new CondObj;
    c->c11 = true;
    c->mkind = k;
    must(mx_init(c->mtx(), k), "mtx");
    must(c11rc(cnd_init(&c->cc)), "cnd");
    snprintf(c->name, sizeof c->name, "cnd(%s)#%zu", kMKindName[k], g_c11c.size());
    g_c11c.push_back(c);
  }
  unsigned inits[] = {0, 0, 1, 3};
  for (unsigned v : inits) {
    auto* s = new SemObj;
    s->init = v;
    snprintf(s->name, sizeof s->name, "sem(init %u)#%zu", v, g_sem.size());
    must(sem_rc(sem_init(&s->s, 0, v)), s->name);
    g_sem.push_back(s);
  }
  g_victim_sem = new SemObj;
  snprintf(g_victim_sem->name, sizeof g_victim_sem->name, "sem(victims only)");
  must(sem_rc(sem_init(&g_victim_sem->s, 0, 0)), g_victim_sem->name);
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) must(errno, "mmap(MAP_SHARED)");
  g_psem = static_cast<sem_t*>(p);
  g_child_step = reinterpret_cast<int*>(static_cast<char*>(p) + 256);
  must(sem_rc(sem_init(g_psem, 1, 0)), "sem_init(pshared)");
  for (int t = 0; t < HS_COUNT; ++t) {
    HsPair& h = g_hs[t];
    h.type = t;
    if (t == HS_COND) {
      must(pthread_mutex_init(&h.m, nullptr), "hs mutex");
      pthread_condattr_t a;
      pthread_condattr_init(&a);
      pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
      must(pthread_cond_init(&h.c, &a), "hs cond");
      pthread_condattr_destroy(&a);
    } else if (t == HS_C11) {
      must(c11rc(mtx_init(&h.cm, mtx_timed)), "hs mtx");
      must(c11rc(cnd_init(&h.cc)), "hs cnd");
    } else {
      must(sem_rc(sem_init(&h.s[0], 0, 1)), "hs sem");
      must(sem_rc(sem_init(&h.s[1], 0, 0)), "hs sem");
    }
  }
}

// ------------------------------------------------------------ helpers

int pick_how(Rng& r) {
  uint32_t x = r.below(20);
  if (x < 8) return H_LOCK;
  if (x < 12) return H_TRY;
  if (x < 15) return H_TIMED;
  if (x < 17) return H_CLOCK_RT;
  return H_CLOCK_MONO;
}
clockid_t deadline_clock(int how) { return how == H_TIMED ? CLOCK_REALTIME : how_clock(how); }

void spin(uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) cpu_relax();
}
// Inside a critical section: mostly nothing or a few spins, sometimes a
// yield, rarely a sleep (so waiters go to sleep in the kernel).
void cs_delay(Rng& r) {
  uint32_t x = r.below(32);
  if (x < 16) return;
  if (x < 26) spin(r.below(300));
  else if (x < 31) sched_yield();
  else sleep_ns(10'000 + r.below(200'000));
}
void between_ops(Rng& r) {
  uint32_t x = r.below(64);
  if (x < 56) return;
  if (x < 62) sched_yield();
  else sleep_ns(r.below(300'000));
}

timespec mono_in(int64_t ns) { return to_ts(mono() + ns); }

// Join with a bound; false when the thread did not finish in time.
bool bounded_join(pthread_t t, void** res, int64_t ns, const char* what) {
  timespec d = mono_in(ns);
  WaitScope ws(W_BOUNDED, nullptr, what, mono() + ns);
  int rc = pthread_clockjoin_np(t, res, CLOCK_MONOTONIC, &d);
  return rc == 0;
}

// Until `tid` sleeps (twice in a row, 1 ms apart), at most max_ns.
bool wait_sleeping(pid_t tid, int64_t max_ns) {
  int64_t end = mono() + max_ns;
  while (mono() < end) {
    if (lstest::thread_state(tid) == 'S') {
      sleep_ns(1'000'000);
      if (lstest::thread_state(tid) == 'S') return true;
    }
    sleep_ns(200'000);
  }
  return false;
}
bool wait_flag(const int* flag, int64_t max_ns) {
  int64_t end = mono() + max_ns;
  while (!__atomic_load_n(flag, __ATOMIC_SEQ_CST)) {
    if (mono() > end) return false;
    sched_yield();
  }
  return true;
}

void* map_page() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// ------------------------------------------------------------ mutex ops

void op_mutex(Rng& r, MutexObj& o) {
  const int me = t_me;
  const int cls = mk_c11(o.kind) ? K_C11 : K_MUTEX;
  // Unlocking an errorcheck mutex one does not own: EPERM (held by another
  // thread or free alike).
  if (mk_errorcheck(o.kind) && r.chance(24)) {
    set_op("mutex_unlock(not owner)");
    int rc = pthread_mutex_unlock(&o.pm);
    if (rc != EPERM)
      fail(CK_ERRNO, "pthread_mutex_unlock of %s by a non-owner returned %s (expected EPERM)", o.name, lstest::err_name(rc));
    count_op(cls);
    return;
  }
  int how = mx_fix_how(o.kind, pick_how(r));
  Deadline d;
  if (how_timed(how)) d = make_deadline(r, mk_c11(o.kind) ? CLOCK_REALTIME : deadline_clock(how));
  const char* call = mk_c11(o.kind) ? (how == H_TRY ? "mtx_trylock" : how == H_TIMED ? "mtx_timedlock" : "mtx_lock")
                                    : kMutexHow[how];
  set_op(call);
  int rc;
  const bool fake = g_opt.inject == "no-lock" && !mk_errorcheck(o.kind) && r.chance(50);
  if (fake) {
    rc = 0;  // pretend to hold it
  } else if (how == H_TRY) {
    rc = mx_acquire(o.obj(), o.kind, how, d);
  } else {
    WaitScope ws(W_MUTEX, &o, call, how_timed(how) ? d.mono_limit() : 0);
    rc = mx_acquire(o.obj(), o.kind, how, d);
  }
  if (rc != 0) {
    check_not_acquired(call, o.name, how, rc, d);
    count_op(cls);
    return;
  }
  enter(o.owner, me, call, o.name);
  if (o.counter != o.shadow.load(std::memory_order_relaxed))
    fail(CK_COUNTERS, "%s: counter of %s is %llu, its shadow %llu", call, o.name, (unsigned long long)o.counter,
         (unsigned long long)o.shadow.load());
  o.counter++;
  o.shadow.fetch_add(1, std::memory_order_relaxed);
  int depth = 1;
  if (mk_recursive(o.kind) && !fake) {
    for (uint32_t i = r.below(3); i > 0; --i) {
      int h = mx_fix_how(o.kind, pick_how(r));
      Deadline d2;
      if (how_timed(h)) d2 = make_deadline(r, mk_c11(o.kind) ? CLOCK_REALTIME : deadline_clock(h));
      int rc2 = mx_acquire(o.obj(), o.kind, h, d2);
      if (rc2 == 0) depth++;
      else fail(CK_ERRNO, "recursive re-lock (%s) of %s, held by this thread, returned %s", kMutexHow[h], o.name, lstest::err_name(rc2));
    }
  } else if (fake) {
  } else if (mk_errorcheck(o.kind) && r.chance(8)) {
    int h = r.below(3) == 0 ? H_TRY : r.chance(2) ? H_LOCK : H_CLOCK_MONO;
    Deadline d2 = make_deadline(r, CLOCK_MONOTONIC);
    int rc2 = mx_acquire(o.obj(), o.kind, h, d2);
    int want = h == H_TRY ? EBUSY : EDEADLK;
    if (rc2 != want)
      fail(CK_ERRNO, "%s of errorcheck %s by its owner returned %s (expected %s)", kMutexHow[h], o.name, lstest::err_name(rc2),
           lstest::err_name(want));
    if (rc2 == 0) depth++;
  }
  cs_delay(r);
  leave(o.owner, me, call, o.name);
  for (int i = 0; i < (fake ? 0 : depth); ++i) {
    int rc2 = mx_release(o.obj(), o.kind);
    if (rc2 != 0) fail(CK_ERRNO, "unlock %d/%d of %s returned %s", i + 1, depth, o.name, lstest::err_name(rc2));
  }
  count_op(cls);
}

// ------------------------------------------------------------ rwlock ops

void op_rwlock(Rng& r, RwObj& o) {
  const int me = t_me;
  bool rd = r.below(5) < 3;
  int how = pick_how(r);
  Deadline d;
  if (how_timed(how)) d = make_deadline(r, deadline_clock(how));
  const char* call = rd ? kRdHow[how] : kWrHow[how];
  set_op(call);
  int rc;
  if (how == H_TRY) {
    rc = rw_acquire(&o.rw, rd, how, d);
  } else {
    WaitScope ws(W_RWLOCK, &o, call, how_timed(how) ? d.mono_limit() : 0, rd ? 1 : 0);
    rc = rw_acquire(&o.rw, rd, how, d);
  }
  if (rc != 0) {
    check_not_acquired(call, o.name, how, rc, d);
    count_op(K_RWLOCK);
    return;
  }
  if (rd) {
    uint64_t v = rd_enter(o, call);
    int extra = 0;
    if (rk_default(o.kind) && r.chance(4)) {
      // A recursive read: the default kind lets it in whatever writers wait.
      int h = pick_how(r);
      Deadline d2;
      if (how_timed(h)) d2 = make_deadline(r, deadline_clock(h));
      set_op("recursive rdlock");
      int rc2;
      {
        WaitScope ws(W_RWLOCK, &o, "recursive rdlock", how_timed(h) ? d2.mono_limit() : 0, 2);
        rc2 = rw_acquire(&o.rw, true, h, d2);
      }
      if (rc2 == 0) {
        extra = 1;
      } else if ((h == H_TRY && rc2 == EBUSY) || (how_timed(h) && rc2 == ETIMEDOUT)) {
        // Not glibc's answer (its default rwlock lets a reader in while any
        // reader holds it), but a variant with writer fairness may refuse a
        // try or time out; counted, not failed.
        g_rec_busy.fetch_add(1, std::memory_order_relaxed);
        if (rc2 == ETIMEDOUT && !d2.reached())
          fail(CK_TIMEOUTS, "recursive %s on %s returned ETIMEDOUT %.3f ms early", kRdHow[h], o.name, d2.early_ms());
      } else {
        fail(CK_ERRNO, "recursive %s on %s (read-held by this thread) returned %s", kRdHow[h], o.name, lstest::err_name(rc2));
      }
    }
    cs_delay(r);
    rd_leave(o, v, call);
    for (int i = 0; i <= extra; ++i) {
      int rc2 = pthread_rwlock_unlock(&o.rw);
      if (rc2 != 0) fail(CK_ERRNO, "rwlock_unlock (read) of %s returned %s", o.name, lstest::err_name(rc2));
    }
  } else {
    wr_enter(o, me, call);
    cs_delay(r);
    wr_leave(o, me, call);
    int rc2 = pthread_rwlock_unlock(&o.rw);
    if (rc2 != 0) fail(CK_ERRNO, "rwlock_unlock (write) of %s returned %s", o.name, lstest::err_name(rc2));
  }
  count_op(K_RWLOCK);
}

// ------------------------------------------------------------ cond ops

void cv_produce(Rng& r, CondObj& c) {
  set_op(c.c11 ? "cnd produce" : "cond produce");
  cond_lock(c, "produce");
  uint64_t k = r.chance(4) ? 1 + r.below(3) : 1;
  c.tokens += k;
  c.tokens_a.store(c.tokens);
  c.produced.fetch_add(k);
  bool all = k > 1 ? r.chance(2) : r.chance(6);
  bool inside = r.below(10) < 7;
  auto wake = [&] {
    if (g_opt.inject == "lost-signal" && r.chance(20)) return;
    for (uint64_t i = 0; i < (all ? 1 : k); ++i) {
      int rc = cv_wake(c, all);
      if (rc != 0) fail(CK_ERRNO, "%s of %s returned %s", all ? "broadcast" : "signal", c.name, lstest::err_name(rc));
    }
  };
  if (inside) wake();
  cs_delay(r);
  cond_unlock(c, "produce");
  if (!inside) wake();
}

void cv_consume(Rng& r, CondObj& c) {
  int form = r.below(5);
  form = form < 2 ? 0 : form < 4 ? 1 : 2;
  if (c.c11 && form == 2) form = 1;
  const bool timed = form != 0;
  const char* call = cv_form_name(c, form);
  set_op(call);
  cond_lock(c, call);
  c.waiter_in(!timed);
  int tries = 1 + static_cast<int>(r.below(3));
  while (c.tokens == 0 && !g_stop.load()) {
    Deadline d;
    if (timed) d = make_deadline(r, c.c11 ? CLOCK_REALTIME : form == 1 ? c.clock : (r.chance(2) ? CLOCK_MONOTONIC : CLOCK_REALTIME), true);
    int rc = cv_wait_owned(c, form, d, call, timed);
    if (rc == ETIMEDOUT && timed) {
      g_timeouts.fetch_add(1, std::memory_order_relaxed);
      if (!d.reached()) fail(CK_TIMEOUTS, "%s on %s returned ETIMEDOUT %.3f ms before its deadline", call, c.name, d.early_ms());
      if (--tries == 0) break;
      continue;
    }
    if (rc != 0) {
      fail(CK_ERRNO, "%s on %s returned %s", call, c.name, lstest::err_name(rc));
      break;
    }
  }
  c.take_token_if_any();
  c.waiter_out(!timed);
  cs_delay(r);
  cond_unlock(c, call);
}

void op_cond(Rng& r, CondObj& c) {
  if (r.chance(2)) cv_produce(r, c);
  else cv_consume(r, c);
  count_op(c.c11 ? K_C11 : K_COND);
}

// ------------------------------------------------------------ sem ops

// Waits on a shared semaphore: blocked counts the waiters (the feeder posts
// when waiters starve on a zero value; the watchdog fails a waiter that
// sleeps while the value stays positive).
int sem_wait_form(SemObj& s, int form, const Deadline& d) {
  switch (form) {
    case 0: return sem_rc(sem_wait(&s.s));
    case 1: return sem_rc(sem_timedwait(&s.s, &d.ts));
    default: return sem_rc(sem_clockwait(&s.s, d.clk, &d.ts));
  }
}
const timespec kEpoch{0, 0};  // an absolute deadline long past, on any clock
const char* const kSemForm[3] = {"sem_wait", "sem_timedwait", "sem_clockwait"};

void sem_waiter(Rng& r, SemObj& s, int form) {
  Deadline d;
  if (form == 1) d = make_deadline(r, CLOCK_REALTIME, true);
  if (form == 2) d = make_deadline(r, r.chance(2) ? CLOCK_MONOTONIC : CLOCK_REALTIME, true);
  set_op(kSemForm[form]);
  s.blocked.fetch_add(1);
  int rc;
  {
    WaitScope ws(W_SEM, &s, kSemForm[form], form ? d.mono_limit() : 0);
    rc = sem_wait_form(s, form, d);
  }
  s.blocked.fetch_sub(1);
  if (rc == 0) {
    s.consumed.fetch_add(1);
  } else if (form != 0 && rc == ETIMEDOUT) {
    g_timeouts.fetch_add(1, std::memory_order_relaxed);
    if (!d.reached()) fail(CK_TIMEOUTS, "%s on %s returned ETIMEDOUT %.3f ms before its deadline", kSemForm[form], s.name, d.early_ms());
  } else {
    fail(CK_ERRNO, "%s on %s returned %s", kSemForm[form], s.name, lstest::err_name(rc));
  }
}

void op_sem(Rng& r, SemObj& s, sem_t* mine) {
  uint32_t x = r.below(40);
  if (x < 17) {
    set_op("sem_post");
    int rc = g_opt.inject == "lost-post" && r.chance(200) ? 0 : sem_rc(sem_post(&s.s));
    if (rc != 0) fail(CK_ERRNO, "sem_post on %s returned %s", s.name, lstest::err_name(rc));
    else s.posted.fetch_add(1);
  } else if (x < 22) {
    set_op("sem_trywait");
    int rc = sem_rc(sem_trywait(&s.s));
    if (rc == 0) s.consumed.fetch_add(1);
    else if (rc == EAGAIN) g_busy.fetch_add(1, std::memory_order_relaxed);
    else fail(CK_ERRNO, "sem_trywait on %s returned %s", s.name, lstest::err_name(rc));
  } else if (x < 27) {
    sem_waiter(r, s, 0);
  } else if (x < 32) {
    sem_waiter(r, s, 1);
  } else if (x < 37) {
    sem_waiter(r, s, 2);
  } else if (x < 38) {
    set_op("sem_getvalue");
    int v = sem_value(&s.s);
    if (v < 0) fail(CK_SEM, "sem_getvalue of %s gave %d", s.name, v);
    // A malformed deadline: EINVAL, whatever the value (checked first).
    if (r.chance(4)) {
      timespec bad{0, 1'000'000'000};
      int rc = sem_rc(sem_timedwait(&s.s, &bad));
      if (rc == 0) s.consumed.fetch_add(1);
      if (rc != EINVAL) fail(CK_ERRNO, "sem_timedwait on %s with tv_nsec=1e9 returned %s (expected EINVAL)", s.name, lstest::err_name(rc));
    }
  } else {
    // The thread's own semaphore: k posts, then k trywaits all succeed and
    // the value is back to 0 (a reserved token can be taken at once).
    set_op("own sem round");
    int k = 1 + static_cast<int>(r.below(4));
    for (int i = 0; i < k; ++i)
      if (sem_post(mine) != 0) fail(CK_ERRNO, "sem_post on the thread's own semaphore returned %s", lstest::err_name(errno));
    for (int i = 0; i < k; ++i) {
      int rc = r.chance(2) ? sem_rc(sem_trywait(mine)) : sem_rc(sem_clockwait(mine, CLOCK_MONOTONIC, &kEpoch));
      if (rc != 0) fail(CK_SEM, "token %d/%d posted to the thread's own semaphore could not be taken: %s", i + 1, k, lstest::err_name(rc));
    }
    int rc = sem_rc(sem_trywait(mine));
    if (rc != EAGAIN) fail(CK_SEM, "the thread's own semaphore is not empty after its round: trywait returned %s", lstest::err_name(rc));
  }
  count_op(K_SEM);
}

void dump_states(const char* why);
std::atomic<uint64_t> g_cancelled{0}, g_async_done{0}, g_forks_done{0}, g_lifetimes_done{0};

// ------------------------------------------------------------ deferred cancellation
//
// A victim runs random operations on the shared objects with cancellation
// disabled, and enables it only around the calls it is testing:
//   - cond waits and sem waits (cancellation points): the cleanup finds the
//     cond's mutex held again (its owner word free, an errorcheck unlock
//     returns 0), takes no token; a cancelled sem waiter takes no token (the
//     final value is exact);
//   - mutex and rwlock acquisitions (not cancellation points): the call must
//     complete; the cancellation then acts at pthread_testcancel with the lock
//     held, and the cleanup releases it.

enum CPhase { CP_NONE, CP_IN_LOCK, CP_MUTEX, CP_RD, CP_WR, CP_COND, CP_SEM };
void cancel_enable() { pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr); }
void cancel_disable() { pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr); }

struct CancelCtx {
  int phase = CP_NONE;
  const char* what = "";
  MutexObj* m = nullptr;
  RwObj* rw = nullptr;
  CondObj* c = nullptr;
  SemObj* s = nullptr;
  bool untimed = false;
  uint64_t rv = 0;
  // Enters `p` with cancellation enabled (a cancellation there runs the
  // cleanup for `p`); disabled again on leaving it.
  void enter_cancellable(int p) {
    phase = p;
    cancel_enable();
  }
  void leave_cancellable() {
    cancel_disable();
    phase = CP_NONE;
  }
};

void cancel_cleanup(void* p) {
  auto* x = static_cast<CancelCtx*>(p);
  int rc = 0;
  switch (x->phase) {
    case CP_IN_LOCK:
      fail(CK_CANCEL, "%s acted on a deferred cancellation (a lock call is not a cancellation point)", x->what);
      break;
    case CP_MUTEX:
      leave(x->m->owner, t_me, "cancel cleanup", x->m->name);
      rc = mx_release(x->m->obj(), x->m->kind);
      if (rc != 0) fail(CK_CANCEL, "cleanup: unlocking %s returned %s", x->m->name, lstest::err_name(rc));
      break;
    case CP_RD:
      rd_leave(*x->rw, x->rv, "cancel cleanup");
      rc = pthread_rwlock_unlock(&x->rw->rw);
      if (rc != 0) fail(CK_CANCEL, "cleanup: unlocking (read) %s returned %s", x->rw->name, lstest::err_name(rc));
      break;
    case CP_WR:
      wr_leave(*x->rw, t_me, "cancel cleanup");
      rc = pthread_rwlock_unlock(&x->rw->rw);
      if (rc != 0) fail(CK_CANCEL, "cleanup: unlocking (write) %s returned %s", x->rw->name, lstest::err_name(rc));
      break;
    case CP_COND: {
      // POSIX: a cancelled condition waiter holds the mutex again when its
      // cleanup handlers run.
      CondObj& c = *x->c;
      enter(c.owner, t_me, "cleanup of a cancelled cond waiter", c.name);
      c.waiter_out(x->untimed);
      leave(c.owner, t_me, "cleanup of a cancelled cond waiter", c.name);
      rc = mx_release(c.mtx(), c.mkind);
      if (rc != 0)
        fail(CK_CANCEL, "cleanup of a waiter cancelled in %s: unlocking its mutex returned %s (not re-acquired?)", c.name,
             lstest::err_name(rc));
      break;
    }
    case CP_SEM:
      x->s->blocked.fetch_sub(1);
      break;
  }
  x->phase = CP_NONE;
}

struct VictimArg {
  TState* ts;
  uint64_t seed;
};


void* cancel_victim(void* p) {
  cancel_disable();
  auto* a = static_cast<VictimArg*>(p);
  adopt_state(a->ts);
  Rng r(a->seed);
  CancelCtx x;
  pthread_cleanup_push(cancel_cleanup, &x);
  for (;;) {
    x = CancelCtx{};
    uint32_t what = r.below(10);
    if (what < 3) {
      CondObj& c = r.chance(3) ? *pick(r, g_c11c) : *pick(r, g_cond);
      int form = c.c11 ? static_cast<int>(r.below(2)) : static_cast<int>(r.below(3));
      const bool timed = form != 0;
      const char* call = cv_form_name(c, form);
      set_op(call);
      cond_lock(c, call);
      c.waiter_in(!timed);
      x.c = &c;
      x.untimed = !timed;
      x.enter_cancellable(CP_COND);
      while (c.tokens == 0 && !g_stop.load()) {
        Deadline d;
        if (timed) d = make_deadline(r, c.c11 ? CLOCK_REALTIME : form == 1 ? c.clock : CLOCK_MONOTONIC, true);
        int rc = cv_wait_owned(c, form, d, call, timed);
        if (rc == ETIMEDOUT && timed) {
          if (!d.reached()) fail(CK_TIMEOUTS, "%s on %s returned ETIMEDOUT %.3f ms early", call, c.name, d.early_ms());
          break;
        }
        if (rc != 0) {
          fail(CK_ERRNO, "%s on %s returned %s", call, c.name, lstest::err_name(rc));
          break;
        }
      }
      x.leave_cancellable();
      c.take_token_if_any();
      c.waiter_out(!timed);
      cond_unlock(c, call);
    } else if (what < 5) {
      SemObj& s = g_native_sem ? *pick(r, g_sem) : *g_victim_sem;
      int form = static_cast<int>(r.below(3));
      Deadline d;
      if (form) d = make_deadline(r, form == 1 || r.chance(2) ? CLOCK_REALTIME : CLOCK_MONOTONIC, true);
      set_op(kSemForm[form]);
      s.blocked.fetch_add(1);
      x.s = &s;
      int rc;
      x.enter_cancellable(CP_SEM);
      {
        WaitScope ws(W_SEM, &s, kSemForm[form], form ? d.mono_limit() : 0);
        rc = sem_wait_form(s, form, d);
      }
      x.leave_cancellable();
      s.blocked.fetch_sub(1);
      if (rc == 0) s.consumed.fetch_add(1);
      else if (!(form && rc == ETIMEDOUT)) fail(CK_ERRNO, "%s on %s returned %s", kSemForm[form], s.name, lstest::err_name(rc));
    } else if (what < 7) {
      MutexObj& m = r.chance(4) ? *pick(r, g_c11m) : *pick(r, g_mutex);
      int how = mx_fix_how(m.kind, r.chance(3) ? H_CLOCK_MONO : H_LOCK);
      Deadline d;
      if (how_timed(how)) d = make_deadline(r, mk_c11(m.kind) ? CLOCK_REALTIME : CLOCK_MONOTONIC, true);
      const char* call = how == H_LOCK ? "mutex_lock (cancel pending?)" : "mutex_timedlock (cancel pending?)";
      set_op(call);
      x.m = &m;
      x.what = call;
      int rc;
      x.enter_cancellable(CP_IN_LOCK);
      {
        WaitScope ws(W_MUTEX, &m, call, how_timed(how) ? d.mono_limit() : 0);
        rc = mx_acquire(m.obj(), m.kind, how, d);
      }
      if (rc != 0) {
        x.leave_cancellable();
        check_not_acquired(call, m.name, how, rc, d);
      } else {
        enter(m.owner, t_me, call, m.name);
        m.counter++;
        m.shadow.fetch_add(1, std::memory_order_relaxed);
        x.phase = CP_MUTEX;
        pthread_testcancel();  // a pending cancellation acts here, with the mutex held
        x.leave_cancellable();
        leave(m.owner, t_me, call, m.name);
        rc = mx_release(m.obj(), m.kind);
        if (rc != 0) fail(CK_ERRNO, "unlock of %s returned %s", m.name, lstest::err_name(rc));
      }
    } else if (what < 9) {
      RwObj& o = *pick(r, g_rw);
      bool rd = r.chance(2);
      int how = r.chance(3) ? H_CLOCK_MONO : H_LOCK;
      Deadline d;
      if (how_timed(how)) d = make_deadline(r, CLOCK_MONOTONIC, true);
      const char* call = rd ? "rwlock_rdlock (cancel pending?)" : "rwlock_wrlock (cancel pending?)";
      set_op(call);
      x.rw = &o;
      x.what = call;
      int rc;
      x.enter_cancellable(CP_IN_LOCK);
      {
        WaitScope ws(W_RWLOCK, &o, call, how_timed(how) ? d.mono_limit() : 0, rd ? 1 : 0);
        rc = rw_acquire(&o.rw, rd, how, d);
      }
      if (rc != 0) {
        x.leave_cancellable();
        check_not_acquired(call, o.name, how, rc, d);
      } else {
        if (rd) {
          x.rv = rd_enter(o, call);
          x.phase = CP_RD;
        } else {
          wr_enter(o, t_me, call);
          x.phase = CP_WR;
        }
        pthread_testcancel();
        x.leave_cancellable();
        if (rd) rd_leave(o, x.rv, call);
        else wr_leave(o, t_me, call);
        rc = pthread_rwlock_unlock(&o.rw);
        if (rc != 0) fail(CK_ERRNO, "unlock of %s returned %s", o.name, lstest::err_name(rc));
      }
    } else {
      set_op("nanosleep");
      cancel_enable();
      sleep_ns(r.below(300'000));
      cancel_disable();
    }
    count_op(K_CANCEL);
    set_op("testcancel");
    cancel_enable();
    pthread_testcancel();
    cancel_disable();
  }
  pthread_cleanup_pop(0);
  return nullptr;
}

void op_cancel(Rng& r) {
  set_op("deferred cancel");
  auto* a = new VictimArg{alloc_state("cancel-victim", 0), r.next()};
  if (!a->ts) {
    delete a;
    return;
  }
  pthread_t t;
  int rc = pthread_create(&t, nullptr, cancel_victim, a);
  if (rc != 0) {
    note("pthread_create (cancel victim): %s", lstest::err_name(rc));
    release_state(a->ts);
    delete a;
    return;
  }
  uint32_t x = r.below(8);
  if (x == 1 || x == 2) sched_yield();
  else if (x > 2) sleep_ns(r.below(3'000'000));
  rc = pthread_cancel(t);
  if (rc != 0) fail(CK_CANCEL, "pthread_cancel returned %s", lstest::err_name(rc));
  void* res = nullptr;
  if (!bounded_join(t, &res, bound_ns(), "join a cancelled victim")) {
    fail(CK_CANCEL, "a deferred-cancelled victim (%s) was not cancelled within %.0f s; it was in %s", a->ts->name,
         g_opt.stall_s, a->ts->op.load());
    dump_states("deferred cancellation: the victim did not end");
    return;  // the victim and its slot are abandoned
  }
  if (res != PTHREAD_CANCELED) fail(CK_CANCEL, "a cancelled victim exited with %p, not PTHREAD_CANCELED", res);
  release_state(a->ts);
  delete a;
  g_cancelled.fetch_add(1, std::memory_order_relaxed);
}

// ------------------------------------------------------------ asynchronous cancellation
//
// A victim (victims.c) blocks in one call on private objects that the
// canceller holds; the canceller cancels it asynchronously (at once, after a
// pause, or once it sleeps), joins it, checks that it was cancelled with its
// cleanup run, then that every object still works, and destroys and unmaps
// them. glibc's own rwlock is left unusable by such a cancellation, so under
// the glibc rwlock the rwlock is not checked (nor destroyed) afterwards.

struct AsyncPage {
  pthread_mutex_t m;
  pthread_rwlock_t rw;
  pthread_cond_t c;
  sem_t s;
};

std::atomic<uint64_t> g_async_window{0};

// The owner field of a pthread_mutex_t (glibc's __data.__owner at offset 8,
// kept there by lockswap's ABI).
int mutex_owner_field(const pthread_mutex_t* m) {
  int owner;
  memcpy(&owner, reinterpret_cast<const char*>(m) + 8, sizeof owner);
  return owner;
}

// False when the objects must not be destroyed (a mutex left held).
bool async_usable(AsyncPage* P, int kind, bool posted, bool returned, const char* desc, bool skip_rw, int victim_tid) {
  const int64_t B = bound_ns();
  timespec far = mono_in(B);
  int rc;
  if (kind == AV_MUTEX_MAYBE && !returned) {
    // The mutex was released just before the cancellation, so the victim may
    // have been cancelled inside pthread_mutex_lock after taking the lock
    // word but before recording itself as owner (pthread_mutex_lock is not
    // async-cancel-safe; glibc has this window too): the mutex then stays
    // held by a dead thread whose cleanup could not release it. Recognised by
    // the owner field (0 or the victim's tid); any other stuck state fails.
    rc = pthread_mutex_trylock(&P->m);
    if (rc == 0) {
      pthread_mutex_unlock(&P->m);
    } else {
      int owner = mutex_owner_field(&P->m);
      if (rc == EBUSY && (owner == 0 || owner == victim_tid)) {
        g_async_window.fetch_add(1, std::memory_order_relaxed);
        note("%s: cancelled inside pthread_mutex_lock after acquiring (owner field %d): the mutex stays held by the "
             "dead victim, as under glibc; page abandoned", desc, owner);
        return false;
      }
      fail(CK_ASYNC, "%s: afterwards its mutex is busy (trylock %s, owner field %d, victim tid %d)", desc, lstest::err_name(rc),
           owner, victim_tid);
      return false;
    }
  }
  {
    WaitScope ws(W_BOUNDED, nullptr, "async: mutex usable?", mono() + B + B);
    rc = pthread_mutex_clocklock(&P->m, CLOCK_MONOTONIC, &far);
  }
  if (rc != 0) {
    fail(CK_ASYNC, "%s: afterwards its mutex cannot be locked: %s", desc, lstest::err_name(rc));
  } else {
    int rc2 = pthread_mutex_trylock(&P->m);
    if (rc2 == 0) pthread_mutex_unlock(&P->m);  // recursive
    else if (rc2 != EBUSY && rc2 != EDEADLK) fail(CK_ASYNC, "%s: trylock of its held mutex returned %s", desc, lstest::err_name(rc2));
    // The condvar: signal, broadcast, an expired wait.
    if ((rc2 = pthread_cond_signal(&P->c)) != 0) fail(CK_ASYNC, "%s: cond_signal afterwards: %s", desc, lstest::err_name(rc2));
    if ((rc2 = pthread_cond_broadcast(&P->c)) != 0) fail(CK_ASYNC, "%s: cond_broadcast afterwards: %s", desc, lstest::err_name(rc2));
    if (kind == AV_COND) {
      rc2 = pthread_cond_clockwait(&P->c, &P->m, CLOCK_MONOTONIC, &kEpoch);
      if (rc2 != ETIMEDOUT) fail(CK_ASYNC, "%s: an expired cond_clockwait afterwards returned %s", desc, lstest::err_name(rc2));
    }
    if ((rc2 = pthread_mutex_unlock(&P->m)) != 0) fail(CK_ASYNC, "%s: mutex_unlock afterwards: %s", desc, lstest::err_name(rc2));
  }
  if (!skip_rw) {
    far = mono_in(B);
    {
      WaitScope ws(W_BOUNDED, nullptr, "async: rwlock usable?", mono() + B + B);
      rc = pthread_rwlock_clockwrlock(&P->rw, CLOCK_MONOTONIC, &far);
    }
    if (rc != 0) {
      fail(CK_ASYNC, "%s: afterwards its rwlock cannot be write-locked: %s", desc, lstest::err_name(rc));
    } else {
      pthread_rwlock_unlock(&P->rw);
      rc = pthread_rwlock_clockrdlock(&P->rw, CLOCK_MONOTONIC, &far);
      if (rc != 0) {
        fail(CK_ASYNC, "%s: afterwards its rwlock cannot be read-locked: %s", desc, lstest::err_name(rc));
      } else {
        int rc2 = pthread_rwlock_tryrdlock(&P->rw);
        if (rc2 != 0) fail(CK_ASYNC, "%s: a second read lock afterwards: %s", desc, lstest::err_name(rc2));
        else pthread_rwlock_unlock(&P->rw);
        rc2 = pthread_rwlock_trywrlock(&P->rw);
        if (rc2 != EBUSY) fail(CK_ASYNC, "%s: trywrlock of a read-held rwlock afterwards: %s", desc, lstest::err_name(rc2));
        if (rc2 == 0) pthread_rwlock_unlock(&P->rw);
        pthread_rwlock_unlock(&P->rw);
      }
    }
  }
  int v = sem_value(&P->s);
  if (kind == AV_SEM && posted) {
    if (v < 0 || v > 1 || (returned && v != 0))
      fail(CK_ASYNC, "%s: one token posted before the cancellation, the victim %s, value now %d", desc,
           returned ? "took it" : "did not return", v);
    if (v == 1 && sem_trywait(&P->s) != 0) fail(CK_ASYNC, "%s: the token left cannot be taken: %s", desc, lstest::err_name(errno));
  } else if (v != 0) {
    fail(CK_ASYNC, "%s: the semaphore's value is %d afterwards (expected 0)", desc, v);
  }
  if (sem_post(&P->s) != 0) fail(CK_ASYNC, "%s: sem_post afterwards: %s", desc, lstest::err_name(errno));
  if (sem_trywait(&P->s) != 0) fail(CK_ASYNC, "%s: sem_trywait of the token just posted: %s", desc, lstest::err_name(errno));
  rc = sem_rc(sem_clockwait(&P->s, CLOCK_MONOTONIC, &kEpoch));
  if (rc != ETIMEDOUT) fail(CK_ASYNC, "%s: an expired sem_clockwait afterwards returned %s", desc, lstest::err_name(rc));
  return true;
}

void op_async(Rng& r) {
  set_op("async cancel");
  const int kind = static_cast<int>(r.below(AV_KINDS));
  const bool is_rw = kind == AV_RDLOCK || kind == AV_WRLOCK;
  const bool skip_rw = !g_native_rwlock;
  auto* P = static_cast<AsyncPage*>(map_page());
  if (!P) {
    note("mmap failed: %s", lstest::err_name(errno));
    return;
  }
  static const int kTypes[] = {PTHREAD_MUTEX_DEFAULT, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK,
                               PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ADAPTIVE_NP};
  static const char* const kTypeName[] = {"default", "normal", "errorcheck", "recursive", "adaptive"};
  int ti = (kind == AV_COND || kind == AV_MUTEX_MAYBE) ? 2 : static_cast<int>(r.below(5));
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, kTypes[ti]);
  must(pthread_mutex_init(&P->m, &ma), "async mutex");
  pthread_mutexattr_destroy(&ma);
  int rk = r.chance(2) ? RK_DEFAULT : RK_WRITER_NONREC;
  must(rw_init(&P->rw, rk), "async rwlock");
  must(pthread_cond_init(&P->c, nullptr), "async cond");
  must(sem_rc(sem_init(&P->s, 0, 0)), "async sem");
  auto* a = new av_arg{};
  a->kind = kind;
  a->timed = r.chance(2);
  a->m = &P->m;
  a->rw = &P->rw;
  a->c = &P->c;
  a->s = &P->s;
  a->far_rt = to_ts(now_ns(CLOCK_REALTIME) + 60'000'000'000);
  a->far_mono = to_ts(mono() + 60'000'000'000);
  a->warmup = r.chance(2);
  int mode = static_cast<int>(r.below(3));  // 0 at once, 1 after a short pause, 2 once it sleeps
  if (kind == AV_COND && !g_native_mutex) mode = 2;  // glibc's cond wait is async-cancel-safe only asleep
  int hold_mode = 0;                                  // AV_WRLOCK: 1 read-held, 2 write-held
  int rc = 0;
  bool held_m = false;
  int held_rw = 0;
  switch (kind) {
    case AV_MUTEX:
    case AV_MUTEX_TIMED:
    case AV_MUTEX_SPIN:
    case AV_MUTEX_MAYBE:
      rc = pthread_mutex_lock(&P->m);
      held_m = rc == 0;
      break;
    case AV_RDLOCK:
      rc = pthread_rwlock_wrlock(&P->rw);
      held_rw = rc == 0 ? 2 : 0;
      break;
    case AV_WRLOCK:
      hold_mode = r.chance(2) ? 1 : 2;
      rc = hold_mode == 1 ? pthread_rwlock_rdlock(&P->rw) : pthread_rwlock_wrlock(&P->rw);
      held_rw = rc == 0 ? hold_mode : 0;
      break;
  }
  char desc[200];
  snprintf(desc, sizeof desc, "async cancel in %s%s (mutex %s, rwlock %s%s, %s, warm-up %d)", av_kind_name(kind),
           a->timed ? " [timed]" : "", kTypeName[ti], kRKindName[rk],
           kind == AV_WRLOCK ? (hold_mode == 1 ? " read-held" : " write-held") : "",
           mode == 0 ? "cancelled at once" : mode == 1 ? "after a pause" : "once asleep", a->warmup);
  if (rc != 0) fail(CK_ERRNO, "%s: the canceller could not take its private object: %s", desc, lstest::err_name(rc));
  pthread_t t;
  rc = pthread_create(&t, nullptr, av_victim, a);
  if (rc != 0) {
    note("pthread_create (async victim): %s", lstest::err_name(rc));
    if (held_m) pthread_mutex_unlock(&P->m);
    if (held_rw) pthread_rwlock_unlock(&P->rw);
    munmap(P, 4096);
    delete a;
    return;
  }
  const int64_t B = bound_ns();
  bool unlock_after_cancel = false;
  if (!wait_flag(&a->started, B)) fail(CK_ASYNC, "%s: the victim did not start", desc);
  if (kind == AV_COND) {
    if (!wait_flag(&a->waiting, B)) fail(CK_ASYNC, "%s: the victim did not reach its wait", desc);
    {
      timespec far = mono_in(B);
      WaitScope ws(W_BOUNDED, nullptr, "async: lock the cond's mutex", mono() + B + B);
      rc = pthread_mutex_clocklock(&P->m, CLOCK_MONOTONIC, &far);  // free once the victim waits
    }
    if (rc != 0)
      fail(CK_ASYNC, "%s: the mutex the victim waits with cannot be locked: %s (victim: returned=%d rc=%s)", desc,
           lstest::err_name(rc), __atomic_load_n(&a->returned, __ATOMIC_SEQ_CST), lstest::err_name(__atomic_load_n(&a->rc, __ATOMIC_SEQ_CST)));
    held_m = rc == 0;
    if (held_m && r.chance(2)) {
      pthread_mutex_unlock(&P->m);
      held_m = false;
    } else {
      unlock_after_cancel = held_m;
    }
  }
  set_op(av_kind_name(kind));  // (a static string: desc lives on this stack)
  if (kind == AV_MUTEX_SPIN) {
    int64_t end = mono() + r.below(2'000'000);  // the holder runs: spinners spin
    while (mono() < end) cpu_relax();
  } else if (mode == 1) {
    if (r.chance(2)) sched_yield();
    else spin(r.below(50'000));
  } else if (mode == 2) {
    int64_t end = mono() + B;
    while (__atomic_load_n(&a->tid, __ATOMIC_SEQ_CST) == 0 && mono() < end) sched_yield();
    wait_sleeping(__atomic_load_n(&a->tid, __ATOMIC_SEQ_CST), 2'000'000'000);
  }
  if (kind == AV_MUTEX_MAYBE && held_m) {
    pthread_mutex_unlock(&P->m);
    held_m = false;
  }
  bool posted = false;
  if (kind == AV_SEM && r.chance(3)) posted = sem_post(&P->s) == 0;
  rc = pthread_cancel(t);
  if (rc != 0) fail(CK_ASYNC, "%s: pthread_cancel returned %s", desc, lstest::err_name(rc));
  if (unlock_after_cancel) {
    sleep_ns(r.below(1'000'000));
    pthread_mutex_unlock(&P->m);
    held_m = false;
  }
  void* res = nullptr;
  if (!bounded_join(t, &res, B, "join an async-cancelled victim")) {
    fail(CK_ASYNC, "%s: the victim was not cancelled within %.0f s (started=%d returned=%d cleanup=%d)", desc, g_opt.stall_s,
         __atomic_load_n(&a->started, __ATOMIC_SEQ_CST), __atomic_load_n(&a->returned, __ATOMIC_SEQ_CST),
         __atomic_load_n(&a->cleanup_ran, __ATOMIC_SEQ_CST));
    dump_states("asynchronous cancellation: the victim did not end");
    return;  // abandoned: the victim may be stuck in the objects
  }
  const int ran = a->cleanup_ran, ret = a->returned, arc = a->rc, crc = a->cleanup_rc;
  if (res != PTHREAD_CANCELED)
    fail(CK_ASYNC, "%s: the victim exited with %p, not PTHREAD_CANCELED (returned=%d rc=%s)", desc, res, ret, lstest::err_name(arc));
  if (!ran) fail(CK_ASYNC, "%s: the cleanup handler did not run", desc);
  const bool may_return = kind == AV_MUTEX_MAYBE || (kind == AV_SEM && posted);
  if (ret && !may_return)
    fail(CK_ASYNC, "%s: the blocking call returned %s although its object was never released", desc, lstest::err_name(arc));
  if (ret && arc != 0) fail(CK_ASYNC, "%s: the blocking call returned %s", desc, lstest::err_name(arc));
  if (kind == AV_COND && crc != 0)
    fail(CK_ASYNC, "%s: in the cleanup handler, unlocking the errorcheck mutex returned %s (not re-acquired)", desc,
         lstest::err_name(crc));
  if (kind == AV_MUTEX_MAYBE && crc != 0 && (crc != EPERM || ret))
    fail(CK_ASYNC, "%s: in the cleanup handler, unlocking the mutex returned %s (victim %s)", desc, lstest::err_name(crc),
         ret ? "returned from the lock" : "did not return");
  if (held_m && (rc = pthread_mutex_unlock(&P->m)) != 0) fail(CK_ASYNC, "%s: the canceller's unlock: %s", desc, lstest::err_name(rc));
  if (held_rw) {
    rc = pthread_rwlock_unlock(&P->rw);
    if (rc != 0 && !(is_rw && skip_rw)) fail(CK_ASYNC, "%s: the canceller's rwlock unlock: %s", desc, lstest::err_name(rc));
  }
  const bool rw_unchecked = is_rw && skip_rw;
  if (rw_unchecked) note("%s: glibc's rwlock is left unusable by this cancellation; not checked", desc);
  if (!async_usable(P, kind, posted, ret, desc, skip_rw && is_rw, __atomic_load_n(&a->tid, __ATOMIC_SEQ_CST))) {
    delete a;
    count_op(K_ASYNC);
    return;  // the page is abandoned: a mutex in it stays held
  }
  if (!rw_unchecked && (rc = pthread_rwlock_destroy(&P->rw)) != 0) fail(CK_ASYNC, "%s: rwlock_destroy: %s", desc, lstest::err_name(rc));
  {
    WaitScope ws(W_BOUNDED, nullptr, "async: destroy", mono() + B);
    if ((rc = pthread_cond_destroy(&P->c)) != 0) fail(CK_ASYNC, "%s: cond_destroy: %s", desc, lstest::err_name(rc));
    if ((rc = pthread_mutex_destroy(&P->m)) != 0) fail(CK_ASYNC, "%s: mutex_destroy: %s", desc, lstest::err_name(rc));
    if (sem_destroy(&P->s) != 0) fail(CK_ASYNC, "%s: sem_destroy: %s", desc, lstest::err_name(errno));
  }
  munmap(P, 4096);
  delete a;
  if (g_opt.verbose && g_async_done.load() < 16) note("%s: ok", desc);
  g_async_done.fetch_add(1, std::memory_order_relaxed);
  count_op(K_ASYNC);
}

// ------------------------------------------------------------ destroy and unmap
//
// A page of its own holds the objects; helper threads use them; the last
// user releases its lock (or returns from its wait) and destroys the objects
// and unmaps the page at once, while the others may still be inside their
// unlock, post or broadcast calls. A late access to the page is a SIGSEGV
// (reported by the fatal-signal handler with the seed).

enum { L_MUTEX, L_COND, L_SEM, L_RWLOCK, L_KINDS };
const char* const kLifeName[L_KINDS] = {"mutex", "cond", "sem", "rwlock"};

struct LifePage {
  pthread_mutex_t m;
  pthread_rwlock_t rw;
  pthread_cond_t c;
  sem_t s;
  clockid_t cclock;
  int users;  // protected by m (L_MUTEX, L_COND)
  int flag;   // L_COND predicate, protected by m
  uint64_t counter, expected;
  std::atomic<int> users_a;  // L_SEM waiters left
  std::atomic<int> arrived;  // L_COND waiters inside the wait
  std::atomic<int> done;     // L_RWLOCK readers/writers finished
};
struct LifeArg {
  int type = 0, role = 0, nw = 0;
  LifePage* P = nullptr;
  uint64_t seed = 0;
  TState* ts = nullptr;
};

void life_destroy(LifePage* P, int type) {
  int rc = 0;
  switch (type) {
    case L_MUTEX: rc = pthread_mutex_destroy(&P->m); break;
    case L_COND:
      rc = pthread_cond_destroy(&P->c);
      if (rc == 0) rc = pthread_mutex_destroy(&P->m);
      break;
    case L_SEM: rc = sem_destroy(&P->s) == 0 ? 0 : errno; break;
    case L_RWLOCK: rc = pthread_rwlock_destroy(&P->rw); break;
  }
  if (rc != 0) fail(CK_LIFETIME, "the last user's destroy of the %s returned %s", kLifeName[type], lstest::err_name(rc));
  if (munmap(P, 4096) != 0) fail(CK_LIFETIME, "munmap: %s", lstest::err_name(errno));
}

int life_mutex_lock(Rng& r, LifePage* P, const char* what) {
  const int64_t B = bound_ns();
  WaitScope ws(W_BOUNDED, nullptr, what, mono() + B);
  switch (r.below(3)) {
    case 0: return pthread_mutex_lock(&P->m);
    case 1: {
      timespec far = mono_in(B);
      return pthread_mutex_clocklock(&P->m, CLOCK_MONOTONIC, &far);
    }
    default: {
      int rc;
      while ((rc = pthread_mutex_trylock(&P->m)) == EBUSY) sched_yield();
      return rc;
    }
  }
}
int life_rw_lock(Rng& r, LifePage* P, bool rd, const char* what) {
  const int64_t B = bound_ns();
  WaitScope ws(W_BOUNDED, nullptr, what, mono() + B);
  int how = static_cast<int>(r.below(3));
  if (how == 2) {
    int rc;
    while ((rc = rd ? pthread_rwlock_tryrdlock(&P->rw) : pthread_rwlock_trywrlock(&P->rw)) == EBUSY) sched_yield();
    return rc;
  }
  Deadline d = far_deadline(CLOCK_MONOTONIC, B / 1'000'000);
  return rw_acquire(&P->rw, rd, how == 0 ? H_LOCK : H_CLOCK_MONO, d);
}
bool life_poll(const std::atomic<int>& v, int want, const char* what) {
  const int64_t B = bound_ns();
  WaitScope ws(W_BOUNDED, nullptr, what, mono() + B);
  int64_t end = mono() + B;
  while (v.load() < want) {
    if (mono() > end) return false;
    sched_yield();
  }
  return true;
}

void* life_helper(void* p) {
  auto* a = static_cast<LifeArg*>(p);
  TState* saved_ts = t_ts;
  int saved_me = t_me;
  adopt_state(a->ts);
  Rng r(a->seed);
  LifePage* P = a->P;
  const int64_t B = bound_ns();
  int rc = 0;
  auto chk = [&](int rc2, const char* what) {
    if (rc2 != 0) fail(CK_LIFETIME, "%s (%s page): %s", what, kLifeName[a->type], lstest::err_name(rc2));
    return rc2 == 0;
  };
  // Gives the page's mutex back and leaves the page: the last user destroys it.
  auto unlock_and_leave = [&](int kind) {
    bool last = --P->users == 0;
    chk(pthread_mutex_unlock(&P->m), "mutex unlock");
    if (last) life_destroy(P, kind);
  };
  switch (a->type) {
    case L_MUTEX: {
      set_op("lifetime mutex");
      uint64_t k = 1 + r.below(8);
      for (uint64_t i = 0; i < k; ++i) {
        if (!chk(life_mutex_lock(r, P, "lifetime mutex_lock"), "mutex lock")) break;
        P->counter++;
        if (r.chance(4)) sched_yield();
        chk(pthread_mutex_unlock(&P->m), "mutex unlock");
      }
      if (!chk(life_mutex_lock(r, P, "lifetime final mutex_lock"), "final mutex lock")) break;
      P->expected += k;
      bool last = --P->users == 0;
      if (last && P->counter != P->expected)
        fail(CK_LIFETIME, "mutex page: counter %llu, expected %llu", (unsigned long long)P->counter,
             (unsigned long long)P->expected);
      chk(pthread_mutex_unlock(&P->m), "final mutex unlock");
      if (last) life_destroy(P, L_MUTEX);
      break;
    }
    case L_COND: {
      set_op(a->role ? "lifetime cond signaller" : "lifetime cond waiter");
      if (a->role == 0) {
        if (!chk(life_mutex_lock(r, P, "lifetime cond: mutex_lock"), "mutex lock")) break;
        P->arrived.fetch_add(1);
        bool timed = r.chance(2);
        while (!P->flag) {
          WaitScope ws(W_BOUNDED, nullptr, "lifetime cond wait", mono() + B);
          if (timed) {
            timespec far = to_ts(now_ns(P->cclock) + B);
            rc = pthread_cond_timedwait(&P->c, &P->m, &far);
          } else {
            rc = pthread_cond_wait(&P->c, &P->m);
          }
          if (rc != 0) {
            chk(rc, timed ? "cond_timedwait" : "cond_wait");
            break;
          }
        }
        unlock_and_leave(L_COND);
      } else {
        if (!life_poll(P->arrived, a->nw, "lifetime cond: waiting for the waiters"))
          fail(CK_LIFETIME, "cond page: the waiters did not all reach their wait");
        if (!chk(life_mutex_lock(r, P, "lifetime cond: signaller mutex_lock"), "mutex lock")) break;
        P->flag = 1;
        if (r.chance(2)) {
          chk(pthread_cond_broadcast(&P->c), "cond_broadcast");
        } else {
          for (int i = 0; i < a->nw; ++i) chk(pthread_cond_signal(&P->c), "cond_signal");
        }
        unlock_and_leave(L_COND);
      }
      break;
    }
    case L_SEM: {
      set_op(a->role ? "lifetime sem poster" : "lifetime sem waiter");
      if (a->role == 0) {
        int form = static_cast<int>(r.below(3));
        {
          WaitScope ws(W_BOUNDED, nullptr, "lifetime sem wait", mono() + B);
          if (form == 0) rc = sem_rc(sem_wait(&P->s));
          else if (form == 1) {
            timespec far = to_ts(now_ns(CLOCK_REALTIME) + B);
            rc = sem_rc(sem_timedwait(&P->s, &far));
          } else {
            timespec far = mono_in(B);
            rc = sem_rc(sem_clockwait(&P->s, CLOCK_MONOTONIC, &far));
          }
        }
        chk(rc, kSemForm[form]);
        // Returned from the wait: the last waiter destroys at once, while the
        // poster may still be inside its sem_post (glibc allows this).
        if (P->users_a.fetch_sub(1) == 1) life_destroy(P, L_SEM);
      } else {
        for (int i = 0; i < a->nw; ++i) {
          chk(sem_rc(sem_post(&P->s)), "sem_post");
          if (r.chance(3)) sched_yield();
        }
      }
      break;
    }
    case L_RWLOCK: {
      set_op(a->role == 0 ? "lifetime rwlock reader" : a->role == 1 ? "lifetime rwlock writer" : "lifetime rwlock last writer");
      uint64_t k = r.below(6);
      for (uint64_t i = 0; i < k; ++i) {
        bool rd = a->role == 0;
        if (!chk(life_rw_lock(r, P, rd, "lifetime rwlock"), rd ? "rdlock" : "wrlock")) break;
        if (!rd) P->counter++;
        chk(pthread_rwlock_unlock(&P->rw), "rwlock unlock");
      }
      if (a->role != 2) {
        bool rd = a->role == 0;
        if (!chk(life_rw_lock(r, P, rd, "lifetime rwlock final"), rd ? "final rdlock" : "final wrlock")) break;
        if (!rd) P->expected += k;
        P->done.fetch_add(1);
        // From here on the page may be destroyed the moment this unlock has
        // released the lock.
        chk(pthread_rwlock_unlock(&P->rw), "final rwlock unlock");
      } else {
        if (!life_poll(P->done, a->nw, "lifetime rwlock: waiting for the others"))
          fail(CK_LIFETIME, "rwlock page: the other users did not finish");
        if (!chk(life_rw_lock(r, P, false, "lifetime rwlock: last wrlock"), "last wrlock")) break;
        P->expected += k;
        if (P->counter != P->expected)
          fail(CK_LIFETIME, "rwlock page: counter %llu, expected %llu", (unsigned long long)P->counter,
               (unsigned long long)P->expected);
        chk(pthread_rwlock_unlock(&P->rw), "last rwlock unlock");
        life_destroy(P, L_RWLOCK);
      }
      break;
    }
  }
  count_op(K_LIFETIME);
  t_ts = saved_ts;  // (a role played inline by the worker: its own state back)
  t_me = saved_me;
  return nullptr;
}

void op_lifetime(Rng& r) {
  set_op("lifetime");
  const int type = static_cast<int>(r.below(L_KINDS));
  auto* P = static_cast<LifePage*>(map_page());
  if (!P) {
    note("mmap failed: %s", lstest::err_name(errno));
    return;
  }
  int nw = 1 + static_cast<int>(r.below(4));
  static const int kTypes[] = {PTHREAD_MUTEX_DEFAULT, PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_ERRORCHECK,
                               PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ADAPTIVE_NP};
  pthread_mutexattr_t ma;
  pthread_mutexattr_init(&ma);
  pthread_mutexattr_settype(&ma, kTypes[r.below(5)]);
  must(pthread_mutex_init(&P->m, &ma), "lifetime mutex");
  pthread_mutexattr_destroy(&ma);
  P->cclock = r.chance(2) ? CLOCK_MONOTONIC : CLOCK_REALTIME;
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, P->cclock);
  must(pthread_cond_init(&P->c, &ca), "lifetime cond");
  pthread_condattr_destroy(&ca);
  must(rw_init(&P->rw, r.chance(2) ? RK_DEFAULT : RK_WRITER_NONREC), "lifetime rwlock");
  must(sem_rc(sem_init(&P->s, 0, 0)), "lifetime sem");
  // Roles: mutex: nw users; cond: nw waiters + 1 signaller; sem: nw waiters +
  // 1 poster; rwlock: readers and writers (nw in all) + 1 last writer.
  std::vector<LifeArg*> args;
  int users = nw;
  for (int i = 0; i < nw; ++i) {
    auto* a = new LifeArg;
    a->type = type;
    a->role = type == L_RWLOCK ? (r.chance(3) ? 1 : 0) : 0;
    args.push_back(a);
  }
  if (type != L_MUTEX) {
    auto* a = new LifeArg;
    a->type = type;
    a->role = type == L_RWLOCK ? 2 : 1;
    args.push_back(a);
    if (type == L_COND) users = nw + 1;
  }
  P->users = users;
  P->users_a.store(nw);
  for (auto* a : args) {
    a->nw = nw;
    a->P = P;
    a->seed = r.next();
  }
  // Unmapping the page is the last user's; the other objects (unused by
  // this type) are left undestroyed on purpose: nothing else to do.
  if (r.chance(2) && args.size() > 1) std::swap(args.front(), args.back());  // the poster/signaller may start first
  std::vector<pthread_t> ts;
  std::vector<LifeArg*> started;
  for (auto* a : args) {
    a->ts = alloc_state("life-%s", 0);
    if (a->ts) snprintf(a->ts->name, sizeof a->ts->name, "life-%s-%d", kLifeName[type], a->role);
    pthread_t t;
    if (a->ts && pthread_create(&t, nullptr, life_helper, a) == 0) {
      ts.push_back(t);
      started.push_back(a);
    } else {
      // No thread: play the role here (bounded waits keep this safe).
      release_state(a->ts);
      a->ts = nullptr;
      life_helper(a);
      delete a;
    }
  }
  bool ok = true;
  for (size_t i = 0; i < ts.size(); ++i) {
    if (!bounded_join(ts[i], nullptr, bound_ns() + 2'000'000'000, "join lifetime helpers")) {
      fail(CK_LIFETIME, "%s page: a helper (role %d) did not finish within %.0f s", kLifeName[type], started[i]->role,
           g_opt.stall_s + 2);
      ok = false;
      continue;  // abandoned
    }
    release_state(started[i]->ts);
    delete started[i];
  }
  if (!ok) dump_states("destroy-and-unmap: a helper did not finish");
  g_lifetimes_done.fetch_add(1, std::memory_order_relaxed);
}

// ------------------------------------------------------------ fork in the middle
//
// The forker holds a few mutexes (kinds without an owner check on unlock: the
// child's thread id differs) and maybe a read lock, and forks while the other
// threads run. The child (one thread, with whatever ghost owners and ghost
// waiters the other threads left in the objects) optionally first creates a
// thread (it reuses a dead thread's stack and scribbles on it), unlocks what
// the forker held and locks it again, probes free or ghost-held objects with
// try and short timed locks, posts to a private semaphore and takes the token
// back, optionally uses the objects from a new thread, posts k tokens to the
// process-shared semaphore and exits. Its exit status names the failed step;
// SIGALRM means it hung. The parent takes the k tokens.

enum {
  FC_THREAD = 11, FC_UNLOCK_HELD, FC_RELOCK_HELD, FC_UNLOCK_AGAIN, FC_RD_UNLOCK, FC_RW_TRY, FC_PROBE_TRY,
  FC_PROBE_TIMED, FC_SEM_PRIVATE, FC_THREAD_AFTER, FC_PSEM, FC_CHECKS
};
const char* fork_code_name(int c) {
  switch (c) {
    case FC_THREAD: return "creating a thread first";
    case FC_UNLOCK_HELD: return "unlocking a mutex the forker held";
    case FC_RELOCK_HELD: return "locking it again";
    case FC_UNLOCK_AGAIN: return "unlocking it again";
    case FC_RD_UNLOCK: return "read-unlocking the rwlock the forker read-held";
    case FC_RW_TRY: return "trywrlock of that rwlock";
    case FC_PROBE_TRY: return "trylock of another mutex";
    case FC_PROBE_TIMED: return "short clocklock of another mutex";
    case FC_SEM_PRIVATE: return "sem_post/sem_trywait on a private semaphore";
    case FC_THREAD_AFTER: return "a new thread locking the mutexes";
    case FC_PSEM: return "sem_post on the process-shared semaphore";
    case FC_CHECKS: return "a harness check (see its FAIL line)";
    case 0: return "before its first step";
  }
  return "?";
}

struct ForkPlan {
  MutexObj* held[3] = {};
  int nheld = 0;
  RwObj* rheld = nullptr;
  uint64_t rv = 0;
  MutexObj* probe[2] = {};
  SemObj* sem = nullptr;
  int posts = 1;
  bool thread_first = false, thread_after = false;
};

uint64_t total_fails() {
  uint64_t n = 0;
  for (auto& f : g_fail) n += f.load();
  return n;
}

void* child_scribbler(void*) {
  // Runs on a stack recycled from a thread that did not survive fork.
  char buf[96 * 1024];
  memset(buf, 0x5a, sizeof buf);
  asm volatile("" : : "r"(buf) : "memory");
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  if (pthread_mutex_lock(&m) != 0 || pthread_mutex_unlock(&m) != 0) return reinterpret_cast<void*>(1);
  return nullptr;
}
void* child_user(void* p) {
  auto* f = static_cast<ForkPlan*>(p);
  for (int i = 0; i < f->nheld; ++i) {
    MutexObj& m = *f->held[i];
    if (mx_acquire(m.obj(), m.kind, H_LOCK, Deadline{}) != 0) return reinterpret_cast<void*>(1);
    if (mx_release(m.obj(), m.kind) != 0) return reinterpret_cast<void*>(1);
  }
  if (f->rheld) {
    // Not a blocking rdlock: a ghost writer may be queued (and a
    // writer-preferring rwlock then refuses new readers for ever).
    int rc = pthread_rwlock_tryrdlock(&f->rheld->rw);
    if (rc == 0) pthread_rwlock_unlock(&f->rheld->rw);
    else if (rc != EBUSY) return reinterpret_cast<void*>(1);
  }
  return nullptr;
}

[[noreturn]] void fork_child(ForkPlan& f) {
  alarm(static_cast<unsigned>(g_opt.stall_s) + 5);  // hung: SIGALRM
  const uint64_t fails0 = total_fails();
  auto step = [](int s) { __atomic_store_n(g_child_step, s, __ATOMIC_SEQ_CST); };
  step(FC_THREAD);
  if (f.thread_first) {
    pthread_t t;
    void* res = nullptr;
    if (pthread_create(&t, nullptr, child_scribbler, nullptr) != 0 || pthread_join(t, &res) != 0 || res) _exit(FC_THREAD);
  }
  for (int i = 0; i < f.nheld; ++i) {
    MutexObj& m = *f.held[i];
    leave(m.owner, t_me, "fork child", m.name);
    step(FC_UNLOCK_HELD);
    if (mx_release(m.obj(), m.kind) != 0) _exit(FC_UNLOCK_HELD);
    step(FC_RELOCK_HELD);
    if (mx_acquire(m.obj(), m.kind, H_LOCK, Deadline{}) != 0) _exit(FC_RELOCK_HELD);
    enter(m.owner, t_me, "fork child", m.name);
    m.counter++;
    m.shadow.fetch_add(1);
    leave(m.owner, t_me, "fork child", m.name);
    step(FC_UNLOCK_AGAIN);
    if (mx_release(m.obj(), m.kind) != 0) _exit(FC_UNLOCK_AGAIN);
  }
  if (f.rheld) {
    step(FC_RD_UNLOCK);
    rd_leave(*f.rheld, f.rv, "fork child");
    if (pthread_rwlock_unlock(&f.rheld->rw) != 0) _exit(FC_RD_UNLOCK);
    step(FC_RW_TRY);
    int rc = pthread_rwlock_trywrlock(&f.rheld->rw);  // ghost readers may hold it
    if (rc == 0) pthread_rwlock_unlock(&f.rheld->rw);
    else if (rc != EBUSY) _exit(FC_RW_TRY);
  }
  for (MutexObj* m : f.probe) {
    if (!m) continue;
    step(FC_PROBE_TRY);
    int rc = mx_acquire(m->obj(), m->kind, H_TRY, Deadline{});  // free at fork, or a ghost holds it
    if (rc == 0) mx_release(m->obj(), m->kind);
    else if (rc != EBUSY) _exit(FC_PROBE_TRY);
    step(FC_PROBE_TIMED);
    Deadline d = far_deadline(CLOCK_MONOTONIC, 2);
    rc = mx_acquire(m->obj(), m->kind, H_CLOCK_MONO, d);
    if (rc == 0) mx_release(m->obj(), m->kind);
    else if (rc != ETIMEDOUT && rc != EDEADLK) _exit(FC_PROBE_TIMED);
  }
  step(FC_SEM_PRIVATE);
  if (sem_post(&f.sem->s) != 0 || sem_trywait(&f.sem->s) != 0) _exit(FC_SEM_PRIVATE);
  step(FC_THREAD_AFTER);
  if (f.thread_after) {
    pthread_t t;
    void* res = nullptr;
    if (pthread_create(&t, nullptr, child_user, &f) != 0 || pthread_join(t, &res) != 0 || res) _exit(FC_THREAD_AFTER);
  }
  step(FC_PSEM);
  for (int i = 0; i < f.posts; ++i)
    if (sem_post(g_psem) != 0) _exit(FC_PSEM);
  if (total_fails() != fails0) _exit(FC_CHECKS);
  _exit(0);
}

void op_fork(Rng& r) {
  bool expect = false;
  if (!g_fork_busy.compare_exchange_strong(expect, true)) return;
  set_op("fork");
  ForkPlan f;
  for (int tries = 0; tries < 6 && f.nheld < 3; ++tries) {
    MutexObj* m = r.chance(4) ? pick(r, g_c11m) : pick(r, g_mutex);
    if (!(mk_plain_pthread(m->kind) || m->kind == MK_C11_PLAIN || m->kind == MK_C11_TIMED)) continue;
    bool dup = false;
    for (int i = 0; i < f.nheld; ++i) dup |= f.held[i] == m;
    if (dup) continue;
    int rc = mx_acquire(m->obj(), m->kind, H_TRY, Deadline{});
    if (rc == 0) {
      enter(m->owner, t_me, "held across fork", m->name);
      f.held[f.nheld++] = m;
    } else if (rc != EBUSY) {
      fail(CK_ERRNO, "trylock of %s returned %s", m->name, lstest::err_name(rc));
    }
  }
  if (r.chance(2)) {
    RwObj* o = pick(r, g_rw);
    if (pthread_rwlock_tryrdlock(&o->rw) == 0) {
      f.rv = rd_enter(*o, "read-held across fork");
      f.rheld = o;
    }
  }
  for (auto& p : f.probe) {
    MutexObj* m = pick(r, g_mutex);
    bool held = false;
    for (int i = 0; i < f.nheld; ++i) held |= f.held[i] == m;
    p = held ? nullptr : m;
  }
  f.sem = pick(r, g_sem);
  f.posts = 1 + static_cast<int>(r.below(3));
  f.thread_first = r.chance(2);
  f.thread_after = r.chance(2);
  __atomic_store_n(g_child_step, 0, __ATOMIC_SEQ_CST);
  pid_t pid = fork();
  if (pid == 0) fork_child(f);
  int fork_errno = errno;
  if (f.rheld) {
    rd_leave(*f.rheld, f.rv, "read-held across fork");
    int rc = pthread_rwlock_unlock(&f.rheld->rw);
    if (rc != 0) fail(CK_ERRNO, "rwlock_unlock of %s after fork: %s", f.rheld->name, lstest::err_name(rc));
  }
  for (int i = 0; i < f.nheld; ++i) {
    leave(f.held[i]->owner, t_me, "held across fork", f.held[i]->name);
    int rc = mx_release(f.held[i]->obj(), f.held[i]->kind);
    if (rc != 0) fail(CK_ERRNO, "unlock of %s after fork: %s", f.held[i]->name, lstest::err_name(rc));
  }
  if (pid < 0) {
    note("fork: %s", lstest::err_name(fork_errno));
    g_fork_busy.store(false);
    return;
  }
  const int64_t B = bound_ns();
  int st = 0;
  bool done = false;
  {
    int64_t end = mono() + B + 6'000'000'000;
    WaitScope ws(W_BOUNDED, nullptr, "waitpid (fork child)", end + B);
    while (mono() < end) {
      pid_t w = waitpid(pid, &st, WNOHANG);
      if (w == pid) {
        done = true;
        break;
      }
      if (w < 0 && errno != EINTR) break;
      sleep_ns(500'000);
    }
  }
  char plan[160];
  snprintf(plan, sizeof plan, "held %d mutexes%s, %s, %s", f.nheld, f.rheld ? " + a read lock" : "",
           f.thread_first ? "thread first" : "no thread first", f.thread_after ? "thread after" : "no thread after");
  if (!done) {
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    fail(CK_FORK, "a child of fork (pid %d; %s) did not finish within %.0f s; killed in step: %s", pid, plan,
         g_opt.stall_s + 6, fork_code_name(__atomic_load_n(g_child_step, __ATOMIC_SEQ_CST)));
  } else if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
    for (int i = 0; i < f.posts; ++i) {
      timespec far = mono_in(B);
      int rc = sem_rc(sem_clockwait(g_psem, CLOCK_MONOTONIC, &far));
      if (rc != 0) {
        fail(CK_FORK, "token %d/%d the child posted to the process-shared semaphore cannot be taken: %s", i + 1, f.posts,
             lstest::err_name(rc));
        break;
      }
    }
  } else {
    if (WIFSIGNALED(st))
      fail(CK_FORK, "a child of fork (%s) was killed by signal %d (%s) in step: %s", plan, WTERMSIG(st),
           WTERMSIG(st) == SIGALRM ? "it hung" : strsignal(WTERMSIG(st)),
           fork_code_name(__atomic_load_n(g_child_step, __ATOMIC_SEQ_CST)));
    else
      fail(CK_FORK, "a child of fork (%s) exited with status %d: %s failed", plan, WEXITSTATUS(st),
           fork_code_name(WEXITSTATUS(st)));
    while (sem_trywait(g_psem) == 0) {
    }
  }
  g_forks_done.fetch_add(1, std::memory_order_relaxed);
  count_op(K_FORK);
  g_fork_busy.store(false);
}

// ------------------------------------------------------------ handshakes

struct HsArg {
  HsPair* h;
  int side;
  uint64_t seed;
  TState* ts;
};

int hs_lock(HsPair& h) { return h.type == HS_C11 ? c11rc(mtx_lock(&h.cm)) : pthread_mutex_lock(&h.m); }
int hs_unlock(HsPair& h) { return h.type == HS_C11 ? c11rc(mtx_unlock(&h.cm)) : pthread_mutex_unlock(&h.m); }
int hs_wake(HsPair& h, bool all) {
  if (h.type == HS_C11) return c11rc(all ? cnd_broadcast(&h.cc) : cnd_signal(&h.cc));
  return all ? pthread_cond_broadcast(&h.c) : pthread_cond_signal(&h.c);
}

void* hs_thread(void* p) {
  auto* a = static_cast<HsArg*>(p);
  adopt_state(a->ts);
  Rng r(a->seed);
  HsPair& h = *a->h;
  const int me = a->side;
  const char* name = kHsName[h.type];
  while (!g_go.load()) sched_yield();
  while (!g_stop.load()) {
    if (h.type == HS_SEM) {
      int form = static_cast<int>(r.below(3));
      Deadline d;
      if (form) d = make_deadline(r, form == 1 ? CLOCK_REALTIME : CLOCK_MONOTONIC, true);
      set_op("handshake sem wait");
      int rc;
      {
        WaitScope ws(W_HS, &h, kSemForm[form], form ? d.mono_limit() : 0, me);
        rc = form == 0 ? sem_rc(sem_wait(&h.s[me]))
             : form == 1 ? sem_rc(sem_timedwait(&h.s[me], &d.ts))
                         : sem_rc(sem_clockwait(&h.s[me], d.clk, &d.ts));
      }
      if (rc == ETIMEDOUT && form) {
        if (!d.reached()) fail(CK_TIMEOUTS, "%s: %s returned ETIMEDOUT %.3f ms early", name, kSemForm[form], d.early_ms());
        continue;
      }
      if (rc != 0) {
        fail(CK_ERRNO, "%s: %s returned %s", name, kSemForm[form], lstest::err_name(rc));
        break;
      }
      if (g_stop.load()) break;
      h.rounds[me].fetch_add(1);
      h.turn_a.store(1 - me);
      if (sem_post(&h.s[1 - me]) != 0) fail(CK_ERRNO, "%s: sem_post: %s", name, lstest::err_name(errno));
    } else {
      set_op("handshake lock");
      int rc;
      {
        WaitScope ws(W_BOUNDED, nullptr, "handshake mutex", mono() + 2 * bound_ns());
        rc = hs_lock(h);
      }
      if (rc != 0) {
        fail(CK_ERRNO, "%s: lock: %s", name, lstest::err_name(rc));
        break;
      }
      enter(h.owner, t_me, name, name);
      bool timed = r.chance(2);
      set_op("handshake wait");
      while (h.turn != me && !g_stop.load()) {
        Deadline d;
        if (timed) d = make_deadline(r, h.type == HS_C11 ? CLOCK_REALTIME : CLOCK_MONOTONIC, true);
        leave(h.owner, t_me, name, name);
        {
          WaitScope ws(W_HS, &h, h.type == HS_C11 ? "cnd_wait" : "cond_wait", timed ? d.mono_limit() : 0, me);
          if (h.type == HS_C11) rc = c11rc(timed ? cnd_timedwait(&h.cc, &h.cm, &d.ts) : cnd_wait(&h.cc, &h.cm));
          else rc = timed ? pthread_cond_timedwait(&h.c, &h.m, &d.ts) : pthread_cond_wait(&h.c, &h.m);
        }
        enter(h.owner, t_me, name, name);
        if (rc == ETIMEDOUT && timed) {
          if (!d.reached()) fail(CK_TIMEOUTS, "%s: timed wait returned ETIMEDOUT %.3f ms early", name, d.early_ms());
          continue;
        }
        if (rc != 0) {
          fail(CK_ERRNO, "%s: wait returned %s", name, lstest::err_name(rc));
          break;
        }
      }
      if (!g_stop.load() && h.turn == me) {
        h.turn = 1 - me;
        h.turn_a.store(h.turn);
        h.rounds[me].fetch_add(1);
        rc = g_opt.inject == "lost-signal" && r.chance(5000) ? 0 : hs_wake(h, r.chance(4));
        if (rc != 0) fail(CK_ERRNO, "%s: signal: %s", name, lstest::err_name(rc));
      }
      leave(h.owner, t_me, name, name);
      if ((rc = hs_unlock(h)) != 0) fail(CK_ERRNO, "%s: unlock: %s", name, lstest::err_name(rc));
    }
    count_op(K_HANDSHAKE);
    if (r.chance(2)) sleep_ns(r.below(100'000));  // leave the CPUs to the workers
  }
  set_op("done");
  return nullptr;
}

// ------------------------------------------------------------ feeder
//
// A waiter on a shared semaphore or condvar may wait for a token that no
// worker happens to produce. The feeder posts (produces) one when waiters
// have found a zero value for two samples in a row. It never feeds an object
// whose value is positive while waiters sleep: that is the watchdog's lost
// wakeup.

std::atomic<bool> g_feeder_stop{false};

void* feeder(void* p) {
  adopt_state(static_cast<TState*>(p));
  set_op("feeding");
  while (!g_feeder_stop.load()) {
    for (SemObj* s : g_sem) {
      bool starving = s->blocked.load() > 0 && sem_value(&s->s) == 0;
      if (starving && s->feed_seen) {
        if (sem_post(&s->s) == 0) {
          s->posted.fetch_add(1);
          g_feeds.fetch_add(1, std::memory_order_relaxed);
        }
        s->feed_seen = false;
      } else {
        s->feed_seen = starving;
      }
    }
    for (auto* list : {&g_cond, &g_c11c})
      for (CondObj* c : *list) {
        bool starving = c->untimed_a.load() > 0 && c->tokens_a.load() == 0;
        if (starving && c->feed_seen) {
          cond_lock(*c, "feeder");
          if (c->tokens == 0 && c->waiters > 0) {
            c->tokens++;
            c->tokens_a.store(c->tokens);
            c->produced.fetch_add(1);
            g_feeds.fetch_add(1, std::memory_order_relaxed);
            int rc = cv_wake(*c, false);
            if (rc != 0) fail(CK_ERRNO, "feeder: signal of %s: %s", c->name, lstest::err_name(rc));
          }
          cond_unlock(*c, "feeder");
          c->feed_seen = false;
        } else {
          c->feed_seen = starving;
        }
      }
    if (t_ts) t_ts->progress.store(mono());
    sleep_ns(g_stop.load() ? 2'000'000 : 5'000'000);
  }
  return nullptr;
}

// ------------------------------------------------------------ workers

std::atomic<int64_t> g_last[NCLASS];

uint64_t mix(uint64_t a, uint64_t b) {
  Rng r(a ^ (b * 0xD1B54A32D192ED03ull));
  r.next();
  return r.next();
}

// A class by weight; the expensive ones at most once per kMinIntervalNs
// (globally); -1 when nothing is due.
int pick_class(Rng& r) {
  uint32_t total = 0;
  for (int c = 0; c < NCLASS; ++c)
    if (c != K_HANDSHAKE) total += g_opt.weight[c];
  if (total == 0) return -1;
  for (int attempt = 0; attempt < 4; ++attempt) {
    uint32_t x = r.below(total);
    int c = 0;
    while (c == K_HANDSHAKE || x >= g_opt.weight[c]) {
      if (c != K_HANDSHAKE) x -= g_opt.weight[c];
      ++c;
    }
    if (kMinIntervalNs[c] == 0) return c;
    int64_t now = mono(), last = g_last[c].load();
    if (now - last >= kMinIntervalNs[c] && g_last[c].compare_exchange_strong(last, now)) return c;
  }
  return -1;
}

struct WorkerArg {
  int idx;
  TState* ts;
};

void* worker(void* p) {
  auto* a = static_cast<WorkerArg*>(p);
  adopt_state(a->ts);
  Rng r(mix(g_opt.seed, static_cast<uint64_t>(a->idx) + 1));
  sem_t mine;
  sem_init(&mine, 0, 0);
  while (!g_go.load()) sched_yield();
  while (!g_stop.load()) {
    switch (pick_class(r)) {
      case K_MUTEX: op_mutex(r, *pick(r, g_mutex)); break;
      case K_C11:
        if (r.chance(2)) op_mutex(r, *pick(r, g_c11m));
        else op_cond(r, *pick(r, g_c11c));
        break;
      case K_RWLOCK: op_rwlock(r, *pick(r, g_rw)); break;
      case K_COND: op_cond(r, *pick(r, g_cond)); break;
      case K_SEM: op_sem(r, *pick(r, g_sem), &mine); break;
      case K_LIFETIME: op_lifetime(r); break;
      case K_CANCEL: op_cancel(r); break;
      case K_ASYNC: op_async(r); break;
      case K_FORK: op_fork(r); break;
      default: sleep_ns(1'000'000); break;
    }
    between_ops(r);
  }
  set_op("done");
  sem_destroy(&mine);
  return nullptr;
}

// ------------------------------------------------------------ watchdog

const char* obj_name(int kind, const void* obj) {
  if (!obj) return "-";
  switch (kind) {
    case W_MUTEX: return static_cast<const MutexObj*>(obj)->name;
    case W_CMUTEX:
    case W_COND: return static_cast<const CondObj*>(obj)->name;
    case W_RWLOCK: return static_cast<const RwObj*>(obj)->name;
    case W_SEM: return static_cast<const SemObj*>(obj)->name;
    case W_HS: return kHsName[static_cast<const HsPair*>(obj)->type];
  }
  return "-";
}

// Is the object the thread waits for free (so that it should not sleep)?
bool wait_is_free(int kind, const void* obj, int mode) {
  switch (kind) {
    case W_MUTEX: return static_cast<const MutexObj*>(obj)->owner.load() == 0;
    case W_CMUTEX: return static_cast<const CondObj*>(obj)->owner.load() == 0;
    case W_RWLOCK: {
      auto* o = static_cast<const RwObj*>(obj);
      if (mode == 2) return o->writer.load() == 0;  // recursive read on the default kind
      return o->writer.load() == 0 && o->readers.load() == 0;
    }
    case W_COND: {
      auto* c = static_cast<const CondObj*>(obj);
      return (c->tokens_a.load() > 0 || g_stop.load()) && c->owner.load() == 0;
    }
    case W_SEM: return sem_value(&const_cast<SemObj*>(static_cast<const SemObj*>(obj))->s) > 0;
    case W_HS: {
      auto* h = const_cast<HsPair*>(static_cast<const HsPair*>(obj));
      if (h->type == HS_SEM) return sem_value(&h->s[mode]) > 0;
      return (h->turn_a.load() == mode || g_stop.load()) && h->owner.load() == 0;
    }
  }
  return false;
}

std::string obj_state(int kind, const void* obj, int mode) {
  char b[200] = "";
  switch (kind) {
    case W_MUTEX: snprintf(b, sizeof b, "owner=%d", static_cast<const MutexObj*>(obj)->owner.load()); break;
    case W_CMUTEX:
    case W_COND: {
      auto* c = static_cast<const CondObj*>(obj);
      snprintf(b, sizeof b, "owner=%d tokens=%llu waiters=%d untimed=%d", c->owner.load(),
               (unsigned long long)c->tokens_a.load(), c->waiters_a.load(), c->untimed_a.load());
      break;
    }
    case W_RWLOCK: {
      auto* o = static_cast<const RwObj*>(obj);
      snprintf(b, sizeof b, "readers=%d writer=%d mode=%s", o->readers.load(), o->writer.load(),
               mode == 0 ? "write" : mode == 1 ? "read" : "recursive read");
      break;
    }
    case W_SEM: {
      auto* s = const_cast<SemObj*>(static_cast<const SemObj*>(obj));
      snprintf(b, sizeof b, "value=%d blocked=%d", sem_value(&s->s), s->blocked.load());
      break;
    }
    case W_HS: {
      auto* h = const_cast<HsPair*>(static_cast<const HsPair*>(obj));
      snprintf(b, sizeof b, "side=%d turn=%d owner=%d rounds=%llu/%llu%s", mode, h->turn_a.load(), h->owner.load(),
               (unsigned long long)h->rounds[0].load(), (unsigned long long)h->rounds[1].load(),
               h->type == HS_SEM ? (sem_value(&h->s[mode]) > 0 ? " sem>0" : " sem=0") : "");
      break;
    }
  }
  return b;
}

void dump_states(const char* why) {
  int64_t now = mono(), last = g_last_dump.load();
  if (now - last < 5'000'000'000 && last != 0) return;
  if (!g_last_dump.compare_exchange_strong(last, now)) return;
  int old;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &old);
  fprintf(stderr, "torture: ---- thread states (%s) ----\n", why);
  for (auto& s : g_states) {
    if (s.used.load() != 1) continue;
    int kind = s.wkind.load();
    const void* obj = s.wobj.load();
    int mode = s.wmode.load();
    if (kind == W_NONE) {
      fprintf(stderr, "torture:   %-22s tid %-7d running %-32s (last progress %.2f s ago)\n", s.name, s.tid.load(),
              s.op.load(), (now - s.progress.load()) / 1e9);
    } else {
      int64_t lim = s.wlimit.load();
      char dl[64] = "";
      if (lim) snprintf(dl, sizeof dl, ", %s %.1f ms", kind == W_BOUNDED ? "bound in" : "deadline in", (lim - now) / 1e6);
      fprintf(stderr, "torture:   %-22s tid %-7d waits  %-32s in %s on %s for %.2f s%s [%s]\n", s.name, s.tid.load(),
              s.wwhat.load(), kWaitName[kind], obj_name(kind, obj), (now - s.wsince.load()) / 1e9, dl,
              kind == W_BOUNDED ? "" : obj_state(kind, obj, mode).c_str());
    }
  }
  fprintf(stderr, "torture: ---- seed %llu; reproduce: %s\n", (unsigned long long)g_opt.seed, g_repro);
  pthread_setcancelstate(old, &old);
}

void watchdog_scan() {
  const int64_t now = mono(), B = bound_ns();
  for (auto& s : g_states) {
    if (s.used.load(std::memory_order_acquire) != 1) continue;
    int kind = s.wkind.load(std::memory_order_acquire);
    if (kind == W_NONE) {
      s.seen_wsince = -1;
      s.free_since = 0;
      int64_t pr = s.progress.load();
      if (now - pr > 6 * B && s.reported_idle != pr) {
        s.reported_idle = pr;
        fail(CK_PROGRESS, "%s (tid %d) made no progress for %.1f s, running %s", s.name, s.tid.load(), (now - pr) / 1e9,
             s.op.load());
        dump_states("no progress");
      }
      continue;
    }
    const int64_t since = s.wsince.load(), limit = s.wlimit.load();
    const void* obj = s.wobj.load();
    const char* what = s.wwhat.load();
    const int mode = s.wmode.load();
    if (kind != s.wkind.load() || since != s.wsince.load()) continue;  // moved on meanwhile
    if (since != s.seen_wsince) {
      s.seen_wsince = since;
      s.free_since = 0;
    }
    if (kind == W_BOUNDED) {
      int64_t lim = limit ? limit : since + B;
      if (now > lim && s.reported_wsince != since) {
        s.reported_wsince = since;
        fail(CK_PROGRESS, "%s (tid %d) is still in \"%s\" after %.1f s (past its bound)", s.name, s.tid.load(), what,
             (now - since) / 1e9);
        dump_states("a bounded wait overran");
      }
      continue;
    }
    if (limit && now > limit + B && s.reported_late != since) {
      s.reported_late = since;
      fail(CK_TIMEOUTS, "%s (tid %d) is still in %s on %s %.1f s past its deadline", s.name, s.tid.load(), what,
           obj_name(kind, obj), (now - limit) / 1e9);
      dump_states("a timed wait overran its deadline");
    }
    if (!wait_is_free(kind, obj, mode)) {
      s.free_since = 0;
    } else if (s.free_since == 0) {
      s.free_since = now;
    } else if (now - s.free_since >= B && s.reported_wsince != since) {
      s.reported_wsince = since;
      Check c = kind == W_COND ? CK_COND : kind == W_SEM ? CK_SEM : kind == W_HS ? CK_HANDSHAKE : CK_PROGRESS;
      fail(c, "%s (tid %d) has waited in %s on %s for %.1f s, while what it waits for was available for the last %.1f s "
           "(%s): lost wakeup",
           s.name, s.tid.load(), what, obj_name(kind, obj), (now - since) / 1e9, (now - s.free_since) / 1e9,
           obj_state(kind, obj, mode).c_str());
      dump_states("lost wakeup");
    }
    if (now - since > 6 * B && s.reported_wsince != since) {
      s.reported_wsince = since;
      fail(CK_PROGRESS, "%s (tid %d) has been blocked in %s on %s for %.1f s (%s)", s.name, s.tid.load(), what,
           obj_name(kind, obj), (now - since) / 1e9, obj_state(kind, obj, mode).c_str());
      dump_states("blocked too long");
    }
  }
}

uint64_t ops_now(uint64_t per[NCLASS]) {
  uint64_t total = 0;
  for (int c = 0; c < NCLASS; ++c) per[c] = g_ops_total[c].load();
  for (auto& s : g_states)
    if (s.used.load() == 1)
      for (int c = 0; c < NCLASS; ++c) per[c] += s.ops[c].load(std::memory_order_relaxed);
  for (int c = 0; c < NCLASS; ++c) total += per[c];
  return total;
}

// ------------------------------------------------------------ the end

void* stopper_main(void* p) {
  adopt_state(static_cast<TState*>(p));
  set_op("stop broadcasts");
  for (auto* list : {&g_cond, &g_c11c})
    for (CondObj* c : *list) {
      cond_lock(*c, "stop");
      cv_wake(*c, true);
      cond_unlock(*c, "stop");
    }
  if (g_opt.weight[K_HANDSHAKE])
    for (HsPair& h : g_hs) {
      if (h.type == HS_SEM) {
        sem_post(&h.s[0]);
        sem_post(&h.s[1]);
      } else {
        hs_lock(h);
        hs_wake(h, true);
        hs_unlock(h);
      }
    }
  set_op("done");
  return nullptr;
}

// Checks once every thread has finished: exact counters and values, and
// every object free and usable.
void final_checks() {
  for (auto* list : {&g_mutex, &g_c11m})
    for (MutexObj* o : *list) {
      if (o->counter != o->shadow.load())
        fail(CK_COUNTERS, "%s: final counter %llu, shadow %llu", o->name, (unsigned long long)o->counter,
             (unsigned long long)o->shadow.load());
      if (o->owner.load() != 0) fail(CK_MUTEX_EXCL, "%s: owner word %d left at the end", o->name, o->owner.load());
      int rc = mx_acquire(o->obj(), o->kind, H_TRY, Deadline{});
      if (rc != 0) fail(CK_PROGRESS, "%s is not free at the end: trylock returned %s", o->name, lstest::err_name(rc));
      else mx_release(o->obj(), o->kind);
    }
  for (RwObj* o : g_rw) {
    if (o->counter != o->shadow.load())
      fail(CK_COUNTERS, "%s: final counter %llu, shadow %llu", o->name, (unsigned long long)o->counter,
           (unsigned long long)o->shadow.load());
    if (o->readers.load() != 0 || o->writer.load() != 0)
      fail(CK_RW_EXCL, "%s: %d readers / writer %d left at the end", o->name, o->readers.load(), o->writer.load());
    int rc = pthread_rwlock_trywrlock(&o->rw);
    if (rc != 0) fail(CK_PROGRESS, "%s is not free at the end: trywrlock returned %s", o->name, lstest::err_name(rc));
    else pthread_rwlock_unlock(&o->rw);
  }
  for (auto* list : {&g_cond, &g_c11c})
    for (CondObj* c : *list) {
      uint64_t p = c->produced.load(), k = c->consumed.load();
      if (p != k + c->tokens)
        fail(CK_COND, "%s: produced %llu tokens, consumed %llu, %llu left: %lld unaccounted", c->name,
             (unsigned long long)p, (unsigned long long)k, (unsigned long long)c->tokens,
             (long long)(p - k - c->tokens));
      if (c->waiters != 0 || c->waiters_a.load() != 0 || c->untimed_a.load() != 0)
        fail(CK_COND, "%s: %d waiters left in the bookkeeping at the end", c->name, c->waiters);
      if (c->owner.load() != 0) fail(CK_MUTEX_EXCL, "%s: owner word %d left at the end", c->name, c->owner.load());
    }
  for (SemObj* s : g_sem) {
    int64_t expect = int64_t{s->init} + static_cast<int64_t>(s->posted.load()) - static_cast<int64_t>(s->consumed.load());
    int v = sem_value(&s->s);
    if (v != expect)
      fail(CK_SEM, "%s: final value %d, expected init %u + posted %llu - consumed %llu = %lld", s->name, v, s->init,
           (unsigned long long)s->posted.load(), (unsigned long long)s->consumed.load(), (long long)expect);
    int64_t taken = 0;
    while (sem_trywait(&s->s) == 0 && taken <= expect + 1000) ++taken;
    if (taken != expect) fail(CK_SEM, "%s: %lld tokens could be taken at the end, expected %lld", s->name, (long long)taken, (long long)expect);
    if (s->blocked.load() != 0) fail(CK_SEM, "%s: %d waiters left in the bookkeeping", s->name, s->blocked.load());
  }
  int pv = sem_value(g_psem);
  if (pv != 0) fail(CK_FORK, "the process-shared semaphore has value %d at the end (expected 0)", pv);
  if (g_opt.weight[K_HANDSHAKE])
    for (HsPair& h : g_hs) {
      uint64_t a = h.rounds[0].load(), b = h.rounds[1].load();
      if (a != b && a != b + 1)
        fail(CK_HANDSHAKE, "%s: rounds %llu and %llu out of step", kHsName[h.type], (unsigned long long)a, (unsigned long long)b);
      if (a == 0 && g_opt.seconds >= 1) fail(CK_HANDSHAKE, "%s made no round at all", kHsName[h.type]);
    }
}

void on_fatal(int sig, siginfo_t* si, void*) {
  char buf[2600];
  char where[120] = "";
  if ((sig == SIGSEGV || sig == SIGBUS) && si)
    snprintf(where, sizeof where, " at address %p (a late access to an unmapped lock page shows here)", si->si_addr);
  int n = snprintf(buf, sizeof buf, "torture[%d]: FATAL: signal %d (%s)%s\ntorture: seed %llu; reproduce: %s\n", getpid(),
                   sig, sigabbrev_np(sig) ? sigabbrev_np(sig) : "?", where, (unsigned long long)g_opt.seed, g_repro);
  if (n > 0) {
    ssize_t w = write(2, buf, static_cast<size_t>(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
    (void)w;
  }
  if (TState* ts = t_ts) {  // what the crashing thread was doing
    int kind = ts->wkind.load();
    n = snprintf(buf, sizeof buf, "torture: the crashing thread: %s (tid %d), op \"%s\"%s%s%s\n", ts->name, current_tid(),
                 ts->op.load(), kind != W_NONE ? ", waiting in \"" : "", kind != W_NONE ? ts->wwhat.load() : "",
                 kind != W_NONE ? "\"" : "");
    if (n > 0) {
      ssize_t w = write(2, buf, static_cast<size_t>(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
      (void)w;
    }
  }
  // Every live thread's operation (a victim of asynchronous cancellation has
  // no state of its own: its canceller's op names the call it was in).
  for (auto& st : g_states) {
    if (st.used.load() != 1) continue;
    n = snprintf(buf, sizeof buf, "torture:   %s: %s\n", st.name, st.op.load());
    if (n > 0) {
      ssize_t w = write(2, buf, static_cast<size_t>(n < (int)sizeof buf ? n : (int)sizeof buf - 1));
      (void)w;
    }
  }
  signal(sig, SIG_DFL);
  raise(sig);
}

void usage(FILE* f) {
  fprintf(f,
          "usage: torture [--seed S] [--seconds T] [--threads N] [--stall-seconds B]\n"
          "               [--no-fork] [--no-cancel] [--no-async-cancel] [--only CLASS,...] [--verbose]\n"
          "  --seed S          operation mix (default: from the clock; always printed)\n"
          "  --seconds T       run time (default 10; hours for a long run)\n"
          "  --threads N       workers (default 4 x online CPUs: oversubscribed)\n"
          "  --stall-seconds B progress bound: a waiter whose object stays free for B s fails (default 10)\n"
          "  --no-fork, --no-cancel (deferred and asynchronous), --no-async-cancel\n"
          "  --only LIST       only these classes: mutex,c11,rwlock,cond,sem,lifetime,cancel,async_cancel,fork,handshake\n"
          "Prints ops=<total> with per-class counts, one line per check, and last \"N passed, M failed\".\n");
}

bool parse_num(const char* s, double* out) {
  char* end = nullptr;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end) return false;
  *out = v;
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  g_opt.argv0 = argv[0];
  for (int c = 0; c < NCLASS; ++c) g_opt.weight[c] = kDefaultWeight[c];
  bool have_seed = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](double* out) {
      if (i + 1 >= argc || !parse_num(argv[i + 1], out)) {
        fprintf(stderr, "torture: %s needs a number\n", a.c_str());
        usage(stderr);
        exit(2);
      }
      ++i;
    };
    double v;
    if (a == "--seed") {
      if (i + 1 >= argc) {
        usage(stderr);
        return 2;
      }
      char* end = nullptr;
      g_opt.seed = strtoull(argv[++i], &end, 0);
      if (!end || *end) {
        fprintf(stderr, "torture: bad seed %s\n", argv[i]);
        return 2;
      }
      have_seed = true;
    } else if (a == "--seconds") {
      val(&v);
      g_opt.seconds = v;
    } else if (a == "--threads") {
      val(&v);
      g_opt.threads = static_cast<int>(v);
    } else if (a == "--stall-seconds") {
      val(&v);
      g_opt.stall_s = v;
      g_opt.extra += " --stall-seconds " + std::string(argv[i]);
    } else if (a == "--no-fork") {
      g_opt.weight[K_FORK] = 0;
      g_opt.extra += " --no-fork";
    } else if (a == "--no-cancel") {
      g_opt.weight[K_CANCEL] = g_opt.weight[K_ASYNC] = 0;
      g_opt.extra += " --no-cancel";
    } else if (a == "--no-async-cancel") {
      g_opt.weight[K_ASYNC] = 0;
      g_opt.extra += " --no-async-cancel";
    } else if (a == "--only") {
      if (i + 1 >= argc) {
        usage(stderr);
        return 2;
      }
      std::string list = std::string(",") + argv[++i] + ",";
      for (int c = 0; c < NCLASS; ++c)
        if (list.find(std::string(",") + kClassName[c] + ",") == std::string::npos) g_opt.weight[c] = 0;
      g_opt.extra += " --only " + std::string(argv[i]);
    } else if (a == "--inject") {  // harness self-test, not for CI
      if (i + 1 >= argc) {
        usage(stderr);
        return 2;
      }
      g_opt.inject = argv[++i];
      g_opt.extra += " --inject " + g_opt.inject;
    } else if (a == "--verbose" || a == "-v") {
      g_opt.verbose = true;
    } else if (a == "--help" || a == "-h") {
      usage(stdout);
      return 0;
    } else {
      fprintf(stderr, "torture: unknown option %s\n", a.c_str());
      usage(stderr);
      return 2;
    }
  }
  if (!have_seed) {
    timespec t;
    clock_gettime(CLOCK_REALTIME, &t);
    g_opt.seed = mix(static_cast<uint64_t>(t.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(t.tv_nsec),
                     static_cast<uint64_t>(getpid())) % 1'000'000'000'000ull;
  }
  long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
  if (g_opt.threads <= 0) g_opt.threads = 4 * static_cast<int>(ncpu > 0 ? ncpu : 1);
  if (g_opt.threads > 128) g_opt.threads = 128;
  if (g_opt.stall_s < 1) g_opt.stall_s = 1;
  g_native_mutex = env_native("LOCKSWAP_MUTEX");
  g_native_rwlock = env_native("LOCKSWAP_RWLOCK");
  g_native_sem = env_native("LOCKSWAP_SEM");

  // The reproduction command: the environment that chooses the variant, then
  // the same options with the seed.
  std::string env;
  for (char** e = environ; *e; ++e)
    if (strncmp(*e, "LOCKSWAP_", 9) == 0 || strncmp(*e, "LD_PRELOAD=", 11) == 0) env += std::string(*e) + " ";
  char opts[256];
  snprintf(opts, sizeof opts, " --seed %llu --seconds %g --threads %d", (unsigned long long)g_opt.seed, g_opt.seconds,
           g_opt.threads);
  snprintf(g_repro, sizeof g_repro, "%s%s%s%s", env.c_str(), g_opt.argv0.c_str(), opts, g_opt.extra.c_str());

  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_sigaction = on_fatal;
  sa.sa_flags = SA_SIGINFO | SA_RESETHAND;
  for (int s : {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT}) sigaction(s, &sa, nullptr);
  signal(SIGPIPE, SIG_IGN);

  printf("torture: seed %llu, %g s, %d workers (%ld CPUs), progress bound %g s; mutex %s, rwlock %s, sem %s\n",
         (unsigned long long)g_opt.seed, g_opt.seconds, g_opt.threads, ncpu, g_opt.stall_s,
         g_native_mutex ? getenv("LOCKSWAP_MUTEX") : "glibc", g_native_rwlock ? getenv("LOCKSWAP_RWLOCK") : "glibc",
         g_native_sem ? getenv("LOCKSWAP_SEM") : "glibc");
  printf("torture: reproduce: %s\n", g_repro);

  make_objects();
  TState* main_ts = alloc_state("main", 0);
  adopt_state(main_ts);
  set_op("watchdog");

  // Threads: handshake pairs, the feeder, the workers.
  std::vector<pthread_t> hs_threads, workers;
  std::vector<HsArg*> hs_args;
  std::vector<WorkerArg*> wargs;
  if (g_opt.weight[K_HANDSHAKE])
    for (HsPair& h : g_hs)
      for (int side = 0; side < 2; ++side) {
        auto* a = new HsArg{&h, side, mix(g_opt.seed, 1000 + static_cast<uint64_t>(h.type) * 2 + static_cast<uint64_t>(side)),
                            alloc_state("hs-%d", h.type * 2 + side)};
        pthread_t t;
        must(pthread_create(&t, nullptr, hs_thread, a), "pthread_create (handshake)");
        hs_threads.push_back(t);
        hs_args.push_back(a);
      }
  TState* feeder_ts = alloc_state("feeder", 0);
  pthread_t feeder_t;
  must(pthread_create(&feeder_t, nullptr, feeder, feeder_ts), "pthread_create (feeder)");
  for (int i = 0; i < g_opt.threads; ++i) {
    auto* a = new WorkerArg{i, alloc_state("worker-%d", i)};
    pthread_t t;
    must(pthread_create(&t, nullptr, worker, a), "pthread_create (worker)");
    workers.push_back(t);
    wargs.push_back(a);
  }

  const int64_t start = mono();
  const int64_t end = start + static_cast<int64_t>(g_opt.seconds * 1e9);
  const int64_t status_every = g_opt.verbose ? 5'000'000'000 : 60'000'000'000;
  int64_t next_status = start + status_every;
  g_go.store(true);
  while (mono() < end) {
    sleep_ns(50'000'000);
    watchdog_scan();
    main_ts->progress.store(mono());
    if (mono() >= next_status) {
      uint64_t per[NCLASS];
      uint64_t total = ops_now(per);
      printf("torture: %.0f s: ops=%llu, %llu failures so far\n", (mono() - start) / 1e9, (unsigned long long)total,
             (unsigned long long)total_fails());
      next_status += status_every;
    }
  }

  // Stop: a stopper thread wakes every waiter whose predicate is the stop
  // flag (the main thread makes no lock call that could hang); then join
  // with a bound (the feeder keeps posting to starving semaphores meanwhile).
  set_op("stopping");
  g_stop.store(true);
  pthread_t stopper_t;
  bool stopper = pthread_create(&stopper_t, nullptr, stopper_main, alloc_state("stopper", 0)) == 0;
  const int64_t join_end = mono() + bound_ns() + 20'000'000'000;
  std::vector<bool> joined(workers.size() + hs_threads.size(), false);
  size_t left = joined.size();
  while (left > 0 && mono() < join_end) {
    for (size_t i = 0; i < joined.size(); ++i) {
      if (joined[i]) continue;
      pthread_t t = i < workers.size() ? workers[i] : hs_threads[i - workers.size()];
      if (pthread_tryjoin_np(t, nullptr) == 0) {
        joined[i] = true;
        --left;
      }
    }
    if (left == 0) break;
    sleep_ns(20'000'000);
    watchdog_scan();
    main_ts->progress.store(mono());
  }
  if (left > 0) {
    fail(CK_PROGRESS, "%zu threads did not finish within %.0f s of the stop", left, g_opt.stall_s + 20);
    g_last_dump.store(0);
    dump_states("threads that did not finish");
  }
  g_feeder_stop.store(true);
  bool feeder_done = bounded_join(feeder_t, nullptr, 5'000'000'000, "join the feeder");
  if (stopper && !bounded_join(stopper_t, nullptr, 2'000'000'000, "join the stopper")) {
    fail(CK_PROGRESS, "the stop sequence (broadcasts to every condvar) did not finish");
    feeder_done = false;
  }
  if (left == 0 && feeder_done) {
    for (size_t i = 0; i < workers.size(); ++i) release_state(wargs[i]->ts);
    for (auto* a : hs_args) release_state(a->ts);
    release_state(feeder_ts);
    final_checks();
  }
  uint64_t per[NCLASS];
  uint64_t total = ops_now(per);

  // The summary.
  std::string counts;
  for (int c = 0; c < NCLASS; ++c) counts += std::string(" ") + kClassName[c] + "=" + std::to_string(per[c]);
  printf("torture: ops=%llu%s\n", (unsigned long long)total, counts.c_str());
  printf("torture: %llu deferred cancellations, %llu asynchronous, %llu forks, %llu destroy-and-unmap pages; "
         "%llu try-busy, %llu timeouts, %llu feeds, %llu recursive reads refused, %llu async cancels inside an acquisition\n",
         (unsigned long long)g_cancelled.load(), (unsigned long long)g_async_done.load(),
         (unsigned long long)g_forks_done.load(), (unsigned long long)g_lifetimes_done.load(),
         (unsigned long long)g_busy.load(), (unsigned long long)g_timeouts.load(), (unsigned long long)g_feeds.load(),
         (unsigned long long)g_rec_busy.load(), (unsigned long long)g_async_window.load());
  int passed = 0, failed = 0;
  for (int c = 0; c < NCHECK; ++c) {
    bool skipped = (c == CK_FORK && !g_opt.weight[K_FORK]) || (c == CK_CANCEL && !g_opt.weight[K_CANCEL]) ||
                   (c == CK_ASYNC && !g_opt.weight[K_ASYNC]) || (c == CK_LIFETIME && !g_opt.weight[K_LIFETIME]) ||
                   (c == CK_HANDSHAKE && !g_opt.weight[K_HANDSHAKE]);
    uint64_t n = g_fail[c].load();
    if (skipped && n == 0) {
      printf("torture: %-24s skipped\n", kCheckName[c]);
      continue;
    }
    if (n == 0) {
      ++passed;
      printf("torture: %-24s ok\n", kCheckName[c]);
    } else {
      ++failed;
      printf("torture: %-24s FAILED (%llu)\n", kCheckName[c], (unsigned long long)n);
    }
  }
  printf("torture: seed %llu; reproduce: %s\n", (unsigned long long)g_opt.seed, g_repro);
  printf("%d passed, %d failed\n", passed, failed);
  fflush(stdout);
  fflush(stderr);
  // After a failure the library may be wedged (threads stuck in locks, an
  // internal lock left held by a cancelled thread): no exit-time handlers.
  if (failed || left > 0 || !feeder_done) _exit(1);
  return 0;
}
