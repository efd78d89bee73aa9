// tests/behaviour/rwlock_test.cpp — pthread_rwlock_* behaviour as glibc 2.36
// implements it, for every way of making an rwlock and every kind.
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/common/test_util.h"

namespace {

using lstest::deadline_in;
using lstest::Holder;
using lstest::kGenerousMs;
using lstest::kShortMs;
using lstest::on_other_thread;
using lstest::reached;
using lstest::Sem;

enum class Origin {
  kStaticInitializer,               // PTHREAD_RWLOCK_INITIALIZER
  kMemsetZero,                      // zero memory, never initialised
  kInitNullAttr,                    // pthread_rwlock_init(l, NULL)
  kStaticWriterNonrecursive,        // PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP
  kAttrPreferReader,                // setkind_np(PTHREAD_RWLOCK_PREFER_READER_NP)
  kAttrPreferWriter,                // setkind_np(PTHREAD_RWLOCK_PREFER_WRITER_NP) (glibc: reader-preferring)
  kAttrPreferWriterNonrecursive,    // setkind_np(PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP)
};

const char* origin_name(Origin o) {
  switch (o) {
    case Origin::kStaticInitializer: return "StaticInitializer";
    case Origin::kMemsetZero: return "MemsetZero";
    case Origin::kInitNullAttr: return "InitNullAttr";
    case Origin::kStaticWriterNonrecursive: return "StaticWriterNonrecursive";
    case Origin::kAttrPreferReader: return "AttrPreferReader";
    case Origin::kAttrPreferWriter: return "AttrPreferWriter";
    case Origin::kAttrPreferWriterNonrecursive: return "AttrPreferWriterNonrecursive";
  }
  return "Unknown";
}

int kind_of(Origin o) {
  switch (o) {
    case Origin::kStaticWriterNonrecursive:
    case Origin::kAttrPreferWriterNonrecursive: return PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP;
    case Origin::kAttrPreferWriter: return PTHREAD_RWLOCK_PREFER_WRITER_NP;
    default: return PTHREAD_RWLOCK_PREFER_READER_NP;
  }
}

class RwlockTest : public testing::TestWithParam<Origin> {
 protected:
  void SetUp() override {
    l_ = lstest::malloc_filled<pthread_rwlock_t>(0x5a);
    ASSERT_NE(l_, nullptr);
    static const pthread_rwlock_t kDefault = PTHREAD_RWLOCK_INITIALIZER;
    static const pthread_rwlock_t kWriterNonrecursive = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
    switch (GetParam()) {
      case Origin::kStaticInitializer: *l_ = kDefault; break;
      case Origin::kMemsetZero: memset(static_cast<void*>(l_), 0, sizeof *l_); break;
      case Origin::kInitNullAttr: ASSERT_EQ(pthread_rwlock_init(l_, nullptr), 0); break;
      case Origin::kStaticWriterNonrecursive: *l_ = kWriterNonrecursive; break;
      default: ASSERT_EQ(init_with_param_kind(), 0);
    }
  }
  void TearDown() override {
    EXPECT_EQ(pthread_rwlock_destroy(l_), 0);
    free(l_);
  }

  // pthread_rwlock_init of l_ with the kind the parameter names.
  int init_with_param_kind() { return lstest::init_rwlock_of_kind(l_, kind_of(GetParam())); }
  bool writer_nonrecursive() const { return kind_of(GetParam()) == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP; }

  std::unique_ptr<Holder> hold_write() {
    auto h = std::make_unique<Holder>([this] { return pthread_rwlock_wrlock(l_); },
                                      [this] { return pthread_rwlock_unlock(l_); });
    EXPECT_EQ(h->acquire_rc(), 0);
    return h;
  }
  std::unique_ptr<Holder> hold_read() {
    auto h = std::make_unique<Holder>([this] { return pthread_rwlock_rdlock(l_); },
                                      [this] { return pthread_rwlock_unlock(l_); });
    EXPECT_EQ(h->acquire_rc(), 0);
    return h;
  }
  // From a fresh thread: try an acquisition, undo it if it succeeded.
  int other_try(bool write) {
    return on_other_thread([this, write] {
      int rc = write ? pthread_rwlock_trywrlock(l_) : pthread_rwlock_tryrdlock(l_);
      if (rc == 0) { EXPECT_EQ(pthread_rwlock_unlock(l_), 0); }
      return rc;
    });
  }

