// tests/stress/sem_stress_test.cpp — POSIX semaphores under contention and
// oversubscription (16-32 threads on a 2-core machine), under LD_PRELOAD for
// every variant and without it (plain glibc). Every test is bounded by a time
// budget (threads count what they actually did, so the accounting stays
// exact) and by bounded joins, so a lost wakeup or a lost unit fails instead
// of hanging. No lock and no semaphore other than the ones under test is used
// for coordination (atomics and polling only).
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <semaphore.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/common/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::eventually;
using lstest::now_ns;
using lstest::PThread;

using lstest::Budget;
using lstest::kJoinMs;

int value_of(sem_t* s) {
  int v = INT_MIN;
  return sem_getvalue(s, &v) == 0 ? v : INT_MIN;
}

// ------------------------------------------------- producers and consumers
//
// Producers post units until the budget is spent. Consumers take units with a
// mix of sem_wait, a sem_trywait retry loop (sched_yield between tries),
// sem_timedwait and sem_clockwait with very short deadlines (so timeouts race
// with posts all the time). Once every producer has stopped, `closing` is set
// to the number of units they posted and one closing unit per consumer is
// posted: a consumer whose take is numbered `closing` or above leaves. Units
// are indistinguishable, but exactly `consumers` numbers are that high, so
// every consumer leaves exactly once, and every unit is accounted for:
// taken == posted + consumers, and the semaphore ends at 0.

enum class Mix { kAllKinds, kShortDeadlinesOnly };

// Lives in shared memory for the process-shared test (lock-free atomics work
// across processes), in ordinary memory otherwise.
struct Accounting {
  std::atomic<long> posted{0}, taken{0};
  std::atomic<long> closing{LONG_MAX};
  std::atomic<long> errors{0}, negative_values{0}, eagain{0}, timeouts{0};
  std::atomic<int> producers_done{0}, ready{0};
  std::atomic<bool> go{false};
};

void produce(sem_t* s, Accounting& a, int id, const Budget& budget) {
  std::minstd_rand rng(id * 31 + 7);
  for (long i = 0; !(i % 16 == 0 && budget.over()); ++i) {
    int burst = rng() % 8 == 0 ? 1 + rng() % 8 : 1;  // sometimes several posts in a row
    for (int b = 0; b < burst; ++b) {
      if (sem_post(s) != 0) {
        ++a.errors;
        return;
      }
      ++a.posted;
    }
    if (rng() % 4 == 0) sched_yield();
  }
}

void consume(sem_t* s, Accounting& a, int id, Mix mix) {
  std::minstd_rand rng(id * 17 + 3);
  for (;;) {
    int rc = -1;
    int kind = mix == Mix::kShortDeadlinesOnly ? 2 + rng() % 2 : rng() % 4;
    switch (kind) {
      case 0: rc = sem_wait(s); break;
      case 1:
        while ((rc = sem_trywait(s)) != 0 && errno == EAGAIN) {
          ++a.eagain;
          sched_yield();
        }
        break;
      case 2: {
        timespec d = lstest::ts_from_ns(now_ns(CLOCK_REALTIME) + 100'000 + rng() % 200'000);  // 0.1-0.3 ms
        rc = sem_timedwait(s, &d);
        break;
      }
      default: {
        timespec d = lstest::ts_from_ns(now_ns(CLOCK_MONOTONIC) + 100'000 + rng() % 200'000);
        rc = sem_clockwait(s, CLOCK_MONOTONIC, &d);
      }
    }
    if (rc != 0) {
      if ((kind == 2 || kind == 3) && errno == ETIMEDOUT) {
        ++a.timeouts;
        continue;
      }
      fprintf(stderr, "consumer %d: wait kind %d failed: %s\n", id, kind, strerrorname_np(errno));
      ++a.errors;
      return;
    }
    long n = a.taken.fetch_add(1);
    if (n % 64 == 0 && value_of(s) < 0) ++a.negative_values;
    if (n >= a.closing.load()) return;
  }
}

// After every producer (of every process) is done: publish the count, then
// post one closing unit per consumer.
void close_production(sem_t* s, Accounting& a, int consumers) {
  a.closing = a.posted.load();
  for (int c = 0; c < consumers; ++c)
    if (sem_post(s) != 0) ++a.errors;
}

// Starts `producers` + `consumers` threads, released together; returns them.
std::vector<std::unique_ptr<PThread>> start_workers(sem_t* s, Accounting& a, int producers, int consumers, int first_id,
                                                    Mix mix, const Budget& budget,
                                                    std::vector<std::unique_ptr<PThread>>* producer_threads) {
  std::vector<std::unique_ptr<PThread>> cs;
  for (int i = 0; i < producers + consumers; ++i) {
    bool producer = i < producers;
    auto t = std::make_unique<PThread>([s, &a, producer, id = first_id + i, mix, &budget] {
      ++a.ready;
      while (!a.go.load()) sched_yield();
      if (producer) {
        produce(s, a, id, budget);
        ++a.producers_done;
      } else {
        consume(s, a, id, mix);
      }
    });
    (producer ? *producer_threads : cs).push_back(std::move(t));
  }
  return cs;
}

