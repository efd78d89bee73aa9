// tests/core/percid_rwlock_test.cpp — core/percid/thread.h tested directly,
// under every concurrency-id allocator: readers share, a writer drains them,
// new readers wait behind it while recursive ones pass, counters balance when
// a reader's id changes, blocks are freed and reused, and a lock that finds no
// free block still works as a plain rwsem. The stress test checks mutual
// exclusion on plain data, so the TSan build checks the happens-before edges.
#include "core/percid/thread.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <new>
#include <thread>
#include <vector>

#include "tests/core/core_test_util.h"

namespace lockswap {
namespace {

using namespace coretest;

using Words = PercidWords;
using Lock = PercidRwlock<Words>;

rwsem::ReadFlags flags_of(bool holds_reads, bool behind_writers) {
  return (holds_reads ? rwsem::kReadHoldsThis : rwsem::kReadPlain) |
         (behind_writers ? rwsem::kReadBehindWriters : rwsem::kReadPlain);
}
int read_lock(Words& w, bool holds_reads = false, bool behind_writers = false) {
  return Lock::read_lock(w, WaitCtx::blocking(), flags_of(holds_reads, behind_writers));
}
int try_read(Words& w, bool holds_reads = false, bool behind_writers = false) {
  return Lock::read_lock(w, WaitCtx::try_once(), flags_of(holds_reads, behind_writers));
}
int try_write(Words& w) { return Lock::write_lock(w, WaitCtx::try_once()); }

bool writer_pending(const Words& w) { return (w.state.load() & percid::kWriterPending) != 0; }

// A writer on its own thread, blocked until every reader has left.
class BlockedWriter {
 public:
  explicit BlockedWriter(Words& w)
      : t_([this, &w] {
          rc_ = Lock::write_lock(w, WaitCtx::blocking());
          in_ = true;
          while (!release_) std::this_thread::yield();
          Lock::write_unlock(w);
        }) {
    EXPECT_TRUE(eventually([&] { return writer_pending(w); })) << "the writer never got to drain";
  }
  ~BlockedWriter() {
    release_ = true;
    t_.join();
  }
  bool in() const { return in_; }
  int rc() const { return rc_; }

 private:
  std::atomic<bool> in_{false}, release_{false};
  std::atomic<int> rc_{-1};
  std::thread t_;
};

class PercidTest : public ::testing::TestWithParam<CidMode> {
 protected:
  void SetUp() override { cid::select(GetParam()); }
  void TearDown() override {
    Lock::destroy(w_);
    cid::select(CidMode::thread);
  }
  Words w_;
};

TEST_P(PercidTest, ReadersShareAndAWriterExcludesThem) {
  ASSERT_EQ(read_lock(w_), 0);
  EXPECT_TRUE(percid::has_block(w_.index.load())) << "first use assigns a block";
  std::thread([&] {
    EXPECT_EQ(try_write(w_), EBUSY);
    EXPECT_EQ(try_read(w_), 0);
    Lock::read_unlock(w_);
  }).join();
  EXPECT_EQ(w_.state.load() & percid::kWriterBits, 0u) << "a failed trywrlock leaves no writer bit";
  Lock::read_unlock(w_);
  std::thread([&] { EXPECT_EQ(try_write(w_), 0); }).join();
  EXPECT_TRUE(Lock::write_locked(w_));
  EXPECT_EQ(try_read(w_), EBUSY);
  Lock::write_unlock(w_);
  EXPECT_FALSE(Lock::write_locked(w_));
  EXPECT_EQ(try_read(w_), 0);
  Lock::read_unlock(w_);
}

// Default kinds (reader_pref): a reader held off by a merely pending writer
// enters past it after the reader-preference bound, while the writer still
// waits for every reader (a program may hold a read lock while it waits for
// another reader to get in, as glibc's default rwlock allows).
TEST_P(PercidTest, APreferredReaderEntersPastAPendingWriterAfterTheBound) {
  ASSERT_EQ(read_lock(w_), 0);
  {
    BlockedWriter writer(w_);
    std::this_thread::sleep_for(20ms);
    ASSERT_FALSE(writer.in());
    std::thread([&] {
      timespec d = monotonic_in(2s);
      auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(Lock::read_lock(w_, WaitCtx::until(CLOCK_MONOTONIC, &d), rwsem::kReadReaderPref), 0);
      EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::nanoseconds(g_rwsem_tunables.reader_pref_ns));
      EXPECT_FALSE(writer.in()) << "the writer owns the lock while a second reader holds it";
      Lock::read_unlock(w_);
    }).join();
    EXPECT_FALSE(writer.in());
    Lock::read_unlock(w_);
    EXPECT_TRUE(eventually([&] { return writer.in(); })) << "the last reader's unlock did not let the writer in";
    EXPECT_EQ(writer.rc(), 0);
  }
  EXPECT_EQ(try_read(w_), 0);
  Lock::read_unlock(w_);
}

// A timed preferred reader waiting for the reader-preference bound still
// gives up at its own deadline (its sleep slices end there).
TEST_P(PercidTest, ATimedPreferredReaderGivesUpAtItsDeadline) {
  const uint64_t saved = g_rwsem_tunables.reader_pref_ns;
  g_rwsem_tunables.reader_pref_ns = 60'000'000'000;  // rule (b) never comes
  ASSERT_EQ(read_lock(w_), 0);
  {
    BlockedWriter writer(w_);
    std::this_thread::sleep_for(20ms);
    std::thread([&] {
      timespec d = monotonic_in(20ms);
      auto t0 = std::chrono::steady_clock::now();
      EXPECT_EQ(Lock::read_lock(w_, WaitCtx::until(CLOCK_MONOTONIC, &d), rwsem::kReadReaderPref), ETIMEDOUT);
      EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s) << "slept on past its deadline";
    }).join();
    Lock::read_unlock(w_);
    EXPECT_TRUE(eventually([&] { return writer.in(); }));
  }
  g_rwsem_tunables.reader_pref_ns = saved;
}

