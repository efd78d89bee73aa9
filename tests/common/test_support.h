// tests/common/test_support.h — what every test program shares, gtest or not
// (behaviour/, stress/, cxx/, torture/, differential/, core/): clocks and
// time budgets, errno and enum names, mutex and rwlock initialisation by type
// or kind, call sequences with fixed results (lock_checks.h), a coordination
// semaphore that is NOT a lock under test, a lock-holding helper thread,
// bounded joins, /proc task states and children of fork() with a watchdog.
//
// Coordination between test threads uses raw futexes (lstest::Sem), never a
// primitive lockswap interposes, so the scaffolding keeps working when the
// primitive under test is broken.
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <string>
#include <thread>

#include "tests/common/lock_checks.h"
#include "tests/common/task_state.h"


namespace lstest {

// ------------------------------------------------------------------ clocks

inline int64_t now_ns(clockid_t clock) {
  timespec t;
  clock_gettime(clock, &t);
  return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec;
}

inline timespec ts_from_ns(int64_t ns) {
  timespec t;
  t.tv_sec = static_cast<time_t>(ns / 1'000'000'000);
  t.tv_nsec = static_cast<long>(ns % 1'000'000'000);
  return t;
}

inline int64_t ns_of(const timespec& t) { return int64_t{t.tv_sec} * 1'000'000'000 + t.tv_nsec; }

// Absolute deadline `ms` milliseconds from now on `clock`.
inline timespec deadline_in(clockid_t clock, int64_t ms) { return ts_from_ns(now_ns(clock) + ms * 1'000'000); }

// True once `clock` has reached `deadline` (a timed-out wait must satisfy this).
inline bool reached(clockid_t clock, const timespec& deadline) { return now_ns(clock) >= ns_of(deadline); }

// Timeouts used by the behaviour tests: short enough to keep the suite fast,
// long enough that "returned ETIMEDOUT before the deadline" is meaningful.
inline constexpr int64_t kShortMs = 50;
// A deadline that must never be reached in a passing test (failure instead of hang).
inline constexpr int64_t kGenerousMs = 10'000;

// ------------------------------------------------------------ environment

// The variant comes from the same variables lockswap reads.
inline bool env_is_native(const char* var) {
  const char* v = getenv(var);
  return v != nullptr && *v != '\0' && strcmp(v, "glibc") != 0 && getenv("LD_PRELOAD") != nullptr;
}
inline bool native_mutex() { return env_is_native("LOCKSWAP_MUTEX"); }
inline bool native_rwlock() { return env_is_native("LOCKSWAP_RWLOCK"); }

// The name of an errno value (or of a thrd_* result mapped to -1), for
// messages and transcripts.
inline const char* err_name(int e) {
  switch (e) {
    case 0: return "0";
    case EBUSY: return "EBUSY";
    case EINVAL: return "EINVAL";
    case EDEADLK: return "EDEADLK";
    case EPERM: return "EPERM";
    case ETIMEDOUT: return "ETIMEDOUT";
    case EAGAIN: return "EAGAIN";
    case EINTR: return "EINTR";
    case EOWNERDEAD: return "EOWNERDEAD";
    case ENOTRECOVERABLE: return "ENOTRECOVERABLE";
    case ENOMEM: return "ENOMEM";
    case ENOTSUP: return "ENOTSUP";
    case EOVERFLOW: return "EOVERFLOW";
    case ESRCH: return "ESRCH";
    case -1: return "thrd_error";
  }
  static thread_local char buf[24];
  snprintf(buf, sizeof buf, "errno-%d", e);
  return buf;
}

// The name of `e`, an enumerator of an enum whose values run 0, 1, ... in the
// order of `names` (the names of test parameters, for messages and suffixes).
template <class Enum, size_t N>
const char* enum_name(Enum e, const char* const (&names)[N]) {
  auto i = static_cast<size_t>(e);
  return i < N ? names[i] : "Unknown";
}

// A malloc'd T whose every byte is `fill`: garbage that the test's own
// initialisation must overwrite (or zeroes). Null when malloc fails.
template <class T>
T* malloc_filled(unsigned char fill) {
  auto* p = static_cast<T*>(malloc(sizeof(T)));
  if (p != nullptr) memset(static_cast<void*>(p), fill, sizeof(T));
  return p;
}

// ------------------------------------------------------------ mutex types

// init(obj, &a) with an attribute object `a` that set(&a) prepared, between
// the attribute's own init and destroy. Returns set's error, else init's.
template <class Obj, class Attr, class Set>
int init_with_attr(Obj* obj, int (*attr_init)(Attr*), int (*attr_destroy)(Attr*), int (*init)(Obj*, const Attr*),
                   Set set) {
  Attr a;
  attr_init(&a);
  int rc = set(&a);
  if (rc == 0) rc = init(obj, &a);
  attr_destroy(&a);
  return rc;
}

// pthread_mutex_init with a mutex of `type` (PTHREAD_MUTEX_NORMAL, ...).
inline int init_mutex_of_type(pthread_mutex_t* m, int type) {
  return init_with_attr(m, pthread_mutexattr_init, pthread_mutexattr_destroy, pthread_mutex_init,
                        [type](pthread_mutexattr_t* a) { return pthread_mutexattr_settype(a, type); });
}

// pthread_rwlock_init with an rwlock of `kind` (PTHREAD_RWLOCK_PREFER_READER_NP, ...).
inline int init_rwlock_of_kind(pthread_rwlock_t* l, int kind) {
  return init_with_attr(l, pthread_rwlockattr_init, pthread_rwlockattr_destroy, pthread_rwlock_init,
                        [kind](pthread_rwlockattr_t* a) { return pthread_rwlockattr_setkind_np(a, kind); });
}

inline const char* mutex_type_name(int type) {
  switch (type) {
    case PTHREAD_MUTEX_NORMAL: return "Normal";
    case PTHREAD_MUTEX_RECURSIVE: return "Recursive";
    case PTHREAD_MUTEX_ERRORCHECK: return "Errorcheck";
    case PTHREAD_MUTEX_ADAPTIVE_NP: return "Adaptive";
  }
  return "Unknown";
}

// pthread_create of a SCHED_FIFO thread of priority `prio` running fn(arg).
inline int start_fifo_thread(pthread_t* t, int prio, void* (*fn)(void*), void* arg) {
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setinheritsched(&a, PTHREAD_EXPLICIT_SCHED);
  pthread_attr_setschedpolicy(&a, SCHED_FIFO);
  sched_param sp{};
  sp.sched_priority = prio;
  pthread_attr_setschedparam(&a, &sp);
  int rc = pthread_create(t, &a, fn, arg);
  pthread_attr_destroy(&a);
  return rc;
}

// ---------------------------------------------------------- coordination

// A counting event with a bounded wait, on a raw futex: never a primitive
// under test (lockswap interposes sem_*, so the scaffolding does not use it).
class Sem {
 public:
  Sem() = default;
  Sem(const Sem&) = delete;
  Sem& operator=(const Sem&) = delete;
  void post() {
    count_.fetch_add(1, std::memory_order_release);
    syscall(SYS_futex, &count_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }
  // False if not posted within `ms`.
  bool wait(int64_t ms = kGenerousMs) {
    int64_t end = now_ns(CLOCK_MONOTONIC) + ms * 1'000'000;
    for (;;) {
      uint32_t c = count_.load(std::memory_order_acquire);
      if (c != 0) {
        if (count_.compare_exchange_weak(c, c - 1, std::memory_order_acquire)) return true;
        continue;
      }
      int64_t left = end - now_ns(CLOCK_MONOTONIC);
      if (left <= 0) return false;
      timespec rel = ts_from_ns(left < 10'000'000 ? left : 10'000'000);  // re-check every 10 ms
      syscall(SYS_futex, &count_, FUTEX_WAIT_PRIVATE, 0, &rel, nullptr, 0);
    }
  }

 private:
  std::atomic<uint32_t> count_{0};
};

// A one-shot start line for many threads: they sleep (no polling, no bound)
// until open() says go or stop. A starter that may fail part-way opens it with
// go=false, so no thread is left parked; a bounded wait here would let a
// thread that arrived early under load give up while its peers went on.
class Gate {
 public:
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  // The first call decides; later ones do nothing.
  void open(bool go) {
    uint32_t closed = kClosed;
    if (!state_.compare_exchange_strong(closed, go ? kGo : kStop, std::memory_order_release)) return;
    syscall(SYS_futex, &state_, FUTEX_WAKE_PRIVATE, INT32_MAX, nullptr, nullptr, 0);
  }
  // True for go, false for stop.
  bool wait() {
    uint32_t s;
    while ((s = state_.load(std::memory_order_acquire)) == kClosed)
      syscall(SYS_futex, &state_, FUTEX_WAIT_PRIVATE, kClosed, nullptr, nullptr, 0);
    return s == kGo;
  }

 private:
  static constexpr uint32_t kClosed = 0, kGo = 1, kStop = 2;
  std::atomic<uint32_t> state_{kClosed};
};

inline pid_t current_tid() { return static_cast<pid_t>(gettid()); }

// The state field ('R', 'S', ...) of a /proc .../stat file, or 0.
inline char stat_file_state(const char* path) { return lstest_stat_file_state(path); }

// Scheduler state of a thread of this process ('R', 'S', ...), or 0.
inline char thread_state(pid_t tid) { return lstest_thread_state(tid); }

// Waits (bounded) until thread `tid` sleeps in the kernel, i.e. is blocked in
// the lock it was about to take. Used only to make a scenario more likely to
// exercise the "someone is queued" case; never asserted on (a spinning lock
// may keep the thread runnable for a while).
inline void settle_until_blocked(pid_t tid, int64_t max_ms = 2000) {
  int64_t end = now_ns(CLOCK_MONOTONIC) + max_ms * 1'000'000;
  while (now_ns(CLOCK_MONOTONIC) < end) {
    if (thread_state(tid) == 'S') {
      // Give a thread that only just went to sleep a moment to be queued.
      usleep(2000);
      if (thread_state(tid) == 'S') return;
    }
    usleep(1000);
  }
}

// Scheduler state ('R', 'S', ...) of any task, by its PID or TID (a thread of
// this process or another process, e.g. a forked child), or 0.
inline char task_state(pid_t pid) {
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  return stat_file_state(path);
}

// Polls `pred` (every millisecond) until it holds or `ms` have passed; returns
// its last value. Uses no lock and no semaphore, so it stays trustworthy in
// the tests of the semaphores themselves (which lockswap may interpose).
inline bool eventually(const std::function<bool()>& pred, int64_t ms = kGenerousMs) {
  int64_t end = now_ns(CLOCK_MONOTONIC) + ms * 1'000'000;
  for (;;) {
    if (pred()) return true;
    if (now_ns(CLOCK_MONOTONIC) >= end) return pred();
    usleep(1000);
  }
}

// A helper thread that runs `acquire` and keeps whatever it took until
// release() (which runs `release` on the same thread and joins).
class Holder {
 public:
  Holder(std::function<int()> acquire, std::function<int()> release)
      : acquire_(std::move(acquire)), release_(std::move(release)) {
    t_ = std::thread([this] {
      tid_ = current_tid();
      acquire_rc_ = acquire_();
      acquired_.post();
      go_.wait(60'000);
      release_rc_ = release_();
    });
    if (!acquired_.wait()) {
      fprintf(stderr, "Holder: acquisition did not finish\n");
      _exit(3);
    }
  }
  ~Holder() { release(); }
  Holder(const Holder&) = delete;
  Holder& operator=(const Holder&) = delete;

  int acquire_rc() const { return acquire_rc_; }
  pid_t tid() const { return tid_; }
  // Releases on the holder thread; returns the release call's result.
  int release() {
    if (t_.joinable()) {
      go_.post();
      t_.join();
    }
    return release_rc_;
  }

 private:
  std::function<int()> acquire_, release_;
  Sem acquired_, go_;
  std::thread t_;
  pid_t tid_ = 0;
  int acquire_rc_ = -1, release_rc_ = -1;
};

// Runs f on a fresh thread and returns its result (for "from another thread").
template <class F>
auto on_other_thread(F&& f) -> decltype(f()) {
  decltype(f()) r{};
  std::thread t([&] { r = f(); });
  t.join();
  return r;
}

// ------------------------------------------------------------ time budgets

// A stress test's time (per test, on top of thread start-up) and the bound on
// joining its threads.
inline constexpr int64_t kBudgetMs = 800;
inline constexpr int64_t kJoinMs = 30'000;

// Set when the time budget is used up; workers stop at their next check.
class Budget {
 public:
  explicit Budget(int64_t ms = kBudgetMs) : end_(now_ns(CLOCK_MONOTONIC) + ms * 1'000'000) {}
  bool over() const { return now_ns(CLOCK_MONOTONIC) >= end_; }

 private:
  int64_t end_;
};

// --------------------------------------------------------------- watchdog

inline constexpr unsigned kWatchdogSeconds = 60;
inline char g_current_test[512];

// A raw pthread running `f`, joined with a bound: a thread stuck in a lock
// ends the program with a message naming the test instead of hanging it (the
// stuck thread still references the test's objects, so nothing else is safe).
class PThread {
 public:
  explicit PThread(std::function<void()> f) : state_(new std::function<void()>(std::move(f))) {
    int rc = pthread_create(&t_, nullptr, &PThread::run, state_);
    if (rc != 0) {
      fprintf(stderr, "pthread_create: %d\n", rc);
      _exit(3);
    }
  }
  ~PThread() {
    if (!joined_) join_or_die();
  }
  PThread(const PThread&) = delete;
  PThread& operator=(const PThread&) = delete;

  pthread_t handle() const { return t_; }
  // Joins within `ms` or exits the program; returns the thread's result.
  void* join_or_die(int64_t ms = kGenerousMs) {
    timespec d = deadline_in(CLOCK_MONOTONIC, ms);
    void* ret = nullptr;
    int rc = pthread_clockjoin_np(t_, &ret, CLOCK_MONOTONIC, &d);
    if (rc != 0) {
      fprintf(stderr, "\n*** %s: a test thread did not finish within %lld ms (deadlock or lost wakeup?)\n",
              g_current_test, static_cast<long long>(ms));
      fflush(stderr);
      _exit(1);
    }
    joined_ = true;
    delete state_;
    return ret;
  }

 private:
  static void* run(void* p) {
    (*static_cast<std::function<void()>*>(p))();
    return nullptr;
  }
  pthread_t t_;
  std::function<void()>* state_;
  bool joined_ = false;
};

// ------------------------------------------------------ children of fork()

// Checks inside a forked child count here; the child's exit status says
// whether any failed (gtest's own assertions do not cross fork()).
inline std::atomic<int> g_child_failures{0};

// Forks a child that runs `body` under a watchdog of its own (SIGALRM after
// `watchdog_s`: a deadlock in the child kills it); returns its pid, or -1.
inline pid_t start_child(const std::function<void()>& body, unsigned watchdog_s = 30) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    signal(SIGALRM, SIG_DFL);  // the parent's reporter would blame the test
    alarm(watchdog_s);
    g_child_failures = 0;
    body();
    fflush(stderr);
    _exit(g_child_failures == 0 ? 0 : 1);
  }
  return pid;
}

// The exit status of a child (0: every child check passed), or 128+signal
// with a line saying whether its watchdog or a crash ended it.
inline int child_result(int status) {
  if (WIFSIGNALED(status)) {
    fprintf(stderr, "child killed by signal %d (%s)\n", WTERMSIG(status),
            WTERMSIG(status) == SIGALRM ? "watchdog: the child hung" : "crash or timeout");
    return 128 + WTERMSIG(status);
  }
  return WEXITSTATUS(status);
}

// Waits at most `ms` for the child; kills it when it is late. Returns its
// child_result, or -1 for no child.
inline int finish_child(pid_t pid, int64_t ms = 30'000) {
  if (pid < 0) return -1;
  int status = 0;
  bool exited = eventually(
      [&] {
        pid_t r = waitpid(pid, &status, WNOHANG);
        return r == pid || (r < 0 && errno != EINTR);
      },
      ms);
  if (!exited) {
    fprintf(stderr, "child %d did not finish within %lld ms: killed\n", pid, static_cast<long long>(ms));
    kill(pid, SIGKILL);
    waitpid(pid, &status, 0);
  }
  return child_result(status);
}

// A lock_checks.h check inside a forked child (CHILD_EXPECT_EQ's report).
inline void child_rc(void*, const char* what, int got, int expected) {
  if (got == expected) return;
  fprintf(stderr, "child: %s == %s, expected %s\n", what, err_name(got), err_name(expected));
  ++g_child_failures;
}

// Runs `body` in a forked child and waits for it (its watchdog ends it first).
inline int run_in_child(const std::function<void()>& body, unsigned watchdog_s = 20) {
  return finish_child(start_child(body, watchdog_s), (watchdog_s + 10) * int64_t{1000});
}

}  // namespace lstest

#define CHILD_EXPECT_EQ(a, b)                                                                        \
  do {                                                                                               \
    long long va_ = static_cast<long long>(a), vb_ = static_cast<long long>(b);                      \
    if (va_ != vb_) {                                                                                \
      fprintf(stderr, "child %s:%d: %s == %lld, expected %s == %lld (errno %s)\n", __FILE__, __LINE__, \
              #a, va_, #b, vb_, strerrorname_np(errno));                                             \
      ++lstest::g_child_failures;                                                                    \
    }                                                                                                \
  } while (0)

#define CHILD_CHECK(cond)                                                            \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "child %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
      ++lstest::g_child_failures;                                                    \
    }                                                                                \
  } while (0)