void expect_exact(sem_t* s, const Accounting& a, int consumers) {
  EXPECT_EQ(a.errors.load(), 0);
  EXPECT_EQ(a.negative_values.load(), 0) << "sem_getvalue reported a negative value";
  EXPECT_GT(a.posted.load(), 0);
  EXPECT_EQ(a.taken.load(), a.posted.load() + consumers) << "units lost or taken twice";
  EXPECT_EQ(value_of(s), 0) << "units left over";
  EXPECT_NE(sem_trywait(s), 0);
  fprintf(stderr, "[ info ] %ld units, %ld EAGAIN retries, %ld timeouts\n", a.posted.load(), a.eagain.load(),
          a.timeouts.load());
}

class SemProducerConsumer : public testing::TestWithParam<Mix> {};

TEST_P(SemProducerConsumer, EveryPostedUnitIsTakenExactlyOnce) {
  constexpr int kProducers = 8, kConsumers = 16;  // 24 threads on 2 cores
  sem_t s;
  ASSERT_EQ(sem_init(&s, 0, 0), 0);
  Accounting a;
  std::vector<std::unique_ptr<PThread>> producers;
  Budget budget;
  auto consumers = start_workers(&s, a, kProducers, kConsumers, 0, GetParam(), budget, &producers);
  ASSERT_TRUE(eventually([&] { return a.ready.load() == kProducers + kConsumers; }));
  a.go = true;
  for (auto& t : producers) t->join_or_die(kJoinMs);
  close_production(&s, a, kConsumers);
  for (auto& t : consumers) t->join_or_die(kJoinMs);
  expect_exact(&s, a, kConsumers);
  EXPECT_EQ(sem_destroy(&s), 0);
}

INSTANTIATE_TEST_SUITE_P(Consumers, SemProducerConsumer, testing::Values(Mix::kAllKinds, Mix::kShortDeadlinesOnly),
                         [](const testing::TestParamInfo<Mix>& i) {
                           return std::string(i.param == Mix::kAllKinds ? "AllWaitKinds" : "ShortDeadlinesOnly");
                         });

// The same across fork(): the semaphore (pshared) and the accounting live in
// MAP_SHARED memory; each process runs half of the producers and consumers.
// Both processes run the same lockswap variant (the child inherits it).
struct SharedRun {
  sem_t s;
  Accounting a;
};

