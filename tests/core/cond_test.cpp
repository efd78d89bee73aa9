// Direct tests of core/cond.h's wait loop with a scripted sleeper: a sleep
// that ends without a signal (a handler ran: EINTR) must not end the wait.
#include <gtest/gtest.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <ctime>

#include "core/cond.h"
#include "core/futex_mutex.h"

using namespace lockswap;

namespace {

// Each sleep is "interrupted" (returns at once, seq unchanged) while
// interruptions remain; then, if asked, a signal arrives during the next
// sleep; then it is a real sleep.
struct InterruptedSleeper {
  static inline int interruptions_left = 0;
  static inline int sleeps = 0;
  static inline Cond* signal_after = nullptr;
  static int sleep(const std::atomic<uint32_t>* word, uint32_t expected, const WaitCtx& ctx, bool shared) {
    ++sleeps;
    if (interruptions_left > 0) {
      --interruptions_left;
      return 0;  // what WaitCtx::sleep reports for EINTR
    }
    if (signal_after != nullptr) signal_after->signal();
    return PlainSleeper::sleep(word, expected, ctx, shared);
  }
};

struct CondInterruptFixture : ::testing::Test {
  alignas(Cond) unsigned char cv_bytes[sizeof(Cond)] = {};
  alignas(FutexMutex) unsigned char m_bytes[sizeof(FutexMutex)] = {};
  Cond& cv = *reinterpret_cast<Cond*>(cv_bytes);
  FutexMutex& m = *reinterpret_cast<FutexMutex*>(m_bytes);
  void SetUp() override {
    InterruptedSleeper::interruptions_left = 0;
    InterruptedSleeper::sleeps = 0;
    InterruptedSleeper::signal_after = nullptr;
  }
  int wait(const WaitCtx& ctx) {
    return cv.wait<InterruptedSleeper>([&] { m.unlock(); return 0; },
                                       [&] { return m.lock(WaitCtx::blocking()); }, ctx);
  }
};

TEST_F(CondInterruptFixture, InterruptedSleepsResumeUntilASignalArrives) {
  InterruptedSleeper::interruptions_left = 5;
  InterruptedSleeper::signal_after = &cv;
  m.lock(WaitCtx::blocking());
  EXPECT_EQ(wait(WaitCtx::blocking()), 0);
  EXPECT_EQ(InterruptedSleeper::sleeps, 6) << "every interrupted sleep must sleep again";
  EXPECT_TRUE(m.is_locked());
  m.unlock();
}

TEST_F(CondInterruptFixture, InterruptedTimedWaitKeepsItsDeadline) {
  InterruptedSleeper::interruptions_left = 3;
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  t.tv_nsec += 20'000'000;
  if (t.tv_nsec >= 1'000'000'000) {
    t.tv_nsec -= 1'000'000'000;
    ++t.tv_sec;
  }
  m.lock(WaitCtx::blocking());
  EXPECT_EQ(wait(WaitCtx::until(CLOCK_MONOTONIC, &t)), ETIMEDOUT);
  EXPECT_EQ(InterruptedSleeper::sleeps, 4);
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  EXPECT_TRUE(now.tv_sec > t.tv_sec || (now.tv_sec == t.tv_sec && now.tv_nsec >= t.tv_nsec));
  m.unlock();
}

}  // namespace
