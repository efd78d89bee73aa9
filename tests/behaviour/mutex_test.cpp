// tests/behaviour/mutex_test.cpp — pthread_mutex_* behaviour, asserted against
// what glibc 2.36 really returns. Runs under LD_PRELOAD for every variant,
// `glibc` included (a test failing there is a wrong test).
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <functional>
#include <limits>
#include <string>
#include <thread>

#include "tests/common/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::Holder;
using lstest::kGenerousMs;
using lstest::kShortMs;
using lstest::on_other_thread;
using lstest::reached;

// How the mutex object came to be.
enum class Origin { kAttr, kNullAttr, kStaticInitializer, kMemsetZero, kCalloc };

struct MutexParam {
  int type;  // PTHREAD_MUTEX_NORMAL / RECURSIVE / ERRORCHECK / ADAPTIVE_NP
  Origin origin;
};

const char* origin_name(Origin o) {
  switch (o) {
    case Origin::kAttr: return "InitWithAttr";
    case Origin::kNullAttr: return "InitNullAttr";
    case Origin::kStaticInitializer: return "StaticInitializer";
    case Origin::kMemsetZero: return "MemsetZero";
    case Origin::kCalloc: return "Calloc";
  }
  return "Unknown";
}

std::string param_name(const testing::TestParamInfo<MutexParam>& info) {
  return std::string(lstest::mutex_type_name(info.param.type)) + "_" + origin_name(info.param.origin);
}

pthread_mutex_t static_initializer(int type) {
  static const pthread_mutex_t normal = PTHREAD_MUTEX_INITIALIZER;
  static const pthread_mutex_t recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
  static const pthread_mutex_t errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
  static const pthread_mutex_t adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
  switch (type) {
    case PTHREAD_MUTEX_RECURSIVE: return recursive;
    case PTHREAD_MUTEX_ERRORCHECK: return errorcheck;
    case PTHREAD_MUTEX_ADAPTIVE_NP: return adaptive;
    default: return normal;
  }
}

// Owns a heap mutex made the way the parameter says (never initialised by
// lockswap for the static / zero-memory origins).
class MutexTest : public testing::TestWithParam<MutexParam> {
 protected:
  void SetUp() override {
    const MutexParam& p = GetParam();
    if (p.origin == Origin::kCalloc) {
      m_ = static_cast<pthread_mutex_t*>(calloc(1, sizeof(pthread_mutex_t)));
    } else {
      m_ = lstest::malloc_filled<pthread_mutex_t>(0xa5);  // garbage first
    }
    ASSERT_NE(m_, nullptr);
    switch (p.origin) {
      case Origin::kAttr: ASSERT_EQ(lstest::init_mutex_of_type(m_, p.type), 0); break;
      case Origin::kNullAttr: ASSERT_EQ(pthread_mutex_init(m_, nullptr), 0); break;
      case Origin::kStaticInitializer: *m_ = static_initializer(p.type); break;
      case Origin::kMemsetZero: memset(static_cast<void*>(m_), 0, sizeof *m_); break;
      case Origin::kCalloc: break;
    }
  }
  void TearDown() override { free(m_); }

  int type() const { return GetParam().type; }
  bool owner_checked() const { return type() == PTHREAD_MUTEX_ERRORCHECK || type() == PTHREAD_MUTEX_RECURSIVE; }
  // Runs on a fresh thread: trylock and, if it got the lock, unlock again.
  int other_thread_trylock() {
    return on_other_thread([this] {
      int rc = pthread_mutex_trylock(m_);
      if (rc == 0) { EXPECT_EQ(pthread_mutex_unlock(m_), 0); }
      return rc;
    });
  }

  pthread_mutex_t* m_ = nullptr;
};

TEST_P(MutexTest, LockThenUnlockReturnZero) {
  EXPECT_EQ(pthread_mutex_lock(m_), 0);
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  EXPECT_EQ(pthread_mutex_trylock(m_), 0);
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  EXPECT_EQ(pthread_mutex_destroy(m_), 0);
}

TEST_P(MutexTest, TrylockFromAnotherThreadWhileHeldIsEbusyThenSucceedsAfterUnlock) {
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  EXPECT_EQ(other_thread_trylock(), EBUSY);
  ASSERT_EQ(pthread_mutex_unlock(m_), 0);
  EXPECT_EQ(other_thread_trylock(), 0);
}

