// tests/behaviour/cond_test.cpp — pthread_cond_* behaviour (glibc 2.36's),
// including cancellation inside a wait. Under native mutex variants the
// condvar is lockswap's own; under `glibc` it is glibc's.
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/common/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::kGenerousMs;
using lstest::kShortMs;
using lstest::on_other_thread;
using lstest::PThread;
using lstest::reached;
using lstest::Sem;

enum class Origin { kStaticInitializer, kMemsetZero, kInitNullAttr, kInitMonotonicAttr };

const char* origin_name(Origin o) {
  static const char* const kNames[] = {"StaticInitializer", "MemsetZero", "InitNullAttr", "InitMonotonicClockAttr"};
  return lstest::enum_name(o, kNames);
}
void PrintTo(Origin o, std::ostream* os) { *os << origin_name(o); }

int init_cond(pthread_cond_t* c, Origin o) {
  static const pthread_cond_t kInit = PTHREAD_COND_INITIALIZER;
  switch (o) {
    case Origin::kStaticInitializer: *c = kInit; return 0;
    case Origin::kMemsetZero: memset(static_cast<void*>(c), 0, sizeof *c); return 0;
    case Origin::kInitNullAttr: return pthread_cond_init(c, nullptr);
    case Origin::kInitMonotonicAttr:
      return lstest::init_with_attr(
          c, pthread_condattr_init, pthread_condattr_destroy, pthread_cond_init,
          [](pthread_condattr_t* a) { return pthread_condattr_setclock(a, CLOCK_MONOTONIC); });
  }
  return EINVAL;
}

// Returns holding `m` once `ready()` holds under it: the threads being waited
// for set what it reads under `m` and then release `m` by going into their
// condvar wait, so holding `m` with ready() true means they are in the wait.
void lock_when(pthread_mutex_t* m, const std::function<bool()>& ready) {
  for (;;) {
    ASSERT_EQ(pthread_mutex_lock(m), 0);
    if (ready()) return;
    pthread_mutex_unlock(m);
    usleep(1000);
  }
}

// Called holding `m`: sets `flag` for the waiters of `c`, wakes them with
// `wake` (signal or broadcast) and lets them run.
void set_wake_unlock(pthread_cond_t* c, pthread_mutex_t* m, bool& flag, int (*wake)(pthread_cond_t*)) {
  flag = true;
  EXPECT_EQ(wake(c), 0);
  EXPECT_EQ(pthread_mutex_unlock(m), 0);
}

class CondTest : public testing::TestWithParam<Origin> {
 protected:
  void SetUp() override {
    c_ = lstest::malloc_filled<pthread_cond_t>(0x3c);
    ASSERT_NE(c_, nullptr);
    ASSERT_EQ(init_cond(c_, GetParam()), 0);
    ASSERT_EQ(lstest::init_mutex_of_type(&m_, PTHREAD_MUTEX_ERRORCHECK), 0);
  }
  void TearDown() override {
    if (c_ != nullptr) {
      EXPECT_EQ(pthread_cond_destroy(c_), 0);
      free(c_);
    }
    EXPECT_EQ(pthread_mutex_destroy(&m_), 0);
  }
  // The clock pthread_cond_timedwait measures against for this condvar.
  clockid_t clock() const { return GetParam() == Origin::kInitMonotonicAttr ? CLOCK_MONOTONIC : CLOCK_REALTIME; }
  // The errorcheck mutex is held by the caller iff unlocking it succeeds;
  // relocks it so the caller's state is unchanged.
  bool caller_holds_mutex() {
    if (pthread_mutex_unlock(&m_) != 0) return false;
    EXPECT_EQ(pthread_mutex_lock(&m_), 0);
    return true;
  }
  int other_thread_trylock() {
    return on_other_thread([this] {
      int rc = pthread_mutex_trylock(&m_);
      if (rc == 0) pthread_mutex_unlock(&m_);
      return rc;
    });
  }

