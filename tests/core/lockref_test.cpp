// tests/core/lockref_test.cpp — core/lockref.h and core/lockref_rwlock.h
// tested directly (no preload).
//
// Semantics tests check each kernel op, including dead and zero counts, and
// the rwlock's try/timed results and its bits afterwards. Stress tests check
// exact counts and mutual exclusion with plain (non-atomic) data, so the TSan
// build also checks the happens-before edges, with the retry bound at its
// default, at 1 (fallbacks forced) and at 0 (unbounded). Fairness tests use
// generous wall-clock budgets, never tight timing assertions.
#include "core/lockref.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <thread>
#include <vector>

#include "core/lockref_rwlock.h"
#include "tests/core/core_test_util.h"

namespace lockswap {
namespace {

using namespace std::chrono_literals;
using namespace coretest;
namespace rw = lockref_rw;

// --- helpers ---------------------------------------------------------------



// Objects are laid over zeroed bytes, as preload does with static initializers.
template <class T>
struct Zeroed {
  alignas(8) unsigned char bytes[sizeof(T)] = {};
  T& get() { return *reinterpret_cast<T*>(bytes); }
  // White-box access to the one word (both classes are standard layout with
  // a single std::atomic<uint64_t> member).
  std::atomic<uint64_t>& word() { return *reinterpret_cast<std::atomic<uint64_t>*>(bytes); }
};

// Sets the retry bound for one test and restores it.
struct Retries {
  explicit Retries(uint32_t n) : saved(g_lockref_tunables.retries) { g_lockref_tunables.retries = n; }
  ~Retries() { g_lockref_tunables.retries = saved; }
  uint32_t saved;
};

uint64_t total(LockEvent e) { return lockevent_total(e); }

// Runs body(t) on `n` threads released together, so that they contend.
template <class Body>
void run_together(int n, Body body) {
  std::atomic<int> ready{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < n; ++t)
    ts.emplace_back([&, t] {
      ready.fetch_add(1);
      while (ready.load() < n) std::this_thread::yield();
      body(t);
    });
  for (auto& t : ts) t.join();
}

// Repeats `round` until `pred` holds, for at most `limit` of wall-clock time.
template <class Round, class Pred>
bool repeat_until(Round round, Pred pred, std::chrono::milliseconds limit = 5000ms) {
  auto end = std::chrono::steady_clock::now() + limit;
  do {
    round();
    if (pred()) return true;
  } while (std::chrono::steady_clock::now() < end);
  return false;
}

constexpr int kIters = kUnderTsan ? 40000 : 400000;

// --- Lockref: the kernel ops -------------------------------------------------

TEST(Lockref, ZeroFilledIsUnlockedWithCountZero) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  EXPECT_EQ(l.count(), 0);
  EXPECT_FALSE(l.is_locked());
  EXPECT_FALSE(l.is_dead());
  EXPECT_FALSE(l.get_not_zero());  // 0 is "unused": no resurrection
  EXPECT_EQ(l.put_return(), -1);   // count <= 0: no change
  EXPECT_EQ(l.count(), 0);
  EXPECT_TRUE(l.get_not_dead());   // 0 is not dead
  EXPECT_EQ(l.count(), 1);
}

TEST(Lockref, GetAndPutReturn) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  l.init();
  EXPECT_EQ(l.count(), 1);
  l.get();
  l.get();
  EXPECT_EQ(l.count(), 3);
  EXPECT_TRUE(l.get_not_zero());
  EXPECT_EQ(l.put_return(), 3);
  EXPECT_EQ(l.put_return(), 2);
  EXPECT_EQ(l.put_return(), 1);
  EXPECT_EQ(l.put_return(), 0);
  EXPECT_EQ(l.put_return(), -1);
  EXPECT_EQ(l.count(), 0);
  EXPECT_EQ(z.word().load(), 0u);
}

// The count is a signed 32-bit half: crossing -1 -> 0 must not carry into
// the lock half.
TEST(Lockref, NegativeCountsNeverTouchTheLockHalf) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  l.init(-2);
  EXPECT_EQ(l.count(), -2);
  EXPECT_TRUE(l.is_dead());
  l.get();
  l.get();
  EXPECT_EQ(l.count(), 0);
  EXPECT_FALSE(l.is_locked());
  EXPECT_EQ(z.word().load(), 0u);
  l.lock();
  l.mark_dead();
  EXPECT_EQ(l.count(), Lockref::kDead);
  EXPECT_TRUE(l.is_locked());
  l.unlock();
  EXPECT_FALSE(l.is_locked());
  EXPECT_EQ(z.word().load(), static_cast<uint32_t>(Lockref::kDead));
}

