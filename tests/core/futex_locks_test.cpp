// Direct tests of the reference futex mutex, rwlock and the condvar (no preload).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "core/cond.h"
#include "core/futex_mutex.h"
#include "core/futex_rwlock.h"

using namespace lockswap;
using namespace std::chrono_literals;

namespace {

timespec deadline_in(std::chrono::milliseconds ms, clockid_t clock = CLOCK_MONOTONIC) {
  timespec t;
  clock_gettime(clock, &t);
  long long ns = t.tv_nsec + std::chrono::nanoseconds(ms).count();
  t.tv_sec += ns / 1'000'000'000;
  t.tv_nsec = ns % 1'000'000'000;
  return t;
}

// Objects are laid over zeroed bytes, as preload does with static initializers.
template <class T>
struct Zeroed {
  alignas(8) unsigned char bytes[sizeof(T)] = {};
  T& get() { return *reinterpret_cast<T*>(bytes); }
};

TEST(FutexMutex, ZeroIsUnlockedAndTryLockReportsBusy) {
  Zeroed<FutexMutex> m;
  EXPECT_FALSE(m.get().is_locked());
  EXPECT_TRUE(m.get().try_lock());
  EXPECT_EQ(m.get().lock(WaitCtx::try_once()), EBUSY);
  m.get().unlock();
  EXPECT_FALSE(m.get().is_locked());
}

TEST(FutexMutex, CountersStayExactUnderContention) {
  Zeroed<FutexMutex> m;
  long counter = 0;
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 20000; ++i) {
        ASSERT_EQ(m.get().lock(WaitCtx::blocking(), t % 2 == 0), 0);
        ++counter;
        m.get().unlock();
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(counter, 8 * 20000);
}

TEST(FutexMutex, TimedLockTimesOutThenLockStillWorks) {
  Zeroed<FutexMutex> m;
  ASSERT_TRUE(m.get().try_lock());
  std::thread other([&] {
    timespec t = deadline_in(50ms);
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(m.get().lock(WaitCtx::until(CLOCK_MONOTONIC, &t)), ETIMEDOUT);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 45ms);
  });
  other.join();
  m.get().unlock();
  EXPECT_EQ(m.get().lock(WaitCtx::blocking()), 0);
  m.get().unlock();
}

TEST(FutexRwlock, ReadersShareWritersExclude) {
  Zeroed<FutexRwlock> l;
  ASSERT_EQ(l.get().read_lock(WaitCtx::blocking(), false), 0);
  ASSERT_EQ(l.get().read_lock(WaitCtx::try_once(), false), 0);
  EXPECT_EQ(l.get().readers(), 2u);
  EXPECT_EQ(l.get().write_lock(WaitCtx::try_once()), EBUSY);
  l.get().unlock();
  l.get().unlock();
  ASSERT_EQ(l.get().write_lock(WaitCtx::try_once()), 0);
  EXPECT_TRUE(l.get().write_locked());
  EXPECT_EQ(l.get().read_lock(WaitCtx::try_once(), false), EBUSY);
  l.get().unlock();
}

// Reader-preferring: a reader gets in while a writer waits (recursive reads
// can never deadlock); writer-preferring: a new reader waits behind it.
TEST(FutexRwlock, WaitingWriterBlocksNewReadersOnlyWhenWriterPreferring) {
  Zeroed<FutexRwlock> l;
  ASSERT_EQ(l.get().read_lock(WaitCtx::blocking(), false), 0);
  std::atomic<bool> writer_done{false};
  std::thread writer([&] {
    timespec t = deadline_in(2000ms);
    EXPECT_EQ(l.get().write_lock(WaitCtx::until(CLOCK_MONOTONIC, &t)), 0);
    l.get().unlock();
    writer_done = true;
  });
  while (l.get().write_lock(WaitCtx::try_once()) != EBUSY) {}
  std::this_thread::sleep_for(30ms);  // let the writer queue
  EXPECT_EQ(l.get().read_lock(WaitCtx::try_once(), false), 0);  // recursion-safe kind
  l.get().unlock();
  EXPECT_EQ(l.get().read_lock(WaitCtx::try_once(), true), EBUSY);  // nonrecursive kind
  l.get().unlock();
  writer.join();
  EXPECT_TRUE(writer_done);
  EXPECT_EQ(l.get().readers(), 0u);
}

TEST(FutexRwlock, InvariantHoldsWithMixedReadersAndWriters) {
  Zeroed<FutexRwlock> l;
  long a = 0, b = 0;
  std::atomic<bool> broken{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < 8; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < 5000; ++i) {
        if ((i + t) % 3 == 0) {
          l.get().write_lock(WaitCtx::blocking());
          ++a;
          ++b;
          l.get().unlock();
        } else {
          l.get().read_lock(WaitCtx::blocking(), t % 2 == 0);
          if (a != b) broken = true;
          l.get().unlock();
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_FALSE(broken);
  EXPECT_EQ(a, b);
}

struct CondFixture : ::testing::Test {
  Zeroed<FutexMutex> m;
  Zeroed<Cond> cv;
  int wait(const WaitCtx& ctx) {
    return cv.get().wait([&] { m.get().unlock(); return 0; },
                         [&] { return m.get().lock(WaitCtx::blocking()); }, ctx);
  }
};

TEST_F(CondFixture, SignalWakesAWaiterAndNoWakeupIsLost) {
  int items = 0, consumed = 0;
  constexpr int kItems = 20000;
  std::thread consumer([&] {
    m.get().lock(WaitCtx::blocking());
    while (consumed < kItems) {
      while (items == 0) wait(WaitCtx::blocking());
      consumed += items;
      items = 0;
    }
    m.get().unlock();
  });
  for (int i = 0; i < kItems; ++i) {
    m.get().lock(WaitCtx::blocking());
    ++items;
    cv.get().signal();
    m.get().unlock();
  }
  consumer.join();
  EXPECT_EQ(consumed, kItems);
}

TEST_F(CondFixture, TimedWaitReturnsTimedOutWithMutexHeld) {
  cv.get().init(true, false);
  m.get().lock(WaitCtx::blocking());
  timespec t = deadline_in(40ms);
  EXPECT_EQ(wait(WaitCtx::until(cv.get().clock(), &t)), ETIMEDOUT);
  EXPECT_TRUE(m.get().is_locked());
  m.get().unlock();
}

TEST_F(CondFixture, BroadcastThenDestroyWaitsForLeavingWaiters) {
  for (int round = 0; round < 50; ++round) {
    auto* cond = new Cond;
    memset(static_cast<void*>(cond), 0, sizeof *cond);
    std::atomic<int> waiting{0};
    bool go = false;
    std::vector<std::thread> ts;
    for (int i = 0; i < 4; ++i)
      ts.emplace_back([&] {
        m.get().lock(WaitCtx::blocking());
        ++waiting;
        while (!go)
          cond->wait([&] { m.get().unlock(); return 0; }, [&] { return m.get().lock(WaitCtx::blocking()); },
                     WaitCtx::blocking());
        m.get().unlock();
      });
    while (waiting < 4) std::this_thread::yield();
    m.get().lock(WaitCtx::blocking());
    go = true;
    cond->broadcast();
    cond->destroy();  // must wait for every waiter to leave the object
    memset(static_cast<void*>(cond), 0xab, sizeof *cond);
    delete cond;
    m.get().unlock();
    for (auto& t : ts) t.join();
  }
}

}  // namespace
