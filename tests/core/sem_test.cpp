// tests/core/sem_test.cpp — core/sem.h tested directly (no preload), for both
// semaphores: the futex reference (FutexSem) and the lockref one (LockrefSem).
//
// Each test lays the semaphore over zero-filled sem_t-sized bytes (or over a
// sem_t that the real glibc initialised: this program is not preloaded), and
// checks results, the value and the waiter registrations afterwards.
#include "core/sem.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <new>
#include <string>
#include <thread>
#include <vector>
#include "preload/abi.h"
#include "tests/core/core_test_util.h"
#include "tests/core/kill_test_util.h"

namespace lockswap {
namespace {

using namespace std::chrono_literals;
using namespace coretest;



constexpr int kUnits = kUnderTsan ? 10000 : 100000;

template <class S>
class SemTest : public ::testing::Test {
 protected:
  SemTest() { std::memset(static_cast<void*>(&storage), 0, sizeof storage); }

  SemWords& w() { return *reinterpret_cast<SemWords*>(&storage); }
  S sem() { return S{w()}; }
  uint64_t word() { return w().data.load(); }

  sem_t storage;
  Restore<LockrefTunables> tunables_{g_lockref_tunables};
};

using Sems = ::testing::Types<FutexSem, LockrefSem>;
constexpr const char* kSemNames[] = {"Futex", "Lockref"};
TYPED_TEST_SUITE(SemTest, Sems, NamesInTypeOrder<kSemNames>);

// --- semantics ---------------------------------------------------------------

TYPED_TEST(SemTest, ZeroFilledIsAnEmptyPrivateSemaphore) {
  auto s = this->sem();
  EXPECT_EQ(s.value(), 0);
  EXPECT_FALSE(s.shared());  // glibc's private field 0 = process-private futexes
  EXPECT_EQ(s.trywait(), EAGAIN);
  EXPECT_EQ(s.wait(WaitCtx::try_once()), EAGAIN);
  EXPECT_EQ(s.post(), 0);
  EXPECT_EQ(s.value(), 1);
  EXPECT_EQ(s.trywait(), 0);
  EXPECT_EQ(s.value(), 0);
  EXPECT_EQ(this->word(), 0u);
}

TYPED_TEST(SemTest, InitSetsTheValueAndTheFutexKind) {
  ASSERT_EQ(TypeParam::init(this->w(), 3, 0), 0);
  EXPECT_EQ(this->w().private_flag, 0);
  auto s = this->sem();
  EXPECT_FALSE(s.shared());
  EXPECT_EQ(s.value(), 3);
  ASSERT_EQ(TypeParam::init(this->w(), 2, abi::kSemSharedFlag), 0);
  EXPECT_EQ(this->w().private_flag, abi::kSemSharedFlag);
  EXPECT_TRUE(s.shared());
  EXPECT_EQ(s.value(), 2);
}

TYPED_TEST(SemTest, PostReportsEoverflowAtTheMaximum) {
  TypeParam::init(this->w(), TypeParam::kValueMax, 0);
  auto s = this->sem();
  EXPECT_EQ(s.post(), EOVERFLOW);
  EXPECT_EQ(s.value(), SEM_VALUE_MAX);
  EXPECT_EQ(s.trywait(), 0);
  EXPECT_EQ(s.post(), 0);
  EXPECT_EQ(s.value(), SEM_VALUE_MAX);
  EXPECT_EQ(this->word(), static_cast<uint64_t>(SEM_VALUE_MAX)) << "no carry into the high half";
}

TYPED_TEST(SemTest, TimedWaitTimesOutAndNegativeSecondsNeverSleep) {
  TypeParam::init(this->w(), 0, 0);
  auto s = this->sem();
  for (clockid_t c : {CLOCK_MONOTONIC, CLOCK_REALTIME}) {
    timespec t = clock_in(c, 30ms);
    auto start = std::chrono::steady_clock::now();
    EXPECT_EQ(s.wait(WaitCtx::until(c, &t)), ETIMEDOUT);
    EXPECT_GE(std::chrono::steady_clock::now() - start, 25ms);
  }
  timespec negative{-1, 0};
  EXPECT_EQ(s.wait(WaitCtx::until(CLOCK_REALTIME, &negative)), ETIMEDOUT);
  EXPECT_EQ(s.waiters(), 0u) << "a timed-out waiter leaves no registration";
  EXPECT_EQ(s.value(), 0);
  // An available unit is taken whatever the deadline says.
  ASSERT_EQ(s.post(), 0);
  EXPECT_EQ(s.wait(WaitCtx::until(CLOCK_REALTIME, &negative)), 0);
  timespec past = clock_in(CLOCK_MONOTONIC, -10ms);
  ASSERT_EQ(s.post(), 0);
  EXPECT_EQ(s.wait(WaitCtx::until(CLOCK_MONOTONIC, &past)), 0);
  EXPECT_EQ(this->word(), 0u);
}

TYPED_TEST(SemTest, ValueIsNeverNegativeWithSleepers) {
  TypeParam::init(this->w(), 0, 0);
  auto s = this->sem();
  uint64_t sleeps = lockevent_total(LockEvent::sem_wait_sleep);
  uint64_t wakes = lockevent_total(LockEvent::sem_post_wake);
  std::vector<std::thread> ts;
  for (int i = 0; i < 3; ++i) ts.emplace_back([&] { EXPECT_EQ(this->sem().wait(WaitCtx::blocking()), 0); });
  EXPECT_TRUE(eventually([&] { return s.waiters() == 3; }));
  EXPECT_TRUE(eventually([&] { return lockevent_total(LockEvent::sem_wait_sleep) >= sleeps + 3; }));
  EXPECT_EQ(s.value(), 0);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(s.post(), 0);
  for (auto& t : ts) t.join();
  EXPECT_EQ(s.value(), 0);
  EXPECT_EQ(s.waiters(), 0u);
  EXPECT_GE(lockevent_total(LockEvent::sem_post_wake), wakes + 1);
  EXPECT_EQ(this->word(), 0u);
}

// Producers post; a blocking, a trywait-polling and a timed consumer each
// take an exact quota. Nothing is lost or taken twice.
template <class S>
void producer_consumer(SemWords& w, int per_consumer) {
  S s{w};
  std::atomic<long> taken{0};
  std::vector<std::thread> ts;
  for (int p = 0; p < 2; ++p)
    ts.emplace_back([&, p] {
      for (int i = 0; i < (3 * per_consumer) / 2 + (p == 0 ? (3 * per_consumer) % 2 : 0); ++i) {
        ASSERT_EQ(s.post(), 0);
        if (i % 64 == 0) std::this_thread::yield();
      }
    });
  ts.emplace_back([&] {
    for (int i = 0; i < per_consumer; ++i) {
      ASSERT_EQ(s.wait(WaitCtx::blocking()), 0);
      ++taken;
    }
  });
  ts.emplace_back([&] {
    for (int i = 0; i < per_consumer;) {
      if (s.trywait() == 0) {
        ++i;
        ++taken;
      } else {
        std::this_thread::yield();
      }
    }
  });
  ts.emplace_back([&] {
    for (int i = 0; i < per_consumer;) {
      timespec t = clock_in(CLOCK_MONOTONIC, 1ms);
      int rc = s.wait(WaitCtx::until(CLOCK_MONOTONIC, &t));
      ASSERT_TRUE(rc == 0 || rc == ETIMEDOUT) << rc;
      if (rc == 0) {
        ++i;
        ++taken;
      }
    }
  });
  for (auto& t : ts) t.join();
  EXPECT_EQ(taken.load(), 3L * per_consumer);
  EXPECT_EQ(s.value(), 0);
  EXPECT_EQ(s.waiters(), 0u);
}

TYPED_TEST(SemTest, ProducerConsumerExactCounts) {
  TypeParam::init(this->w(), 0, 0);
  producer_consumer<TypeParam>(this->w(), kUnits);
  EXPECT_EQ(this->word(), 0u);
}

TYPED_TEST(SemTest, ProducerConsumerRetriesOneAndZero) {
  for (uint32_t r : {1u, 0u}) {
    g_lockref_tunables.retries = r;
    TypeParam::init(this->w(), 0, 0);
    uint64_t fallbacks = lockevent_total(LockEvent::lockref_fallback);
    producer_consumer<TypeParam>(this->w(), kUnits / 4);
    EXPECT_EQ(this->word(), 0u);
    if (r == 0 || std::is_same_v<TypeParam, FutexSem>) {
      EXPECT_EQ(lockevent_total(LockEvent::lockref_fallback), fallbacks) << "retries " << r;
    }
  }
}

// Many threads hammer one word with retries = 1: the lockref semaphore's
// updates fall back to the lock half, and the counts stay exact.
TYPED_TEST(SemTest, LockrefFallbacksKeepExactCounts) {
  if (!std::is_same_v<TypeParam, LockrefSem>) GTEST_SKIP() << "lockref semaphore only";
  g_lockref_tunables.retries = 1;
  TypeParam::init(this->w(), 0, 0);
  auto s = this->sem();
  uint64_t fallbacks = lockevent_total(LockEvent::lockref_fallback);
  auto end = std::chrono::steady_clock::now() + 5s;
  do {
    std::atomic<int> ready{0};
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t)
      ts.emplace_back([&] {
        ready.fetch_add(1);
        while (ready.load() < 4) std::this_thread::yield();
        for (int i = 0; i < kUnits / 4; ++i) {
          ASSERT_EQ(s.post(), 0);
          ASSERT_EQ(s.wait(WaitCtx::blocking()), 0);  // our own post guarantees a unit
        }
      });
    for (auto& t : ts) t.join();
    ASSERT_EQ(this->word(), 0u);
  } while (lockevent_total(LockEvent::lockref_fallback) == fallbacks && std::chrono::steady_clock::now() < end);
  EXPECT_GT(lockevent_total(LockEvent::lockref_fallback), fallbacks);
}

// A waiter unwound out of its sleep (preload: thread cancellation) drops its
// registration through the guard.
struct Unwound {};
struct ThrowingSleeper {
  static int sleep(const std::atomic<uint32_t>*, uint32_t, const WaitCtx&, bool) { throw Unwound{}; }
};

TYPED_TEST(SemTest, ForcedUnwindDropsTheRegistration) {
  TypeParam::init(this->w(), 0, 0);
  auto s = this->sem();
  bool unwound = false;
  try {
    s.template wait<ThrowingSleeper>(WaitCtx::blocking());
  } catch (const Unwound&) {
    unwound = true;
  }
  EXPECT_TRUE(unwound);
  EXPECT_EQ(s.waiters(), 0u);
  EXPECT_EQ(this->word(), 0u);
}

// EINTR: a handler installed without SA_RESTART interrupts the futex wait,
// and the wait reports it (WaitCtx::sleep would have swallowed it).
std::atomic<int> g_signals{0};
void count_signal(int) { g_signals.fetch_add(1); }

TYPED_TEST(SemTest, SignalWithoutSaRestartMakesWaitReturnEintr) {
  TypeParam::init(this->w(), 0, 0);
  auto s = this->sem();
  struct sigaction sa {}, old {};
  sa.sa_handler = count_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = 0;  // no SA_RESTART
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  std::atomic<int> rc{-1};
  std::thread t([&] { rc = this->sem().wait(WaitCtx::blocking()); });
  EXPECT_TRUE(eventually([&] { return s.waiters() == 1; }));
  // The signal may land before the thread enters the futex wait (then the
  // wait goes on): keep signalling until it returns.
  EXPECT_TRUE(eventually([&] {
    pthread_kill(t.native_handle(), SIGUSR1);
    std::this_thread::sleep_for(2ms);
    return rc.load() != -1;
  }));
  t.join();
  EXPECT_EQ(rc.load(), EINTR);
  EXPECT_EQ(s.waiters(), 0u);
  EXPECT_EQ(s.value(), 0);
  sigaction(SIGUSR1, &old, nullptr);
}

// sem_post is async-signal-safe: a handler that posts to the semaphore its
// own thread is posting to under the lock half must not wait for that lock
// (its holder cannot run until the handler returns). The pause point fires
// inside the lock half and raises the signal there; the handler's post must
// complete, and both units arrive.
std::atomic<bool> g_raise_in_sem_half{false};
SemWords* g_handler_sem = nullptr;
std::atomic<int> g_handler_post_rc{-1};
void post_from_handler(int) { g_handler_post_rc = LockrefSem{*g_handler_sem}.post(); }

}  // namespace
}  // namespace lockswap