TEST_P(MutexTest, TrylockByOwnerIsEbusyExceptRecursiveWhichCounts) {
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  if (type() == PTHREAD_MUTEX_RECURSIVE) {
    EXPECT_EQ(pthread_mutex_trylock(m_), 0);
    EXPECT_EQ(pthread_mutex_unlock(m_), 0);
    EXPECT_EQ(other_thread_trylock(), EBUSY) << "one level must still be held";
  } else {
    EXPECT_EQ(pthread_mutex_trylock(m_), EBUSY);
  }
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  EXPECT_EQ(other_thread_trylock(), 0);
}

TEST_P(MutexTest, RelockByOwnerIsEdeadlkForErrorcheckAndCountsForRecursive) {
  if (!owner_checked()) GTEST_SKIP() << "relocking a normal/adaptive mutex deadlocks (see timedlock test)";
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  if (type() == PTHREAD_MUTEX_ERRORCHECK) {
    EXPECT_EQ(pthread_mutex_lock(m_), EDEADLK);
  } else {
    EXPECT_EQ(pthread_mutex_lock(m_), 0);
    EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  }
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  EXPECT_EQ(other_thread_trylock(), 0);
}

TEST_P(MutexTest, TimedlockByOwnerTimesOutForNormalIsEdeadlkForErrorcheckCountsForRecursive) {
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  int rc = pthread_mutex_timedlock(m_, &d);
  switch (type()) {
    case PTHREAD_MUTEX_ERRORCHECK: EXPECT_EQ(rc, EDEADLK); break;
    case PTHREAD_MUTEX_RECURSIVE:
      EXPECT_EQ(rc, 0);
      EXPECT_EQ(pthread_mutex_unlock(m_), 0);
      break;
    default:
      EXPECT_EQ(rc, ETIMEDOUT);
      EXPECT_TRUE(reached(CLOCK_REALTIME, d));
  }
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  EXPECT_EQ(other_thread_trylock(), 0);
}

TEST_P(MutexTest, UnlockByNonOwnerIsEpermForErrorcheckAndRecursive) {
  if (!owner_checked()) GTEST_SKIP() << "undefined for normal/adaptive";
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  EXPECT_EQ(on_other_thread([this] { return pthread_mutex_unlock(m_); }), EPERM);
  EXPECT_EQ(other_thread_trylock(), EBUSY) << "the failed unlock must not release it";
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
}

TEST_P(MutexTest, UnlockWhenUnlockedIsEpermForErrorcheckAndRecursive) {
  if (!owner_checked()) GTEST_SKIP() << "undefined for normal/adaptive";
  EXPECT_EQ(pthread_mutex_unlock(m_), EPERM);
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  EXPECT_EQ(pthread_mutex_unlock(m_), EPERM);
  EXPECT_EQ(other_thread_trylock(), 0);
}