TEST_P(PercidTest, AWriterDrainsTheReadersAndNewReadersWaitBehindIt) {
  Events ev;
  ASSERT_EQ(read_lock(w_), 0);
  {
    BlockedWriter writer(w_);
    std::this_thread::sleep_for(20ms);
    EXPECT_FALSE(writer.in()) << "the writer got in past a reader";
    EXPECT_FALSE(Lock::write_locked(w_)) << "pending is not write-held";
    std::thread([&] {
      timespec d = monotonic_in(20ms);
      EXPECT_EQ(Lock::read_lock(w_, WaitCtx::until(CLOCK_MONOTONIC, &d)), ETIMEDOUT);
    }).join();
    if (kEvents) {
      EXPECT_GT(ev(LockEvent::percid_wlock_sleep), 0u) << "the drain spin is bounded: 20 ms of reading ends it";
    }
    Lock::read_unlock(w_);
    EXPECT_TRUE(eventually([&] { return writer.in(); })) << "the last reader's unlock did not let the writer in";
    EXPECT_EQ(writer.rc(), 0);
    EXPECT_TRUE(Lock::write_locked(w_));
  }
  EXPECT_EQ(try_read(w_), 0) << "readers are back on the fast path after the writer";
  Lock::read_unlock(w_);
}

// A reader that leaves a few microseconds after the writer began to drain is
// waited out by the writer's spin (the kernel's reader-phase budget,
// rwsem::rspin_budget_ns(): 10 µs and more), not by a futex sleep.
TEST_P(PercidTest, AWriterSpinsThroughAShortReadSectionInsteadOfSleeping) {
  if (!kEvents) GTEST_SKIP() << "needs lock events to tell a spin from a sleep";
  TwoCpus cpus;
  if (!cpus.ok()) GTEST_SKIP() << "needs two CPUs";
  ASSERT_TRUE(pin_to_cpu(cpus[0]));
  constexpr uint64_t kHoldNs = 4'000;  // well past kDrainPolls sums, within the budget
  static_assert(kHoldNs < rwsem::rspin_budget_ns(1));
  Events ev;
  bool spun = false;
  for (int attempt = 0; attempt < 50 && !spun; ++attempt) {
    const uint64_t sleeps = ev(LockEvent::percid_wlock_sleep);
    ASSERT_EQ(read_lock(w_), 0);
    std::thread wr([&] {
      ASSERT_TRUE(pin_to_cpu(cpus[1]));
      ASSERT_EQ(Lock::write_lock(w_, WaitCtx::blocking()), 0);
      Lock::write_unlock(w_);
    });
    // Busy: a sleeping check would see the writer only after its spin ended.
    const uint64_t give_up = arch::monotonic_ns() + 5'000'000'000;
    bool pending = true;
    while (pending && !writer_pending(w_)) pending = arch::monotonic_ns() < give_up;
    const uint64_t until = arch::monotonic_ns() + kHoldNs;
    while (arch::monotonic_ns() < until) arch::cpu_relax();
    Lock::read_unlock(w_);
    wr.join();
    ASSERT_TRUE(pending) << "the writer never got to drain";
    spun = ev(LockEvent::percid_wlock_sleep) == sleeps;
  }
  EXPECT_TRUE(spun) << "in 50 attempts the writer never waited out a 4 us read section without sleeping";
}

