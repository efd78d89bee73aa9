// tests/wtlock/wtlock_test.cpp — WiredTiger's rwlock functions under every
// LOCKSWAP_WTLOCK value (off and wt included), on a real connection.
//
// The program calls the eight __wt_* functions itself, as WiredTiger's own
// code does, on 40-byte 8-aligned lock objects of its own, each thread with
// its own session: writers exclusive, readers concurrent, the try functions'
// 0/EBUSY, init/destroy repeated, zero-filled locks, the statistics offsets
// WiredTiger's callers own, and what the variant leaves in the condition
// pointers (nothing allocated by a swapped variant).
#include <errno.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "tests/wtlock/wt_harness.h"

namespace {

constexpr int kThreads = 4;
constexpr int kRounds = 20000;

class WtlockTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(wt_test_open(&db_), 0); }
  void TearDown() override {
    for (WT_SESSION* s : sessions_) s->close(s, nullptr);
    wt_test_close(&db_);
  }
  // One session per caller: WiredTiger's sessions are single-threaded.
  WT_SESSION* session() {
    WT_SESSION* s = wt_test_session(&db_);
    EXPECT_NE(s, nullptr);
    std::lock_guard<std::mutex> g(m_);
    sessions_.push_back(s);
    return s;
  }
  // fn(session, i) on kThreads threads, each with a session of its own.
  template <class Fn>
  void on_threads(Fn fn) {
    std::vector<WT_SESSION*> ss;
    for (int i = 0; i < kThreads; ++i) ss.push_back(session());
    std::vector<std::thread> ts;
    for (int i = 0; i < kThreads; ++i) ts.emplace_back([&fn, s = ss[i], i] { fn(s, i); });
    for (auto& t : ts) t.join();
  }
  wt_test_db db_{};
  std::mutex m_;
  std::vector<WT_SESSION*> sessions_;
};

void* cond_readers(wt_test_rwlock& l) {
  void* p;
  memcpy(&p, l.bytes + WT_TEST_COND_READERS_AT, sizeof p);
  return p;
}

TEST_F(WtlockTest, WritersAreExclusive) {
  wt_test_rwlock l{};
  WT_SESSION* s0 = session();
  ASSERT_EQ(__wt_rwlock_init(s0, &l), 0);
  std::atomic<int> inside{0};
  long counter = 0;  // guarded by the write lock only
  on_threads([&](WT_SESSION* s, int) {
    for (int r = 0; r < kRounds; ++r) {
      __wt_writelock(s, &l);
      EXPECT_EQ(inside.fetch_add(1), 0);
      ++counter;
      inside.fetch_sub(1);
      __wt_writeunlock(s, &l);
    }
  });
  EXPECT_EQ(counter, static_cast<long>(kThreads) * kRounds);
  __wt_rwlock_destroy(s0, &l);
}

