// tests/stress/stress_test.cpp — contention under LD_PRELOAD, sized for a
// 2-core machine shared with other jobs: every test is bounded by an
// iteration count AND a time budget (threads count what they actually did,
// so the checks stay exact), and every join is bounded, so a lost wakeup or
// deadlock fails instead of hanging.
#include <errno.h>
#include <pthread.h>
#include <sched.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "tests/common/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::now_ns;
using lstest::PThread;

using lstest::Budget;
using lstest::kJoinMs;

// Runs `n` threads of body(index), released together so they really
// contend, and joins them (bounded).
void run_threads(int n, const std::function<void(int)>& body) {
  std::atomic<int> arrived{0};
  std::vector<std::unique_ptr<PThread>> ts;
  for (int i = 0; i < n; ++i)
    ts.push_back(std::make_unique<PThread>([&, i] {
      arrived.fetch_add(1);
      while (arrived.load() < n) sched_yield();
      body(i);
    }));
  for (auto& t : ts) t->join_or_die(kJoinMs);
}

// ------------------------------------------------------- mutual exclusion

class MutexStress : public testing::TestWithParam<int> {};

TEST_P(MutexStress, NonAtomicCounterIsExact) {
  pthread_mutex_t m;
  ASSERT_EQ(lstest::init_mutex_of_type(&m, GetParam()), 0);
  constexpr int kThreads = 4, kIters = 40'000;
  long counter = 0;
  int inside = 0;
  std::atomic<long> done{0}, errors{0};
  Budget budget;
  run_threads(kThreads, [&](int) {
    long mine = 0;
    for (int i = 0; i < kIters && !(i % 256 == 0 && budget.over()); ++i) {
      if (pthread_mutex_lock(&m) != 0) ++errors;
      if (++inside != 1) ++errors;
      ++counter;
      if (i % 64 == 0) sched_yield();  // preempted holder: waiters must sleep and be woken
      if (GetParam() == PTHREAD_MUTEX_RECURSIVE && i % 16 == 0) {
        if (pthread_mutex_lock(&m) != 0) ++errors;  // nested level
        ++counter;
        ++mine;
        if (pthread_mutex_unlock(&m) != 0) ++errors;
      }
      --inside;
      if (pthread_mutex_unlock(&m) != 0) ++errors;
      ++mine;
    }
    done += mine;
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(counter, done.load());
  EXPECT_GT(done.load(), 0);
  EXPECT_EQ(pthread_mutex_destroy(&m), 0);
}

TEST_P(MutexStress, LockTrylockTimedlockClocklockMixIsExact) {
  pthread_mutex_t m;
  ASSERT_EQ(lstest::init_mutex_of_type(&m, GetParam()), 0);
  constexpr int kThreads = 4, kIters = 20'000;
  long counter = 0;
  std::atomic<long> done{0}, errors{0}, busy{0}, timeouts{0};
  Budget budget;
  run_threads(kThreads, [&](int id) {
    std::minstd_rand rng(id + 1);
    long mine = 0;
    for (int i = 0; i < kIters && !(i % 256 == 0 && budget.over()); ++i) {
      int rc;
      for (;;) {
        switch (rng() % 4) {
          case 0: rc = pthread_mutex_lock(&m); break;
          case 1:
            rc = pthread_mutex_trylock(&m);
            if (rc == EBUSY) ++busy;
            break;
          case 2: {
            timespec d = lstest::ts_from_ns(now_ns(CLOCK_REALTIME) + 200'000);  // 0.2 ms
            rc = pthread_mutex_timedlock(&m, &d);
            if (rc == ETIMEDOUT) ++timeouts;
            break;
          }
          default: {
            timespec d = deadline_in(CLOCK_MONOTONIC, 1);
            rc = pthread_mutex_clocklock(&m, CLOCK_MONOTONIC, &d);
            if (rc == ETIMEDOUT) ++timeouts;
          }
        }
        if (rc == 0) break;
        if (rc != EBUSY && rc != ETIMEDOUT) {
          ++errors;
          break;
        }
      }
      if (rc != 0) continue;
      ++counter;
      ++mine;
      if (i % 64 == 0) sched_yield();
      if (pthread_mutex_unlock(&m) != 0) ++errors;
    }
    done += mine;
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(counter, done.load());
  EXPECT_EQ(pthread_mutex_trylock(&m), 0) << "mutex left locked (a timed-out waiter took it?)";
  EXPECT_EQ(pthread_mutex_unlock(&m), 0);
  EXPECT_EQ(pthread_mutex_destroy(&m), 0);
  RecordProperty("busy", std::to_string(busy.load()));
  RecordProperty("timeouts", std::to_string(timeouts.load()));
}

INSTANTIATE_TEST_SUITE_P(Kinds, MutexStress,
                         testing::Values(PTHREAD_MUTEX_NORMAL, PTHREAD_MUTEX_RECURSIVE, PTHREAD_MUTEX_ERRORCHECK,
                                         PTHREAD_MUTEX_ADAPTIVE_NP),
                         [](const testing::TestParamInfo<int>& i) { return std::string(lstest::mutex_type_name(i.param)); });

TEST(MutexStressStatic, ZeroInitialisedMutexUnderContention) {
  static pthread_mutex_t m;  // zero, never initialised
  long counter = 0;
  std::atomic<long> done{0};
  Budget budget;
  run_threads(3, [&](int) {
    long mine = 0;
    for (int i = 0; i < 30'000 && !(i % 256 == 0 && budget.over()); ++i) {
      pthread_mutex_lock(&m);
      ++counter;
      if (i % 64 == 0) sched_yield();
      pthread_mutex_unlock(&m);
      ++mine;
    }
    done += mine;
  });
  EXPECT_EQ(counter, done.load());
}

// ----------------------------------------------------------------- rwlock

class RwlockStress : public testing::TestWithParam<int> {};

// A write acquisition of `l` by a way `rng` picks: blocking, try, or timed
// with a 1 ms deadline.
int random_write_lock(pthread_rwlock_t* l, std::minstd_rand& rng) {
  switch (rng() % 3) {
    case 0: return pthread_rwlock_wrlock(l);
    case 1: return pthread_rwlock_trywrlock(l);
  }
  timespec d = deadline_in(CLOCK_MONOTONIC, 1);
  return pthread_rwlock_clockwrlock(l, CLOCK_MONOTONIC, &d);
}

// A read acquisition of `l` by a way `rng` picks (as above, both clocks).
int random_read_lock(pthread_rwlock_t* l, std::minstd_rand& rng) {
  switch (rng() % 4) {
    case 0: return pthread_rwlock_rdlock(l);
    case 1: return pthread_rwlock_tryrdlock(l);
    case 2: {
      timespec d = deadline_in(CLOCK_REALTIME, 1);
      return pthread_rwlock_timedrdlock(l, &d);
    }
  }
  timespec d = deadline_in(CLOCK_MONOTONIC, 1);
  return pthread_rwlock_clockrdlock(l, CLOCK_MONOTONIC, &d);
}

// Whether an acquisition that returned `rc` took the lock; a busy or
// timed-out one did not, and any other failure counts in `errors`.
bool took_it(int rc, std::atomic<long>& errors) {
  if (rc != 0 && rc != EBUSY && rc != ETIMEDOUT) ++errors;
  return rc == 0;
}

TEST_P(RwlockStress, WritersAndReadersKeepTheInvariant) {
  pthread_rwlock_t l;
  ASSERT_EQ(lstest::init_rwlock_of_kind(&l, GetParam()), 0);
  constexpr int kWriters = 2, kReaders = 3, kIters = 20'000;
  // Two fields written together under the write lock.
  volatile long x = 0, y = 0;
  std::atomic<int> writers_inside{0}, readers_inside{0};
  std::atomic<long> writes{0}, errors{0}, reads{0};
  Budget budget;
  run_threads(kWriters + kReaders, [&](int id) {
    std::minstd_rand rng(id + 7);
    bool writer = id < kWriters;
    for (int i = 0; i < kIters && !(i % 128 == 0 && budget.over()); ++i) {
      if (!took_it(writer ? random_write_lock(&l, rng) : random_read_lock(&l, rng), errors)) continue;
      if (writer) {
        if (writers_inside.fetch_add(1) != 0 || readers_inside.load() != 0) ++errors;
        long v = x + 1;
        x = v;
        if (i % 32 == 0) sched_yield();
        y = v;
        ++writes;
        writers_inside.fetch_sub(1);
        if (pthread_rwlock_unlock(&l) != 0) ++errors;
      } else {
        readers_inside.fetch_add(1);
        if (writers_inside.load() != 0) ++errors;
        if (i % 32 == 0) sched_yield();
        if (x != y) ++errors;
        ++reads;
        readers_inside.fetch_sub(1);
        if (pthread_rwlock_unlock(&l) != 0) ++errors;
      }
    }
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(x, writes.load());
  EXPECT_EQ(pthread_rwlock_trywrlock(&l), 0) << "lock left held";
  EXPECT_EQ(pthread_rwlock_unlock(&l), 0);
  EXPECT_EQ(pthread_rwlock_destroy(&l), 0);
}

// Readers that re-read (recursively) while writers keep queueing: with the
// reader-preferring kinds this must never deadlock.
TEST_P(RwlockStress, RecursiveReadersWithQueuedWritersNeverDeadlock) {
  if (GetParam() == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP) GTEST_SKIP() << "recursion not allowed";
  pthread_rwlock_t l;
  ASSERT_EQ(lstest::init_rwlock_of_kind(&l, GetParam()), 0);
  std::atomic<long> errors{0};
  Budget budget(500);
  run_threads(4, [&](int id) {
    for (int i = 0; i < 5'000 && !(i % 64 == 0 && budget.over()); ++i) {
      if (id == 0) {
        if (pthread_rwlock_wrlock(&l) != 0) ++errors;
        if (pthread_rwlock_unlock(&l) != 0) ++errors;
      } else {
        if (pthread_rwlock_rdlock(&l) != 0) ++errors;
        sched_yield();  // let the writer queue up behind us
        timespec d = deadline_in(CLOCK_MONOTONIC, 5'000);
        int rc = pthread_rwlock_clockrdlock(&l, CLOCK_MONOTONIC, &d);  // recursive
        if (rc != 0) ++errors;
        if (rc == 0 && pthread_rwlock_unlock(&l) != 0) ++errors;
        if (pthread_rwlock_unlock(&l) != 0) ++errors;
      }
    }
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(pthread_rwlock_destroy(&l), 0);
}

INSTANTIATE_TEST_SUITE_P(Kinds, RwlockStress,
                         testing::Values(PTHREAD_RWLOCK_PREFER_READER_NP, PTHREAD_RWLOCK_PREFER_WRITER_NP,
                                         PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP),
                         [](const testing::TestParamInfo<int>& i) {
                           return std::string(i.param == PTHREAD_RWLOCK_PREFER_READER_NP   ? "PreferReader"
                                              : i.param == PTHREAD_RWLOCK_PREFER_WRITER_NP ? "PreferWriter"
                                                                                          : "WriterNonrecursive");
                         });

// ---------------------------------------------------------------- condvars

// Bounded queue: no item lost, none duplicated, nobody left asleep.
class BoundedQueue {
 public:
  explicit BoundedQueue(bool broadcast) : broadcast_(broadcast) {}
  ~BoundedQueue() {
    pthread_cond_destroy(&not_full_);
    pthread_cond_destroy(&not_empty_);
    pthread_mutex_destroy(&m_);
  }
  void push(long v) {
    pthread_mutex_lock(&m_);
    while (n_ == kCap) pthread_cond_wait(&not_full_, &m_);
    buf_[(head_ + n_) % kCap] = v;
    ++n_;
    wake(&not_empty_);
    pthread_mutex_unlock(&m_);
  }
  long pop() {
    pthread_mutex_lock(&m_);
    while (n_ == 0) pthread_cond_wait(&not_empty_, &m_);
    long v = buf_[head_];
    head_ = (head_ + 1) % kCap;
    --n_;
    wake(&not_full_);
    pthread_mutex_unlock(&m_);
    return v;
  }

 private:
  void wake(pthread_cond_t* c) { broadcast_ ? pthread_cond_broadcast(c) : pthread_cond_signal(c); }
  static constexpr int kCap = 4;
  pthread_mutex_t m_ = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t not_full_ = PTHREAD_COND_INITIALIZER, not_empty_ = PTHREAD_COND_INITIALIZER;
  long buf_[kCap] = {};
  int head_ = 0, n_ = 0;
  bool broadcast_;
};

class ProducerConsumer : public testing::TestWithParam<bool> {};

TEST_P(ProducerConsumer, EveryItemIsConsumedExactlyOnce) {
  BoundedQueue q(GetParam());
  constexpr int kProducers = 2, kConsumers = 3, kItems = 15'000;  // per producer
  std::atomic<long> sum{0}, count{0};
  std::vector<std::unique_ptr<PThread>> consumers, producers;
  for (int c = 0; c < kConsumers; ++c)
    consumers.push_back(std::make_unique<PThread>([&] {
      for (;;) {
        long v = q.pop();
        if (v < 0) return;
        sum += v;
        ++count;
      }
    }));
  for (int p = 0; p < kProducers; ++p)
    producers.push_back(std::make_unique<PThread>([&] {
      for (long i = 1; i <= kItems; ++i) q.push(i);
    }));
  for (auto& t : producers) t->join_or_die(kJoinMs);
  for (int c = 0; c < kConsumers; ++c) q.push(-1);
  for (auto& t : consumers) t->join_or_die(kJoinMs);
  EXPECT_EQ(count.load(), long{kProducers} * kItems);
  EXPECT_EQ(sum.load(), long{kProducers} * kItems * (kItems + 1) / 2);
}

INSTANTIATE_TEST_SUITE_P(Wake, ProducerConsumer, testing::Values(false, true),
                         [](const testing::TestParamInfo<bool>& i) {
                           return std::string(i.param ? "Broadcast" : "Signal");
                         });

// Two threads pass a token back and forth with signal only: a single lost
// wakeup stops the game.
TEST(CondStress, PingPongWithSignalOnly) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  constexpr int kRounds = 10'000;
  int turn = 0;
  std::atomic<bool> stop{false};
  Budget budget;
  run_threads(2, [&](int me) {
    for (int r = 0; r < kRounds; ++r) {
      pthread_mutex_lock(&m);
      while (turn != me && !stop) pthread_cond_wait(&c, &m);
      if (stop) {
        pthread_mutex_unlock(&m);
        return;
      }
      turn = 1 - me;
      if (r % 256 == 0 && budget.over()) stop = true;
      pthread_cond_signal(&c);
      pthread_mutex_unlock(&m);
    }
    pthread_mutex_lock(&m);
    stop = true;
    pthread_cond_signal(&c);
    pthread_mutex_unlock(&m);
  });
}

// A barrier on one condvar, many generations: classic lost-wakeup detector.
TEST(CondStress, BroadcastBarrierManyGenerations) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  constexpr int kThreads = 6, kRounds = 2'000;
  int arrived = 0;
  long generation = 0;
  int rounds_to_run = kRounds;
  Budget budget;
  run_threads(kThreads, [&](int) {
    for (int r = 0;; ++r) {
      pthread_mutex_lock(&m);
      if (r >= rounds_to_run) {
        pthread_mutex_unlock(&m);
        return;
      }
      long gen = generation;
      if (++arrived == kThreads) {
        arrived = 0;
        ++generation;
        // The last arrival decides, for everyone at once, whether to stop.
        if (budget.over() && rounds_to_run > r + 1) rounds_to_run = r + 1;
        pthread_cond_broadcast(&c);
      } else {
        while (generation == gen) pthread_cond_wait(&c, &m);
      }
      pthread_mutex_unlock(&m);
    }
  });
  EXPECT_EQ(generation, rounds_to_run);
}

// Waiters with tiny deadlines while signals and broadcasts fly: every wait
// returns 0 or ETIMEDOUT with the mutex held, and everyone finishes.
TEST(CondStress, TimeoutsRacingSignalsAndBroadcasts) {
  for (bool monotonic : {false, true}) {
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    if (monotonic) pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    ASSERT_EQ(pthread_cond_init(&c, &ca), 0);
    pthread_condattr_destroy(&ca);
    clockid_t clk = monotonic ? CLOCK_MONOTONIC : CLOCK_REALTIME;
    bool stop = false;
    long in_mutex = 0;
    std::atomic<long> errors{0}, timeouts{0}, wakes{0};
    constexpr int kWaiters = 4;
    std::vector<std::unique_ptr<PThread>> waiters;
    for (int w = 0; w < kWaiters; ++w)
      waiters.push_back(std::make_unique<PThread>([&, w] {
        std::minstd_rand rng(w + 3);
        pthread_mutex_lock(&m);
        while (!stop) {
          timespec d = lstest::ts_from_ns(now_ns(clk) + int64_t(rng() % 2'000) * 1'000);
          int rc;
          if (rng() % 2) {
            rc = pthread_cond_timedwait(&c, &m, &d);
          } else {
            d = lstest::ts_from_ns(now_ns(CLOCK_MONOTONIC) + int64_t(rng() % 2'000) * 1'000);
            rc = pthread_cond_clockwait(&c, &m, CLOCK_MONOTONIC, &d);
          }
          if (rc == ETIMEDOUT) ++timeouts;
          else if (rc == 0) ++wakes;
          else ++errors;
          if (++in_mutex, in_mutex != 1) ++errors;  // mutex really held
          --in_mutex;
        }
        pthread_mutex_unlock(&m);
      }));
    Budget budget(400);
    std::minstd_rand rng(99);
    while (!budget.over()) {
      pthread_mutex_lock(&m);
      if (++in_mutex, in_mutex != 1) ++errors;
      --in_mutex;
      if (rng() % 3 == 0) pthread_cond_broadcast(&c);
      else pthread_cond_signal(&c);
      pthread_mutex_unlock(&m);
      if (rng() % 2) pthread_cond_signal(&c);  // also outside the mutex
      if (rng() % 8 == 0) usleep(rng() % 500);
    }
    pthread_mutex_lock(&m);
    stop = true;
    pthread_cond_broadcast(&c);
    pthread_mutex_unlock(&m);
    for (auto& t : waiters) t->join_or_die(kJoinMs);
    EXPECT_EQ(errors.load(), 0) << (monotonic ? "monotonic" : "realtime");
    EXPECT_GT(timeouts.load() + wakes.load(), 0);
    EXPECT_EQ(pthread_cond_destroy(&c), 0);
  }
}

// ------------------------------------------------------- oversubscription

TEST(Oversubscribed, SixtyFourThreadsOnTwoCores) {
  constexpr int kThreads = 64, kIters = 1'500;
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_t am = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
  pthread_rwlock_t l = PTHREAD_RWLOCK_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  long counter = 0, acounter = 0, wcounter = 0;
  std::atomic<long> done{0}, adone{0}, wdone{0}, errors{0};
  int finished = 0;
  Budget budget(1'500);
  run_threads(kThreads, [&](int id) {
    long mine = 0, amine = 0, wmine = 0;
    for (int i = 0; i < kIters && !(i % 64 == 0 && budget.over()); ++i) {
      if (pthread_mutex_lock(&m) != 0) ++errors;
      ++counter;
      ++mine;
      if (i % 16 == 0) sched_yield();
      if (pthread_mutex_unlock(&m) != 0) ++errors;
      if (pthread_mutex_lock(&am) != 0) ++errors;
      ++acounter;
      ++amine;
      if (pthread_mutex_unlock(&am) != 0) ++errors;
      if ((i + id) % 8 == 0) {
        if (pthread_rwlock_wrlock(&l) != 0) ++errors;
        ++wcounter;
        ++wmine;
        if (pthread_rwlock_unlock(&l) != 0) ++errors;
      } else {
        if (pthread_rwlock_rdlock(&l) != 0) ++errors;
        if (pthread_rwlock_unlock(&l) != 0) ++errors;
      }
    }
    done += mine;
    adone += amine;
    wdone += wmine;
    // Everyone waits for everyone on one condvar before leaving.
    pthread_mutex_lock(&m);
    if (++finished == kThreads) pthread_cond_broadcast(&c);
    while (finished < kThreads) pthread_cond_wait(&c, &m);
    pthread_mutex_unlock(&m);
  });
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(counter, done.load());
  EXPECT_EQ(acounter, adone.load());
  EXPECT_EQ(wcounter, wdone.load());
}

}  // namespace