TEST_P(PercidTest, ARecursiveReaderPassesAPendingWriter) {
  Events ev;
  ASSERT_EQ(read_lock(w_), 0);
  BlockedWriter writer(w_);
  EXPECT_EQ(try_read(w_, /*holds_reads=*/true), 0);
  EXPECT_EQ(read_lock(w_, /*holds_reads=*/true), 0);
  EXPECT_FALSE(writer.in());
  Lock::read_unlock(w_);
  Lock::read_unlock(w_);
  EXPECT_FALSE(writer.in()) << "one read is still held";
  Lock::read_unlock(w_);
  EXPECT_TRUE(eventually([&] { return writer.in(); }));
  if (kEvents) { EXPECT_EQ(ev(LockEvent::percid_rlock_recursive), 2u); }
}

// The epoch a draining writer's CAS checks does not wrap where a 32-bit word
// would (27 bits): started at its last 27-bit value, recursive readers carry
// it into the high half while the writer sleeps on the low half, and the
// writer still waits for them and then gets in.
TEST_P(PercidTest, TheEpochCarriesPastThirtyTwoBitsAndTheWriterStillWaits) {
  ASSERT_EQ(read_lock(w_), 0);  // assigns the block
  const uint64_t last_27_bit_epoch = (uint64_t{1} << 32) - percid::kEpochOne;
  w_.state.store(last_27_bit_epoch);
  BlockedWriter writer(w_);
  EXPECT_EQ(read_lock(w_, /*holds_reads=*/true), 0);
  EXPECT_EQ(w_.state.load() >> 32, 1u) << "the epoch wrapped at 27 bits";
  Lock::read_unlock(w_);
  EXPECT_FALSE(writer.in()) << "one read is still held";
  Lock::read_unlock(w_);
  EXPECT_TRUE(eventually([&] { return writer.in(); }));
  EXPECT_EQ(writer.rc(), 0);
}

TEST_P(PercidTest, TheWriterNonrecursiveKindKeepsEvenHoldersBehindAPendingWriter) {
  ASSERT_EQ(read_lock(w_, false, true), 0);
  BlockedWriter writer(w_);
  EXPECT_EQ(try_read(w_, /*holds_reads=*/true, /*behind_writers=*/true), EBUSY);
  Lock::read_unlock(w_);
  EXPECT_TRUE(eventually([&] { return writer.in(); }));
}

TEST_P(PercidTest, ATimedWriterGivesUpAndReadersKeepTheFastPath) {
  ASSERT_EQ(read_lock(w_), 0);
  std::thread([&] {
    timespec d = monotonic_in(20ms);
    EXPECT_EQ(Lock::write_lock(w_, WaitCtx::until(CLOCK_MONOTONIC, &d)), ETIMEDOUT);
  }).join();
  EXPECT_EQ(w_.state.load() & percid::kWriterBits, 0u);
  EXPECT_EQ(Lock::Sem::write_locked(w_), false) << "the rwsem write lock was given back";
  EXPECT_TRUE(Lock::read_fast(w_));
  Lock::read_unlock(w_);
  Lock::read_unlock(w_);
  EXPECT_EQ(try_write(w_), 0);
  Lock::write_unlock(w_);
}

TEST_P(PercidTest, ReadersEnteringBehindAWriterAreCountedWhenItLeaves) {
  Events ev;
  ASSERT_EQ(try_write(w_), 0);
  std::atomic<int> in{0};
  std::vector<std::thread> readers;
  for (int i = 0; i < 3; ++i)
    readers.emplace_back([&] {
      EXPECT_EQ(read_lock(w_), 0);
      ++in;
      while (in.load() < 3) std::this_thread::yield();  // all three hold it at once
      Lock::read_unlock(w_);
    });
  EXPECT_TRUE(eventually([&] { return Lock::Sem::waiters(w_) == 3; })) << "readers did not queue on the rwsem";
  EXPECT_EQ(in.load(), 0);
  Lock::write_unlock(w_);
  for (auto& t : readers) t.join();
  EXPECT_EQ(percid::readers(w_.index.load()), 0u);
  if (kEvents) { EXPECT_EQ(ev(LockEvent::percid_rlock_slow), 3u); }
}