TEST(Lockref, DeadRefusesGetNotZeroAndGetNotDead) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  l.init(5);
  l.lock();
  l.mark_dead();
  EXPECT_TRUE(l.is_dead());
  l.unlock();
  EXPECT_FALSE(l.get_not_zero());
  EXPECT_FALSE(l.get_not_dead());
  EXPECT_EQ(l.put_return(), -1);
  EXPECT_EQ(l.count(), Lockref::kDead);
}

TEST(Lockref, PutReturnIsMinusOneWhileLocked) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  l.init(3);
  l.lock();
  EXPECT_EQ(l.put_return(), -1);
  EXPECT_EQ(l.count(), 3);
  l.unlock();
  EXPECT_EQ(l.put_return(), 2);
}

TEST(Lockref, PutOrLockReturnsFalseWithTheLockHeld) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  l.init(3);
  EXPECT_TRUE(l.put_or_lock());
  EXPECT_FALSE(l.is_locked());
  EXPECT_TRUE(l.put_or_lock());
  EXPECT_EQ(l.count(), 1);
  EXPECT_FALSE(l.put_or_lock());  // count <= 1: untouched, lock held
  EXPECT_TRUE(l.is_locked());
  EXPECT_EQ(l.count(), 1);
  l.unlock();
  // Put on a held lock: the lock-free path is unavailable, the fallback waits
  // for the lock and then decides under it.
  l.get();
  l.get();  // 3
  l.lock();
  std::atomic<bool> done{false};
  std::thread t([&] {
    EXPECT_TRUE(l.put_or_lock());
    done = true;
  });
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(done);  // it cannot finish while we hold the lock
  EXPECT_EQ(l.count(), 3);
  l.unlock();
  t.join();
  EXPECT_EQ(l.count(), 2);
  EXPECT_FALSE(l.is_locked());
}

TEST(Lockref, PutOrLockOnZeroAndDeadLocks) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  EXPECT_FALSE(l.put_or_lock());
  EXPECT_TRUE(l.is_locked());
  l.mark_dead();
  l.unlock();
  EXPECT_FALSE(l.put_or_lock());
  EXPECT_EQ(l.count(), Lockref::kDead);
  l.unlock();
}

TEST(Lockref, FallbacksWaitForTheLockHolder) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  l.init(1);
  l.lock();
  std::atomic<int> done{0};
  std::thread a([&] { l.get(); ++done; });
  std::thread b([&] { EXPECT_TRUE(l.get_not_zero()); ++done; });
  std::thread c([&] { EXPECT_TRUE(l.get_not_dead()); ++done; });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(done.load(), 0);
  EXPECT_EQ(l.count(), 1);  // stable under the lock
  l.unlock();
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(l.count(), 4);
  EXPECT_FALSE(l.is_locked());
}

// --- Lockref: the sleeping lock half ----------------------------------------

TEST(Lockref, LockSleepsAndEveryWaiterIsWoken) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  uint64_t sleeps = total(LockEvent::lockref_lock_sleep);
  l.lock();
  std::atomic<int> done{0};
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i)
    ts.emplace_back([&] {
      l.lock();
      ++done;
      l.unlock();
    });
  // Bounded spin, then a futex sleep: the event shows they went to sleep.
  EXPECT_TRUE(eventually([&] { return total(LockEvent::lockref_lock_sleep) >= sleeps + 3; }));
  EXPECT_NE(z.word().load() & lockref::kLockSleepers, 0u);
  EXPECT_EQ(done.load(), 0);
  l.unlock();
  for (auto& t : ts) t.join();
  EXPECT_EQ(done.load(), 3);
  EXPECT_EQ(z.word().load(), 0u);  // the last unlock cleared kLockSleepers
}

