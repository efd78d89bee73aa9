// tests/behaviour/sem_test.cpp — POSIX unnamed semaphores (sem_init,
// sem_destroy, sem_wait, sem_trywait, sem_timedwait, sem_clockwait, sem_post,
// sem_getvalue), asserted against what glibc 2.36 really does. Written against
// the POSIX API only: the program passes without any preload (plain glibc) and
// runs under LD_PRELOAD for every variant (LOCKSWAP_SEM=glibc|futex|lockref).
//
// The scaffolding here never relies on a semaphore (nor on a lock): threads
// are started and joined with bounded pthread joins and synchronised by
// polling atomics (lstest::eventually), so a broken semaphore fails a test
// instead of breaking the harness that observes it.
//
// "Sleeping in the semaphore" is detected from /proc (state 'S'); that is
// never asserted on (a variant may spin for a while first), it only makes the
// "a waiter is queued" case the likely one.
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <signal.h>
#include <spawn.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/common/test_util.h"

extern char** environ;

namespace {

using lstest::deadline_in;
using lstest::eventually;
using lstest::kGenerousMs;
using lstest::kShortMs;
using lstest::now_ns;
using lstest::PThread;
using lstest::reached;

// ---------------------------------------------------------------- helpers

// A semaphore call's outcome as one string: "0", or "-1/EAGAIN" (the return
// value and errno together, so a failure message shows both).
std::string outcome(int rc, int err) {
  if (rc == 0) return "0";
  const char* name = strerrorname_np(err);
  return std::to_string(rc) + "/" + (name != nullptr ? name : "errno " + std::to_string(err));
}
std::string res(int rc) { return outcome(rc, errno); }

// sem_getvalue, or INT_MIN when sem_getvalue itself fails.
int value_of(sem_t* s) {
  int v = INT_MIN;
  return sem_getvalue(s, &v) == 0 ? v : INT_MIN;
}

enum class WaitKind { kWait, kTimedwait, kClockwaitMonotonic, kClockwaitRealtime };
constexpr WaitKind kAllWaitKinds[] = {WaitKind::kWait, WaitKind::kTimedwait, WaitKind::kClockwaitMonotonic,
                                      WaitKind::kClockwaitRealtime};
const char* kind_name(WaitKind k) {
  static const char* const kNames[] = {"Wait", "Timedwait", "ClockwaitMonotonic", "ClockwaitRealtime"};
  return lstest::enum_name(k, kNames);
}
void PrintTo(WaitKind k, std::ostream* os) { *os << kind_name(k); }

// One blocking acquisition of the given kind; timed kinds get a deadline `ms`
// ahead on their clock.
int wait_on(sem_t* s, WaitKind k, int64_t ms = kGenerousMs) {
  switch (k) {
    case WaitKind::kWait: return sem_wait(s);
    case WaitKind::kTimedwait: {
      timespec d = deadline_in(CLOCK_REALTIME, ms);
      return sem_timedwait(s, &d);
    }
    case WaitKind::kClockwaitMonotonic: {
      timespec d = deadline_in(CLOCK_MONOTONIC, ms);
      return sem_clockwait(s, CLOCK_MONOTONIC, &d);
    }
    case WaitKind::kClockwaitRealtime: {
      timespec d = deadline_in(CLOCK_REALTIME, ms);
      return sem_clockwait(s, CLOCK_REALTIME, &d);
    }
  }
  return -2;
}

// A thread running `op` (expected to block on a semaphore) that records the
// outcome. settle() waits (bounded, not asserted) until it sleeps in the kernel.
class Waiter {
 public:
  explicit Waiter(std::function<int()> op) : op_(std::move(op)) {
    t_ = std::make_unique<PThread>([this] {
      tid_ = lstest::current_tid();
      int rc = op_();
      err_ = errno;
      rc_ = rc;
      done_ = true;
    });
  }
  Waiter(sem_t* s, WaitKind k, int64_t ms = kGenerousMs) : Waiter([s, k, ms] { return wait_on(s, k, ms); }) {}

  void settle() {
    eventually([this] { return tid_.load() != 0; });
    lstest::settle_until_blocked(tid_);
  }
  bool done() const { return done_; }
  pid_t tid() const { return tid_; }
  pthread_t handle() const { return t_->handle(); }
  // Joins (bounded: a thread that never returns ends the program) and returns the outcome.
  std::string join() {
    t_->join_or_die();
    return outcome(rc_, err_);
  }

