// tests/cxx/cxx_std_test.cpp — unmodified C++ standard-library code under the
// preload. libstdc++ builds its primitives on the interposed functions:
//   std::mutex / recursive_mutex        pthread_mutex_lock/trylock/unlock
//   std::timed_mutex::try_lock_for      pthread_mutex_clocklock(CLOCK_MONOTONIC)
//   std::timed_mutex::try_lock_until    clocklock (steady) / timedlock (system)
//   std::shared_mutex                   pthread_rwlock_*
//   std::shared_timed_mutex             pthread_rwlock_clock{rd,wr}lock
//   std::condition_variable::wait_for   pthread_cond_clockwait(CLOCK_MONOTONIC)
//   std::condition_variable_any         an internal std::mutex + condvar
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>
#include <stop_token>
#include <thread>
#include <vector>

#include "tests/common/test_util.h"

namespace {

using namespace std::chrono_literals;
using steady = std::chrono::steady_clock;
using system_clock = std::chrono::system_clock;

constexpr auto kShort = 50ms;

template <class F>
bool from_other_thread(F&& f) {
  bool r = false;
  std::thread t([&] { r = f(); });
  t.join();
  return r;
}

TEST(StdMutex, CounterAndTryLock) {
  std::mutex m;
  long counter = 0;
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 20'000; ++i) {
        std::lock_guard<std::mutex> g(m);
        ++counter;
        if (i % 128 == 0) std::this_thread::yield();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(counter, 80'000);
  std::unique_lock<std::mutex> l(m);
  EXPECT_FALSE(from_other_thread([&] { return m.try_lock(); }));
  l.unlock();
  EXPECT_TRUE(from_other_thread([&] {
    bool ok = m.try_lock();
    if (ok) m.unlock();
    return ok;
  }));
}

TEST(StdMutex, ScopedLockOfTwoMutexesInOppositeOrdersNeverDeadlocks) {
  std::mutex a, b;
  long n = 0;
  std::thread t1([&] {
    for (int i = 0; i < 5'000; ++i) {
      std::scoped_lock l(a, b);
      ++n;
    }
  });
  std::thread t2([&] {
    for (int i = 0; i < 5'000; ++i) {
      std::scoped_lock l(b, a);
      ++n;
    }
  });
  t1.join();
  t2.join();
  EXPECT_EQ(n, 10'000);
}

TEST(StdRecursiveMutex, NestedLockingAndOwnership) {
  std::recursive_mutex m;
  m.lock();
  EXPECT_TRUE(m.try_lock());
  m.lock();
  EXPECT_FALSE(from_other_thread([&] { return m.try_lock(); }));
  m.unlock();
  m.unlock();
  EXPECT_FALSE(from_other_thread([&] { return m.try_lock(); }));
  m.unlock();
  EXPECT_TRUE(from_other_thread([&] {
    bool ok = m.try_lock();
    if (ok) m.unlock();
    return ok;
  }));
}

TEST(StdTimedMutex, TryLockForAndUntilTimeOutWhileHeld) {
  std::timed_mutex m;
  m.lock();
  std::thread t([&] {
    auto t0 = steady::now();
    EXPECT_FALSE(m.try_lock_for(kShort));
    EXPECT_GE(steady::now() - t0, kShort);
    auto until = steady::now() + kShort;
    EXPECT_FALSE(m.try_lock_until(until));
    EXPECT_GE(steady::now(), until);
    auto until_sys = system_clock::now() + kShort;
    EXPECT_FALSE(m.try_lock_until(until_sys));
    EXPECT_GE(system_clock::now(), until_sys);
  });
  t.join();
  m.unlock();
  std::thread t2([&] {
    EXPECT_TRUE(m.try_lock_for(10s));
    m.unlock();
    EXPECT_TRUE(m.try_lock_until(system_clock::now() + 10s));
    m.unlock();
  });
  t2.join();
}

TEST(StdTimedMutex, TryLockForSucceedsWhenReleasedInTime) {
  std::timed_mutex m;
  m.lock();
  std::thread t([&] {
    EXPECT_TRUE(m.try_lock_for(10s));
    m.unlock();
  });
  std::this_thread::sleep_for(20ms);
  m.unlock();
  t.join();
}

TEST(StdRecursiveTimedMutex, CountsAndTimesOut) {
  std::recursive_timed_mutex m;
  m.lock();
  EXPECT_TRUE(m.try_lock_for(kShort));
  std::thread t([&] {
    auto t0 = steady::now();
    EXPECT_FALSE(m.try_lock_for(kShort));
    EXPECT_GE(steady::now() - t0, kShort);
  });
  t.join();
  m.unlock();
  m.unlock();
  EXPECT_TRUE(from_other_thread([&] {
    bool ok = m.try_lock_for(1s);
    if (ok) m.unlock();
    return ok;
  }));
}

TEST(StdSharedMutex, ReadersShareWritersExclude) {
  std::shared_mutex m;
  m.lock_shared();
  EXPECT_TRUE(from_other_thread([&] {
    bool ok = m.try_lock_shared();
    if (ok) m.unlock_shared();
    return ok;
  }));
  EXPECT_FALSE(from_other_thread([&] { return m.try_lock(); }));
  m.unlock_shared();
  m.lock();
  EXPECT_FALSE(from_other_thread([&] { return m.try_lock_shared(); }));
  EXPECT_FALSE(from_other_thread([&] { return m.try_lock(); }));
  m.unlock();

  // Invariant under contention.
  long a = 0, b = 0;
  std::atomic<long> bad{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 5'000; ++i) {
        if (t == 0) {
          std::unique_lock l(m);
          ++a;
          if (i % 64 == 0) std::this_thread::yield();
          ++b;
        } else {
          std::shared_lock l(m);
          if (a != b) ++bad;
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(a, 5'000);
}

TEST(StdSharedTimedMutex, TimedSharedAndExclusiveAttempts) {
  std::shared_timed_mutex m;
  m.lock();
  std::thread t([&] {
    auto t0 = steady::now();
    EXPECT_FALSE(m.try_lock_shared_for(kShort));
    EXPECT_GE(steady::now() - t0, kShort);
    t0 = steady::now();
    EXPECT_FALSE(m.try_lock_for(kShort));
    EXPECT_GE(steady::now() - t0, kShort);
    auto until = system_clock::now() + kShort;
    EXPECT_FALSE(m.try_lock_shared_until(until));
    EXPECT_GE(system_clock::now(), until);
  });
  t.join();
  m.unlock();
  m.lock_shared();
  std::thread t2([&] {
    EXPECT_TRUE(m.try_lock_shared_for(1s));
    m.unlock_shared();
    auto t0 = steady::now();
    EXPECT_FALSE(m.try_lock_for(kShort));
    EXPECT_GE(steady::now() - t0, kShort);
  });
  t2.join();
  m.unlock_shared();
  EXPECT_TRUE(m.try_lock_until(steady::now() + 1s));
  m.unlock();
}

TEST(StdConditionVariable, NotifyOneAndNotifyAll) {
  std::mutex m;
  std::condition_variable cv;
  int stage = 0, woken = 0;
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i)
    ts.emplace_back([&] {
      std::unique_lock l(m);
      cv.wait(l, [&] { return stage == 1; });
      ++woken;
    });
  std::this_thread::sleep_for(10ms);
  {
    std::lock_guard l(m);
    stage = 1;
  }
  cv.notify_all();
  for (auto& t : ts) t.join();
  EXPECT_EQ(woken, 3);

  bool ready = false;
  std::thread one([&] {
    std::unique_lock l(m);
    EXPECT_TRUE(cv.wait_for(l, 10s, [&] { return ready; }));
  });
  std::this_thread::sleep_for(5ms);
  {
    std::lock_guard l(m);
    ready = true;
  }
  cv.notify_one();
  one.join();
}

TEST(StdConditionVariable, WaitForAndWaitUntilTimeOutOnTheirClocks) {
  std::mutex m;
  std::condition_variable cv;
  std::unique_lock l(m);
  auto t0 = steady::now();
  EXPECT_EQ(cv.wait_for(l, kShort), std::cv_status::timeout);  // pthread_cond_clockwait(MONOTONIC)
  EXPECT_GE(steady::now() - t0, kShort);
  EXPECT_TRUE(l.owns_lock());
  auto until = steady::now() + kShort;
  EXPECT_EQ(cv.wait_until(l, until), std::cv_status::timeout);
  EXPECT_GE(steady::now(), until);
  auto until_sys = system_clock::now() + kShort;
  EXPECT_EQ(cv.wait_until(l, until_sys), std::cv_status::timeout);
  EXPECT_GE(system_clock::now(), until_sys);
  EXPECT_FALSE(cv.wait_for(l, 5ms, [] { return false; }));
  // Still held: another thread cannot take it.
  EXPECT_FALSE(from_other_thread([&] { return m.try_lock(); }));
}

TEST(StdConditionVariableAny, WorksWithTimedAndSharedMutexes) {
  std::condition_variable_any cv;
  std::timed_mutex tm;
  {
    std::unique_lock l(tm);
    auto t0 = steady::now();
    EXPECT_EQ(cv.wait_for(l, kShort), std::cv_status::timeout);
    EXPECT_GE(steady::now() - t0, kShort);
    EXPECT_TRUE(l.owns_lock());
  }
  std::shared_mutex sm;
  bool flag = false;
  std::thread t([&] {
    std::unique_lock l(sm);
    EXPECT_TRUE(cv.wait_for(l, 10s, [&] { return flag; }));
  });
  std::this_thread::sleep_for(5ms);
  {
    std::unique_lock l(sm);
    flag = true;
  }
  cv.notify_all();
  t.join();
}

TEST(StdConditionVariableAny, StopTokenInterruptsAWait) {
  std::condition_variable_any cv;
  std::mutex m;
  bool returned = false, pred = false;
  std::jthread t([&](std::stop_token st) {
    std::unique_lock l(m);
    pred = cv.wait(l, st, [] { return false; });
    returned = true;
  });
  std::this_thread::sleep_for(10ms);
  t.request_stop();
  t.join();
  EXPECT_TRUE(returned);
  EXPECT_FALSE(pred);
}

}  // namespace