TEST(Lockref, LockHalfIsAMutexAndKeepsTheCountStable) {
  Zeroed<Lockref> z;
  Lockref& l = z.get();
  l.init(1);
  long counter = 0;
  std::atomic<bool> unstable{false};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int i = 0; i < kIters / 4; ++i) {
        if (t < 2) {
          l.lock();
          ++counter;
          int32_t c = l.count();
          for (int k = 0; k < 20; ++k) arch::cpu_relax();
          if (l.count() != c) unstable = true;
          l.unlock();
        } else {
          l.get();
          if (l.put_return() < 0) {
            ASSERT_TRUE(l.put_or_lock());  // count >= 2: never keeps the lock
          }
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_FALSE(unstable);
  EXPECT_EQ(counter, 2 * (kIters / 4));
  EXPECT_EQ(l.count(), 1);
  EXPECT_FALSE(l.is_locked());
}

// --- Lockref: concurrency and the retry bound --------------------------------

// Gets and puts from many threads: exact final count, whatever path each took.
void get_put_storm(Lockref& l, int threads, int iters) {
  run_together(threads, [&](int t) {
      for (int i = 0; i < iters; ++i) {
        switch ((i + t) % 4) {
          case 0: l.get(); break;
          case 1: ASSERT_TRUE(l.get_not_zero()); break;
          case 2: ASSERT_TRUE(l.get_not_dead()); break;
          case 3: l.get(); break;
        }
        if (i % 2 == 0) {
          ASSERT_TRUE(l.put_or_lock());  // count >= 2 here: never takes the lock for good
        } else if (l.put_return() < 0) {
          ASSERT_TRUE(l.put_or_lock());  // no fallback in put_return: the caller's job
        }
      }
  });
}

TEST(Lockref, ManyThreadsGetAndPutToAnExactCount) {
  Zeroed<Lockref> z;
  z.get().init(1);
  get_put_storm(z.get(), 4, kIters);
  EXPECT_EQ(z.get().count(), 1);
  EXPECT_FALSE(z.get().is_locked());
}

TEST(Lockref, RetriesOneForcesFallbacksUnderContention) {
  Retries r(1);
  Zeroed<Lockref> z;
  z.get().init(1);
  uint64_t fallbacks = total(LockEvent::lockref_fallback);
  uint64_t fails = total(LockEvent::lockref_cas_fail);
  // Contention is likely but not certain on a loaded machine: repeat a while.
  EXPECT_TRUE(repeat_until([&] { get_put_storm(z.get(), 4, kIters); },
                           [&] { return total(LockEvent::lockref_fallback) > fallbacks; }));
  EXPECT_EQ(z.get().count(), 1);
  EXPECT_GT(total(LockEvent::lockref_cas_fail), fails);
  EXPECT_FALSE(z.get().is_locked());
}

TEST(Lockref, RetriesZeroIsUnboundedAndNeverFallsBack) {
  Retries r(0);
  Zeroed<Lockref> z;
  z.get().init(1);
  uint64_t fallbacks = total(LockEvent::lockref_fallback);
  get_put_storm(z.get(), 4, kIters);
  EXPECT_EQ(z.get().count(), 1);
  EXPECT_EQ(total(LockEvent::lockref_fallback), fallbacks);
}

// --- LockrefRwlock: semantics -------------------------------------------------

TEST(LockrefRwlock, ZeroFilledReadersShareWritersExclude) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  EXPECT_EQ(l.readers(), 0u);
  EXPECT_FALSE(l.write_locked());
  ASSERT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
  ASSERT_EQ(l.read_lock(WaitCtx::try_once(), false, false), 0);
  EXPECT_EQ(l.readers(), 2u);
  EXPECT_FALSE(l.write_locked());
  EXPECT_EQ(l.write_lock(WaitCtx::try_once()), EBUSY);
  EXPECT_EQ(l.raw(), 2u) << "a failed trylock leaves no bit behind";
  l.read_unlock();
  l.read_unlock();
  ASSERT_EQ(l.write_lock(WaitCtx::try_once()), 0);
  EXPECT_TRUE(l.write_locked());
  EXPECT_EQ(l.read_lock(WaitCtx::try_once(), false, false), EBUSY);
  EXPECT_EQ(l.read_lock(WaitCtx::try_once(), true, false), EBUSY) << "no readers inside: no recursion";
  EXPECT_EQ(l.write_lock(WaitCtx::try_once()), EBUSY);
  l.write_unlock(false);
  EXPECT_EQ(l.raw(), 0u);
}

TEST(LockrefRwlock, TimedWriterTimesOutWhileReadersStayAndLeavesAConsistentWord) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  ASSERT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
  std::thread w([&] {
    timespec t = monotonic_in(50ms);
    EXPECT_EQ(l.write_lock(WaitCtx::until(CLOCK_MONOTONIC, &t)), ETIMEDOUT);
    timespec past{-1, 0};
    EXPECT_EQ(l.write_lock(WaitCtx::until(CLOCK_MONOTONIC, &past)), ETIMEDOUT);
  });
  w.join();
  EXPECT_EQ(l.raw() & (rw::kWriter | rw::kDrainer | rw::kReaderLock), 0u);
  EXPECT_EQ(l.readers(), 1u);
  ASSERT_EQ(l.read_lock(WaitCtx::try_once(), false, false), 0);
  l.read_unlock();
  l.read_unlock();
  ASSERT_EQ(l.write_lock(WaitCtx::try_once()), 0);
  l.write_unlock(false);
  EXPECT_EQ(l.raw(), 0u);
}