 private:
  std::function<int()> op_;
  std::unique_ptr<PThread> t_;
  std::atomic<pid_t> tid_{0};
  std::atomic<int> rc_{-2}, err_{0};
  std::atomic<bool> done_{false};
};

// A sem_wait asleep on `s` (at zero) is woken by one sem_post.
void expect_post_wakes_a_sleeper(sem_t* s) {
  Waiter w(s, WaitKind::kWait);
  w.settle();
  EXPECT_EQ(res(sem_post(s)), "0");
  EXPECT_EQ(w.join(), "0");
}

// sem_destroy, then sem_init(s, pshared, value): it starts from `value`.
void expect_reinit(sem_t* s, int pshared, unsigned value) {
  EXPECT_EQ(res(sem_destroy(s)), "0");
  ASSERT_EQ(res(sem_init(s, pshared, value)), "0");
  EXPECT_EQ(value_of(s), static_cast<int>(value));
}

// A page of MAP_SHARED|MAP_ANONYMOUS memory (shared with forked children).
template <class T>
T* map_shared() {
  void* p = mmap(nullptr, sizeof(T), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  return new (p) T();
}
template <class T>
void unmap_shared(T* p) {
  p->~T();
  munmap(p, sizeof(T));
}

// A unique name for sem_open/shm_open in this process.
std::string unique_name(const char* what) {
  static std::atomic<int> n{0};
  return "/lockswap-test-" + std::string(what) + "-" + std::to_string(getpid()) + "-" + std::to_string(n++);
}

// --------------------------------------------------- children of fork()

// ----------------------------------------------------------------- sem_init

TEST(SemInit, AcceptsZeroAndSemValueMax) {
  sem_t s;
  ASSERT_EQ(res(sem_init(&s, 0, 0)), "0");
  EXPECT_EQ(value_of(&s), 0);
  EXPECT_EQ(res(sem_destroy(&s)), "0");
  ASSERT_EQ(res(sem_init(&s, 0, SEM_VALUE_MAX)), "0");
  EXPECT_EQ(value_of(&s), SEM_VALUE_MAX);
  EXPECT_EQ(res(sem_trywait(&s)), "0");
  EXPECT_EQ(value_of(&s), SEM_VALUE_MAX - 1);
  EXPECT_EQ(res(sem_destroy(&s)), "0");
  ASSERT_EQ(res(sem_init(&s, 1, SEM_VALUE_MAX)), "0");
  EXPECT_EQ(value_of(&s), SEM_VALUE_MAX);
  EXPECT_EQ(res(sem_destroy(&s)), "0");
}

TEST(SemInit, ValueAboveSemValueMaxIsEinvalAndLeavesTheSemaphoreAlone) {
  sem_t s;
  ASSERT_EQ(res(sem_init(&s, 0, 5)), "0");
  for (unsigned bad : {static_cast<unsigned>(SEM_VALUE_MAX) + 1, UINT_MAX}) {
    for (int pshared : {0, 1}) {
      EXPECT_EQ(res(sem_init(&s, pshared, bad)), "-1/EINVAL") << bad << " pshared " << pshared;
      EXPECT_EQ(value_of(&s), 5) << "glibc checks the value before writing anything";
    }
  }
  EXPECT_EQ(res(sem_trywait(&s)), "0");
  EXPECT_EQ(value_of(&s), 4);
  EXPECT_EQ(res(sem_destroy(&s)), "0");
}

TEST(SemInit, AnyPsharedValueIsAccepted) {
  // glibc maps pshared != 0 to process-shared; there is no EINVAL for it.
  for (int pshared : {0, 1, 2, -1, INT_MIN, INT_MAX}) {
    sem_t s;
    EXPECT_EQ(res(sem_init(&s, pshared, 1)), "0") << "pshared " << pshared;
    EXPECT_EQ(res(sem_trywait(&s)), "0") << "pshared " << pshared;
    EXPECT_EQ(res(sem_trywait(&s)), "-1/EAGAIN") << "pshared " << pshared;
    EXPECT_EQ(res(sem_destroy(&s)), "0");
  }
}

sem_t g_static_sem;  // zero-initialised, never passed to sem_init

TEST(SemInit, StaticZeroInitialisedSemaphoreHasValueZero) {
  EXPECT_EQ(value_of(&g_static_sem), 0);
  EXPECT_EQ(res(sem_trywait(&g_static_sem)), "-1/EAGAIN");
  timespec past{0, 0};
  EXPECT_EQ(res(sem_timedwait(&g_static_sem, &past)), "-1/ETIMEDOUT");
  EXPECT_EQ(res(sem_post(&g_static_sem)), "0");
  EXPECT_EQ(value_of(&g_static_sem), 1);
  EXPECT_EQ(res(sem_wait(&g_static_sem)), "0");
  expect_post_wakes_a_sleeper(&g_static_sem);
  EXPECT_EQ(value_of(&g_static_sem), 0);
}

TEST(SemInit, ReinitAfterDestroyStartsFromTheNewValue) {
  sem_t s;
  ASSERT_EQ(res(sem_init(&s, 0, 5)), "0");
  EXPECT_EQ(res(sem_trywait(&s)), "0");
  EXPECT_EQ(res(sem_trywait(&s)), "0");
  ASSERT_NO_FATAL_FAILURE(expect_reinit(&s, 0, 1));
  ASSERT_NO_FATAL_FAILURE(expect_reinit(&s, 1, 0));  // and to process-shared, at zero
  EXPECT_EQ(res(sem_trywait(&s)), "-1/EAGAIN");
  EXPECT_EQ(res(sem_post(&s)), "0");
  EXPECT_EQ(res(sem_wait(&s)), "0");
  EXPECT_EQ(res(sem_destroy(&s)), "0");
}

TEST(SemInit, ReinitAfterAWaiterSleptAndWokeStartsClean) {
  sem_t s;
  ASSERT_EQ(res(sem_init(&s, 0, 0)), "0");
  expect_post_wakes_a_sleeper(&s);
  ASSERT_NO_FATAL_FAILURE(expect_reinit(&s, 0, 2));
  EXPECT_EQ(res(sem_trywait(&s)), "0");
  EXPECT_EQ(res(sem_trywait(&s)), "0");
  EXPECT_EQ(res(sem_trywait(&s)), "-1/EAGAIN");
  EXPECT_EQ(res(sem_destroy(&s)), "0");
}

// ------------------------------------------------------------- sem_post max

TEST(SemPost, AtSemValueMaxIsEoverflowAndLeavesTheValue) {
  std::string name = unique_name("max");
  sem_t* named = sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, SEM_VALUE_MAX);
  ASSERT_NE(named, SEM_FAILED) << strerrorname_np(errno);
  sem_unlink(name.c_str());
  sem_t priv, shared;
  ASSERT_EQ(res(sem_init(&priv, 0, SEM_VALUE_MAX)), "0");
  ASSERT_EQ(res(sem_init(&shared, 1, SEM_VALUE_MAX)), "0");
  for (sem_t* s : {&priv, &shared, named}) {
    EXPECT_EQ(res(sem_post(s)), "-1/EOVERFLOW");
    EXPECT_EQ(value_of(s), SEM_VALUE_MAX);
    EXPECT_EQ(res(sem_trywait(s)), "0");
    EXPECT_EQ(res(sem_post(s)), "0");
    EXPECT_EQ(value_of(s), SEM_VALUE_MAX);
    EXPECT_EQ(res(sem_post(s)), "-1/EOVERFLOW");
    EXPECT_EQ(res(sem_wait(s)), "0");
    EXPECT_EQ(value_of(s), SEM_VALUE_MAX - 1);
  }
  EXPECT_EQ(res(sem_destroy(&priv)), "0");
  EXPECT_EQ(res(sem_destroy(&shared)), "0");
  EXPECT_EQ(res(sem_close(named)), "0");
}

// ------------------------------------- every origin of a semaphore at zero

enum class Origin { kInitPrivate, kInitSharedInSharedMemory, kZeroFilled, kReinitAfterDestroy, kSemOpen };
const char* origin_name(Origin o) {
  static const char* const kNames[] = {"InitPrivate", "InitSharedInSharedMemory", "ZeroFilled", "ReinitAfterDestroy",
                                       "SemOpen"};
  return lstest::enum_name(o, kNames);
}
void PrintTo(Origin o, std::ostream* os) { *os << origin_name(o); }

// A semaphore with value 0, made in each of the ways a program can make one.
// sem_open's semaphore is laid out by glibc's sem_open (not interposed), which
// is exactly the case to cover for the variants.
class SemTest : public testing::TestWithParam<Origin> {
 protected:
  void SetUp() override {
    mem_ = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(mem_, MAP_FAILED);
    memset(mem_, 0x3c, 4096);  // garbage sem_init must overwrite
    s_ = static_cast<sem_t*>(mem_);
    switch (GetParam()) {
      case Origin::kInitPrivate: ASSERT_EQ(res(sem_init(s_, 0, 0)), "0"); break;
      case Origin::kInitSharedInSharedMemory: ASSERT_EQ(res(sem_init(s_, 1, 0)), "0"); break;
      case Origin::kZeroFilled: memset(s_, 0, sizeof *s_); break;
      case Origin::kReinitAfterDestroy:
        ASSERT_EQ(res(sem_init(s_, 0, 3)), "0");
        ASSERT_EQ(res(sem_trywait(s_)), "0");
        ASSERT_EQ(res(sem_post(s_)), "0");
        ASSERT_EQ(res(sem_post(s_)), "0");
        ASSERT_EQ(res(sem_destroy(s_)), "0");
        ASSERT_EQ(res(sem_init(s_, 0, 0)), "0");
        break;
      case Origin::kSemOpen: {
        std::string name = unique_name("sem");
        s_ = sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, 0);
        ASSERT_NE(s_, SEM_FAILED) << strerrorname_np(errno);
        sem_unlink(name.c_str());  // the mapping stays; nothing is left behind on failure
        break;
      }
    }
  }
  void TearDown() override {
    if (s_ != nullptr && s_ != SEM_FAILED) {
      EXPECT_EQ(value_of(s_), 0) << "units left over";
      if (GetParam() == Origin::kSemOpen)
        EXPECT_EQ(res(sem_close(s_)), "0");
      else
        EXPECT_EQ(res(sem_destroy(s_)), "0");
    }
    if (mem_ != MAP_FAILED) munmap(mem_, 4096);
  }

  void* mem_ = MAP_FAILED;
  sem_t* s_ = nullptr;

  // The three deadline-taking waits, each with the clock its deadline is on.
  struct TimedWait {
    const char* name;
    clockid_t clock;
    std::function<int(const timespec*)> wait;
  };
  std::vector<TimedWait> timed_waits() const {
    sem_t* s = s_;
    return {{"sem_timedwait", CLOCK_REALTIME, [s](const timespec* d) { return sem_timedwait(s, d); }},
            {"sem_clockwait MONOTONIC", CLOCK_MONOTONIC,
             [s](const timespec* d) { return sem_clockwait(s, CLOCK_MONOTONIC, d); }},
            {"sem_clockwait REALTIME", CLOCK_REALTIME,
             [s](const timespec* d) { return sem_clockwait(s, CLOCK_REALTIME, d); }}};
  }
};

std::string origin_param_name(const testing::TestParamInfo<Origin>& info) { return origin_name(info.param); }

TEST_P(SemTest, TrywaitAtZeroIsEagainAndLeavesTheValueAtZero) {
  EXPECT_EQ(value_of(s_), 0);
  EXPECT_EQ(res(sem_trywait(s_)), "-1/EAGAIN");
  EXPECT_EQ(res(sem_trywait(s_)), "-1/EAGAIN");
  EXPECT_EQ(value_of(s_), 0);
}