TEST_P(MutexTest, RecursiveNeedsAsManyUnlocksAsLocks) {
  if (type() != PTHREAD_MUTEX_RECURSIVE) GTEST_SKIP();
  constexpr int kDepth = 6;
  timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
  timespec dm = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  ASSERT_EQ(pthread_mutex_trylock(m_), 0);
  ASSERT_EQ(pthread_mutex_timedlock(m_, &d), 0);
  ASSERT_EQ(pthread_mutex_clocklock(m_, CLOCK_MONOTONIC, &dm), 0);
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  for (int i = 0; i < kDepth - 1; ++i) {
    ASSERT_EQ(pthread_mutex_unlock(m_), 0);
    EXPECT_EQ(other_thread_trylock(), EBUSY) << "after " << i + 1 << " unlocks of " << kDepth;
  }
  // The blocked thread gets the lock only after the last unlock.
  std::atomic<bool> got{false};
  std::thread t([&] {
    EXPECT_EQ(pthread_mutex_lock(m_), 0);
    got = true;
    EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  });
  usleep(20'000);
  EXPECT_FALSE(got.load());
  ASSERT_EQ(pthread_mutex_unlock(m_), 0);
  t.join();
  EXPECT_TRUE(got.load());
  EXPECT_EQ(pthread_mutex_unlock(m_), EPERM);
}

TEST_P(MutexTest, DestroyWhileLockedIsEbusyAndLeavesItUsable) {
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  EXPECT_EQ(pthread_mutex_destroy(m_), EBUSY);
  EXPECT_EQ(other_thread_trylock(), EBUSY);
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  EXPECT_EQ(other_thread_trylock(), 0);
  EXPECT_EQ(pthread_mutex_destroy(m_), 0);
}

TEST_P(MutexTest, DestroyedMutexReturnsEinvalUntilInitialisedAgain) {
  ASSERT_EQ(pthread_mutex_destroy(m_), 0);
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  timespec dm = deadline_in(CLOCK_MONOTONIC, kShortMs);
  EXPECT_EQ(pthread_mutex_lock(m_), EINVAL);
  EXPECT_EQ(pthread_mutex_trylock(m_), EINVAL);
  EXPECT_EQ(pthread_mutex_timedlock(m_, &d), EINVAL);
  EXPECT_EQ(pthread_mutex_clocklock(m_, CLOCK_MONOTONIC, &dm), EINVAL);
  EXPECT_EQ(pthread_mutex_unlock(m_), EINVAL);
  EXPECT_EQ(pthread_mutex_consistent(m_), EINVAL);
  // Initialising again brings it back, with its kind.
  ASSERT_EQ(lstest::init_mutex_of_type(m_, type()), 0);
  EXPECT_EQ(pthread_mutex_lock(m_), 0);
  EXPECT_EQ(pthread_mutex_trylock(m_), type() == PTHREAD_MUTEX_RECURSIVE ? 0 : EBUSY);
  if (type() == PTHREAD_MUTEX_RECURSIVE) { EXPECT_EQ(pthread_mutex_unlock(m_), 0); }
  if (type() == PTHREAD_MUTEX_ERRORCHECK) { EXPECT_EQ(pthread_mutex_lock(m_), EDEADLK); }
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  EXPECT_EQ(pthread_mutex_destroy(m_), 0);
}

TEST_P(MutexTest, BlockedLockerGetsTheMutexOnlyAfterUnlock) {
  ASSERT_EQ(pthread_mutex_lock(m_), 0);
  std::atomic<int> stage{0};
  lstest::Sem started;
  pid_t tid = 0;
  std::thread t([&] {
    tid = lstest::current_tid();
    started.post();
    EXPECT_EQ(pthread_mutex_lock(m_), 0);
    EXPECT_EQ(stage.load(), 1) << "acquired before the owner unlocked";
    stage = 2;
    EXPECT_EQ(pthread_mutex_unlock(m_), 0);
  });
  ASSERT_TRUE(started.wait());
  lstest::settle_until_blocked(tid);
  stage = 1;
  ASSERT_EQ(pthread_mutex_unlock(m_), 0);
  t.join();
  EXPECT_EQ(stage.load(), 2);
  EXPECT_EQ(pthread_mutex_trylock(m_), 0);
  EXPECT_EQ(pthread_mutex_unlock(m_), 0);
}

std::vector<MutexParam> all_mutex_params() {
  std::vector<MutexParam> v;
  for (int type : {PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK, PTHREAD_MUTEX_ADAPTIVE_NP}) {
    v.push_back({type, Origin::kAttr});
    v.push_back({type, Origin::kStaticInitializer});
  }
  v.push_back({PTHREAD_MUTEX_NORMAL, Origin::kNullAttr});
  v.push_back({PTHREAD_MUTEX_NORMAL, Origin::kMemsetZero});
  v.push_back({PTHREAD_MUTEX_NORMAL, Origin::kCalloc});
  return v;
}

INSTANTIATE_TEST_SUITE_P(Kinds, MutexTest, testing::ValuesIn(all_mutex_params()), param_name);

// ------------------------------------------------------- timed and clocked
// One origin per kind: the timing paths do not depend on how it was made.

class MutexTimedTest : public testing::TestWithParam<int> {
 protected:
  void SetUp() override { ASSERT_EQ(lstest::init_mutex_of_type(&m_, GetParam()), 0); }
  void TearDown() override { EXPECT_EQ(pthread_mutex_destroy(&m_), 0); }
  // A helper thread holding the mutex for the duration of the scope.
  std::unique_ptr<Holder> hold() {
    auto h = std::make_unique<Holder>([this] { return pthread_mutex_lock(&m_); },
                                      [this] { return pthread_mutex_unlock(&m_); });
    EXPECT_EQ(h->acquire_rc(), 0);
    return h;
  }
  // `timed_lock` (whose deadline lies past the owner's unlock) on the mutex
  // while a helper thread holds it and unlocks it 20 ms after being asked to:
  // the timed acquisition waits for the owner and succeeds.
  void expect_timed_lock_waits_for_owner(const std::function<int()>& timed_lock) {
    auto h = std::make_unique<Holder>([this] { return pthread_mutex_lock(&m_); },
                                      [this] {
                                        usleep(20'000);
                                        return pthread_mutex_unlock(&m_);
                                      });
    std::thread releaser([&] { h->release(); });
    EXPECT_EQ(timed_lock(), 0);
    releaser.join();
    EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
  }
  pthread_mutex_t m_;
};

std::string kind_name(const testing::TestParamInfo<int>& info) { return lstest::mutex_type_name(info.param); }

TEST_P(MutexTimedTest, TimedlockOnHeldMutexTimesOutAfterRealtimeDeadline) {
  auto h = hold();
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  EXPECT_EQ(pthread_mutex_timedlock(&m_, &d), ETIMEDOUT);
  EXPECT_TRUE(reached(CLOCK_REALTIME, d)) << "returned before the deadline";
  EXPECT_EQ(h->release(), 0);
  // Still a working mutex after a timeout left a waiter mark behind.
  d = deadline_in(CLOCK_REALTIME, kGenerousMs);
  EXPECT_EQ(pthread_mutex_timedlock(&m_, &d), 0);
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

TEST_P(MutexTimedTest, ClocklockRealtimeOnHeldMutexTimesOut) {
  auto h = hold();
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_REALTIME, &d), ETIMEDOUT);
  EXPECT_TRUE(reached(CLOCK_REALTIME, d));
}

TEST_P(MutexTimedTest, ClocklockMonotonicOnHeldMutexTimesOut) {
  auto h = hold();
  // A MONOTONIC deadline read as REALTIME would be decades in the past and
  // return at once: the elapsed-time check catches the wrong clock.
  timespec d = deadline_in(CLOCK_MONOTONIC, kShortMs);
  EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_MONOTONIC, &d), ETIMEDOUT);
  EXPECT_TRUE(reached(CLOCK_MONOTONIC, d));
  EXPECT_EQ(h->release(), 0);
  d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
  EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_MONOTONIC, &d), 0);
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