TEST(LockrefRwlock, TimedReaderTimesOutBehindAWriter) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  ASSERT_EQ(l.write_lock(WaitCtx::blocking()), 0);
  std::thread r([&] {
    timespec t = monotonic_in(50ms);
    EXPECT_EQ(l.read_lock(WaitCtx::until(CLOCK_MONOTONIC, &t), false, false), ETIMEDOUT);
    timespec past{-1, 0};
    EXPECT_EQ(l.read_lock(WaitCtx::until(CLOCK_REALTIME, &past), false, false), ETIMEDOUT);
    EXPECT_EQ(l.read_lock(WaitCtx::try_once(), false, true), EBUSY);
  });
  r.join();
  EXPECT_TRUE(l.write_locked());
  EXPECT_EQ(l.readers(), 0u);
  l.write_unlock(false);
  // A reader that timed out may have left kReaderSleepers (-> a read turn): harmless.
  ASSERT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
  EXPECT_EQ(l.raw() & rw::kReadTurn, 0u) << "the entering reader took the turn";
  l.read_unlock();
  EXPECT_EQ(l.raw(), 0u);
}

TEST(LockrefRwlock, ExpiredDeadlineStillTakesAFreeLock) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  timespec past{-1, 0};
  ASSERT_EQ(l.write_lock(WaitCtx::until(CLOCK_REALTIME, &past)), 0);
  l.write_unlock(false);
  ASSERT_EQ(l.read_lock(WaitCtx::until(CLOCK_REALTIME, &past), false, true), 0);
  l.read_unlock();
}

// A blocked writer sleeps, and the write unlock wakes it.
TEST(LockrefRwlock, WriterSleepsBehindWriterAndIsWoken) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  ASSERT_EQ(l.write_lock(WaitCtx::blocking()), 0);
  std::atomic<bool> got{false};
  std::thread w([&] {
    ASSERT_EQ(l.write_lock(WaitCtx::blocking()), 0);
    got = true;
    l.write_unlock(false);
  });
  EXPECT_TRUE(eventually([&] { return (l.raw() & rw::kWriterSleepers) != 0; }));
  EXPECT_FALSE(got);
  l.write_unlock(false);
  w.join();
  EXPECT_TRUE(got);
  EXPECT_EQ(l.raw(), 0u);
}

// A writer draining readers sleeps on the count half; the last reader out wakes it.
TEST(LockrefRwlock, DrainingWriterSleepsUntilTheLastReaderLeaves) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  ASSERT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
  ASSERT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
  std::atomic<bool> got{false};
  std::thread w([&] {
    ASSERT_EQ(l.write_lock(WaitCtx::blocking()), 0);
    got = true;
    l.write_unlock(false);
  });
  EXPECT_TRUE(eventually([&] { return (l.raw() & rw::kDrainer) != 0; }));
  EXPECT_FALSE(l.write_locked()) << "a draining writer does not hold the lock for writing yet";
  EXPECT_EQ(l.read_lock(WaitCtx::try_once(), false, false), EBUSY) << "new readers wait behind it";
  l.read_unlock();
  std::this_thread::sleep_for(10ms);
  EXPECT_FALSE(got);
  l.read_unlock();
  w.join();
  EXPECT_TRUE(got);
  EXPECT_EQ(l.raw(), 0u);
}

// A thread that holds a read lock re-enters past a draining writer instead
// of deadlocking with it.
TEST(LockrefRwlock, RecursiveReadPastADrainingWriterDoesNotDeadlock) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  ASSERT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
  uint64_t rec = total(LockEvent::lockref_rlock_recursive);
  std::thread w([&] {
    ASSERT_EQ(l.write_lock(WaitCtx::blocking()), 0);
    EXPECT_EQ(l.readers(), 0u);
    l.write_unlock(false);
  });
  ASSERT_TRUE(eventually([&] { return (l.raw() & rw::kWriter) != 0; }));
  ASSERT_EQ(l.read_lock(WaitCtx::blocking(), true, false), 0);
  ASSERT_EQ(l.read_lock(WaitCtx::try_once(), true, false), 0);
  EXPECT_EQ(l.readers(), 3u);
  EXPECT_GE(total(LockEvent::lockref_rlock_recursive), rec + 2);
  EXPECT_FALSE(l.write_locked()) << "our unlock must be a read unlock";
  l.read_unlock();
  l.read_unlock();
  l.read_unlock();
  w.join();
  EXPECT_EQ(l.raw(), 0u);
}