TEST_P(SemTest, EachPostAddsOneUnitAndEachTakeRemovesOne) {
  for (int i = 1; i <= 3; ++i) {
    EXPECT_EQ(res(sem_post(s_)), "0");
    EXPECT_EQ(value_of(s_), i);
  }
  EXPECT_EQ(res(sem_trywait(s_)), "0");
  EXPECT_EQ(value_of(s_), 2);
  EXPECT_EQ(res(sem_wait(s_)), "0");
  EXPECT_EQ(value_of(s_), 1);
  timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
  EXPECT_EQ(res(sem_timedwait(s_, &d)), "0");
  EXPECT_EQ(value_of(s_), 0);
  EXPECT_EQ(res(sem_trywait(s_)), "-1/EAGAIN");
  for (clockid_t ck : {CLOCK_MONOTONIC, CLOCK_REALTIME}) {
    EXPECT_EQ(res(sem_post(s_)), "0");
    d = deadline_in(ck, kGenerousMs);
    EXPECT_EQ(res(sem_clockwait(s_, ck, &d)), "0") << "clock " << ck;
    EXPECT_EQ(value_of(s_), 0);
  }
}

TEST_P(SemTest, GetvalueIsZeroNotNegativeWhileThreadsSleep) {
  std::vector<std::unique_ptr<Waiter>> ws;
  for (WaitKind k : {WaitKind::kWait, WaitKind::kTimedwait, WaitKind::kClockwaitMonotonic})
    ws.push_back(std::make_unique<Waiter>(s_, k));
  for (auto& w : ws) w->settle();
  EXPECT_EQ(value_of(s_), 0) << "POSIX allows a negative count of waiters; glibc reports 0";
  EXPECT_EQ(res(sem_trywait(s_)), "-1/EAGAIN");
  for (size_t i = 0; i < ws.size(); ++i) EXPECT_EQ(res(sem_post(s_)), "0");
  for (auto& w : ws) EXPECT_EQ(w->join(), "0");
  EXPECT_EQ(value_of(s_), 0);
}