TEST_P(MutexTimedTest, TimedlockSucceedsWhenOwnerUnlocksBeforeDeadline) {
  expect_timed_lock_waits_for_owner([this] {
    timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
    return pthread_mutex_clocklock(&m_, CLOCK_MONOTONIC, &d);
  });
}

TEST_P(MutexTimedTest, FarFutureDeadlineWaitsForTheOwner) {
  expect_timed_lock_waits_for_owner([this] {
    timespec far{std::numeric_limits<time_t>::max(), 0};
    return pthread_mutex_timedlock(&m_, &far);
  });
}

TEST_P(MutexTimedTest, ClocklockWithUnsupportedClockIsEinvalEvenUncontended) {
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_PROCESS_CPUTIME_ID, &d), EINVAL);
  EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_THREAD_CPUTIME_ID, &d), EINVAL);
  {
    auto h = hold();
    EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_PROCESS_CPUTIME_ID, &d), EINVAL);
  }
  EXPECT_EQ(pthread_mutex_trylock(&m_), 0) << "the failed call must not have taken it";
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

TEST_P(MutexTimedTest, InvalidNanosecondsAreEinvalOnlyWhenItWouldBlock) {
  for (long bad : {1'000'000'000L, -1L}) {
    timespec t{time(nullptr) + 1, bad};
    {
      auto h = hold();
      EXPECT_EQ(pthread_mutex_timedlock(&m_, &t), EINVAL) << "tv_nsec=" << bad;
      EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_MONOTONIC, &t), EINVAL) << "tv_nsec=" << bad;
      EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_REALTIME, &t), EINVAL) << "tv_nsec=" << bad;
    }
    // glibc quirk: the uncontended fast path never looks at the timeout.
    EXPECT_EQ(pthread_mutex_timedlock(&m_, &t), 0) << "tv_nsec=" << bad;
    EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
    EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_MONOTONIC, &t), 0) << "tv_nsec=" << bad;
    EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
  }
}