  // Returns holding m_ once `n` threads count themselves in `waiting`.
  void lock_when_waiting(const int& waiting, int n) {
    lock_when(&m_, [&] { return waiting == n; });
  }
  // `n` threads that each wait on `c` under m_ until `flag`, counting
  // themselves in `waiting` before the wait and in `woken` after it.
  std::vector<std::unique_ptr<PThread>> start_waiters(int n, pthread_cond_t* c, const bool& flag, int& waiting,
                                                      int& woken) {
    std::vector<std::unique_ptr<PThread>> ts;
    for (int i = 0; i < n; ++i) {
      ts.push_back(std::make_unique<PThread>([this, c, &flag, &waiting, &woken] {
        pthread_mutex_lock(&m_);
        ++waiting;
        int rc = 0;
        while (!flag && rc == 0) rc = pthread_cond_wait(c, &m_);
        EXPECT_EQ(rc, 0);
        ++woken;
        pthread_mutex_unlock(&m_);
      }));
    }
    return ts;
  }

  pthread_cond_t* c_ = nullptr;
  pthread_mutex_t m_;
};

std::string param_name(const testing::TestParamInfo<Origin>& info) { return origin_name(info.param); }

TEST_P(CondTest, SignalWakesABlockedWaiter) {
  bool flag = false;
  int waiting = 0;
  int rc = -1;
  PThread t([&] {
    pthread_mutex_lock(&m_);
    ++waiting;
    while (!flag) rc = pthread_cond_wait(c_, &m_);
    pthread_mutex_unlock(&m_);
  });
  ASSERT_NO_FATAL_FAILURE(lock_when_waiting(waiting, 1));
  set_wake_unlock(c_, &m_, flag, pthread_cond_signal);
  t.join_or_die();
  EXPECT_EQ(rc, 0);
}

TEST_P(CondTest, BroadcastWakesEveryWaiter) {
  constexpr int kWaiters = 4;
  bool flag = false;
  int waiting = 0, woken = 0;
  auto ts = start_waiters(kWaiters, c_, flag, waiting, woken);
  ASSERT_NO_FATAL_FAILURE(lock_when_waiting(waiting, kWaiters));
  set_wake_unlock(c_, &m_, flag, pthread_cond_broadcast);
  for (auto& t : ts) t->join_or_die();
  EXPECT_EQ(woken, kWaiters);
}

TEST_P(CondTest, SignalWakesClockwaitAndTimedwaitWaiters) {
  for (int mode = 0; mode < 3; ++mode) {
    bool flag = false;
    int waiting = 0, rc = -1;
    PThread t([&] {
      pthread_mutex_lock(&m_);
      ++waiting;
      while (!flag) {
        if (mode == 0) {
          timespec d = deadline_in(clock(), kGenerousMs);
          rc = pthread_cond_timedwait(c_, &m_, &d);
        } else {
          clockid_t ck = mode == 1 ? CLOCK_MONOTONIC : CLOCK_REALTIME;
          timespec d = deadline_in(ck, kGenerousMs);
          rc = pthread_cond_clockwait(c_, &m_, ck, &d);
        }
        if (rc != 0) break;
      }
      pthread_mutex_unlock(&m_);
    });
    ASSERT_NO_FATAL_FAILURE(lock_when_waiting(waiting, 1));
    set_wake_unlock(c_, &m_, flag, pthread_cond_signal);
    t.join_or_die();
    EXPECT_EQ(rc, 0) << "mode " << mode;
  }
}

TEST_P(CondTest, TimedwaitTimesOutOnItsClockWithTheMutexReacquired) {
  ASSERT_EQ(pthread_mutex_lock(&m_), 0);
  // With the MONOTONIC attribute, a REALTIME reading of this deadline would
  // be decades in the past: the elapsed check tells the clocks apart.
  timespec d = deadline_in(clock(), kShortMs);
  EXPECT_EQ(pthread_cond_timedwait(c_, &m_, &d), ETIMEDOUT);
  EXPECT_TRUE(reached(clock(), d)) << "timed out before the deadline on the condvar's clock";
  EXPECT_EQ(other_thread_trylock(), EBUSY) << "mutex not re-acquired after the timeout";
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0) << "errorcheck: the waiter must own the mutex again";
}