  // l_ works as a free lock does: write-held, it keeps another thread's
  // reader out; read-held, another thread's writer. Free again on return.
  void expect_excludes_like_a_free_lock() {
    EXPECT_EQ(pthread_rwlock_wrlock(l_), 0);
    EXPECT_EQ(other_try(false), EBUSY);
    EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
    EXPECT_EQ(pthread_rwlock_rdlock(l_), 0);
    EXPECT_EQ(other_try(true), EBUSY);
    EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  }

  // A writer thread queued behind the caller's lock: a clockwrlock with a
  // deadline `ms` away, its result in `rc`; on success it keeps the lock
  // `hold_us` before unlocking. Returns once the writer sleeps in the lock.
  std::thread queue_writer(int64_t ms, std::atomic<int>& rc, useconds_t hold_us) {
    Sem started;
    std::atomic<pid_t> tid{0};
    std::thread w([this, ms, &rc, hold_us, &started, &tid] {
      tid = lstest::current_tid();
      started.post();
      timespec d = deadline_in(CLOCK_MONOTONIC, ms);
      rc = pthread_rwlock_clockwrlock(l_, CLOCK_MONOTONIC, &d);
      if (rc != 0) return;
      usleep(hold_us);
      EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
    });
    EXPECT_TRUE(started.wait());
    lstest::settle_until_blocked(tid);
    return w;
  }

  pthread_rwlock_t* l_ = nullptr;
};

std::string param_name(const testing::TestParamInfo<Origin>& info) { return origin_name(info.param); }
void PrintTo(Origin o, std::ostream* os) { *os << origin_name(o); }

TEST_P(RwlockTest, ReadAndWriteLockUnlockReturnZero) {
  EXPECT_EQ(pthread_rwlock_rdlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_wrlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_tryrdlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

TEST_P(RwlockTest, ManyReadersHoldItAtTheSameTime) {
  constexpr int kReaders = 4;
  Sem have_it, release;
  std::vector<std::thread> readers;
  std::atomic<int> ok{0};
  for (int i = 0; i < kReaders; ++i) {
    readers.emplace_back([&] {
      timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
      int rc = pthread_rwlock_timedrdlock(l_, &d);
      EXPECT_EQ(rc, 0);
      if (rc == 0) ++ok;
      have_it.post();
      release.wait();
      if (rc == 0) { EXPECT_EQ(pthread_rwlock_unlock(l_), 0); }
    });
  }
  for (int i = 0; i < kReaders; ++i) EXPECT_TRUE(have_it.wait()) << "readers did not share the lock";
  EXPECT_EQ(ok.load(), kReaders);
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), EBUSY);
  EXPECT_EQ(pthread_rwlock_tryrdlock(l_), 0) << "one more reader, nobody waiting to write";
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  for (int i = 0; i < kReaders; ++i) release.post();
  for (auto& t : readers) t.join();
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

TEST_P(RwlockTest, TryLocksAgainstAReaderOfAnotherThread) {
  auto h = hold_read();
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), EBUSY);
  EXPECT_EQ(pthread_rwlock_tryrdlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(other_try(true), EBUSY);
  EXPECT_EQ(other_try(false), 0);
  EXPECT_EQ(h->release(), 0);
  EXPECT_EQ(other_try(true), 0);
}

TEST_P(RwlockTest, TryLocksAgainstAWriterOfAnotherThread) {
  auto h = hold_write();
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), EBUSY);
  EXPECT_EQ(pthread_rwlock_tryrdlock(l_), EBUSY);
  EXPECT_EQ(h->release(), 0);
  EXPECT_EQ(pthread_rwlock_tryrdlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

TEST_P(RwlockTest, BlockingAcquisitionsByTheWriteOwnerAreEdeadlk) {
  ASSERT_EQ(pthread_rwlock_wrlock(l_), 0);
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  timespec dm = deadline_in(CLOCK_MONOTONIC, kShortMs);
  EXPECT_EQ(pthread_rwlock_rdlock(l_), EDEADLK);
  EXPECT_EQ(pthread_rwlock_wrlock(l_), EDEADLK);
  EXPECT_EQ(pthread_rwlock_timedrdlock(l_, &d), EDEADLK);
  EXPECT_EQ(pthread_rwlock_timedwrlock(l_, &d), EDEADLK);
  EXPECT_EQ(pthread_rwlock_clockrdlock(l_, CLOCK_MONOTONIC, &dm), EDEADLK);
  EXPECT_EQ(pthread_rwlock_clockwrlock(l_, CLOCK_MONOTONIC, &dm), EDEADLK);
  EXPECT_EQ(pthread_rwlock_clockrdlock(l_, CLOCK_REALTIME, &d), EDEADLK);
  EXPECT_EQ(pthread_rwlock_clockwrlock(l_, CLOCK_REALTIME, &d), EDEADLK);
  EXPECT_EQ(other_try(false), EBUSY);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(other_try(true), 0);
}

// glibc's try-functions do not look at __cur_writer: the write owner gets
// EBUSY, like everybody else, not EDEADLK.
TEST_P(RwlockTest, TryLocksByTheWriteOwnerAreEbusy) {
  ASSERT_EQ(pthread_rwlock_wrlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_tryrdlock(l_), EBUSY);
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), EBUSY);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(other_try(true), 0);
}