TEST(LockrefRwlock, TooManyReadersIsEagain) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  z.word().store(rw::kMaxReaders);
  EXPECT_EQ(l.read_lock(WaitCtx::blocking(), false, false), EAGAIN);
  EXPECT_EQ(l.read_lock(WaitCtx::try_once(), true, false), EAGAIN);
  {
    Retries r(1);  // through the fallback as well
    EXPECT_EQ(l.read_lock(WaitCtx::blocking(), false, true), EAGAIN);
  }
  EXPECT_EQ(l.readers(), rw::kMaxReaders);
  z.word().store(rw::kMaxReaders - 1);
  EXPECT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
  EXPECT_EQ(l.readers(), rw::kMaxReaders);
  z.word().store(0);
}

// --- LockrefRwlock: the inline read path and what it leaves to the slow one ---

using FastRead = LockrefRwlock::FastRead;

// The inline attempt counts against the retry bound: after its CAS failed,
// a bound of 1 is spent (straight to the fallback), a bound of 2 leaves one
// lock-free attempt, 0 stays unbounded.
TEST(LockrefRwlock, FailedInlineAttemptSpendsOneRetry) {
  if (!kEvents) GTEST_SKIP() << "told apart by the event counts";
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  ASSERT_EQ(l.read_fast(false), FastRead::entered);  // this thread has its slot from here on
  l.read_unlock();
  struct Case {
    uint32_t retries;
    FastRead miss;
    bool falls_back;
  };
  for (Case c : {Case{1, FastRead::cas_failed, true}, Case{2, FastRead::cas_failed, false},
                 Case{0, FastRead::cas_failed, false}, Case{1, FastRead::not_tried, false}}) {
    Retries r(c.retries);
    uint64_t fallbacks = total(LockEvent::lockref_fallback), lockless = total(LockEvent::lockref_lockless);
    ASSERT_EQ(l.read_lock_slow(WaitCtx::blocking(), false, false, c.miss), 0);
    EXPECT_EQ(total(LockEvent::lockref_fallback) - fallbacks, c.falls_back ? 1u : 0u) << "retries " << c.retries;
    EXPECT_EQ(total(LockEvent::lockref_lockless) - lockless, c.falls_back ? 0u : 1u) << "retries " << c.retries;
    EXPECT_EQ(l.raw(), 1u);
    l.read_unlock();
  }
  EXPECT_EQ(l.raw(), 0u);
}

// Counts from kFastReadersLimit up, a read turn to claim and (writer-
// preferring kind) sleeping writers are left to the slow path, which still
// enters where the rules allow it.
TEST(LockrefRwlock, InlineReadLeavesRareStatesToTheSlowPath) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  const uint64_t limit = rw::kFastReadersLimit;
  z.word().store(limit - 1);
  EXPECT_EQ(l.read_fast(false), FastRead::entered);
  EXPECT_EQ(l.read_fast(false), FastRead::not_tried);
  EXPECT_EQ(l.raw(), limit);
  EXPECT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
  EXPECT_EQ(l.raw(), limit + 1);

  z.word().store(rw::kReadTurn | rw::kWriterSleepers);
  EXPECT_EQ(l.read_fast(false), FastRead::not_tried);
  EXPECT_EQ(l.raw(), rw::kReadTurn | rw::kWriterSleepers);
  EXPECT_EQ(l.read_lock(WaitCtx::try_once(), false, false), 0);
  EXPECT_EQ(l.raw(), 1u) << "the reader took the turn: writers may go";

  z.word().store(rw::kWriterSleepers);
  EXPECT_EQ(l.read_fast(true), FastRead::not_tried);
  EXPECT_EQ(l.read_lock(WaitCtx::try_once(), false, true), EBUSY);
  EXPECT_EQ(l.read_fast(false), FastRead::entered) << "the default kind ignores sleeping writers";
  EXPECT_EQ(l.raw(), rw::kWriterSleepers | 1);

  z.word().store(rw::kWriter);
  EXPECT_EQ(l.read_fast(false), FastRead::not_tried);
  EXPECT_EQ(l.raw(), rw::kWriter);
  z.word().store(0);
}

