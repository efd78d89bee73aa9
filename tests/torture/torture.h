// tests/torture/torture.h — what the torture driver (torture.cpp) and its
// operation families (*_ops.cpp, handshake.cpp) share: options, the checks and
// fail(), thread states, deadlines, the objects under test and their helpers,
// and the table each family registers its operation class in (ClassRegistration).
// Everything lives in namespace torture; what was file-local when the program
// was one file is `inline` here.
#pragma once
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

namespace torture {

// ------------------------------------------------------------------ basics

using lstest::now_ns;
inline int64_t mono() { return now_ns(CLOCK_MONOTONIC); }
inline timespec to_ts(int64_t ns) {
  if (ns < 0) ns = 0;
  timespec t;
  t.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  t.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return t;
}
inline void sleep_ns(int64_t ns) {
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
};
inline Options g_opt;

inline std::atomic<uint64_t> g_fail[NCHECK];
inline std::atomic<int> g_msgs{0};
inline std::atomic<bool> g_stop{false};
inline std::atomic<bool> g_go{false};
inline std::atomic<int> g_next_id{1000};
inline std::atomic<uint64_t> g_busy{0}, g_timeouts{0}, g_feeds{0}, g_rec_busy{0}, g_notes{0};
inline std::atomic<uint64_t> g_ops_total[NCLASS];
inline std::atomic<int64_t> g_last_dump{0};
inline bool g_native_mutex = false, g_native_rwlock = false, g_native_sem = false;
inline char g_repro[2048];

// The variant in force, from the variables lockswap itself reads.
inline bool env_native(const char* var) {
  const char* v = getenv(var);
  const char* pre = getenv("LD_PRELOAD");
  return v != nullptr && *v != '\0' && strcmp(v, "glibc") != 0 && pre != nullptr && strstr(pre, "lockswap") != nullptr;
}

inline void fail(Check c, const char* fmt, ...) __attribute__((format(printf, 2, 3)));
inline void fail(Check c, const char* fmt, ...) {
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

inline void note(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
inline void note(const char* fmt, ...) {
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
inline TState g_states[kMaxStates];
inline thread_local TState* t_ts = nullptr;
inline thread_local int t_me = 0;

// A slot for a new thread (workers, helpers, victims: slots are recycled).
inline TState* alloc_state(const char* fmt, int i) {
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
inline void release_state(TState* s) {
  if (!s) return;
  for (int c = 0; c < NCLASS; ++c) g_ops_total[c].fetch_add(s->ops[c].load(std::memory_order_relaxed));
  s->wkind.store(W_NONE);
  s->used.store(0, std::memory_order_release);
}
inline void adopt_state(TState* s) {
  t_ts = s;
  t_me = s ? s->id : g_next_id.fetch_add(1);
  if (s) s->tid.store(current_tid());
}

inline void count_op(int c) {
  if (!t_ts) return;
  t_ts->ops[c].store(t_ts->ops[c].load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  t_ts->progress.store(mono(), std::memory_order_relaxed);
}
inline void set_op(const char* what) {
  if (t_ts) t_ts->op.store(what, std::memory_order_relaxed);
}

inline int64_t bound_ns() { return static_cast<int64_t>(g_opt.stall_s * 1e9); }

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
inline Deadline make_deadline(Rng& r, clockid_t clk, bool long_ok = false) {
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
inline Deadline far_deadline(clockid_t clk, int64_t ms) {
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
inline bool how_timed(int h) { return h >= H_TIMED; }
inline clockid_t how_clock(int h) { return h == H_CLOCK_MONO ? CLOCK_MONOTONIC : CLOCK_REALTIME; }

// The result of a lock attempt that did not acquire.
inline void check_not_acquired(const char* call, const char* obj, int how, int rc, const Deadline& d) {
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
inline void enter(std::atomic<int>& owner, int me, const char* what, const char* name) {
  int prev = owner.exchange(me, std::memory_order_acq_rel);
  if (prev != 0) fail(CK_MUTEX_EXCL, "%s: acquired %s while its owner word says thread %d holds it", what, name, prev);
}
inline void leave(std::atomic<int>& owner, int me, const char* what, const char* name) {
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
inline bool mk_c11(int k) { return k >= MK_C11_PLAIN; }
inline bool mk_recursive(int k) {
  return k == MK_RECURSIVE || k == MK_RECURSIVE_STATIC || k == MK_C11_RECURSIVE || k == MK_C11_TIMED_RECURSIVE;
}
inline bool mk_errorcheck(int k) { return k == MK_ERRORCHECK || k == MK_ERRORCHECK_STATIC; }
inline bool mk_c11_timed(int k) { return k == MK_C11_TIMED || k == MK_C11_TIMED_RECURSIVE; }
// No owner check on unlock: a child of fork can unlock what its forker held.
inline bool mk_plain_pthread(int k) {
  return k == MK_DEFAULT_STATIC || k == MK_DEFAULT || k == MK_NORMAL || k == MK_ADAPTIVE || k == MK_ADAPTIVE_STATIC;
}

inline int c11rc(int r) {
  switch (r) {
    case thrd_success: return 0;
    case thrd_busy: return EBUSY;
    case thrd_timedout: return ETIMEDOUT;
    case thrd_nomem: return ENOMEM;
  }
  return -1;
}

inline int mx_init(void* p, int kind) {
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
inline int mx_fix_how(int kind, int how) {
  if (!mk_c11(kind)) return how;
  if (how_timed(how)) return mk_c11_timed(kind) ? H_TIMED : H_LOCK;
  return how;
}
inline int mx_acquire(void* p, int kind, int how, const Deadline& d) {
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
inline int mx_release(void* p, int kind) {
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
inline bool rk_default(int k) { return k == RK_DEFAULT_STATIC || k == RK_DEFAULT || k == RK_PREFER_READER; }

inline int rw_init(pthread_rwlock_t* l, int kind) {
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

inline int rw_acquire(pthread_rwlock_t* l, bool rd, int how, const Deadline& d) {
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
inline uint64_t rd_enter(RwObj& o, const char* what) {
  o.readers.fetch_add(1);
  int w = o.writer.load();
  if (w != 0) fail(CK_RW_EXCL, "%s: read-acquired %s while its writer word says thread %d writes", what, o.name, w);
  uint64_t v = o.data[0].load(std::memory_order_relaxed);
  for (int i = 1; i < 4; ++i)
    if (o.data[i].load(std::memory_order_relaxed) != v)
      fail(CK_RW_EXCL, "%s: torn data under a read lock of %s (a writer inside)", what, o.name);
  return v;
}
inline void rd_leave(RwObj& o, uint64_t v, const char* what) {
  for (int i = 0; i < 4; ++i)
    if (o.data[i].load(std::memory_order_relaxed) != v) {
      fail(CK_RW_EXCL, "%s: data of %s changed while read-locked", what, o.name);
      break;
    }
  int w = o.writer.load();
  if (w != 0) fail(CK_RW_EXCL, "%s: thread %d writes %s while it is read-locked", what, w, o.name);
  o.readers.fetch_sub(1);
}
inline void wr_enter(RwObj& o, int me, const char* what) {
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
inline void wr_leave(RwObj& o, int me, const char* what) {
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

inline void cond_lock(CondObj& c, const char* what) {
  int rc;
  {
    WaitScope ws(W_CMUTEX, &c, what);
    rc = mx_acquire(c.mtx(), c.mkind, H_LOCK, Deadline{});
  }
  if (rc != 0) fail(CK_ERRNO, "%s: locking the mutex of %s returned %s", what, c.name, lstest::err_name(rc));
  enter(c.owner, t_me, what, c.name);
}
inline void cond_unlock(CondObj& c, const char* what) {
  leave(c.owner, t_me, what, c.name);
  int rc = mx_release(c.mtx(), c.mkind);
  if (rc != 0) fail(CK_ERRNO, "%s: unlocking the mutex of %s returned %s", what, c.name, lstest::err_name(rc));
}
// form: 0 wait, 1 timedwait (the cond's clock), 2 clockwait (d.clk)
inline int cv_wait(CondObj& c, int form, const Deadline& d) {
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
inline int cv_wake(CondObj& c, bool all) {
  if (c.c11) return c11rc(all ? cnd_broadcast(&c.cc) : cnd_signal(&c.cc));
  return all ? pthread_cond_broadcast(&c.pc) : pthread_cond_signal(&c.pc);
}
// One wait of `form` by the mutex owner `call`, as the checker sees it: the
// mutex is not owned during the wait, and owned again after it.
inline int cv_wait_owned(CondObj& c, int form, const Deadline& d, const char* call, bool timed) {
  leave(c.owner, t_me, call, c.name);
  int rc;
  {
    WaitScope ws(W_COND, &c, call, timed ? d.mono_limit() : 0);
    rc = cv_wait(c, form, d);
  }
  enter(c.owner, t_me, call, c.name);
  return rc;
}
inline const char* cv_form_name(const CondObj& c, int form) {
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
inline SemObj* g_victim_sem = nullptr;
inline int sem_rc(int r) { return r == 0 ? 0 : errno; }
inline int sem_value(sem_t* s) {
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

inline std::vector<MutexObj*> g_mutex;  // pthread kinds
inline std::vector<MutexObj*> g_c11m;   // C11 kinds
inline std::vector<RwObj*> g_rw;
inline std::vector<CondObj*> g_cond;  // pthread
inline std::vector<CondObj*> g_c11c;  // C11
inline std::vector<SemObj*> g_sem;
inline sem_t* g_psem = nullptr;  // process-shared, in MAP_SHARED memory (fork)
inline int* g_child_step = nullptr;  // same page: the step a child of fork is in
inline HsPair g_hs[HS_COUNT];
inline std::atomic<bool> g_fork_busy{false};

template <class T>
inline T* pick(Rng& r, std::vector<T*>& v) {
  // Half the time one of the first three objects: high contention there.
  if (r.chance(2)) return v[r.below(v.size() < 3 ? static_cast<uint32_t>(v.size()) : 3)];
  return v[r.below(static_cast<uint32_t>(v.size()))];
}

inline void must(int rc, const char* what) {
  if (rc != 0) {
    fprintf(stderr, "torture: set-up failed: %s: %s\n", what, lstest::err_name(rc));
    exit(2);
  }
}

inline void make_objects() {
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

inline int pick_how(Rng& r) {
  uint32_t x = r.below(20);
  if (x < 8) return H_LOCK;
  if (x < 12) return H_TRY;
  if (x < 15) return H_TIMED;
  if (x < 17) return H_CLOCK_RT;
  return H_CLOCK_MONO;
}
inline clockid_t deadline_clock(int how) { return how == H_TIMED ? CLOCK_REALTIME : how_clock(how); }

inline void spin(uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) cpu_relax();
}
// Inside a critical section: mostly nothing or a few spins, sometimes a
// yield, rarely a sleep (so waiters go to sleep in the kernel).
inline void cs_delay(Rng& r) {
  uint32_t x = r.below(32);
  if (x < 16) return;
  if (x < 26) spin(r.below(300));
  else if (x < 31) sched_yield();
  else sleep_ns(10'000 + r.below(200'000));
}
inline void between_ops(Rng& r) {
  uint32_t x = r.below(64);
  if (x < 56) return;
  if (x < 62) sched_yield();
  else sleep_ns(r.below(300'000));
}

inline timespec mono_in(int64_t ns) { return to_ts(mono() + ns); }

// Join with a bound; false when the thread did not finish in time.
inline bool bounded_join(pthread_t t, void** res, int64_t ns, const char* what) {
  timespec d = mono_in(ns);
  WaitScope ws(W_BOUNDED, nullptr, what, mono() + ns);
  int rc = pthread_clockjoin_np(t, res, CLOCK_MONOTONIC, &d);
  return rc == 0;
}

// Until `tid` sleeps (twice in a row, 1 ms apart), at most max_ns.
inline bool wait_sleeping(pid_t tid, int64_t max_ns) {
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
inline bool wait_flag(const int* flag, int64_t max_ns) {
  int64_t end = mono() + max_ns;
  while (!__atomic_load_n(flag, __ATOMIC_SEQ_CST)) {
    if (mono() > end) return false;
    sched_yield();
  }
  return true;
}

inline void* map_page() {
  void* p = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

// ------------------------------------------------------------ sem waits
// (sem_ops.cpp, and the cancellation families' waiters)

// Waits on a shared semaphore: blocked counts the waiters (the feeder posts
// when waiters starve on a zero value; the watchdog fails a waiter that
// sleeps while the value stays positive).
inline int sem_wait_form(SemObj& s, int form, const Deadline& d) {
  switch (form) {
    case 0: return sem_rc(sem_wait(&s.s));
    case 1: return sem_rc(sem_timedwait(&s.s, &d.ts));
    default: return sem_rc(sem_clockwait(&s.s, d.clk, &d.ts));
  }
}
const timespec kEpoch{0, 0};  // an absolute deadline long past, on any clock
const char* const kSemForm[3] = {"sem_wait", "sem_timedwait", "sem_clockwait"};

// ------------------------------------------------------------ the families
//
// Each operation class (Class) is run by one function, registered by the file
// of its family with a ClassRegistration at namespace scope; the workers
// (torture.cpp) call the one pick_class() draws. K_HANDSHAKE has none: its
// pairs run on their own threads (handshake.cpp).

using ClassOp = void (*)(Rng& r, sem_t* mine);  // mine: the worker's own semaphore
inline ClassOp g_class_ops[NCLASS];
struct ClassRegistration {
  ClassRegistration(Class c, ClassOp op) { g_class_ops[c] = op; }
};

inline std::atomic<uint64_t> g_cancelled{0}, g_async_done{0}, g_forks_done{0}, g_lifetimes_done{0};
inline std::atomic<uint64_t> g_async_window{0};  // async_cancel_ops.cpp: cancels inside an acquisition

void op_mutex(Rng& r, MutexObj& o);   // mutex_ops.cpp, also C11 mtx (c11_ops.cpp)
void op_cond(Rng& r, CondObj& c);     // cond_ops.cpp, also C11 cnd (c11_ops.cpp)
void dump_states(const char* why);    // torture.cpp (the watchdog)
uint64_t total_fails();               // fork_ops.cpp

// handshake.cpp: the ping-pong pairs, run on threads of their own.
struct HsArg {
  HsPair* h;
  int side;
  uint64_t seed;
  TState* ts;
};
int hs_lock(HsPair& h);
int hs_unlock(HsPair& h);
int hs_wake(HsPair& h, bool all);
void* hs_thread(void* p);

}  // namespace torture