TEST_P(SemTest, InvalidNanosecondsAreEinvalEvenWithAUnitAvailable) {
  // glibc checks tv_nsec before trying to take a unit (and sem_clockwait
  // checks the clock before that), so the unit stays.
  ASSERT_EQ(res(sem_post(s_)), "0");
  for (long bad : {1'000'000'000L, -1L, LONG_MAX, LONG_MIN}) {
    timespec t{time(nullptr) + 1, bad};
    EXPECT_EQ(res(sem_timedwait(s_, &t)), "-1/EINVAL") << bad;
    EXPECT_EQ(res(sem_clockwait(s_, CLOCK_MONOTONIC, &t)), "-1/EINVAL") << bad;
    EXPECT_EQ(res(sem_clockwait(s_, CLOCK_REALTIME, &t)), "-1/EINVAL") << bad;
    EXPECT_EQ(value_of(s_), 1) << bad;
  }
  timespec negative_both{-1, -1};
  EXPECT_EQ(res(sem_timedwait(s_, &negative_both)), "-1/EINVAL");
  EXPECT_EQ(value_of(s_), 1);
  EXPECT_EQ(res(sem_trywait(s_)), "0");
}

TEST_P(SemTest, InvalidNanosecondsAreEinvalAtOnceWhenTheValueIsZero) {
  int64_t start = now_ns(CLOCK_MONOTONIC);
  for (long bad : {1'000'000'000L, -1L}) {
    timespec t{time(nullptr) + 5, bad};
    EXPECT_EQ(res(sem_timedwait(s_, &t)), "-1/EINVAL") << bad;
    EXPECT_EQ(res(sem_clockwait(s_, CLOCK_MONOTONIC, &t)), "-1/EINVAL") << bad;
    EXPECT_EQ(res(sem_clockwait(s_, CLOCK_REALTIME, &t)), "-1/EINVAL") << bad;
  }
  EXPECT_LT(now_ns(CLOCK_MONOTONIC) - start, 2'000'000'000LL) << "an invalid deadline must not be waited for";
  EXPECT_EQ(value_of(s_), 0);
}

TEST_P(SemTest, TimedWaitsTimeOutOnlyOnceTheDeadlineHasPassedOnTheirClock) {
  for (const TimedWait& c : timed_waits()) {
    timespec d = deadline_in(c.clock, kShortMs);
    EXPECT_EQ(res(c.wait(&d)), "-1/ETIMEDOUT") << c.name;
    EXPECT_TRUE(reached(c.clock, d)) << c.name << " timed out before its deadline";
    EXPECT_EQ(value_of(s_), 0) << c.name;
  }
}

TEST_P(SemTest, ExpiredAndNegativeDeadlinesTimeOutAtZeroButSucceedWithAUnit) {
  for (const TimedWait& c : timed_waits()) {
    const timespec deadlines[] = {{-1, 0}, {LONG_MIN, 0}, {-1, 999'999'999}, {0, 0}, {0, 999'999'999},
                                  lstest::ts_from_ns(now_ns(c.clock) - 10'000'000'000LL)};
    for (const timespec& d : deadlines) {
      EXPECT_EQ(res(c.wait(&d)), "-1/ETIMEDOUT") << c.name << ", tv_sec " << d.tv_sec;
      EXPECT_EQ(value_of(s_), 0);
      EXPECT_EQ(res(sem_post(s_)), "0");
      EXPECT_EQ(res(c.wait(&d)), "0") << c.name << ", tv_sec " << d.tv_sec << ": a unit is taken whatever the deadline";
      EXPECT_EQ(value_of(s_), 0);
    }
  }
}

TEST_P(SemTest, ClockwaitAcceptsOnlyMonotonicAndRealtime) {
  const clockid_t bad_clocks[] = {CLOCK_PROCESS_CPUTIME_ID, CLOCK_THREAD_CPUTIME_ID, CLOCK_MONOTONIC_RAW,
                                  CLOCK_REALTIME_COARSE,    CLOCK_MONOTONIC_COARSE,  CLOCK_BOOTTIME,
                                  CLOCK_TAI,                -1,                      12345};
  ASSERT_EQ(res(sem_post(s_)), "0");
  for (clockid_t ck : bad_clocks) {
    timespec d = deadline_in(CLOCK_MONOTONIC, kShortMs);
    EXPECT_EQ(res(sem_clockwait(s_, ck, &d)), "-1/EINVAL") << "clock " << ck << ", even with a unit available";
    timespec bad_ns{0, -1};
    EXPECT_EQ(res(sem_clockwait(s_, ck, &bad_ns)), "-1/EINVAL") << "clock " << ck;
    EXPECT_EQ(value_of(s_), 1) << "clock " << ck;
  }
  ASSERT_EQ(res(sem_trywait(s_)), "0");
  for (clockid_t ck : bad_clocks) {
    timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
    EXPECT_EQ(res(sem_clockwait(s_, ck, &d)), "-1/EINVAL") << "clock " << ck << " at value 0: no wait";
  }
  EXPECT_EQ(value_of(s_), 0);
}

TEST_P(SemTest, PostWakesASleepingWaiterOfEveryKind) {
  for (WaitKind k : kAllWaitKinds) {
    Waiter w(s_, k);
    w.settle();
    EXPECT_FALSE(w.done()) << kind_name(k) << " returned with no unit";
    EXPECT_EQ(res(sem_post(s_)), "0");
    EXPECT_EQ(w.join(), "0") << kind_name(k);
    EXPECT_EQ(value_of(s_), 0) << kind_name(k);
  }
}

TEST_P(SemTest, AWaiterThatTimedOutDoesNotKeepALaterPost) {
  for (WaitKind k : {WaitKind::kTimedwait, WaitKind::kClockwaitMonotonic, WaitKind::kClockwaitRealtime}) {
    Waiter w(s_, k, kShortMs);
    EXPECT_EQ(w.join(), "-1/ETIMEDOUT") << kind_name(k);
    EXPECT_EQ(res(sem_post(s_)), "0");
    EXPECT_EQ(value_of(s_), 1) << kind_name(k);
    EXPECT_EQ(res(sem_trywait(s_)), "0") << kind_name(k);
    Waiter next(s_, WaitKind::kWait);
    next.settle();
    EXPECT_EQ(res(sem_post(s_)), "0");
    EXPECT_EQ(next.join(), "0") << kind_name(k);
  }
}

TEST_P(SemTest, EveryPostWakesOneOfManySleepingWaitersRoundAfterRound) {
  constexpr int kWaiters = 4, kRounds = 150;
  std::atomic<int> taken{0}, failed{0};
  std::vector<std::atomic<pid_t>> tids(kWaiters);
  std::vector<std::unique_ptr<PThread>> ts;
  for (int i = 0; i < kWaiters; ++i) {
    ts.push_back(std::make_unique<PThread>([&, i] {
      tids[i] = lstest::current_tid();
      for (int r = 0; r < kRounds; ++r) {
        // Every kind of wait, rotating, with deadlines that are never reached.
        int rc = wait_on(s_, kAllWaitKinds[(i + r) % 4], 3 * kGenerousMs);
        if (rc != 0) {
          ++failed;
          return;
        }
        ++taken;
      }
    }));
  }
  bool lost = false;
  for (int r = 0; r < kRounds && !lost && failed == 0; ++r) {
    if (r % 10 == 0) {  // every waiter asleep in the kernel before the posts
      for (auto& tid : tids) {
        eventually([&] { return tid.load() != 0; });
        lstest::settle_until_blocked(tid, 500);
      }
    }
    for (int k = 0; k < kWaiters; ++k) {
      EXPECT_EQ(res(sem_post(s_)), "0");
      if (r % 3 == 1) sched_yield();  // some posts one at a time, others in a burst
    }
    auto all_taken = [&] { return taken.load() == kWaiters * (r + 1); };
    for (int spin = 0; spin < 2000 && !all_taken(); ++spin) sched_yield();
    if (!eventually(all_taken)) {
      ADD_FAILURE() << "lost wakeup in round " << r << ": " << taken.load() << " of " << kWaiters * (r + 1)
                    << " units taken, value " << value_of(s_);
      lost = true;
    }
  }
  if (lost || failed != 0) {  // release whoever still waits so the joins finish
    for (int i = 0; i < kWaiters * kRounds; ++i) sem_post(s_);
  }
  for (auto& t : ts) t->join_or_die(4 * kGenerousMs);
  EXPECT_EQ(failed.load(), 0) << "a wait returned an error";
  if (!lost && failed == 0) {
    EXPECT_EQ(taken.load(), kWaiters * kRounds);
    EXPECT_EQ(value_of(s_), 0);
  } else {
    while (sem_trywait(s_) == 0) {
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Origins, SemTest,
                         testing::Values(Origin::kInitPrivate, Origin::kInitSharedInSharedMemory, Origin::kZeroFilled,
                                         Origin::kReinitAfterDestroy, Origin::kSemOpen),
                         origin_param_name);

// ------------------------------------------------------------------ signals

std::atomic<int> g_handled{0};
std::atomic<sem_t*> g_post_from_handler{nullptr};
void on_usr1(int) {
  int saved = errno;
  g_handled.fetch_add(1, std::memory_order_relaxed);
  sem_t* s = g_post_from_handler.load();
  if (s != nullptr) sem_post(s);  // async-signal-safe
  errno = saved;
}

class SemSignalTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(res(sem_init(&s_, 0, 0)), "0");
    g_handled = 0;
    g_post_from_handler = nullptr;
    ASSERT_EQ(sigaction(SIGUSR1, nullptr, &old_), 0);
  }
  void TearDown() override {
    sigaction(SIGUSR1, &old_, nullptr);
    g_post_from_handler = nullptr;
    EXPECT_EQ(res(sem_destroy(&s_)), "0");
  }
  void install(int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_usr1;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = flags;
    ASSERT_EQ(sigaction(SIGUSR1, &sa, nullptr), 0);
  }
  // Signals the sleeping waiter every 2 ms until it returns (at most ~5 s).
  void signal_until_done(Waiter& w) {
    w.settle();
    for (int i = 0; i < 2500 && !w.done(); ++i) {
      pthread_kill(w.handle(), SIGUSR1);
      usleep(2000);
    }
  }
  // Each wait of `kinds`, signalled while it sleeps, returns -1/EINTR once a
  // handler ran, and leaves the semaphore working.
  template <class Kinds>
  void expect_every_wait_interrupted(const Kinds& kinds) {
    for (WaitKind k : kinds) {
      g_handled = 0;
      Waiter w(&s_, k);
      signal_until_done(w);
      EXPECT_EQ(w.join(), "-1/EINTR") << kind_name(k);
      EXPECT_GT(g_handled.load(), 0) << kind_name(k);
      expect_usable();
    }
  }
  // The semaphore still works: a post reaches a new sleeping waiter.
  void expect_usable() {
    EXPECT_EQ(value_of(&s_), 0);
    EXPECT_EQ(res(sem_trywait(&s_)), "-1/EAGAIN");
    expect_post_wakes_a_sleeper(&s_);
    EXPECT_EQ(value_of(&s_), 0);
  }

  sem_t s_;
  struct sigaction old_;
};

TEST_F(SemSignalTest, HandlerWithoutSaRestartInterruptsEveryKindOfWaitWithEintr) {
  install(0);
  expect_every_wait_interrupted(kAllWaitKinds);
}

TEST_F(SemSignalTest, HandlerWithSaRestartLeavesSemWaitSleepingUntilAPost) {
  install(SA_RESTART);
  Waiter w(&s_, WaitKind::kWait);
  w.settle();
  for (int i = 0; i < 25 && !w.done(); ++i) {
    pthread_kill(w.handle(), SIGUSR1);
    usleep(2000);
  }
  usleep(20'000);
  EXPECT_FALSE(w.done()) << "sem_wait returned under SA_RESTART with no unit";
  EXPECT_GT(g_handled.load(), 0) << "no signal was delivered";
  EXPECT_EQ(res(sem_post(&s_)), "0");
  EXPECT_EQ(w.join(), "0");
  expect_usable();
}

// Linux does not restart a futex wait that has a timeout after a handler ran
// (it ends in -ERESTART_RESTARTBLOCK, which becomes EINTR whatever SA_RESTART
// says), and glibc forwards that EINTR: only the untimed sem_wait keeps
// sleeping under SA_RESTART.
TEST_F(SemSignalTest, HandlerWithSaRestartStillInterruptsTimedWaitsWithEintr) {
  install(SA_RESTART);
  constexpr WaitKind kTimedKinds[] = {WaitKind::kTimedwait, WaitKind::kClockwaitMonotonic,
                                      WaitKind::kClockwaitRealtime};
  expect_every_wait_interrupted(kTimedKinds);
}

TEST_F(SemSignalTest, PostFromAHandlerOnAnotherThreadWakesEveryKindOfWaiter) {
  install(SA_RESTART);
  g_post_from_handler = &s_;
  for (WaitKind k : kAllWaitKinds) {
    Waiter w(&s_, k);
    w.settle();
    ASSERT_EQ(raise(SIGUSR1), 0);  // handled on this thread: it posts
    EXPECT_EQ(w.join(), "0") << kind_name(k);
    EXPECT_EQ(value_of(&s_), 0) << kind_name(k);
  }
}

TEST_F(SemSignalTest, PostFromAHandlerOnTheSleepingThreadItselfLetsSemWaitReturn) {
  // The handler interrupts the waiter's own sleep and posts; with SA_RESTART
  // the resumed sem_wait finds the unit.
  install(SA_RESTART);
  g_post_from_handler = &s_;
  Waiter w(&s_, WaitKind::kWait);
  w.settle();
  ASSERT_EQ(pthread_kill(w.handle(), SIGUSR1), 0);
  EXPECT_EQ(w.join(), "0");
  EXPECT_EQ(value_of(&s_), 0);
}

// ------------------------------------------------------------- cancellation
// sem_wait, sem_timedwait and sem_clockwait are cancellation points. In C++,
// pthread_cleanup_push is a destructor run by the forced unwind.

struct CancelCtx {
  sem_t* s = nullptr;
  WaitKind kind = WaitKind::kWait;
  bool async = false;
  std::atomic<pid_t> tid{0};
  std::atomic<bool> cleanup_ran{false};
  std::atomic<bool> wait_returned{false};
  std::atomic<int> wait_rc{-2};
};

void mark_cleanup(void* p) { static_cast<CancelCtx*>(p)->cleanup_ran = true; }

// Blocks in one wait; records whether it returned (and took a unit) before
// acting on the cancellation at the next cancellation point.
void* cancellable_waiter(void* p) {
  auto* x = static_cast<CancelCtx*>(p);
  if (x->async) pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, nullptr);
  x->tid = lstest::current_tid();
  pthread_cleanup_push(mark_cleanup, x);
  int rc = wait_on(x->s, x->kind, 60'000);
  if (x->async) pthread_setcanceltype(PTHREAD_CANCEL_DEFERRED, nullptr);
  x->wait_rc = rc;
  x->wait_returned = true;
  pthread_cleanup_pop(0);
  pthread_testcancel();
  return reinterpret_cast<void*>(1);
}

void* join_or_die(pthread_t t) {
  timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
  void* ret = nullptr;
  if (pthread_clockjoin_np(t, &ret, CLOCK_MONOTONIC, &d) != 0) {
    fprintf(stderr, "*** cancelled waiter did not exit (%s)\n", lstest::g_current_test);
    _exit(1);
  }
  return ret;
}

class SemCancelTest : public testing::TestWithParam<WaitKind> {
 protected:
  void SetUp() override {
    ASSERT_EQ(res(sem_init(&s_, 0, 0)), "0");
    x_.s = &s_;
    x_.kind = GetParam();
  }
  void TearDown() override { EXPECT_EQ(res(sem_destroy(&s_)), "0"); }

  pthread_t start_and_settle() {
    pthread_t t;
    EXPECT_EQ(pthread_create(&t, nullptr, cancellable_waiter, &x_), 0);
    eventually([&] { return x_.tid.load() != 0; });
    lstest::settle_until_blocked(x_.tid);
    return t;
  }
  // No unit was lost or invented: one post reaches a new waiter of the same
  // kind, both by trywait and by waking a sleeper.
  void expect_consistent_after_cancel() {
    EXPECT_EQ(value_of(&s_), 0);
    EXPECT_EQ(res(sem_trywait(&s_)), "-1/EAGAIN");
    EXPECT_EQ(res(sem_post(&s_)), "0");
    EXPECT_EQ(value_of(&s_), 1);
    EXPECT_EQ(res(sem_trywait(&s_)), "0");
    Waiter w(&s_, GetParam());
    w.settle();
    EXPECT_EQ(res(sem_post(&s_)), "0");
    EXPECT_EQ(w.join(), "0");
    EXPECT_EQ(value_of(&s_), 0);
  }

  sem_t s_;
  CancelCtx x_;
};

std::string kind_param_name(const testing::TestParamInfo<WaitKind>& info) { return kind_name(info.param); }

TEST_P(SemCancelTest, DeferredCancelOfASleepingWaiterRunsCleanupAndLosesNoUnit) {
  pthread_t t = start_and_settle();
  ASSERT_EQ(pthread_cancel(t), 0);
  EXPECT_EQ(join_or_die(t), PTHREAD_CANCELED);
  EXPECT_TRUE(x_.cleanup_ran.load());
  EXPECT_FALSE(x_.wait_returned.load()) << "the wait returned " << x_.wait_rc.load();
  expect_consistent_after_cancel();
}

TEST_P(SemCancelTest, AsynchronousCancelOfASleepingWaiterRunsCleanupAndLosesNoUnit) {
  x_.async = true;
  pthread_t t = start_and_settle();
  ASSERT_EQ(pthread_cancel(t), 0);
  EXPECT_EQ(join_or_die(t), PTHREAD_CANCELED);
  EXPECT_TRUE(x_.cleanup_ran.load());
  EXPECT_FALSE(x_.wait_returned.load());
  expect_consistent_after_cancel();
}

TEST_P(SemCancelTest, APostRacingTheCancelIsEitherTakenOrLeftInTheSemaphore) {
  for (int i = 0; i < 40; ++i) {
    x_.cleanup_ran = false;
    x_.wait_returned = false;
    x_.tid = 0;
    pthread_t t = start_and_settle();
    if (i % 2 == 0) {
      ASSERT_EQ(res(sem_post(&s_)), "0");
      ASSERT_EQ(pthread_cancel(t), 0);
    } else {
      ASSERT_EQ(pthread_cancel(t), 0);
      ASSERT_EQ(res(sem_post(&s_)), "0");
    }
    void* ret = join_or_die(t);
    bool took = x_.wait_returned && x_.wait_rc == 0;
    if (x_.wait_returned) {
      // Woken by the post before the cancellation reached it. (glibc 2.36 may
      // even let the pthread_testcancel right after it pass: the request
      // travels by signal and can land a moment later, so `ret` may be 1.)
      EXPECT_EQ(x_.wait_rc.load(), 0) << "round " << i;
      EXPECT_FALSE(x_.cleanup_ran.load()) << "round " << i;
    } else {
      EXPECT_EQ(ret, PTHREAD_CANCELED) << "round " << i;
      EXPECT_TRUE(x_.cleanup_ran.load()) << "round " << i;
    }
    EXPECT_EQ(value_of(&s_), took ? 0 : 1) << "round " << i << ": the unit was " << (took ? "taken" : "not taken");
    if (!took) {
      EXPECT_EQ(res(sem_trywait(&s_)), "0") << "round " << i;
    }
  }
  expect_consistent_after_cancel();
}

INSTANTIATE_TEST_SUITE_P(Kinds, SemCancelTest, testing::ValuesIn(kAllWaitKinds), kind_param_name);

// A cancellation request already pending when the call starts. glibc 2.36:
// sem_wait and sem_timedwait call pthread_testcancel at entry (after
// sem_timedwait's tv_nsec check), so they act on it even when a unit is
// available; sem_clockwait has no such check and acts on it only when it has
// to sleep; sem_trywait, sem_post and sem_getvalue are not cancellation points.
struct PendingCase {
  const char* name;
  unsigned initial;
  std::function<int(sem_t*)> op;
  bool cancelled;         // the thread is cancelled inside the call
  const char* outcome;    // otherwise, the call's outcome
  int value_after;
};

struct PendingRun {
  const PendingCase* c = nullptr;
  sem_t* s = nullptr;
  std::atomic<bool> cleanup_ran{false};
  std::atomic<bool> returned{false};
  std::string result;
};

void mark_pending_cleanup(void* p) { static_cast<PendingRun*>(p)->cleanup_ran = true; }

void* call_with_cancel_pending(void* p) {
  auto* r = static_cast<PendingRun*>(p);
  pthread_cleanup_push(mark_pending_cleanup, r);
  pthread_cancel(pthread_self());  // deferred: pending until a cancellation point
  int rc = r->c->op(r->s);
  r->result = outcome(rc, errno);
  r->returned = true;
  pthread_cleanup_pop(0);
  return reinterpret_cast<void*>(1);  // returning is not a cancellation point
}

void run_pending_cases(const std::vector<PendingCase>& cases) {
  for (const PendingCase& c : cases) {
    sem_t s;
    ASSERT_EQ(res(sem_init(&s, 0, c.initial)), "0");
    PendingRun r;
    r.c = &c;
    r.s = &s;
    pthread_t t;
    ASSERT_EQ(pthread_create(&t, nullptr, call_with_cancel_pending, &r), 0);
    void* ret = join_or_die(t);
    if (c.cancelled) {
      EXPECT_EQ(ret, PTHREAD_CANCELED) << c.name << ": not cancelled; returned " << r.result;
      EXPECT_TRUE(r.cleanup_ran.load()) << c.name;
      EXPECT_FALSE(r.returned.load()) << c.name;
    } else {
      EXPECT_NE(ret, PTHREAD_CANCELED) << c.name << ": acted on the pending cancellation";
      EXPECT_EQ(r.result, c.outcome) << c.name;
    }
    EXPECT_EQ(value_of(&s), c.value_after) << c.name;
    EXPECT_EQ(res(sem_destroy(&s)), "0");
  }
}

int timedwait_generous(sem_t* s) { return wait_on(s, WaitKind::kTimedwait); }
int clockwait_monotonic_generous(sem_t* s) { return wait_on(s, WaitKind::kClockwaitMonotonic); }
int clockwait_realtime_generous(sem_t* s) { return wait_on(s, WaitKind::kClockwaitRealtime); }

TEST(SemCancelPending, SemWaitAndSemTimedwaitActOnItAtEntryEvenWithAUnitAvailable) {
  run_pending_cases({
      {"sem_wait at 0", 0, sem_wait, true, nullptr, 0},
      {"sem_wait at 1", 1, sem_wait, true, nullptr, 1},
      {"sem_timedwait at 0", 0, timedwait_generous, true, nullptr, 0},
      {"sem_timedwait at 1", 1, timedwait_generous, true, nullptr, 1},
      {"sem_timedwait at 1, expired deadline", 1,
       [](sem_t* s) {
         timespec past{0, 0};
         return sem_timedwait(s, &past);
       },
       true, nullptr, 1},
  });
}

TEST(SemCancelPending, SemClockwaitActsOnItOnlyWhenItHasToSleep) {
  run_pending_cases({
      {"sem_clockwait MONOTONIC at 0", 0, clockwait_monotonic_generous, true, nullptr, 0},
      {"sem_clockwait REALTIME at 0", 0, clockwait_realtime_generous, true, nullptr, 0},
      {"sem_clockwait MONOTONIC at 1", 1, clockwait_monotonic_generous, false, "0", 0},
      {"sem_clockwait REALTIME at 1", 1, clockwait_realtime_generous, false, "0", 0},
  });
}

TEST(SemCancelPending, ArgumentErrorsAndNonBlockingCallsIgnoreIt) {
  auto bad_nsec = [](sem_t* s) {
    timespec t{time(nullptr) + 1, 1'000'000'000};
    return sem_timedwait(s, &t);
  };
  auto bad_clock = [](sem_t* s) {
    timespec t = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
    return sem_clockwait(s, CLOCK_PROCESS_CPUTIME_ID, &t);
  };
  auto clock_bad_nsec = [](sem_t* s) {
    timespec t{time(nullptr) + 1, -1};
    return sem_clockwait(s, CLOCK_MONOTONIC, &t);
  };
  auto getvalue = [](sem_t* s) {
    int v = -1;
    return sem_getvalue(s, &v);
  };
  run_pending_cases({
      {"sem_timedwait bad tv_nsec at 0", 0, bad_nsec, false, "-1/EINVAL", 0},
      {"sem_timedwait bad tv_nsec at 1", 1, bad_nsec, false, "-1/EINVAL", 1},
      {"sem_clockwait bad clock at 0", 0, bad_clock, false, "-1/EINVAL", 0},
      {"sem_clockwait bad clock at 1", 1, bad_clock, false, "-1/EINVAL", 1},
      {"sem_clockwait bad tv_nsec at 0", 0, clock_bad_nsec, false, "-1/EINVAL", 0},
      {"sem_trywait at 0", 0, sem_trywait, false, "-1/EAGAIN", 0},
      {"sem_trywait at 1", 1, sem_trywait, false, "0", 0},
      {"sem_post at 0", 0, sem_post, false, "0", 1},
      {"sem_getvalue at 1", 1, getvalue, false, "0", 1},
  });
}

// ------------------------------------------------------ process-shared: fork
// A forked child inherits the parent's variant (same process image and
// environment); SemUnrelatedProcess below also pairs a variant with glibc.

struct PingPong {
  sem_t ping, pong;
};

TEST(SemProcessShared, ForkedParentAndChildPingPongTwentyThousandRoundTrips) {
  constexpr int kRoundTrips = 20'000;
  auto* pp = map_shared<PingPong>();
  ASSERT_NE(pp, nullptr);
  ASSERT_EQ(res(sem_init(&pp->ping, 1, 0)), "0");
  ASSERT_EQ(res(sem_init(&pp->pong, 1, 0)), "0");
  int64_t start = now_ns(CLOCK_MONOTONIC);
  pid_t child = lstest::start_child([&] {
    for (int i = 0; i < kRoundTrips; ++i) {
      int rc = wait_on(&pp->ping, kAllWaitKinds[i % 4], 20'000);  // the child waits with every kind
      CHILD_EXPECT_EQ(rc, 0);
      if (rc != 0) return;
      CHILD_EXPECT_EQ(sem_post(&pp->pong), 0);
    }
  });
  ASSERT_GT(child, 0);
  int done = 0;
  for (; done < kRoundTrips; ++done) {
    if (sem_post(&pp->ping) != 0) break;
    // Bounded waits in the parent: a lost wakeup fails instead of hanging.
    WaitKind k = done % 2 ? WaitKind::kTimedwait : WaitKind::kClockwaitMonotonic;
    if (wait_on(&pp->pong, k, kGenerousMs) != 0) {
      int e = errno;
      ADD_FAILURE() << "round trip " << done << ": " << outcome(-1, e) << ", ping " << value_of(&pp->ping)
                    << ", pong " << value_of(&pp->pong);
      break;
    }
  }
  EXPECT_EQ(done, kRoundTrips);
  EXPECT_EQ(lstest::finish_child(child), 0);
  fprintf(stderr, "[ info ] %d round trips in %.1f ms\n", done, (now_ns(CLOCK_MONOTONIC) - start) / 1e6);
  EXPECT_EQ(value_of(&pp->ping), 0);
  EXPECT_EQ(value_of(&pp->pong), 0);
  EXPECT_EQ(res(sem_destroy(&pp->ping)), "0");
  EXPECT_EQ(res(sem_destroy(&pp->pong)), "0");
  unmap_shared(pp);
}

TEST(SemProcessShared, SleepersInTwoProcessesAreEachWokenByOnePost) {
  auto* s = map_shared<sem_t>();
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(res(sem_init(s, 1, 0)), "0");
  pid_t child = lstest::start_child([&] { CHILD_EXPECT_EQ(wait_on(s, WaitKind::kWait), 0); });
  ASSERT_GT(child, 0);
  Waiter w(s, WaitKind::kClockwaitMonotonic);
  w.settle();
  eventually([&] { return lstest::task_state(child) == 'S'; }, 2000);
  EXPECT_EQ(value_of(s), 0);
  EXPECT_EQ(res(sem_post(s)), "0");
  EXPECT_EQ(res(sem_post(s)), "0");
  EXPECT_EQ(w.join(), "0");
  EXPECT_EQ(lstest::finish_child(child), 0);
  EXPECT_EQ(value_of(s), 0);
  EXPECT_EQ(res(sem_destroy(s)), "0");
  unmap_shared(s);
}

TEST(SemProcessShared, AnyNonZeroPsharedWakesASleeperInAnotherProcess) {
  for (int pshared : {1, 2, -1}) {
    auto* s = map_shared<sem_t>();
    ASSERT_NE(s, nullptr);
    ASSERT_EQ(res(sem_init(s, pshared, 0)), "0");
    // Bounded in the child: a private semaphore would never be woken from here.
    pid_t child = lstest::start_child([&] { CHILD_EXPECT_EQ(wait_on(s, WaitKind::kTimedwait, 5000), 0); });
    ASSERT_GT(child, 0);
    eventually([&] { return lstest::task_state(child) == 'S'; }, 2000);
    usleep(2000);
    EXPECT_EQ(res(sem_post(s)), "0");
    EXPECT_EQ(lstest::finish_child(child), 0) << "pshared " << pshared;
    EXPECT_EQ(value_of(s), 0) << "pshared " << pshared;
    EXPECT_EQ(res(sem_destroy(s)), "0");
    unmap_shared(s);
  }
}

TEST(SemProcessShared, ChildPostsWakeAParentSleeperAndTheOtherWayRound) {
  auto* pp = map_shared<PingPong>();
  ASSERT_NE(pp, nullptr);
  ASSERT_EQ(res(sem_init(&pp->ping, 1, 0)), "0");
  ASSERT_EQ(res(sem_init(&pp->pong, 1, 0)), "0");
  pid_t child = lstest::start_child([&] {
    // Wait until the parent's thread sleeps on pong, then post it; then sleep on ping.
    for (int i = 0; i < 3; ++i) {
      usleep(20'000);
      CHILD_EXPECT_EQ(sem_post(&pp->pong), 0);
      CHILD_EXPECT_EQ(wait_on(&pp->ping, WaitKind::kWait), 0);
    }
  });
  ASSERT_GT(child, 0);
  for (int i = 0; i < 3; ++i) {
    Waiter w(&pp->pong, kAllWaitKinds[i + 1]);
    EXPECT_EQ(w.join(), "0") << "round " << i;
    eventually([&] { return lstest::task_state(child) == 'S'; }, 2000);
    EXPECT_EQ(res(sem_post(&pp->ping)), "0");
  }
  EXPECT_EQ(lstest::finish_child(child), 0);
  EXPECT_EQ(value_of(&pp->ping), 0);
  EXPECT_EQ(value_of(&pp->pong), 0);
  unmap_shared(pp);
}

// --------------------------------------- process-shared: unrelated processes
// ------------------------------------ random SIGKILLs among the sharers

// Worker processes pass tokens through two process-shared semaphores (a to
// b, or b to a) and take a process-private rwlock read lock on the way, so
// the percid variants' concurrency ids (LOCKSWAP_CID=global: a lock shared by
// the whole process tree) are in the loop too.
struct KillLoop {
  sem_t a;
  sem_t b;
  std::atomic<uint64_t> rounds;
  std::atomic<int> stop;
};

void kill_loop_worker(KillLoop* k, bool a_to_b) {
  static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;
  sem_t* from = a_to_b ? &k->a : &k->b;
  sem_t* to = a_to_b ? &k->b : &k->a;
  while (k->stop.load() == 0) {
    timespec d = deadline_in(CLOCK_MONOTONIC, 50);
    if (sem_clockwait(from, CLOCK_MONOTONIC, &d) != 0) continue;
    CHILD_EXPECT_EQ(pthread_rwlock_rdlock(&rw), 0);
    CHILD_EXPECT_EQ(pthread_rwlock_unlock(&rw), 0);
    CHILD_EXPECT_EQ(sem_post(to), 0);
    k->rounds.fetch_add(1);
  }
}

// Takes every unit left; never blocks.
int drain(sem_t* s) {
  int n = 0;
  while (sem_trywait(s) == 0) ++n;
  return n;
}

// Workers SIGKILLed at random moments, each replaced at once: the others
// keep passing tokens (a killed worker may take a token with it; the test
// puts one back when nothing moved for a while), nobody hangs, no token is
// made from nothing; afterwards a fresh pair on the same semaphores passes
// one token thousands of times and leaves exactly it.
TEST(SemProcessShared, RandomSigkillsAmongSharersStopNobodyAndLoseNoCount) {
  constexpr int kWorkers = 4, kTokens = 2, kFreshRounds = 2000;
  void* mem = mmap(nullptr, sizeof(KillLoop), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* k = new (mem) KillLoop{};
  ASSERT_EQ(res(sem_init(&k->a, 1, kTokens)), "0");
  ASSERT_EQ(res(sem_init(&k->b, 1, 0)), "0");
  auto start = [&](int i) { return lstest::start_child([=] { kill_loop_worker(k, i % 2 == 0); }); };
  pid_t worker[kWorkers];
  for (int i = 0; i < kWorkers; ++i) worker[i] = start(i);

  unsigned seed = static_cast<unsigned>(now_ns(CLOCK_MONOTONIC));
  std::mt19937 rng(seed);
  int kills = 0, put_back = 0;
  uint64_t seen = 0;
  int64_t end = now_ns(CLOCK_MONOTONIC) + 2'000'000'000, moved_at = now_ns(CLOCK_MONOTONIC);
  while (now_ns(CLOCK_MONOTONIC) < end) {
    usleep(1000 + rng() % 10000);
    int i = static_cast<int>(rng() % kWorkers);
    kill(worker[i], SIGKILL);
    waitpid(worker[i], nullptr, 0);
    ++kills;
    worker[i] = start(i);
    int64_t now = now_ns(CLOCK_MONOTONIC);
    if (uint64_t r = k->rounds.load(); r != seen) {
      seen = r;
      moved_at = now;
    } else if (now - moved_at > 300'000'000) {  // tokens went down with killed workers
      ASSERT_EQ(res(sem_post(&k->a)), "0");
      ++put_back;
      moved_at = now;
    }
  }
  k->stop.store(1);
  for (pid_t w : worker) EXPECT_EQ(lstest::finish_child(w, 10'000), 0) << "a worker hung or failed (seed " << seed << ")";
  EXPECT_GT(k->rounds.load(), 0u);
  EXPECT_LE(drain(&k->a) + drain(&k->b), kTokens + put_back) << "a token made from nothing (seed " << seed << ")";
  EXPECT_GT(kills, 20);

  k->rounds.store(0);
  k->stop.store(0);
  ASSERT_EQ(res(sem_post(&k->a)), "0");
  pid_t fresh[2] = {start(0), start(1)};
  EXPECT_TRUE(eventually([&] { return k->rounds.load() >= kFreshRounds; }, 20'000))
      << "after the kills the token moved " << k->rounds.load() << " times (seed " << seed << ")";
  k->stop.store(1);
  for (pid_t w : fresh) EXPECT_EQ(lstest::finish_child(w, 10'000), 0);
  EXPECT_EQ(value_of(&k->a) + value_of(&k->b), 1) << "exactly the one token";
  munmap(mem, sizeof(KillLoop));
}

// A separate program (sem_peer) maps the same memory by name and ping-pongs.
// It is spawned with this process's environment (the same LD_PRELOAD and
// LOCKSWAP_SEM), or without LD_PRELOAD: then it runs glibc's own semaphore
// against this process's variant, which must interoperate (process-shared
// semaphores keep glibc's word under every variant, core/sem.h).

#ifndef LOCKSWAP_SEM_PEER
#error "LOCKSWAP_SEM_PEER (the path of the sem_peer program) must be defined by the build"
#endif

// Layout shared with sem_peer.c: `ping` at offset 0, `pong` at kPongOffset.
constexpr size_t kPeerMapSize = 4096;
constexpr size_t kPongOffset = 64;

enum class PeerMemory { kShmOpen, kFileInTempDir };

class SemUnrelatedProcess : public testing::TestWithParam<PeerMemory> {
 public:
  void TearDown() override {
    if (mem_ != MAP_FAILED) munmap(mem_, kPeerMapSize);
    if (GetParam() == PeerMemory::kShmOpen) {
      if (!where_.empty()) shm_unlink(where_.c_str());
    } else {
      if (!where_.empty()) unlink(where_.c_str());
      if (!dir_.empty()) rmdir(dir_.c_str());
    }
  }
  // Creates the memory, maps it and returns its fd (-1 on failure).
  int create() {
    int fd = -1;
    if (GetParam() == PeerMemory::kShmOpen) {
      where_ = unique_name("shm");
      fd = shm_open(where_.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    } else {
      const char* tmp = getenv("TMPDIR");
      std::string templ = std::string(tmp != nullptr && *tmp != '\0' ? tmp : P_tmpdir) + "/lockswap-sem-XXXXXX";
      std::vector<char> buf(templ.begin(), templ.end());
      buf.push_back('\0');
      if (mkdtemp(buf.data()) == nullptr) return -1;
      dir_ = buf.data();
      where_ = dir_ + "/semaphores";
      fd = open(where_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    }
    if (fd < 0) return -1;
    if (ftruncate(fd, kPeerMapSize) != 0) return close(fd), -1;
    mem_ = mmap(nullptr, kPeerMapSize, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    return mem_ == MAP_FAILED ? -1 : 0;
  }
  sem_t* ping() { return reinterpret_cast<sem_t*>(static_cast<char*>(mem_)); }
  sem_t* pong() { return reinterpret_cast<sem_t*>(static_cast<char*>(mem_) + kPongOffset); }

  void* mem_ = MAP_FAILED;
  std::string where_, dir_;
};

// This process's environment without LD_PRELOAD (the strings stay environ's).
std::vector<char*> environment_without_preload() {
  std::vector<char*> env;
  for (char** e = environ; *e != nullptr; ++e)
    if (strncmp(*e, "LD_PRELOAD=", 11) != 0) env.push_back(*e);
  env.push_back(nullptr);
  return env;
}

// How one ping-pong with sem_peer goes.
struct PeerRun {
  int round_trips;
  int post_delay_us;          // the peer's pause before each post (0: none)
  char* const* env;           // the peer's environment
  WaitKind every_third_wait;  // this process's wait on pong every third round (else clockwait)
  bool post_to_a_sleeper;     // every other round, post only once the peer sleeps on ping
};

// Spawns sem_peer on this memory and ping-pongs with it; both semaphores end
// at 0. The peer ends with one handshake of its own: it sleeps on ping until
// this process posts.
void ping_pong_with_peer(SemUnrelatedProcess& t, const PeerRun& run) {
  ASSERT_EQ(res(sem_init(t.ping(), 1, 0)), "0");
  ASSERT_EQ(res(sem_init(t.pong(), 1, 0)), "0");
  std::string rounds = std::to_string(run.round_trips), delay_us = std::to_string(run.post_delay_us);
  const char* mode = t.GetParam() == PeerMemory::kShmOpen ? "shm" : "file";
  char* argv[] = {const_cast<char*>(LOCKSWAP_SEM_PEER), const_cast<char*>(mode), t.where_.data(), rounds.data(),
                  delay_us.data(), nullptr};
  pid_t peer = -1;
  int rc = posix_spawn(&peer, LOCKSWAP_SEM_PEER, nullptr, nullptr, argv, run.env);
  ASSERT_EQ(rc, 0) << strerrorname_np(rc);
  int done = 0;
  for (; done < run.round_trips; ++done) {
    if (run.post_to_a_sleeper && done % 2 == 0) eventually([&] { return lstest::task_state(peer) == 'S'; }, 2000);
    if (sem_post(t.ping()) != 0) break;
    WaitKind k = done % 3 == 0 ? run.every_third_wait : WaitKind::kClockwaitMonotonic;
    if (wait_on(t.pong(), k, kGenerousMs) != 0) {
      int e = errno;
      ADD_FAILURE() << "round trip " << done << ": " << outcome(-1, e) << ", ping " << value_of(t.ping())
                    << ", pong " << value_of(t.pong());
      break;
    }
  }
  EXPECT_EQ(done, run.round_trips);
  if (done == run.round_trips) {
    eventually([&] { return lstest::task_state(peer) == 'S'; }, 2000);
    EXPECT_EQ(res(sem_post(t.ping())), "0");
  }
  EXPECT_EQ(lstest::finish_child(peer), 0) << "sem_peer failed (its stderr says why)";
  EXPECT_EQ(value_of(t.ping()), 0);
  EXPECT_EQ(value_of(t.pong()), 0);
}

// Both pairings on one pair of semaphores: the glibc peer sleeps on ping and
// this process's variant posts it; this process sleeps on pong (the peer
// pauses before each post) and glibc's post must wake it.
TEST_P(SemUnrelatedProcess, PeerRunningGlibcsOwnSemaphoreInteroperates) {
  ASSERT_EQ(create(), 0) << strerrorname_np(errno);
  std::vector<char*> env = environment_without_preload();
  ping_pong_with_peer(*this, {200, 500, env.data(), WaitKind::kWait, true});
}

TEST_P(SemUnrelatedProcess, SpawnedPeerMapsTheSameMemoryAndPingPongs) {
  ASSERT_EQ(create(), 0) << strerrorname_np(errno);
  ping_pong_with_peer(*this, {5000, 0, environ, WaitKind::kTimedwait, false});  // same environment
  EXPECT_EQ(res(sem_destroy(ping())), "0");
  EXPECT_EQ(res(sem_destroy(pong())), "0");
}

INSTANTIATE_TEST_SUITE_P(Memory, SemUnrelatedProcess, testing::Values(PeerMemory::kShmOpen, PeerMemory::kFileInTempDir),
                         [](const testing::TestParamInfo<PeerMemory>& info) {
                           return std::string(info.param == PeerMemory::kShmOpen ? "ShmOpen" : "FileInTempDir");
                         });

// ------------------------------------------------------- named (sem_open)

TEST(SemNamed, SemOpenCreatedSemaphoreWaitsPostsAndReportsItsValue) {
  std::string name = unique_name("named");
  sem_t* s = sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, 2);
  ASSERT_NE(s, SEM_FAILED) << strerrorname_np(errno);
  // Opening it again by name gives the same semaphore.
  sem_t* again = sem_open(name.c_str(), 0);
  ASSERT_NE(again, SEM_FAILED) << strerrorname_np(errno);
  EXPECT_EQ(res(sem_unlink(name.c_str())), "0");
  EXPECT_EQ(value_of(s), 2);
  EXPECT_EQ(value_of(again), 2);
  EXPECT_EQ(res(sem_trywait(s)), "0");
  EXPECT_EQ(res(sem_wait(again)), "0");
  EXPECT_EQ(res(sem_trywait(s)), "-1/EAGAIN");
  EXPECT_EQ(value_of(s), 0);
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  EXPECT_EQ(res(sem_timedwait(s, &d)), "-1/ETIMEDOUT");
  d = deadline_in(CLOCK_MONOTONIC, kShortMs);
  EXPECT_EQ(res(sem_clockwait(s, CLOCK_MONOTONIC, &d)), "-1/ETIMEDOUT");
  EXPECT_EQ(res(sem_post(s)), "0");
  EXPECT_EQ(value_of(again), 1);
  d = deadline_in(CLOCK_REALTIME, kGenerousMs);
  EXPECT_EQ(res(sem_clockwait(again, CLOCK_REALTIME, &d)), "0");
  {
    Waiter w(s, WaitKind::kWait);
    w.settle();
    EXPECT_EQ(value_of(s), 0);
    EXPECT_EQ(res(sem_post(again)), "0");
    EXPECT_EQ(w.join(), "0");
  }
  EXPECT_EQ(value_of(s), 0);
  // glibc hands out one mapping per name and counts the opens: close both.
  EXPECT_EQ(res(sem_close(again)), "0");
  EXPECT_EQ(res(sem_close(s)), "0");
}

TEST(SemNamed, SemOpenCreatedSemaphoresWakeSleepersAcrossFork) {
  std::string name = unique_name("named-fork");
  sem_t* to_child = sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, 0);
  ASSERT_NE(to_child, SEM_FAILED) << strerrorname_np(errno);
  sem_unlink(name.c_str());
  name = unique_name("named-fork");
  sem_t* to_parent = sem_open(name.c_str(), O_CREAT | O_EXCL, 0600, 0);
  ASSERT_NE(to_parent, SEM_FAILED) << strerrorname_np(errno);
  sem_unlink(name.c_str());
  pid_t child = lstest::start_child([&] {
    CHILD_EXPECT_EQ(wait_on(to_child, WaitKind::kTimedwait, 5000), 0);
    usleep(20'000);  // let the parent's waiter fall asleep first
    CHILD_EXPECT_EQ(sem_post(to_parent), 0);
  });
  ASSERT_GT(child, 0);
  eventually([&] { return lstest::task_state(child) == 'S'; }, 2000);
  EXPECT_EQ(res(sem_post(to_child)), "0");
  EXPECT_EQ(res(wait_on(to_parent, WaitKind::kClockwaitMonotonic)), "0");
  EXPECT_EQ(lstest::finish_child(child), 0);
  EXPECT_EQ(value_of(to_child), 0);
  EXPECT_EQ(value_of(to_parent), 0);
  EXPECT_EQ(res(sem_close(to_child)), "0");
  EXPECT_EQ(res(sem_close(to_parent)), "0");
}

}  // namespace