// A thread's first lock call has no slot to count the event in: the inline
// path declines and the slow path attaches the thread and enters.
TEST(LockrefRwlock, FirstReadOfAThreadTakesTheSlowPath) {
  if (!kEvents) GTEST_SKIP() << "the inline path checks the slot only to count its event";
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  std::thread([&] {
    ASSERT_EQ(t_local.slot, nullptr);
    EXPECT_EQ(l.read_fast(false), FastRead::not_tried);
    EXPECT_EQ(l.raw(), 0u);
    EXPECT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
    EXPECT_NE(t_local.slot, nullptr);
    EXPECT_EQ(l.read_fast(false), FastRead::entered);
    l.read_unlock();
    l.read_unlock();
  }).join();
  EXPECT_EQ(l.raw(), 0u);
}

// The put asks for the drainer's wake exactly when it was the last reader
// out with a writer asleep draining; write_locked() means drained.
TEST(LockrefRwlock, InlineUnlockAndWriteLockedReadTheWordExactly) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  z.word().store(rw::kWriter | rw::kDrainer | 2);
  EXPECT_FALSE(l.write_locked());
  EXPECT_TRUE(l.read_unlock_fast());
  EXPECT_FALSE(l.read_unlock_fast()) << "last reader out, drainer asleep";
  EXPECT_TRUE(l.write_locked());
  z.word().store(rw::kWriter | 1);
  EXPECT_TRUE(l.read_unlock_fast()) << "no drainer asleep: nobody to wake";
  z.word().store(rw::kDrainer | rw::kFastReadersLimit | 1);
  EXPECT_TRUE(l.read_unlock_fast());
  EXPECT_FALSE(l.write_locked());
  z.word().store(0);
}

// White box: the writer-preferring kind treats sleeping writers as a gate,
// except during a read turn; the reader that takes the turn clears it.
TEST(LockrefRwlock, WriterPreferringReadersWaitBehindSleepingWriters) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  z.word().store(rw::kWriterSleepers);
  EXPECT_EQ(l.read_lock(WaitCtx::try_once(), false, true), EBUSY);
  timespec t = monotonic_in(20ms);
  EXPECT_EQ(l.read_lock(WaitCtx::until(CLOCK_MONOTONIC, &t), false, true), ETIMEDOUT);
  EXPECT_EQ(l.read_lock(WaitCtx::try_once(), false, false), 0) << "the default kind ignores sleeping writers";
  l.read_unlock();

  z.word().store(rw::kWriterSleepers | rw::kReadTurn);
  EXPECT_EQ(l.read_lock(WaitCtx::try_once(), false, true), 0) << "a read turn overrides writer preference";
  EXPECT_EQ(l.raw(), 1u) << "the entering reader ended the turn and woke the writers";
  l.read_unlock();
  EXPECT_EQ(l.raw(), 0u);
}

// End to end: a write unlock that finds readers and writers asleep gives the
// readers the next turn, except for the writer-preferring kind. (Who wins the
// race after the wake-all is not specified; both get in.) The event is read
// from this thread's own counter, so the other threads' unlocks don't count.
void unlock_with_readers_and_writers_asleep(bool wp, uint64_t expected_turns) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  ASSERT_EQ(l.write_lock(WaitCtx::blocking()), 0);
  std::thread w([&] {
    ASSERT_EQ(l.write_lock(WaitCtx::blocking()), 0);
    l.write_unlock(wp);
  });
  EXPECT_TRUE(eventually([&] { return (l.raw() & rw::kWriterSleepers) != 0; }));
  std::thread r([&] {
    ASSERT_EQ(l.read_lock(WaitCtx::blocking(), false, wp), 0);
    l.read_unlock();
  });
  EXPECT_TRUE(eventually([&] { return (l.raw() & rw::kReaderSleepers) != 0; }));
  auto& mine = self_slot().events[static_cast<uint32_t>(LockEvent::lockref_read_turn)];
  uint64_t before = mine.load();
  l.write_unlock(wp);
  EXPECT_EQ(mine.load() - before, expected_turns);
  w.join();
  r.join();
  EXPECT_EQ(l.raw() & ~rw::kReadTurn, 0u);
}

TEST(LockrefRwlock, UnlockWithReadersAsleepGivesThemTheNextTurn) { unlock_with_readers_and_writers_asleep(false, 1); }

TEST(LockrefRwlock, WriterPreferringUnlockGivesNoReadTurnWhileWritersSleep) {
  unlock_with_readers_and_writers_asleep(true, 0);
}