extern "C" void lockswap_test_pause_in_sem_half() {
  if (lockswap::g_raise_in_sem_half.exchange(false)) raise(SIGUSR1);
}

namespace lockswap {
namespace {

TEST(LockrefSemSignals, HandlerPostingToTheSemaphoreItsThreadHoldsIsServedWithoutTheLock) {
  sem_t storage{};
  auto& w = *reinterpret_cast<SemWords*>(&storage);
  LockrefSem::init(w, 0, 0);
  g_handler_sem = &w;
  g_handler_post_rc = -1;
  struct sigaction sa {}, old {};
  sa.sa_handler = post_from_handler;
  sigemptyset(&sa.sa_mask);
  ASSERT_EQ(sigaction(SIGUSR1, &sa, &old), 0);
  // The lock half is held "by someone", so the poster's post goes to the
  // lock half; once released, the poster takes it and the signal lands there.
  lockref::lock_half(w.data, false);
  g_raise_in_sem_half = true;
  std::atomic<int> rc{-1};
  pthread_t poster;
  ASSERT_EQ(pthread_create(
                &poster, nullptr,
                [](void* p) -> void* {
                  static_cast<std::atomic<int>*>(p)->store(LockrefSem{*g_handler_sem}.post());
                  return nullptr;
                },
                &rc),
            0);
  EXPECT_TRUE(eventually([&] { return (w.data.load() & lockref::kLockSleepers) != 0; }));
  lockref::unlock_half(w.data, false);
  bool done = eventually([&] { return rc.load() != -1; });
  if (!done) {  // the poster's thread waits for itself: nothing can end it
    fprintf(stderr, "the handler's sem_post waits for the lock half its own thread holds\n");
    _exit(1);
  }
  pthread_join(poster, nullptr);
  EXPECT_EQ(rc.load(), 0);
  EXPECT_EQ(g_handler_post_rc.load(), 0);
  EXPECT_FALSE(g_raise_in_sem_half.load()) << "the pause point never fired";
  EXPECT_EQ(LockrefSem{w}.value(), 2);
  EXPECT_EQ(w.data.load(), 2u) << "no lock bit or waiter left behind";
  sigaction(SIGUSR1, &old, nullptr);
}

// --- layout compatibility -----------------------------------------------------

// glibc's own sem_init (this test program is not preloaded) produces a valid
// semaphore for both classes, and glibc reads back what they leave.
TYPED_TEST(SemTest, GlibcInitialisedSemaphoreWorks) {
  for (int pshared : {0, 1}) {
    sem_t gs;
    ASSERT_EQ(sem_init(&gs, pshared, 2), 0);
    SemWords& w = *reinterpret_cast<SemWords*>(&gs);
    TypeParam s{w};
    EXPECT_EQ(s.shared(), pshared != 0);
    EXPECT_EQ(w.private_flag, pshared != 0 ? abi::kSemSharedFlag : 0) << "glibc's encoding";
    EXPECT_EQ(s.value(), 2);
    EXPECT_EQ(s.trywait(), 0);
    EXPECT_EQ(s.wait(WaitCtx::blocking()), 0);
    EXPECT_EQ(s.trywait(), EAGAIN);
    timespec t = clock_in(CLOCK_REALTIME, 10ms);
    EXPECT_EQ(s.wait(WaitCtx::until(CLOCK_REALTIME, &t)), ETIMEDOUT);
    EXPECT_EQ(s.post(), 0);
    EXPECT_EQ(s.post(), 0);
    EXPECT_EQ(s.post(), 0);
    int v = -1;
    ASSERT_EQ(sem_getvalue(&gs, &v), 0);
    EXPECT_EQ(v, 3);
    EXPECT_EQ(w.data.load(), 3u) << "our high half is clear again, as glibc expects";
    sem_destroy(&gs);
  }
}

// pshared: the child posts, the parent waits, across fork() on MAP_SHARED memory.
TYPED_TEST(SemTest, ProcessSharedAcrossFork) {
  void* mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* ping = new (mem) SemWords{};
  auto* pong = new (static_cast<char*>(mem) + sizeof(sem_t)) SemWords{};
  TypeParam::init(*ping, 0, abi::kSemSharedFlag);
  TypeParam::init(*pong, 0, abi::kSemSharedFlag);
  pid_t pid = fork();
  ASSERT_NE(pid, -1);
  if (pid == 0) {
    TypeParam ping_s{*ping}, pong_s{*pong};
    int rc = 0;
    timespec t = clock_in(CLOCK_MONOTONIC, 10'000ms);
    if (ping_s.wait(WaitCtx::until(CLOCK_MONOTONIC, &t)) != 0) rc |= 1;  // the parent's post
    for (int i = 0; i < 3; ++i)
      if (pong_s.post() != 0) rc |= 2;
    _exit(rc);
  }
  TypeParam ping_s{*ping}, pong_s{*pong};
  std::this_thread::sleep_for(10ms);  // let the child go to sleep first (not required)
  ASSERT_EQ(ping_s.post(), 0);
  for (int i = 0; i < 3; ++i) {
    timespec t = clock_in(CLOCK_MONOTONIC, 10'000ms);
    EXPECT_EQ(pong_s.wait(WaitCtx::until(CLOCK_MONOTONIC, &t)), 0) << "unit " << i;
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(ping->data.load(), 0u);
  EXPECT_EQ(pong->data.load(), 0u);
  munmap(mem, 4096);
}

// --- a process SIGKILLed in the middle of a process-shared semaphore ----------

// Two process-shared semaphores on a MAP_SHARED page, unmapped at the end.
template <class S>
struct SharedPair {
  SharedPair() {
    mem = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    a = new (mem) SemWords{};
    b = new (static_cast<char*>(mem) + sizeof(sem_t)) SemWords{};
    S::init(*a, 0, abi::kSemSharedFlag);
    S::init(*b, 0, abi::kSemSharedFlag);
  }
  ~SharedPair() { munmap(mem, 4096); }
  void* mem;
  SemWords* a;
  SemWords* b;
};

// What the other processes must still be able to do: post, take, wake a
// sleeper in another process, and see exact counts. Exit status 0 if so.
template <class S>
int peers_still_work(SemWords& a, SemWords& b) {
  S sa{a}, sb{b};
  if (sa.post() != 0 || sa.post() != 0) return 1;
  if (sa.value() != 2 || sa.trywait() != 0 || sa.value() != 1) return 2;
  pid_t sleeper = fork();
  if (sleeper == 0) {
    timespec t = clock_in(CLOCK_MONOTONIC, 5'000ms);
    S s{b};
    _exit(s.wait(WaitCtx::until(CLOCK_MONOTONIC, &t)) == 0 ? 0 : 1);
  }
  std::this_thread::sleep_for(20ms);  // usually asleep by now (not required)
  if (sb.post() != 0) return 3;
  int status = 0;
  if (waitpid(sleeper, &status, 0) != sleeper || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
  if (sb.value() != 0 || sa.value() != 1 || sa.trywait() != 0 || sa.trywait() != EAGAIN) return 5;
  return 0;
}

// SIGKILLs the process (reaped), then checks from another one that the
// semaphores still work, in bounded time.
template <class S>
void expect_peers_still_work_after_killing(pid_t pid, SharedPair<S>& p) {
  ASSERT_TRUE(kill_and_reap(pid));
  int rc = exit_status_within(10s, [&] { return peers_still_work<S>(*p.a, *p.b); });
  EXPECT_NE(rc, -1) << "the other processes hang";
  EXPECT_EQ(rc, 0);
}

// The state LockrefSem's fallback leaves in a process-shared word while it
// holds the lock half (bit 32 set), left by a process SIGKILLed there.
TYPED_TEST(SemTest, ProcessSharedSurvivesAProcessKilledHoldingTheLockHalf) {
  SharedPair<TypeParam> p;
  pid_t holder = fork_stopped_inside([&](int report_fd) {
    lockref::lock_half(p.a->data, true);
    report_inside(report_fd);
    for (;;) pause();
  });
  ASSERT_GT(holder, 0);
  expect_peers_still_work_after_killing(holder, p);
}

// A process SIGKILLed while it sleeps registered as a waiter.
TYPED_TEST(SemTest, ProcessSharedSurvivesAWaiterKilledAsleep) {
  SharedPair<TypeParam> p;
  pid_t waiter = fork_stopped_inside([&](int report_fd) {
    report_inside(report_fd);
    TypeParam{*p.a}.wait(WaitCtx::blocking());
    _exit(97);
  });
  ASSERT_GT(waiter, 0);
  ASSERT_TRUE(eventually([&] { return TypeParam{*p.a}.waiters() == 1; })) << "the child never registered";
  expect_peers_still_work_after_killing(waiter, p);
}

// This program is not preloaded: sem_wait/sem_post here are glibc's own. A
// process-shared semaphore is shared with them in both directions, a
// sleeper on either side woken by the other's post.
TYPED_TEST(SemTest, ProcessSharedInteroperatesWithGlibcsOwnSemaphore) {
  SharedPair<TypeParam> p;
  auto* glibc_a = reinterpret_cast<sem_t*>(p.a);
  ASSERT_EQ(sem_init(glibc_a, 1, 0), 0);  // glibc's init: the same bytes as S::init
  int rc = exit_status_within(10s, [&] {
    pid_t glibc_waiter = fork();
    if (glibc_waiter == 0) _exit(sem_wait(glibc_a) == 0 && sem_post(glibc_a) == 0 ? 0 : 1);
    if (!eventually([&] { return p.a->data.load() >> 32 == 1; })) return 2;  // glibc registered its waiter
    TypeParam s{*p.a};
    if (s.post() != 0) return 3;  // wakes glibc's sleeper, which posts back
    int status = 0;
    if (waitpid(glibc_waiter, &status, 0) != glibc_waiter || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return 4;
    if (s.trywait() != 0 || s.value() != 0) return 5;
    pid_t glibc_poster = fork();
    if (glibc_poster == 0) {
      std::this_thread::sleep_for(20ms);  // usually after the wait below went to sleep
      _exit(sem_post(glibc_a) == 0 ? 0 : 1);
    }
    timespec t = clock_in(CLOCK_MONOTONIC, 5'000ms);
    if (s.wait(WaitCtx::until(CLOCK_MONOTONIC, &t)) != 0) return 6;
    if (waitpid(glibc_poster, &status, 0) != glibc_poster || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
      return 7;
    return p.a->data.load() == 0 ? 0 : 8;
  });
  EXPECT_NE(rc, -1) << "a post or a wait hung";
  EXPECT_EQ(rc, 0);
}

// LockrefSem hands each call on a process-shared semaphore to glibc's word.
TEST(LockrefSemShared, CallsAreCountedAsDelegatedToGlibc) {
  sem_t storage{};
  auto& w = *reinterpret_cast<SemWords*>(&storage);
  LockrefSem::init(w, 0, abi::kSemSharedFlag);
  Events ev;
  LockrefSem s{w};
  EXPECT_EQ(s.post(), 0);
  EXPECT_EQ(s.trywait(), 0);
  EXPECT_EQ(s.wait(WaitCtx::try_once()), EAGAIN);
  if (kEvents) { EXPECT_EQ(ev(LockEvent::delegated_to_glibc), 3u); }
  LockrefSem::init(w, 0, 0);
  Events private_ev;
  EXPECT_EQ(s.post(), 0);
  if (kEvents) { EXPECT_EQ(private_ev(LockEvent::delegated_to_glibc), 0u); }
}

}  // namespace
}  // namespace lockswap