TEST_P(CondTest, ClockwaitUsesTheClockItIsGiven) {
  ASSERT_EQ(pthread_mutex_lock(&m_), 0);
  for (clockid_t ck : {CLOCK_MONOTONIC, CLOCK_REALTIME}) {
    timespec d = deadline_in(ck, kShortMs);
    EXPECT_EQ(pthread_cond_clockwait(c_, &m_, ck, &d), ETIMEDOUT) << "clock " << ck;
    EXPECT_TRUE(reached(ck, d)) << "clock " << ck;
    EXPECT_TRUE(caller_holds_mutex()) << "clock " << ck;
  }
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

TEST_P(CondTest, UnsupportedClockIsEinvalAndKeepsTheMutex) {
  ASSERT_EQ(pthread_mutex_lock(&m_), 0);
  timespec d = deadline_in(CLOCK_MONOTONIC, kShortMs);
  EXPECT_EQ(pthread_cond_clockwait(c_, &m_, CLOCK_PROCESS_CPUTIME_ID, &d), EINVAL);
  EXPECT_EQ(pthread_cond_clockwait(c_, &m_, CLOCK_THREAD_CPUTIME_ID, &d), EINVAL);
  EXPECT_TRUE(caller_holds_mutex());
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

TEST_P(CondTest, InvalidNanosecondsAreEinvalAndKeepTheMutex) {
  ASSERT_EQ(pthread_mutex_lock(&m_), 0);
  for (long bad : {1'000'000'000L, -1L}) {
    timespec t{time(nullptr) + 1, bad};
    EXPECT_EQ(pthread_cond_timedwait(c_, &m_, &t), EINVAL) << bad;
    EXPECT_EQ(pthread_cond_clockwait(c_, &m_, CLOCK_MONOTONIC, &t), EINVAL) << bad;
    EXPECT_EQ(pthread_cond_clockwait(c_, &m_, CLOCK_REALTIME, &t), EINVAL) << bad;
    EXPECT_EQ(pthread_cond_clockwait(c_, &m_, CLOCK_PROCESS_CPUTIME_ID, &t), EINVAL) << bad;
  }
  EXPECT_TRUE(caller_holds_mutex());
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

TEST_P(CondTest, NegativeSecondsTimeOutWithTheMutexHeld) {
  ASSERT_EQ(pthread_mutex_lock(&m_), 0);
  timespec t{-1, 0};
  EXPECT_EQ(pthread_cond_timedwait(c_, &m_, &t), ETIMEDOUT);
  EXPECT_EQ(pthread_cond_clockwait(c_, &m_, CLOCK_MONOTONIC, &t), ETIMEDOUT);
  EXPECT_TRUE(caller_holds_mutex());
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

TEST_P(CondTest, WaitWithAnUnownedErrorcheckMutexIsEperm) {
  timespec d = deadline_in(clock(), kShortMs);
  timespec dm = deadline_in(CLOCK_MONOTONIC, kShortMs);
  EXPECT_EQ(pthread_cond_wait(c_, &m_), EPERM);
  EXPECT_EQ(pthread_cond_timedwait(c_, &m_, &d), EPERM);
  EXPECT_EQ(pthread_cond_clockwait(c_, &m_, CLOCK_MONOTONIC, &dm), EPERM);
  // Owned by another thread: still EPERM, and that thread keeps it.
  lstest::Holder h([this] { return pthread_mutex_lock(&m_); }, [this] { return pthread_mutex_unlock(&m_); });
  ASSERT_EQ(h.acquire_rc(), 0);
  EXPECT_EQ(pthread_cond_wait(c_, &m_), EPERM);
  EXPECT_EQ(pthread_cond_timedwait(c_, &m_, &d), EPERM);
  EXPECT_EQ(pthread_mutex_trylock(&m_), EBUSY);
  EXPECT_EQ(h.release(), 0);
  // A waiter that failed must not be counted: a later signal/destroy works.
  EXPECT_EQ(pthread_cond_signal(c_), 0);
}

TEST_P(CondTest, WaitWithARecursiveMutexHeldOnce) {
  pthread_mutex_t rm;
  ASSERT_EQ(lstest::init_mutex_of_type(&rm, PTHREAD_MUTEX_RECURSIVE), 0);
  bool flag = false;
  int waiting = 0, rc = -1, unlock1 = -1, unlock2 = -1;
  PThread t([&] {
    pthread_mutex_lock(&rm);
    ++waiting;
    while (!flag) rc = pthread_cond_wait(c_, &rm);
    unlock1 = pthread_mutex_unlock(&rm);
    unlock2 = pthread_mutex_unlock(&rm);
  });
  ASSERT_NO_FATAL_FAILURE(lock_when(&rm, [&] { return waiting == 1; }));
  set_wake_unlock(c_, &rm, flag, pthread_cond_signal);
  t.join_or_die();
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(unlock1, 0);
  EXPECT_EQ(unlock2, EPERM) << "the wait must give back exactly one level";
  EXPECT_EQ(pthread_mutex_destroy(&rm), 0);
}

// glibc releases a single level of a recursive mutex for the wait: a mutex
// locked twice stays held by the waiter throughout.
TEST_P(CondTest, WaitWithARecursiveMutexHeldTwiceKeepsItHeld) {
  pthread_mutex_t rm;
  ASSERT_EQ(lstest::init_mutex_of_type(&rm, PTHREAD_MUTEX_RECURSIVE), 0);
  ASSERT_EQ(pthread_mutex_lock(&rm), 0);
  ASSERT_EQ(pthread_mutex_lock(&rm), 0);
  int other_rc = -1;
  PThread t([&] {
    usleep(10'000);
    other_rc = pthread_mutex_trylock(&rm);
    if (other_rc == 0) pthread_mutex_unlock(&rm);
  });
  timespec d = deadline_in(clock(), 3 * kShortMs);
  EXPECT_EQ(pthread_cond_timedwait(c_, &rm, &d), ETIMEDOUT);
  t.join_or_die();
  EXPECT_EQ(other_rc, EBUSY);
  EXPECT_EQ(pthread_mutex_unlock(&rm), 0);
  EXPECT_EQ(pthread_mutex_unlock(&rm), 0);
  EXPECT_EQ(pthread_mutex_unlock(&rm), EPERM);
  EXPECT_EQ(pthread_mutex_destroy(&rm), 0);
}

TEST_P(CondTest, SignalBroadcastWithoutWaitersThenDestroyAndInitAgain) {
  EXPECT_EQ(pthread_cond_signal(c_), 0);
  EXPECT_EQ(pthread_cond_broadcast(c_), 0);
  ASSERT_EQ(pthread_cond_destroy(c_), 0);
  ASSERT_EQ(init_cond(c_, GetParam()), 0);
  ASSERT_EQ(pthread_mutex_lock(&m_), 0);
  timespec d = deadline_in(clock(), 1);
  EXPECT_EQ(pthread_cond_timedwait(c_, &m_, &d), ETIMEDOUT);
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

// "broadcast; destroy; free" while the woken waiters have not yet returned
// (they still need the mutex, which the destroyer holds). glibc allows it:
// its destroy waits for woken waiters to stop touching the condvar.
TEST_P(CondTest, BroadcastDestroyFreeWhileWokenWaitersAreStillReturning) {
  constexpr int kWaiters = 4;
  bool flag = false;
  int waiting = 0, done = 0;
  pthread_cond_t* c = c_;
  auto ts = start_waiters(kWaiters, c, flag, waiting, done);
  ASSERT_NO_FATAL_FAILURE(lock_when_waiting(waiting, kWaiters));
  flag = true;
  EXPECT_EQ(pthread_cond_broadcast(c), 0);
  EXPECT_EQ(pthread_cond_destroy(c), 0);
  memset(static_cast<void*>(c), 0xee, sizeof *c);
  free(c);
  c_ = nullptr;
  // Reuse the memory at once (another object lands where the condvar was).
  std::vector<void*> reuse;
  for (int i = 0; i < 16; ++i) {
    void* p = malloc(sizeof(pthread_cond_t));
    memset(p, 0xdd, sizeof(pthread_cond_t));
    reuse.push_back(p);
  }
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
  for (auto& t : ts) t->join_or_die();
  EXPECT_EQ(done, kWaiters);
  for (void* p : reuse) free(p);
}

INSTANTIATE_TEST_SUITE_P(Origins, CondTest,
                         testing::Values(Origin::kStaticInitializer, Origin::kMemsetZero, Origin::kInitNullAttr,
                                         Origin::kInitMonotonicAttr),
                         param_name);

TEST(CondAttr, ClockAttributeRoundTripsAndRejectsCpuClocks) {
  lstest::expect_attr_setting(pthread_condattr_init, pthread_condattr_destroy, pthread_condattr_getclock,
                              pthread_condattr_setclock, clockid_t{CLOCK_REALTIME}, clockid_t{CLOCK_PROCESS_CPUTIME_ID},
                              {clockid_t{CLOCK_MONOTONIC}});
}

pthread_cond_t g_cond = PTHREAD_COND_INITIALIZER;
pthread_cond_t g_cond_bss;
pthread_mutex_t g_cond_mutex = PTHREAD_MUTEX_INITIALIZER;

TEST(CondStatic, GlobalStaticAndZeroCondvarsWork) {
  for (pthread_cond_t* c : {&g_cond, &g_cond_bss}) {
    EXPECT_EQ(pthread_cond_signal(c), 0);
    ASSERT_EQ(pthread_mutex_lock(&g_cond_mutex), 0);
    timespec d = deadline_in(CLOCK_REALTIME, 5);
    EXPECT_EQ(pthread_cond_timedwait(c, &g_cond_mutex, &d), ETIMEDOUT);
    EXPECT_TRUE(reached(CLOCK_REALTIME, d));
    EXPECT_EQ(pthread_mutex_trylock(&g_cond_mutex), EBUSY);
    EXPECT_EQ(pthread_mutex_unlock(&g_cond_mutex), 0);
  }
}

// ------------------------------------------------------------ cancellation
// pthread_cleanup_push in C++ is a destructor run by the forced unwind.

enum class WaitMode { kWait, kTimedwait, kClockwaitMonotonic, kClockwaitRealtime };
const char* mode_name(WaitMode m) {
  static const char* const kNames[] = {"Wait", "Timedwait", "ClockwaitMonotonic", "ClockwaitRealtime"};
  return lstest::enum_name(m, kNames);
}
void PrintTo(WaitMode m, std::ostream* os) { *os << mode_name(m); }

struct CancelCase {
  WaitMode mode;
  pthread_mutex_t m;  // errorcheck: unlocking tells whether it was held
  pthread_cond_t c;
  bool ready = false;  // under m
  bool go = false;     // under m
  Sem started, cancel_sent;
  std::atomic<pid_t> tid{0};
  std::atomic<int> handler_unlock_rc{-1};
  std::atomic<bool> handler_ran{false};
  std::atomic<bool> handler_saw_go{false};
  std::atomic<int> waits_returned{0};
  std::atomic<int> last_wait_rc{-1};
  std::atomic<int> unlock_after_wait_rc{-1};

  int wait_once() {
    switch (mode) {
      case WaitMode::kWait: return pthread_cond_wait(&c, &m);
      case WaitMode::kTimedwait: {
        timespec d = deadline_in(CLOCK_REALTIME, 60'000);
        return pthread_cond_timedwait(&c, &m, &d);
      }
      case WaitMode::kClockwaitMonotonic: {
        timespec d = deadline_in(CLOCK_MONOTONIC, 60'000);
        return pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d);
      }
      case WaitMode::kClockwaitRealtime: {
        timespec d = deadline_in(CLOCK_REALTIME, 60'000);
        return pthread_cond_clockwait(&c, &m, CLOCK_REALTIME, &d);
      }
    }
    return -1;
  }
  // Waits (holding m) until `go`, recording every return of the wait.
  void wait_until_go() {
    while (!go) {
      last_wait_rc = wait_once();
      ++waits_returned;
    }
  }
};

void cleanup_unlock(void* p) {
  auto* x = static_cast<CancelCase*>(p);
  x->handler_saw_go = x->go;
  x->handler_unlock_rc = pthread_mutex_unlock(&x->m);
  x->handler_ran = true;
}

// A waiter's life, holding m with cleanup_unlock as its cleanup handler:
// `before_wait`, the wait until go, `after_wait`.
template <class Before, class After>
void wait_with_cleanup(CancelCase* x, Before before_wait, After after_wait) {
  pthread_mutex_lock(&x->m);
  pthread_cleanup_push(cleanup_unlock, x);
  before_wait();
  x->wait_until_go();
  after_wait();
  pthread_cleanup_pop(1);
}

// Blocks in the wait until cancelled.
void* waiter_cancelled_while_blocked(void* p) {
  auto* x = static_cast<CancelCase*>(p);
  x->tid = lstest::current_tid();
  wait_with_cleanup(x, [x] { x->ready = true; }, [] {});
  return nullptr;
}

// The cancellation is already pending when the wait starts.
void* waiter_with_cancel_pending(void* p) {
  auto* x = static_cast<CancelCase*>(p);
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
  wait_with_cleanup(
      x,
      [x] {
        x->started.post();
        x->cancel_sent.wait();  // a cancellation point, but cancellation is disabled
        pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);  // not a cancellation point
      },
      [] {});
  return nullptr;
}

// Cancellation disabled: the wait must ignore the request and finish normally.
void* waiter_with_cancel_disabled(void* p) {
  auto* x = static_cast<CancelCase*>(p);
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, nullptr);
  wait_with_cleanup(
      x, [x] { x->ready = true; },
      [x] {
        x->unlock_after_wait_rc = pthread_mutex_unlock(&x->m);
        pthread_mutex_lock(&x->m);
        pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, nullptr);
        pthread_testcancel();  // the request is still pending: acted on here
      });
  return reinterpret_cast<void*>(1);
}

class CondCancelTest : public testing::TestWithParam<WaitMode> {
 protected:
  void SetUp() override {
    x_.mode = GetParam();
    ASSERT_EQ(lstest::init_mutex_of_type(&x_.m, PTHREAD_MUTEX_ERRORCHECK), 0);
    ASSERT_EQ(pthread_cond_init(&x_.c, nullptr), 0);
  }
  void TearDown() override {
    EXPECT_EQ(pthread_cond_destroy(&x_.c), 0);
    EXPECT_EQ(pthread_mutex_destroy(&x_.m), 0);
  }
  // Returns with x_.m held once the waiter has set `ready` (so it is in the wait).
  void lock_when_ready() {
    lock_when(&x_.m, [this] { return x_.ready; });
  }
  void* join(pthread_t t) {
    timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
    void* ret = nullptr;
    int rc = pthread_clockjoin_np(t, &ret, CLOCK_MONOTONIC, &d);
    if (rc != 0) {
      fprintf(stderr, "*** cancelled waiter did not exit (%s)\n", lstest::g_current_test);
      _exit(1);
    }
    return ret;
  }
  CancelCase x_;
};

std::string mode_param_name(const testing::TestParamInfo<WaitMode>& info) { return mode_name(info.param); }

TEST_P(CondCancelTest, CancelWhileBlockedRunsHandlerWithTheMutexHeld) {
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, waiter_cancelled_while_blocked, &x_), 0);
  ASSERT_NO_FATAL_FAILURE(lock_when_ready());
  ASSERT_EQ(pthread_mutex_unlock(&x_.m), 0);
  lstest::settle_until_blocked(x_.tid);  // cancel it while it sleeps, not while it relocks
  ASSERT_EQ(pthread_cancel(t), 0);
  EXPECT_EQ(join(t), PTHREAD_CANCELED);
  EXPECT_TRUE(x_.handler_ran.load());
  EXPECT_EQ(x_.handler_unlock_rc.load(), 0) << "cleanup handler ran without the mutex re-acquired";
  EXPECT_EQ(pthread_mutex_trylock(&x_.m), 0) << "mutex left locked after the cancellation";
  EXPECT_EQ(pthread_mutex_unlock(&x_.m), 0);
  // The condvar is still usable (no leaked waiter registration).
  EXPECT_EQ(pthread_cond_signal(&x_.c), 0);
  EXPECT_EQ(pthread_cond_broadcast(&x_.c), 0);
}

TEST_P(CondCancelTest, CancelPendingBeforeTheWaitIsActedOnByTheWait) {
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, waiter_with_cancel_pending, &x_), 0);
  ASSERT_TRUE(x_.started.wait());
  ASSERT_EQ(pthread_cancel(t), 0);
  x_.cancel_sent.post();
  EXPECT_EQ(join(t), PTHREAD_CANCELED);
  EXPECT_EQ(x_.waits_returned.load(), 0) << "the wait returned instead of acting on the cancellation";
  EXPECT_TRUE(x_.handler_ran.load());
  EXPECT_EQ(x_.handler_unlock_rc.load(), 0) << "cleanup handler ran without the mutex held";
  EXPECT_EQ(pthread_mutex_trylock(&x_.m), 0);
  EXPECT_EQ(pthread_mutex_unlock(&x_.m), 0);
}

TEST_P(CondCancelTest, CancelWithCancellationDisabledKeepsWaitingUntilSignalled) {
  pthread_t t;
  ASSERT_EQ(pthread_create(&t, nullptr, waiter_with_cancel_disabled, &x_), 0);
  ASSERT_NO_FATAL_FAILURE(lock_when_ready());
  ASSERT_EQ(pthread_mutex_unlock(&x_.m), 0);
  ASSERT_EQ(pthread_cancel(t), 0);
  usleep(30'000);  // a wrongly honoured cancellation would end the thread now
  EXPECT_FALSE(x_.handler_ran.load()) << "cancellation acted on while disabled";
  ASSERT_EQ(pthread_mutex_lock(&x_.m), 0);
  x_.go = true;
  EXPECT_EQ(pthread_cond_signal(&x_.c), 0);
  ASSERT_EQ(pthread_mutex_unlock(&x_.m), 0);
  EXPECT_EQ(join(t), PTHREAD_CANCELED) << "pending request not acted on at pthread_testcancel";
  EXPECT_EQ(x_.last_wait_rc.load(), 0);
  EXPECT_EQ(x_.unlock_after_wait_rc.load(), 0) << "wait returned without the mutex";
  EXPECT_TRUE(x_.handler_saw_go.load());
  EXPECT_EQ(x_.handler_unlock_rc.load(), 0);
  EXPECT_EQ(pthread_mutex_trylock(&x_.m), 0);
  EXPECT_EQ(pthread_mutex_unlock(&x_.m), 0);
}

// Several waiters, one cancelled right after a signal: if the cancelled
// waiter was the one the signal woke, it must pass the wakeup on (POSIX: a
// cancelled waiter does not consume a signal), so another waiter wakes
// without any further signal.
TEST_P(CondCancelTest, CancelledWaiterDoesNotSwallowASignal) {
  constexpr int kOthers = 3;
  pthread_t victim;
  ASSERT_EQ(pthread_create(&victim, nullptr, waiter_cancelled_while_blocked, &x_), 0);
  int others_waiting = 0, others_done = 0;
  bool release_all = false;
  std::vector<std::unique_ptr<PThread>> others;
  for (int i = 0; i < kOthers; ++i) {
    others.push_back(std::make_unique<PThread>([&] {
      pthread_mutex_lock(&x_.m);
      ++others_waiting;
      int rc = x_.wait_once();  // exactly one wait: a wakeup ends it
      EXPECT_EQ(rc, 0);
      ++others_done;
      while (!release_all) x_.wait_once();
      pthread_mutex_unlock(&x_.m);
    }));
  }
  ASSERT_NO_FATAL_FAILURE(lock_when(&x_.m, [&] { return x_.ready && others_waiting == kOthers; }));
  x_.go = true;  // the victim leaves its loop if it is the one woken
  EXPECT_EQ(pthread_cond_signal(&x_.c), 0);
  ASSERT_EQ(pthread_cancel(victim), 0);
  ASSERT_EQ(pthread_mutex_unlock(&x_.m), 0);
  void* ret = join(victim);
  EXPECT_TRUE(x_.handler_ran.load());
  EXPECT_EQ(x_.handler_unlock_rc.load(), 0);
  if (ret == PTHREAD_CANCELED) {
    // Wait (bounded) for the signal to reach one of the others.
    int64_t end = lstest::now_ns(CLOCK_MONOTONIC) + int64_t{5'000} * 1'000'000;
    int done = 0;
    while (lstest::now_ns(CLOCK_MONOTONIC) < end) {
      pthread_mutex_lock(&x_.m);
      done = others_done;
      pthread_mutex_unlock(&x_.m);
      if (done >= 1) break;
      usleep(1000);
    }
    EXPECT_GE(done, 1) << "the signal died with the cancelled waiter";
  }
  ASSERT_EQ(pthread_mutex_lock(&x_.m), 0);
  release_all = true;
  EXPECT_EQ(pthread_cond_broadcast(&x_.c), 0);
  ASSERT_EQ(pthread_mutex_unlock(&x_.m), 0);
  for (auto& o : others) o->join_or_die();
  EXPECT_EQ(others_done, kOthers);
}

INSTANTIATE_TEST_SUITE_P(Modes, CondCancelTest,
                         testing::Values(WaitMode::kWait, WaitMode::kTimedwait, WaitMode::kClockwaitMonotonic,
                                         WaitMode::kClockwaitRealtime),
                         mode_param_name);

}  // namespace