// White box: a stale read turn (its readers timed out) holds blocking
// writers back only for the bounded wait; trylock ignores it.
TEST(LockrefRwlock, UnclaimedReadTurnExpires) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  z.word().store(rw::kReadTurn);
  ASSERT_EQ(l.write_lock(WaitCtx::try_once()), 0);
  l.write_unlock(false);
  EXPECT_EQ(l.raw(), rw::kReadTurn) << "a trylock does not consume the readers' turn";
  uint64_t expired = total(LockEvent::lockref_read_turn_expired);
  timespec t = monotonic_in(5000ms);
  ASSERT_EQ(l.write_lock(WaitCtx::until(CLOCK_MONOTONIC, &t)), 0);
  EXPECT_EQ(total(LockEvent::lockref_read_turn_expired), expired + 1);
  EXPECT_EQ(l.raw() & rw::kReadTurn, 0u);
  l.write_unlock(false);
  EXPECT_EQ(l.raw(), 0u);
}

// White box: a fallback reader's moment (kReaderLock alone) is not a writer:
// a read trylock waits for it instead of failing.
TEST(LockrefRwlock, ReaderLockAloneMakesATrylockWaitNotFail) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  z.word().store(rw::kReaderLock);
  std::atomic<int> rc{-1};
  std::thread r([&] { rc = l.read_lock(WaitCtx::try_once(), false, false); });
  std::this_thread::sleep_for(20ms);
  EXPECT_EQ(rc.load(), -1);
  // End the moment as the fallback does: clear the bit and the sleeper bits, wake.
  uint64_t old = z.word().fetch_and(~(rw::kReaderLock | rw::kSleepers));
  if (old & rw::kSleepers) arch::futex_wake(lockref::lock_futex(z.word()), arch::futex_wake_all);
  r.join();
  EXPECT_EQ(rc.load(), 0);
  EXPECT_EQ(l.readers(), 1u);
  l.read_unlock();
  // A writer's trylock, on the other hand, reports the moment as busy.
  z.word().store(rw::kReaderLock);
  EXPECT_EQ(l.write_lock(WaitCtx::try_once()), EBUSY);
  z.word().store(0);
}

// --- LockrefRwlock: fairness (generous budgets, no timing assertions) ----------

// Readers overlap continuously, so the count never drains by itself; the
// kWriter gate must still let writers in.
TEST(LockrefRwlock, WriterIsNotStarvedByAStreamOfReaders) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  std::atomic<bool> stop{false};
  std::atomic<long> loops{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 3; ++t)
    readers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        ASSERT_EQ(l.read_lock(WaitCtx::blocking(), false, false), 0);
        for (int k = 0; k < 50; ++k) arch::cpu_relax();
        l.read_unlock();
        loops.fetch_add(1, std::memory_order_relaxed);
      }
    });
  EXPECT_TRUE(eventually([&] { return loops.load() > 3000; }));  // the stream is flowing
  for (int i = 0; i < 20; ++i) {
    timespec t = monotonic_in(10'000ms);
    ASSERT_EQ(l.write_lock(WaitCtx::until(CLOCK_MONOTONIC, &t)), 0) << "writer starved at round " << i;
    EXPECT_EQ(l.readers(), 0u);
    l.write_unlock(false);
  }
  stop = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(l.readers(), 0u);
}

// Writers hand the lock to each other continuously; kReadTurn must still let
// readers in.
TEST(LockrefRwlock, ReadersAreNotStarvedByAStreamOfWriters) {
  Zeroed<LockrefRwlock> z;
  LockrefRwlock& l = z.get();
  std::atomic<bool> stop{false};
  std::atomic<long> loops{0};
  std::vector<std::thread> writers;
  for (int t = 0; t < 3; ++t)
    writers.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
        ASSERT_EQ(l.write_lock(WaitCtx::blocking()), 0);
        for (int k = 0; k < 50; ++k) arch::cpu_relax();
        l.write_unlock(false);
        loops.fetch_add(1, std::memory_order_relaxed);
      }
    });
  EXPECT_TRUE(eventually([&] { return loops.load() > 3000; }));  // the stream is flowing
  for (int i = 0; i < 20; ++i) {
    timespec t = monotonic_in(10'000ms);
    ASSERT_EQ(l.read_lock(WaitCtx::until(CLOCK_MONOTONIC, &t), false, false), 0) << "reader starved at round " << i;
    EXPECT_FALSE(l.write_locked());
    l.read_unlock();
  }
  stop = true;
  for (auto& t : writers) t.join();
  EXPECT_EQ(l.raw() & ~(rw::kReadTurn | rw::kSleepers), 0u);
}