TEST_F(WtlockTest, ReadersShareWritersWait) {
  wt_test_rwlock l{};
  WT_SESSION* a = session();
  WT_SESSION* b = session();
  ASSERT_EQ(__wt_rwlock_init(a, &l), 0);
  __wt_readlock(a, &l);
  std::atomic<int> step{0};
  std::thread other([&] {
    __wt_readlock(b, &l);  // a second reader gets in while the first holds it
    step = 1;
    EXPECT_EQ(__wt_try_writelock(b, &l), EBUSY);
    __wt_readunlock(b, &l);
    step = 2;
  });
  other.join();
  EXPECT_EQ(step.load(), 2);
  // A writer waits for the remaining reader.
  std::atomic<bool> wrote{false};
  std::thread writer([&] {
    __wt_writelock(b, &l);
    wrote = true;
    __wt_writeunlock(b, &l);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(wrote.load());
  __wt_readunlock(a, &l);
  writer.join();
  EXPECT_TRUE(wrote.load());
  __wt_rwlock_destroy(a, &l);
}

TEST_F(WtlockTest, TryFunctionsReturnZeroOrEbusy) {
  wt_test_rwlock l{};
  WT_SESSION* a = session();
  WT_SESSION* b = session();
  ASSERT_EQ(__wt_rwlock_init(a, &l), 0);
  ASSERT_EQ(__wt_try_writelock(a, &l), 0);
  std::thread([&] {
    EXPECT_EQ(__wt_try_writelock(b, &l), EBUSY);
    EXPECT_EQ(__wt_try_readlock(b, &l), EBUSY);
  }).join();
  __wt_writeunlock(a, &l);
  ASSERT_EQ(__wt_try_readlock(a, &l), 0);
  std::thread([&] {
    EXPECT_EQ(__wt_try_writelock(b, &l), EBUSY);
    EXPECT_EQ(__wt_try_readlock(b, &l), 0);  // readers share
    __wt_readunlock(b, &l);
  }).join();
  __wt_readunlock(a, &l);
  EXPECT_EQ(__wt_try_writelock(b, &l), 0);
  __wt_writeunlock(b, &l);
  __wt_rwlock_destroy(a, &l);
}

// Readers see the pair a writer keeps equal; readers and writers mixed.
TEST_F(WtlockTest, ReadersNeverSeeAHalfWrite) {
  wt_test_rwlock l{};
  WT_SESSION* s0 = session();
  ASSERT_EQ(__wt_rwlock_init(s0, &l), 0);
  volatile long x = 0, y = 0;
  on_threads([&](WT_SESSION* s, int i) {
    for (int r = 0; r < kRounds; ++r) {
      if ((r + i) % 4 == 0) {
        __wt_writelock(s, &l);
        x = x + 1;
        y = y + 1;
        __wt_writeunlock(s, &l);
      } else if (r % 7 == 0 && __wt_try_readlock(s, &l) == 0) {
        EXPECT_EQ(x, y);
        __wt_readunlock(s, &l);
      } else {
        __wt_readlock(s, &l);
        EXPECT_EQ(x, y);
        __wt_readunlock(s, &l);
      }
    }
  });
  EXPECT_EQ(x, y);
  __wt_rwlock_destroy(s0, &l);
}

TEST_F(WtlockTest, InitAndDestroyRepeated) {
  WT_SESSION* s = session();
  for (int i = 0; i < 2000; ++i) {
    wt_test_rwlock l;
    memset(&l, 0xa5, sizeof l);  // init must not depend on what was there
    ASSERT_EQ(__wt_rwlock_init(s, &l), 0);
    __wt_writelock(s, &l);
    __wt_writeunlock(s, &l);
    __wt_readlock(s, &l);
    __wt_readunlock(s, &l);
    __wt_rwlock_destroy(s, &l);
  }
}

// __wt_rwlock_init sets the first four statistics offsets to -1; whatever a
// caller writes there afterwards stays (WT_RWLOCK_INIT_TRACKED).
TEST_F(WtlockTest, StatisticsOffsetsAreTheCallers) {
  WT_SESSION* s = session();
  wt_test_rwlock l{};
  ASSERT_EQ(__wt_rwlock_init(s, &l), 0);
  int16_t off[5];
  memcpy(off, l.bytes + WT_TEST_STAT_OFFSETS_AT, sizeof off);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(off[i], -1) << "offset " << i;
  // Offsets a connection would never have: WiredTiger's own functions would
  // count into them, so keep them for the swapped variants only.
  if (!wt_test_own_algorithm()) {
    const int16_t mine[5] = {11, 12, 13, 14, 15};
    memcpy(l.bytes + WT_TEST_STAT_OFFSETS_AT, mine, sizeof mine);
    __wt_writelock(s, &l);
    __wt_writeunlock(s, &l);
    __wt_readlock(s, &l);
    EXPECT_EQ(__wt_try_writelock(s, &l), EBUSY);
    __wt_readunlock(s, &l);
    memcpy(off, l.bytes + WT_TEST_STAT_OFFSETS_AT, sizeof off);
    EXPECT_EQ(memcmp(off, mine, sizeof mine), 0);
  }
  __wt_rwlock_destroy(s, &l);
}

// WiredTiger's own init allocates its condition variables; a swapped variant
// allocates nothing and its words start at zero.
TEST_F(WtlockTest, WhatInitLeavesInTheConditionPointers) {
  WT_SESSION* s = session();
  wt_test_rwlock l{};
  ASSERT_EQ(__wt_rwlock_init(s, &l), 0);
  if (wt_test_own_algorithm()) {
    EXPECT_NE(cond_readers(l), nullptr) << "WiredTiger's own init allocates the condition variables";
  } else {
    EXPECT_EQ(cond_readers(l), nullptr) << wt_test_variant() << " must allocate nothing";
    uint64_t ticket;
    memcpy(&ticket, l.bytes, sizeof ticket);
    EXPECT_EQ(ticket, 0u);
  }
  __wt_rwlock_destroy(s, &l);
}

// A zero-filled lock never initialised: uncontended under every variant;
// contended only where the variant's words need no initialisation (WiredTiger's
// own lock would sleep on a null condition variable).
TEST_F(WtlockTest, ZeroFilledLock) {
  WT_SESSION* s0 = session();
  wt_test_rwlock l{};
  __wt_writelock(s0, &l);
  __wt_writeunlock(s0, &l);
  __wt_readlock(s0, &l);
  __wt_readunlock(s0, &l);
  if (wt_test_own_algorithm()) return;
  long counter = 0;
  on_threads([&](WT_SESSION* s, int) {
    for (int r = 0; r < kRounds; ++r) {
      __wt_writelock(s, &l);
      ++counter;
      __wt_writeunlock(s, &l);
    }
  });
  EXPECT_EQ(counter, static_cast<long>(kThreads) * kRounds);
}

// A lock never initialised whose padding holds the percid record number of
// another, live lock (memory that held a copy of it: the bytes copied
// here) is destroyed, many times over, while a thread takes and releases the
// live lock. Destroy must leave the live lock's record (its reader-slot
// block, its words) alone: under percid the number at 0x12 names a record
// that the destroyed lock does not own (docs/wtlock.md, "percid"). Under the
// other values the padding is nobody's and the test holds trivially. After
// the run the live lock must be free, take a writer, and exclude.
TEST_F(WtlockTest, DestroyWithoutInitLeavesAnotherLocksRecordAlone) {
  constexpr size_t kPadAt = 0x12, kPadBytes = 2;
  WT_SESSION* a = session();
  WT_SESSION* b = session();
  WT_SESSION* c = session();
  wt_test_rwlock live{};
  ASSERT_EQ(__wt_rwlock_init(a, &live), 0);
  __wt_readlock(a, &live);  // a reader-slot block in use (percid), then idle again
  __wt_readunlock(a, &live);
  std::atomic<bool> stop{false};
  std::atomic<long> reads{0};
  std::thread reader([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      __wt_readlock(b, &live);
      __wt_readunlock(b, &live);
      reads.fetch_add(1, std::memory_order_relaxed);
    }
  });
  std::thread destroyer([&] {
    // 1.5 s, and at least 1000 reads meanwhile (a loaded machine), 20 s at most.
    const auto start = std::chrono::steady_clock::now();
    for (;;) {
      auto ran = std::chrono::steady_clock::now() - start;
      if (ran > std::chrono::seconds(20) || (ran > std::chrono::milliseconds(1500) && reads.load() >= 1000)) break;
      wt_test_rwlock stranger{};
      memcpy(stranger.bytes + kPadAt, live.bytes + kPadAt, kPadBytes);
      __wt_rwlock_destroy(c, &stranger);
    }
    stop = true;
  });
  destroyer.join();
  reader.join();

  // The live lock is free: a writer gets in, then a reader.
  ASSERT_EQ(__wt_try_writelock(a, &live), 0) << "the live lock's record was disturbed";
  __wt_writeunlock(a, &live);
  ASSERT_EQ(__wt_try_readlock(a, &live), 0);
  __wt_readunlock(a, &live);
  // It excludes: held for writing here, another thread finds it busy both
  // ways, and a reader there waits until the writer leaves.
  __wt_writelock(a, &live);
  std::atomic<bool> read_in{false};
  std::thread other([&] {
    EXPECT_EQ(__wt_try_writelock(b, &live), EBUSY);
    EXPECT_EQ(__wt_try_readlock(b, &live), EBUSY);
    __wt_readlock(b, &live);
    read_in = true;
    __wt_readunlock(b, &live);
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(read_in.load()) << "a reader got past the writer";
  __wt_writeunlock(a, &live);
  other.join();
  EXPECT_TRUE(read_in.load());
  // A lock initialised now (it may take a record or block the destroys
  // freed) is independent of the live one.
  wt_test_rwlock fresh{};
  ASSERT_EQ(__wt_rwlock_init(a, &fresh), 0);
  __wt_writelock(a, &live);
  std::thread([&] {
    EXPECT_EQ(__wt_try_writelock(b, &fresh), 0) << "the fresh lock shares the live one's record";
    __wt_writeunlock(b, &fresh);
  }).join();
  __wt_writeunlock(a, &live);
  __wt_rwlock_destroy(a, &fresh);
  __wt_rwlock_destroy(a, &live);
}

}  // namespace