TEST_P(RwlockTest, TimedAcquisitionsTimeOutAgainstAWriter) {
  auto h = hold_write();
  struct Case {
    const char* what;
    clockid_t clock;
    std::function<int(const timespec*)> op;
  };
  const Case cases[] = {
      {"timedrdlock", CLOCK_REALTIME, [this](const timespec* t) { return pthread_rwlock_timedrdlock(l_, t); }},
      {"timedwrlock", CLOCK_REALTIME, [this](const timespec* t) { return pthread_rwlock_timedwrlock(l_, t); }},
      {"clockrdlock(REALTIME)", CLOCK_REALTIME,
       [this](const timespec* t) { return pthread_rwlock_clockrdlock(l_, CLOCK_REALTIME, t); }},
      {"clockwrlock(REALTIME)", CLOCK_REALTIME,
       [this](const timespec* t) { return pthread_rwlock_clockwrlock(l_, CLOCK_REALTIME, t); }},
      {"clockrdlock(MONOTONIC)", CLOCK_MONOTONIC,
       [this](const timespec* t) { return pthread_rwlock_clockrdlock(l_, CLOCK_MONOTONIC, t); }},
      {"clockwrlock(MONOTONIC)", CLOCK_MONOTONIC,
       [this](const timespec* t) { return pthread_rwlock_clockwrlock(l_, CLOCK_MONOTONIC, t); }},
  };
  for (const Case& c : cases) {
    timespec d = deadline_in(c.clock, kShortMs);
    EXPECT_EQ(c.op(&d), ETIMEDOUT) << c.what;
    EXPECT_TRUE(reached(c.clock, d)) << c.what << " returned before its deadline";
  }
  EXPECT_EQ(h->release(), 0);
  // Timed-out waiters left nothing behind.
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
  EXPECT_EQ(pthread_rwlock_clockrdlock(l_, CLOCK_MONOTONIC, &d), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

TEST_P(RwlockTest, TimedWriteAcquisitionsTimeOutAgainstAReader) {
  auto h = hold_read();
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  EXPECT_EQ(pthread_rwlock_timedwrlock(l_, &d), ETIMEDOUT);
  EXPECT_TRUE(reached(CLOCK_REALTIME, d));
  timespec dm = deadline_in(CLOCK_MONOTONIC, kShortMs);
  EXPECT_EQ(pthread_rwlock_clockwrlock(l_, CLOCK_MONOTONIC, &dm), ETIMEDOUT);
  EXPECT_TRUE(reached(CLOCK_MONOTONIC, dm));
  // A timed-out writer must not keep new readers out (writer-preferring kinds).
  EXPECT_EQ(other_try(false), 0);
  EXPECT_EQ(h->release(), 0);
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

TEST_P(RwlockTest, TimedAcquisitionSucceedsWhenTheWriterLeavesInTime) {
  auto h = std::make_unique<Holder>([this] { return pthread_rwlock_wrlock(l_); },
                                    [this] {
                                      usleep(20'000);
                                      return pthread_rwlock_unlock(l_);
                                    });
  std::thread releaser([&] { h->release(); });
  timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
  EXPECT_EQ(pthread_rwlock_clockwrlock(l_, CLOCK_MONOTONIC, &d), 0);
  releaser.join();
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

// glibc validates the clock and tv_nsec before anything else, so these are
// EINVAL even when the lock is free, and even for the write owner.
TEST_P(RwlockTest, BadClockOrNanosecondsAreEinvalEvenUncontended) {
  timespec ok = deadline_in(CLOCK_MONOTONIC, kShortMs);
  EXPECT_EQ(pthread_rwlock_clockrdlock(l_, CLOCK_PROCESS_CPUTIME_ID, &ok), EINVAL);
  EXPECT_EQ(pthread_rwlock_clockwrlock(l_, CLOCK_PROCESS_CPUTIME_ID, &ok), EINVAL);
  EXPECT_EQ(pthread_rwlock_clockrdlock(l_, CLOCK_THREAD_CPUTIME_ID, &ok), EINVAL);
  for (long bad : {1'000'000'000L, -1L}) {
    timespec t{time(nullptr) + 1, bad};
    EXPECT_EQ(pthread_rwlock_timedrdlock(l_, &t), EINVAL) << bad;
    EXPECT_EQ(pthread_rwlock_timedwrlock(l_, &t), EINVAL) << bad;
    EXPECT_EQ(pthread_rwlock_clockrdlock(l_, CLOCK_MONOTONIC, &t), EINVAL) << bad;
    EXPECT_EQ(pthread_rwlock_clockwrlock(l_, CLOCK_REALTIME, &t), EINVAL) << bad;
  }
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0) << "a failed call took the lock";
  // Still EINVAL (not EDEADLK) for the write owner.
  timespec bad{time(nullptr) + 1, 1'000'000'000L};
  EXPECT_EQ(pthread_rwlock_timedrdlock(l_, &bad), EINVAL);
  EXPECT_EQ(pthread_rwlock_timedwrlock(l_, &bad), EINVAL);
  EXPECT_EQ(pthread_rwlock_clockrdlock(l_, CLOCK_PROCESS_CPUTIME_ID, &ok), EINVAL);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

TEST_P(RwlockTest, NegativeSecondsTimeOutWhenContendedAndSucceedWhenFree) {
  timespec t{-1, 0};
  {
    auto h = hold_write();
    EXPECT_EQ(pthread_rwlock_timedrdlock(l_, &t), ETIMEDOUT);
    EXPECT_EQ(pthread_rwlock_timedwrlock(l_, &t), ETIMEDOUT);
    EXPECT_EQ(pthread_rwlock_clockrdlock(l_, CLOCK_MONOTONIC, &t), ETIMEDOUT);
  }
  EXPECT_EQ(pthread_rwlock_timedrdlock(l_, &t), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_timedwrlock(l_, &t), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

TEST_P(RwlockTest, BlockedReaderGetsInOnlyAfterTheWriterLeaves) {
  ASSERT_EQ(pthread_rwlock_wrlock(l_), 0);
  std::atomic<int> stage{0};
  Sem started;
  pid_t tid = 0;
  std::thread r([&] {
    tid = lstest::current_tid();
    started.post();
    EXPECT_EQ(pthread_rwlock_rdlock(l_), 0);
    EXPECT_EQ(stage.load(), 1);
    EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  });
  ASSERT_TRUE(started.wait());
  lstest::settle_until_blocked(tid);
  stage = 1;
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  r.join();
}

// Reader-preferring kinds (the default): a thread that already holds a read
// lock may read-lock again while a writer is queued; it must not deadlock.
TEST_P(RwlockTest, RecursiveReadWhileAWriterWaitsSucceeds) {
  if (writer_nonrecursive()) GTEST_SKIP() << "the writer-nonrecursive kind forbids recursive reads";
  ASSERT_EQ(pthread_rwlock_rdlock(l_), 0);
  Sem started;
  pid_t wtid = 0;
  std::atomic<int> writer_rc{-1};
  std::atomic<bool> writer_in{false};
  std::thread w([&] {
    wtid = lstest::current_tid();
    started.post();
    timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
    writer_rc = pthread_rwlock_clockwrlock(l_, CLOCK_MONOTONIC, &d);
    writer_in = true;
    if (writer_rc == 0) { EXPECT_EQ(pthread_rwlock_unlock(l_), 0); }
  });
  ASSERT_TRUE(started.wait());
  lstest::settle_until_blocked(wtid);
  timespec d = deadline_in(CLOCK_REALTIME, kGenerousMs);
  EXPECT_EQ(pthread_rwlock_timedrdlock(l_, &d), 0) << "recursive read lock blocked behind a waiting writer";
  EXPECT_EQ(pthread_rwlock_tryrdlock(l_), 0) << "recursive tryrdlock refused while a writer waits";
  timespec dm = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
  EXPECT_EQ(pthread_rwlock_clockrdlock(l_, CLOCK_MONOTONIC, &dm), 0);
  EXPECT_FALSE(writer_in.load()) << "writer got in while readers held the lock";
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_FALSE(writer_in.load());
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  w.join();
  EXPECT_EQ(writer_rc.load(), 0);
}

// PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP: while a writer waits behind a
// reader, a new reader (one holding nothing) must not get in.
TEST_P(RwlockTest, WriterNonrecursiveKindKeepsNewReadersOutWhileAWriterWaits) {
  if (!writer_nonrecursive()) GTEST_SKIP() << "only for the writer-nonrecursive kind";
  ASSERT_EQ(pthread_rwlock_rdlock(l_), 0);
  std::atomic<int> writer_rc{-1};
  std::thread w = queue_writer(kGenerousMs, writer_rc, 10'000);
  int try_rc = -1, timed_rc = -1;
  bool deadline_reached = false;
  std::thread newcomer([&] {
    try_rc = pthread_rwlock_tryrdlock(l_);
    if (try_rc == 0) pthread_rwlock_unlock(l_);
    timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
    timed_rc = pthread_rwlock_timedrdlock(l_, &d);
    deadline_reached = reached(CLOCK_REALTIME, d);
    if (timed_rc == 0) pthread_rwlock_unlock(l_);
  });
  newcomer.join();
  EXPECT_EQ(try_rc, EBUSY) << "new reader got in past a queued writer";
  EXPECT_EQ(timed_rc, ETIMEDOUT) << "new reader got in past a queued writer";
  EXPECT_TRUE(deadline_reached);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  w.join();
  EXPECT_EQ(writer_rc.load(), 0);
  EXPECT_EQ(other_try(false), 0);
}

// A reader blocked behind a queued writer (writer-preferring or writer-fair
// implementations queue it) must be let in when that writer gives up.
TEST_P(RwlockTest, ReaderBlockedBehindAWriterThatTimesOutGetsIn) {
  ASSERT_EQ(pthread_rwlock_rdlock(l_), 0);
  std::atomic<int> writer_rc{-1};
  std::thread w = queue_writer(150, writer_rc, 0);
  std::atomic<int> reader_rc{-1};
  std::thread r([&] {
    timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
    reader_rc = pthread_rwlock_clockrdlock(l_, CLOCK_MONOTONIC, &d);
    if (reader_rc == 0) pthread_rwlock_unlock(l_);
  });
  w.join();
  EXPECT_EQ(writer_rc.load(), ETIMEDOUT);
  r.join();  // a reader stranded behind the departed writer would wait kGenerousMs
  EXPECT_EQ(reader_rc.load(), 0) << "reader was not let in after the writer it queued behind gave up";
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

// A reader asking for the write lock waits for itself: glibc times out.
TEST_P(RwlockTest, TimedWriteLockByAReaderOfTheSameThreadTimesOut) {
  ASSERT_EQ(pthread_rwlock_rdlock(l_), 0);
  timespec d = deadline_in(CLOCK_REALTIME, kShortMs);
  EXPECT_EQ(pthread_rwlock_timedwrlock(l_, &d), ETIMEDOUT);
  EXPECT_TRUE(reached(CLOCK_REALTIME, d));
  EXPECT_EQ(other_try(false), 0) << "the timed-out writer left readers blocked";
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(other_try(true), 0);
}

TEST_P(RwlockTest, DestroyThenInitAgainWorks) {
  ASSERT_EQ(pthread_rwlock_destroy(l_), 0);
  ASSERT_EQ(init_with_param_kind(), 0);
  expect_excludes_like_a_free_lock();
}

// Destroying or re-initialising a lock that is in use is undefined in POSIX,
// but programs do it, and glibc 2.36's destroy of a private rwlock does
// nothing at all while its init only rewrites the object: the lock keeps
// working. These are glibc's results (the glibc column checks them).
TEST_P(RwlockTest, DestroyWhileWriteHeldLeavesTheLockUsable) {
  ASSERT_EQ(pthread_rwlock_wrlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_destroy(l_), 0);
  EXPECT_EQ(other_try(false), EBUSY) << "destroy released the write lock";
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0) << "the unlock after destroy left the lock taken";
  EXPECT_EQ(other_try(false), EBUSY);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_tryrdlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

TEST_P(RwlockTest, DestroyWhileReadHeldLeavesTheLockUsable) {
  auto h = hold_read();
  EXPECT_EQ(pthread_rwlock_destroy(l_), 0);
  EXPECT_EQ(other_try(true), EBUSY) << "destroy dropped the read hold";
  EXPECT_EQ(other_try(false), 0);
  EXPECT_EQ(h->release(), 0);
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0) << "the read unlock after destroy left the lock taken";
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(other_try(false), 0);
}

// Waiters queued when the lock is destroyed keep waiting and get it in turn.
TEST_P(RwlockTest, DestroyWithWaitersLetsThemFinish) {
  ASSERT_EQ(pthread_rwlock_wrlock(l_), 0);
  std::atomic<int> reader_rc{-1}, writer_rc{-1};
  Sem started;
  pid_t rtid = 0, wtid = 0;
  auto waiter = [&](bool write, pid_t* tid, std::atomic<int>* rc) {
    return std::thread([=, this, &started] {
      *tid = lstest::current_tid();
      started.post();
      timespec d = deadline_in(CLOCK_MONOTONIC, kGenerousMs);
      *rc = write ? pthread_rwlock_clockwrlock(l_, CLOCK_MONOTONIC, &d) : pthread_rwlock_clockrdlock(l_, CLOCK_MONOTONIC, &d);
      if (*rc == 0) { EXPECT_EQ(pthread_rwlock_unlock(l_), 0); }
    });
  };
  std::thread r = waiter(false, &rtid, &reader_rc);
  std::thread w = waiter(true, &wtid, &writer_rc);
  ASSERT_TRUE(started.wait());
  ASSERT_TRUE(started.wait());
  lstest::settle_until_blocked(rtid);
  lstest::settle_until_blocked(wtid);
  EXPECT_EQ(pthread_rwlock_destroy(l_), 0);
  EXPECT_EQ(reader_rc.load(), -1) << "a waiter got in while the lock was write-held";
  EXPECT_EQ(writer_rc.load(), -1) << "a waiter got in while the lock was write-held";
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  r.join();
  w.join();
  EXPECT_EQ(reader_rc.load(), 0);
  EXPECT_EQ(writer_rc.load(), 0);
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

// Destroy does nothing in glibc: the object works on without a new init.
TEST_P(RwlockTest, UseAfterDestroyWorksAsBefore) {
  ASSERT_EQ(pthread_rwlock_rdlock(l_), 0);
  ASSERT_EQ(pthread_rwlock_unlock(l_), 0);
  ASSERT_EQ(pthread_rwlock_destroy(l_), 0);
  expect_excludes_like_a_free_lock();
  EXPECT_EQ(pthread_rwlock_destroy(l_), 0);
  ASSERT_EQ(init_with_param_kind(), 0);
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
}

TEST_P(RwlockTest, InitAgainWithoutDestroyGivesAFreeLock) {
  ASSERT_EQ(pthread_rwlock_rdlock(l_), 0);
  ASSERT_EQ(pthread_rwlock_unlock(l_), 0);
  ASSERT_EQ(init_with_param_kind(), 0);
  EXPECT_EQ(pthread_rwlock_trywrlock(l_), 0);
  EXPECT_EQ(other_try(false), EBUSY);
  EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
  EXPECT_EQ(other_try(true), 0);
}

// glibc's init rewrites a held lock as a free one; the old holder's unlock
// still returns 0. (What the lock does after that stale unlock is not
// asserted: glibc's own lock is left counting one reader too few, so its
// writers get EBUSY from then on.)
TEST_P(RwlockTest, InitOverAHeldLockGivesAFreeLock) {
  for (bool write : {true, false}) {
    SCOPED_TRACE(write ? "write-held" : "read-held");
    ASSERT_EQ(write ? pthread_rwlock_wrlock(l_) : pthread_rwlock_rdlock(l_), 0);
    ASSERT_EQ(init_with_param_kind(), 0);
    EXPECT_EQ(other_try(true), 0) << "the re-initialised lock is still taken";
    EXPECT_EQ(other_try(false), 0);
    EXPECT_EQ(pthread_rwlock_tryrdlock(l_), 0);
    EXPECT_EQ(pthread_rwlock_unlock(l_), 0);
    EXPECT_EQ(pthread_rwlock_unlock(l_), 0) << "the old holder's unlock";
    ASSERT_EQ(init_with_param_kind(), 0);  // a clean lock for the next round
  }
}

INSTANTIATE_TEST_SUITE_P(Kinds, RwlockTest,
                         testing::Values(Origin::kStaticInitializer, Origin::kMemsetZero, Origin::kInitNullAttr,
                                         Origin::kStaticWriterNonrecursive, Origin::kAttrPreferReader,
                                         Origin::kAttrPreferWriter, Origin::kAttrPreferWriterNonrecursive),
                         param_name);

TEST(RwlockAttr, KindRoundTripsAndInvalidKindIsEinval) {
  lstest::expect_attr_setting(pthread_rwlockattr_init, pthread_rwlockattr_destroy, pthread_rwlockattr_getkind_np,
                              pthread_rwlockattr_setkind_np, int{PTHREAD_RWLOCK_DEFAULT_NP}, 42,
                              {int{PTHREAD_RWLOCK_PREFER_READER_NP}, int{PTHREAD_RWLOCK_PREFER_WRITER_NP},
                               int{PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP}});
}

pthread_rwlock_t g_rwlock = PTHREAD_RWLOCK_INITIALIZER;
pthread_rwlock_t g_rwlock_wn = PTHREAD_RWLOCK_WRITER_NONRECURSIVE_INITIALIZER_NP;
pthread_rwlock_t g_rwlock_bss;

TEST(RwlockStatic, GlobalStaticAndZeroRwlocksWork) {
  for (pthread_rwlock_t* l : {&g_rwlock, &g_rwlock_wn, &g_rwlock_bss}) {
    EXPECT_EQ(pthread_rwlock_rdlock(l), 0);
    EXPECT_EQ(pthread_rwlock_rdlock(l), 0);
    EXPECT_EQ(pthread_rwlock_trywrlock(l), EBUSY);
    EXPECT_EQ(pthread_rwlock_unlock(l), 0);
    EXPECT_EQ(pthread_rwlock_unlock(l), 0);
    EXPECT_EQ(pthread_rwlock_wrlock(l), 0);
    EXPECT_EQ(pthread_rwlock_rdlock(l), EDEADLK);
    EXPECT_EQ(pthread_rwlock_unlock(l), 0);
  }
}

}  // namespace