// --- LockrefRwlock: stress -------------------------------------------------------

struct StressShape {
  int threads;
  int iters;
  int write_every;       // 1 in write_every operations writes
  bool writer_preferring;
};

void rw_stress(LockrefRwlock& l, StressShape s) {
  long a = 0, b = 0;  // plain data: TSan checks the happens-before edges
  std::atomic<int> inside_readers{0}, inside_writers{0};
  std::atomic<bool> broken{false};
  std::atomic<long> writes{0};
  run_together(s.threads, [&](int t) {
      unsigned rng = 12345u + 7919u * t;
      for (int i = 0; i < s.iters; ++i) {
        rng = rng * 1103515245u + 12345u;
        unsigned mode = (rng >> 16) % 3;  // blocking, try, timed
        WaitCtx ctx = WaitCtx::blocking();
        timespec dl;
        if (mode == 1) ctx = WaitCtx::try_once();
        if (mode == 2) {
          dl = monotonic_in(1ms);
          ctx = WaitCtx::until(CLOCK_MONOTONIC, &dl);
        }
        if ((rng >> 8) % s.write_every == 0) {
          int rc = l.write_lock(ctx);
          if (rc != 0) {
            if (rc != EBUSY && rc != ETIMEDOUT) broken = true;
            continue;
          }
          if (inside_writers.fetch_add(1) != 0 || inside_readers.load() != 0) broken = true;
          if (!l.write_locked()) broken = true;
          ++a;
          if ((rng >> 4) % 64 == 0) std::this_thread::yield();  // others pile up behind us
          ++b;
          inside_writers.fetch_sub(1);
          ++writes;
          l.write_unlock(s.writer_preferring);
        } else {
          int rc = l.read_lock(ctx, false, s.writer_preferring);
          if (rc != 0) {
            if (rc != EBUSY && rc != ETIMEDOUT) broken = true;
            continue;
          }
          inside_readers.fetch_add(1);
          if ((rng >> 4) % 64 == 0) std::this_thread::yield();  // a writer starts draining us
          if (inside_writers.load() != 0 || a != b || l.write_locked()) broken = true;
          inside_readers.fetch_sub(1);
          l.read_unlock();
        }
      }
  });
  EXPECT_FALSE(broken);
  EXPECT_EQ(a, writes.load());
  EXPECT_EQ(b, writes.load());
  EXPECT_EQ(l.readers(), 0u);
  EXPECT_FALSE(l.write_locked());
  EXPECT_EQ(l.raw() & (rw::kWriter | rw::kDrainer | rw::kReaderLock), 0u);
}

TEST(LockrefRwlock, StressMixedDefaultRetries) {
  Zeroed<LockrefRwlock> z;
  rw_stress(z.get(), {4, kIters / 4, 4, false});
}

TEST(LockrefRwlock, StressMixedWriterPreferring) {
  Zeroed<LockrefRwlock> z;
  rw_stress(z.get(), {4, kIters / 4, 4, true});
}

TEST(LockrefRwlock, StressRetriesOneForcesReaderFallbacks) {
  Retries r(1);
  Zeroed<LockrefRwlock> z;
  uint64_t fallbacks = total(LockEvent::lockref_fallback);
  rw_stress(z.get(), {4, kIters / 4, 16, false});
  // Readers alone churn the count fastest: a failed CAS (a racing get or put)
  // sends the reader to the kReaderLock fallback at once.
  auto readers_only = [&] {
    run_together(4, [&](int) {
      for (int i = 0; i < kIters / 4; ++i) {
        ASSERT_EQ(z.get().read_lock(WaitCtx::blocking(), false, false), 0);
        z.get().read_unlock();
      }
    });
  };
  EXPECT_TRUE(repeat_until(readers_only, [&] { return total(LockEvent::lockref_fallback) > fallbacks; }, 10'000ms));
  EXPECT_EQ(z.get().raw(), 0u);
}

TEST(LockrefRwlock, StressRetriesZero) {
  Retries r(0);
  Zeroed<LockrefRwlock> z;
  rw_stress(z.get(), {4, kIters / 4, 8, false});
}

TEST(LockrefRwlock, StressWritersOnly) {
  Zeroed<LockrefRwlock> z;
  rw_stress(z.get(), {4, kIters / 4, 1, false});
}

}  // namespace
}  // namespace lockswap