TEST(SemProcessSharedStress, ProducersAndConsumersInTwoProcessesAccountForEveryUnit) {
  constexpr int kProducersEach = 4, kConsumersEach = 8;  // 24 threads in all
  void* mem = mmap(nullptr, sizeof(SharedRun), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(mem, MAP_FAILED);
  auto* run = new (mem) SharedRun();
  ASSERT_EQ(sem_init(&run->s, 1, 0), 0);
  Accounting& a = run->a;
  Budget budget;
  fflush(stdout);
  fflush(stderr);
  pid_t child = fork();
  if (child == 0) {
    signal(SIGALRM, SIG_DFL);
    alarm(40);
    std::vector<std::unique_ptr<PThread>> producers;
    auto consumers = start_workers(&run->s, a, kProducersEach, kConsumersEach, 1000, Mix::kAllKinds, budget, &producers);
    for (auto& t : producers) t->join_or_die(kJoinMs);
    for (auto& t : consumers) t->join_or_die(kJoinMs);
    _exit(0);
  }
  ASSERT_GT(child, 0);
  std::vector<std::unique_ptr<PThread>> producers;
  auto consumers = start_workers(&run->s, a, kProducersEach, kConsumersEach, 0, Mix::kAllKinds, budget, &producers);
  ASSERT_TRUE(eventually([&] { return a.ready.load() == 2 * (kProducersEach + kConsumersEach); }));
  a.go = true;
  for (auto& t : producers) t->join_or_die(kJoinMs);
  EXPECT_TRUE(eventually([&] { return a.producers_done.load() == 2 * kProducersEach; }, kJoinMs))
      << "the child's producers did not finish";
  close_production(&run->s, a, 2 * kConsumersEach);
  for (auto& t : consumers) t->join_or_die(kJoinMs);
  int status = 0;
  bool exited = eventually([&] { return waitpid(child, &status, WNOHANG) == child; }, kJoinMs);
  if (!exited) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
  }
  EXPECT_TRUE(exited && WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "child: " << (exited ? (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                                     : "exit " + std::to_string(WEXITSTATUS(status)))
                              : std::string("did not finish (lost wakeup?)"));
  expect_exact(&run->s, a, 2 * kConsumersEach);
  EXPECT_EQ(sem_destroy(&run->s), 0);
  run->~SharedRun();
  munmap(mem, sizeof(SharedRun));
}

// ------------------------------------------------------------- baton ring
// One unit travels round a ring of semaphores, one per thread; every hand-over
// wakes a sleeping thread, so a single lost wakeup stops the ring (and fails
// the bounded join). At the end exactly one unit exists in the whole ring.

TEST(SemStress, OneBatonRoundARingOfTwentyFourSleepingThreads) {
  constexpr int kThreads = 24;
  std::vector<sem_t> ring(kThreads);
  for (sem_t& s : ring) ASSERT_EQ(sem_init(&s, 0, 0), 0);
  std::atomic<bool> stop{false};
  std::atomic<long> passes{0}, errors{0};
  Budget budget;
  std::vector<std::unique_ptr<PThread>> ts;
  for (int i = 0; i < kThreads; ++i) {
    ts.push_back(std::make_unique<PThread>([&, i] {
      sem_t* mine = &ring[i];
      sem_t* next = &ring[(i + 1) % kThreads];
      for (long n = 0;; ++n) {
        int rc;
        switch ((i + n) % 3) {
          case 0: rc = sem_wait(mine); break;
          case 1: {
            timespec d = deadline_in(CLOCK_REALTIME, kJoinMs);
            rc = sem_timedwait(mine, &d);
            break;
          }
          default: {
            timespec d = deadline_in(CLOCK_MONOTONIC, kJoinMs);
            rc = sem_clockwait(mine, CLOCK_MONOTONIC, &d);
          }
        }
        if (rc != 0) {
          ++errors;
          stop = true;
        }
        if (stop) {  // pass it on once more so the next thread sees `stop`, then leave
          sem_post(next);
          return;
        }
        ++passes;
        if (budget.over()) stop = true;
        if (sem_post(next) != 0) ++errors;
      }
    }));
  }
  ASSERT_EQ(sem_post(&ring[0]), 0);
  for (auto& t : ts) t->join_or_die(kJoinMs);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_GT(passes.load(), kThreads);
  long total = 0;
  for (sem_t& s : ring) total += value_of(&s);
  EXPECT_EQ(total, 1) << "the baton was duplicated or lost";
  for (sem_t& s : ring) EXPECT_EQ(sem_destroy(&s), 0);
  fprintf(stderr, "[ info ] %ld hand-overs\n", passes.load());
}

// ------------------------------------------------ many sleepers, big posts
// 32 threads sleep on one semaphore; each round posts exactly as many units
// as there are sleepers, in a burst from several posters. Every unit must be
// taken (none stranded with sleepers left), round after round.

TEST(SemStress, BurstsOfPostsWakeThirtyTwoSleepersRoundAfterRound) {
  constexpr int kSleepers = 32, kPosters = 4;
  sem_t s;
  ASSERT_EQ(sem_init(&s, 0, 0), 0);
  std::atomic<long> taken{0}, errors{0};
  std::atomic<bool> stop{false};
  std::vector<std::unique_ptr<PThread>> ts;
  for (int i = 0; i < kSleepers; ++i) {
    ts.push_back(std::make_unique<PThread>([&, i] {
      for (long n = 0;; ++n) {
        int rc = (i + n) % 2 ? sem_wait(&s) : [&] {
          timespec d = deadline_in(CLOCK_MONOTONIC, kJoinMs);
          return sem_clockwait(&s, CLOCK_MONOTONIC, &d);
        }();
        if (rc != 0) {
          ++errors;
          return;
        }
        if (stop) return;  // a closing unit
        ++taken;
      }
    }));
  }
  Budget budget;
  long rounds = 0, posted = 0;
  bool stranded = false;
  while (!budget.over() && !stranded) {
    std::atomic<long> posted_this_round{0};
    std::vector<std::unique_ptr<PThread>> posters;
    for (int p = 0; p < kPosters; ++p)
      posters.push_back(std::make_unique<PThread>([&] {
        for (int k = 0; k < kSleepers / kPosters; ++k)
          if (sem_post(&s) == 0) ++posted_this_round;
      }));
    for (auto& t : posters) t->join_or_die(kJoinMs);
    posted += posted_this_round;
    ++rounds;
    if (!eventually([&] { return taken.load() == posted; }, 10'000)) {
      ADD_FAILURE() << "round " << rounds << ": " << posted - taken.load() << " unit(s) stranded, value "
                    << value_of(&s);
      stranded = true;
    }
  }
  stop = true;
  for (int i = 0; i < kSleepers; ++i) sem_post(&s);
  for (auto& t : ts) t->join_or_die(kJoinMs);
  EXPECT_EQ(errors.load(), 0);
  if (!stranded) {
    EXPECT_EQ(taken.load(), posted);
    EXPECT_EQ(value_of(&s), 0);
  }
  EXPECT_EQ(sem_destroy(&s), 0);
  fprintf(stderr, "[ info ] %ld rounds of %d posts\n", rounds, kSleepers);
}

}  // namespace
