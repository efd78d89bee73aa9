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

}  // namespace