TEST_P(MutexTimedTest, NegativeSecondsTimeOutWhenContendedAndSucceedWhenFree) {
  timespec t{-1, 0};
  {
    auto h = hold();
    EXPECT_EQ(pthread_mutex_timedlock(&m_, &t), ETIMEDOUT);
    EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_MONOTONIC, &t), ETIMEDOUT);
  }
  EXPECT_EQ(pthread_mutex_timedlock(&m_, &t), 0);
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

TEST_P(MutexTimedTest, OwnerTimedlockWithInvalidNanoseconds) {
  int type = GetParam();
  if (type != PTHREAD_MUTEX_ERRORCHECK && type != PTHREAD_MUTEX_RECURSIVE) GTEST_SKIP() << "would self-block";
  timespec t{time(nullptr) + 1, 1'000'000'000L};
  ASSERT_EQ(pthread_mutex_lock(&m_), 0);
  if (type == PTHREAD_MUTEX_ERRORCHECK) {
    EXPECT_EQ(pthread_mutex_timedlock(&m_, &t), EDEADLK);
    EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_MONOTONIC, &t), EDEADLK);
  } else {
    EXPECT_EQ(pthread_mutex_timedlock(&m_, &t), 0);
    EXPECT_EQ(pthread_mutex_clocklock(&m_, CLOCK_REALTIME, &t), 0);
    EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
    EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
  }
  EXPECT_EQ(pthread_mutex_unlock(&m_), 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, MutexTimedTest,
                         testing::Values(PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK,
                                         PTHREAD_MUTEX_ADAPTIVE_NP),
                         kind_name);

// ---------------------------------------------- genuinely static objects

pthread_mutex_t g_normal = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t g_recursive = PTHREAD_RECURSIVE_MUTEX_INITIALIZER_NP;
pthread_mutex_t g_errorcheck = PTHREAD_ERRORCHECK_MUTEX_INITIALIZER_NP;
pthread_mutex_t g_adaptive = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
pthread_mutex_t g_zero_bss;  // zero-initialised storage, never initialised

TEST(MutexStatic, GlobalStaticInitializersHaveTheirKinds) {
  EXPECT_EQ(pthread_mutex_lock(&g_normal), 0);
  EXPECT_EQ(pthread_mutex_trylock(&g_normal), EBUSY);
  EXPECT_EQ(pthread_mutex_unlock(&g_normal), 0);

  lstest_check_recursive_mutex(&g_recursive, lstest::expect_rc, nullptr);

  EXPECT_EQ(pthread_mutex_lock(&g_errorcheck), 0);
  EXPECT_EQ(pthread_mutex_lock(&g_errorcheck), EDEADLK);
  EXPECT_EQ(pthread_mutex_unlock(&g_errorcheck), 0);
  EXPECT_EQ(pthread_mutex_unlock(&g_errorcheck), EPERM);

  EXPECT_EQ(pthread_mutex_lock(&g_adaptive), 0);
  EXPECT_EQ(pthread_mutex_trylock(&g_adaptive), EBUSY);
  EXPECT_EQ(pthread_mutex_unlock(&g_adaptive), 0);

  EXPECT_EQ(pthread_mutex_lock(&g_zero_bss), 0);
  EXPECT_EQ(pthread_mutex_trylock(&g_zero_bss), EBUSY);
  EXPECT_EQ(pthread_mutex_unlock(&g_zero_bss), 0);
}

TEST(MutexAttr, GettypeRoundTripsAndInvalidTypeIsRejected) {
  lstest::expect_attr_setting(pthread_mutexattr_init, pthread_mutexattr_destroy, pthread_mutexattr_gettype,
                              pthread_mutexattr_settype, int{PTHREAD_MUTEX_DEFAULT}, 12345,
                              {int{PTHREAD_MUTEX_NORMAL}, int{PTHREAD_MUTEX_RECURSIVE}, int{PTHREAD_MUTEX_ERRORCHECK},
                               int{PTHREAD_MUTEX_ADAPTIVE_NP}});
}

}  // namespace