// Readers and writers on plain (non-atomic) data: a reader must see both
// halves equal, and every write must survive.
TEST_P(PercidTest, StressKeepsTheInvariantAndEveryWrite) {
  long a = 0, b = 0;
  std::atomic<long> writes{0}, torn{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&, t] {
      for (int k = 0; k < 20000; ++k) {
        if ((k + t) % 10 == 0) {
          ASSERT_EQ(Lock::write_lock(w_, WaitCtx::blocking()), 0);
          ++a;
          ++b;
          ++writes;
          Lock::write_unlock(w_);
        } else {
          ASSERT_EQ(read_lock(w_), 0);
          if (a != b) ++torn;
          Lock::read_unlock(w_);
        }
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(torn.load(), 0);
  EXPECT_EQ(a, writes.load());
  EXPECT_EQ(percid::readers(w_.index.load()), 0u);
}

INSTANTIATE_TEST_SUITE_P(Cids, PercidTest, every_cid(), cid_param_name);

// --------------------------------------------------------- allocator-specific

class PercidArena : public ::testing::Test {
 protected:
  void TearDown() override { cid::select(CidMode::thread); }
};

// global: a sleep gives the reader's id back and another thread takes it, so
// the unlock decrements a different slot than the lock incremented.
TEST_F(PercidArena, AReaderWhoseIdChangesStillBalancesTheSum) {
  cid::select(CidMode::global);
  Words w;
  ASSERT_EQ(read_lock(w), 0);
  uint32_t at_lock = cid::current();
  sleep_in_lockswap();
  std::atomic<bool> taken{false}, done{false};
  std::thread other([&] {
    EXPECT_EQ(cid::current(), at_lock);
    taken = true;
    while (!done) std::this_thread::yield();
  });
  while (!taken) std::this_thread::yield();
  EXPECT_NE(cid::current(), at_lock);
  Lock::read_unlock(w);
  EXPECT_EQ(percid::readers(w.index.load()), 0u);
  EXPECT_EQ(try_write(w), 0) << "a writer sees the sum drained";
  Lock::write_unlock(w);
  done = true;
  other.join();
  Lock::destroy(w);
}

TEST_F(PercidArena, BlocksAreFreedAtDestroyAndTakenBackAtTheSameAddress) {
  uint32_t base = percid::blocks_in_use();
  auto w = std::make_unique<Words>();
  ASSERT_EQ(try_write(*w), 0);
  Lock::write_unlock(*w);
  uint32_t first = w->index.load();
  EXPECT_EQ(percid::blocks_in_use(), base + 1);
  Lock::destroy(*w);
  EXPECT_EQ(w->index.load(), percid::kNoBlock);
  EXPECT_EQ(percid::blocks_in_use(), base);
  ASSERT_EQ(read_lock(*w), 0);
  Lock::read_unlock(*w);
  // Re-initialised in place without destroy (memory reuse): same block again.
  new (w.get()) Words();
  ASSERT_EQ(read_lock(*w), 0);
  Lock::read_unlock(*w);
  EXPECT_EQ(w->index.load(), first);
  EXPECT_EQ(percid::blocks_in_use(), base + 1);
  Lock::destroy(*w);
  EXPECT_EQ(percid::blocks_in_use(), base);
}

// glibc's destroy leaves a held lock working: a busy lock keeps its block
// and its state, and gives the block back at a destroy once idle.
TEST_F(PercidArena, DestroyingABusyLockKeepsItWorking) {
  uint32_t base = percid::blocks_in_use();
  Words w;
  ASSERT_EQ(try_write(w), 0);
  uint32_t block = w.index.load();
  Lock::destroy(w);
  EXPECT_EQ(w.index.load(), block);
  EXPECT_TRUE(Lock::write_locked(w)) << "destroy dropped the write lock";
  Lock::write_unlock(w);
  ASSERT_EQ(read_lock(w), 0);
  Lock::destroy(w);
  EXPECT_EQ(percid::readers(w.index.load()), 1u) << "destroy dropped the read hold";
  std::thread([&] { EXPECT_EQ(try_write(w), EBUSY); }).join();
  Lock::read_unlock(w);
  ASSERT_EQ(try_write(w), 0);
  Lock::write_unlock(w);
  Lock::destroy(w);
  EXPECT_EQ(w.index.load(), percid::kNoBlock);
  EXPECT_EQ(percid::blocks_in_use(), base);
}

TEST_F(PercidArena, WhenBlocksRunOutLocksRunAsPlainRwsems) {
  Events ev;
  uint32_t base = percid::blocks_in_use();
  constexpr size_t kLocks = percid::kMaxLocks + 20;
  auto locks = std::make_unique<Words[]>(kLocks);
  size_t plain = 0;
  for (size_t i = 0; i < kLocks; ++i) {
    Words& w = locks[i];
    ASSERT_EQ(read_lock(w), 0);
    plain += w.index.load() == percid::kPlainRwsem;
    std::thread([&] { EXPECT_EQ(try_write(w), EBUSY); }).join();
    Lock::read_unlock(w);
    ASSERT_EQ(try_write(w), 0);
    EXPECT_TRUE(Lock::write_locked(w));
    Lock::write_unlock(w);
  }
  EXPECT_GE(plain, 20u);
  if (kEvents) { EXPECT_EQ(ev(LockEvent::percid_plain), plain); }
  for (size_t i = 0; i < kLocks; ++i) Lock::destroy(locks[i]);
  EXPECT_EQ(percid::blocks_in_use(), base);
}

}  // namespace
}  // namespace lockswap
