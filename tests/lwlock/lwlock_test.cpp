// tests/lwlock/lwlock_test.cpp — PostgreSQL's LWLock API as lockswap runs it
// (preload/lwlock/), on a synthetic PostgreSQL (fake_postgres.h) whose entry
// points the library redirects before main. Runs under every
// LOCKSWAP_LWLOCK variant; TEST_LWLOCK_EXPECT names the variant each tranche
// must run ("Alpha:pg,Beta:futex"; default: every tranche the LOCKSWAP_LWLOCK
// variant), checked through the lock word each leaves behind.
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>

#include "tests/common/test_util.h"
#include "tests/lwlock/fake_postgres.h"

namespace {

using lstest::run_in_child;
using lstest::start_child;
using lstest::finish_child;

constexpr int kChildren = 4;

// The main array as PostgreSQL 15 lays it out (fake_postgres.h): the fixed
// locks, the named tranches' locks (TEST_LWLOCK_NAMED of them, 3 unless
// set: two requests, of 2 locks and 1), NamedLWLockTrancheArray in the next
// two 128-byte lines, then locks 128-byte aligned as the WAL insertion
// locks are, still within a few KiB of the array: LWLocks, not the array's.
constexpr int kMaxNamed = 8;
constexpr int kTrancheArraySlots = 2;
constexpr int kAfter = 8;
constexpr int kSlots = FAKE_FIXED_LWLOCKS + kMaxNamed + kTrancheArraySlots + kAfter;
int named_locks() {
  static const int n = [] {
    const char* e = getenv("TEST_LWLOCK_NAMED");
    int v = e != nullptr ? atoi(e) : 3;
    return v < 0 ? 0 : v > kMaxNamed ? kMaxNamed : v;
  }();
  return n;
}
int main_locks() { return FAKE_FIXED_LWLOCKS + named_locks(); }

// Shared memory as PostgreSQL's: the main array and what follows it (locks
// at 0 mod 128) and, as buffer content locks sit, locks at 4 mod 8
// elsewhere; a variable, counters, each process's PGPROC and wait-event word.
struct Shared {
  FakeLwlockPadded locks[kSlots];
  char shift[4];
  FakeLwlock odd[2];
  uint64_t var;
  long counter;
  std::atomic<int> inside_writer, inside_readers, ready;
  FakeProc procs[kChildren + 2];
  uint32_t wait_event[kChildren + 2];
};

class LwlockTest : public ::testing::Test {
 protected:
  void SetUp() override {
    void* p = mmap(nullptr, sizeof(Shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(p, MAP_FAILED);
    s_ = static_cast<Shared*>(p);
    for (int i = 0; i < kSlots; ++i) fake_lwlock_init(&s_->locks[i].lock, static_cast<uint16_t>(i % 4));
    MainLWLockArray = s_->locks;
    // The named tranches: two requests (2 locks, then the rest), their
    // array right after the last named lock; none: no array (NULL).
    const int named = named_locks();
    NamedLWLockTrancheRequests = named == 0 ? 0 : named == 1 ? 1 : 2;
    NamedLWLockTrancheArray = nullptr;
    if (named > 0) {
      auto* t = reinterpret_cast<FakeNamedTranche*>(&s_->locks[main_locks()]);
      memset(t, 0, kTrancheArraySlots * sizeof(FakeLwlockPadded));
      for (int r = 0; r < NamedLWLockTrancheRequests; ++r) t[r].trancheId = 100 + r;
      NamedLWLockTrancheArray = t;
    }
    for (FakeLwlock& l : s_->odd) fake_lwlock_init(&l, 0);
    ASSERT_EQ(reinterpret_cast<uintptr_t>(&s_->odd[0]) % 8, 4u);
    become(0);
    InterruptHoldoffCount = 0;
  }
  void TearDown() override {
    MyProc = nullptr;
    MainLWLockArray = nullptr;
    NamedLWLockTrancheArray = nullptr;
    munmap(s_, sizeof(Shared));
  }
  // This process is backend `n`: its PGPROC and its wait-event word.
  void become(int n) {
    s_->procs[n].procno = n;
    MyProc = &s_->procs[n];
    my_wait_event_info = &s_->wait_event[n];
  }
  FakeLwlock* lock(int i) { return &s_->locks[i].lock; }
  // The k-th lock after the main array and its named-tranche array.
  FakeLwlock* lock_after(int k) { return &s_->locks[main_locks() + kTrancheArraySlots + k].lock; }
  // A backend is forked holding nothing (as from the postmaster): the
  // parent takes its lock after the fork, then says so.
  void hold_then_tell(FakeLwlock* l, int mode) {
    LWLockAcquire(l, mode);
    s_->ready.store(1);
  }
  void exclude_one_another(FakeLwlock* l);
  void wait_for_parent_to_hold() {
    while (s_->ready.load() == 0) usleep(1000);
  }
  Shared* s_ = nullptr;
};

const char* chosen_variant() {
  const char* v = getenv("LOCKSWAP_LWLOCK");
  return v != nullptr ? v : "off";
}

// The variant a tranche's name must run.
std::string expected_variant(const char* tranche) {
  std::string want = chosen_variant() == std::string("off") ? "pg" : chosen_variant();
  if (const char* e = getenv("TEST_LWLOCK_EXPECT")) {
    std::string list = e;
    size_t at = list.find(std::string(tranche) + ":");
    if (at != std::string::npos) want = list.substr(at + strlen(tranche) + 1, list.find(',', at) - at - strlen(tranche) - 1);
  }
  return want;
}

TEST_F(LwlockTest, ExclusiveExcludesEveryoneAndHoldsInterruptsOff) {
  EXPECT_TRUE(LWLockAcquire(lock(0), LW_EXCLUSIVE));
  EXPECT_EQ(InterruptHoldoffCount, 1u);
  EXPECT_FALSE(LWLockConditionalAcquire(lock(0), LW_SHARED));
  EXPECT_FALSE(LWLockConditionalAcquire(lock(0), LW_EXCLUSIVE));
  EXPECT_EQ(InterruptHoldoffCount, 1u) << "a failed conditional acquisition gives its holdoff back";
  EXPECT_TRUE(LWLockHeldByMe(lock(0)));
  EXPECT_TRUE(LWLockHeldByMeInMode(lock(0), LW_EXCLUSIVE));
  EXPECT_FALSE(LWLockHeldByMeInMode(lock(0), LW_SHARED));
  EXPECT_FALSE(LWLockHeldByMe(lock(1)));
  LWLockRelease(lock(0));
  EXPECT_EQ(InterruptHoldoffCount, 0u);
  EXPECT_FALSE(LWLockHeldByMe(lock(0)));
  EXPECT_TRUE(LWLockConditionalAcquire(lock(0), LW_EXCLUSIVE));
  LWLockRelease(lock(0));
}

TEST_F(LwlockTest, SharedAdmitsSharedButNotExclusive) {
  EXPECT_TRUE(LWLockAcquire(lock(1), LW_SHARED));
  EXPECT_TRUE(LWLockAcquire(lock(1), LW_SHARED));
  EXPECT_TRUE(LWLockConditionalAcquire(lock(1), LW_SHARED));
  EXPECT_FALSE(LWLockConditionalAcquire(lock(1), LW_EXCLUSIVE));
  EXPECT_EQ(InterruptHoldoffCount, 3u);
  for (int i = 0; i < 3; ++i) LWLockRelease(lock(1));
  EXPECT_EQ(InterruptHoldoffCount, 0u);
  EXPECT_TRUE(LWLockConditionalAcquire(lock(1), LW_EXCLUSIVE));
  LWLockRelease(lock(1));
}

struct Visit {
  int count = 0;
  FakeLwlock* seen[8];
  int modes[8];
};
void visit(FakeLwlock* l, int mode, void* ctx) {
  auto* v = static_cast<Visit*>(ctx);
  v->seen[v->count] = l;
  v->modes[v->count++] = mode;
}

TEST_F(LwlockTest, HeldLocksAreReleasedInAnyOrderAndListed) {
  for (int i = 0; i < 5; ++i) LWLockAcquire(lock(10 + i), i % 2 ? LW_SHARED : LW_EXCLUSIVE);
  LWLockRelease(lock(12));
  LWLockRelease(lock(10));
  Visit v;
  ForEachLWLockHeldByMe(visit, &v);
  ASSERT_EQ(v.count, 3);
  EXPECT_EQ(v.seen[0], lock(11));
  EXPECT_EQ(v.modes[0], LW_SHARED);
  EXPECT_EQ(v.seen[2], lock(14));
  EXPECT_EQ(v.modes[2], LW_EXCLUSIVE);
  EXPECT_TRUE(LWLockAnyHeldByMe(lock(10), 4, sizeof(FakeLwlockPadded)));
  EXPECT_FALSE(LWLockAnyHeldByMe(lock(10), 1, sizeof(FakeLwlockPadded)));
  EXPECT_FALSE(LWLockAnyHeldByMe(lock(12), 1, 2 * sizeof(FakeLwlockPadded))) << "12 is free";
  EXPECT_TRUE(LWLockAnyHeldByMe(lock(12), 2, 2 * sizeof(FakeLwlockPadded))) << "14 is held";
  EXPECT_FALSE(LWLockAnyHeldByMe(lock(15), 3, sizeof(FakeLwlockPadded))) << "15, 16 and 17 are free";
  EXPECT_TRUE(LWLockAnyHeldByMe(lock(10), 3, 2 * sizeof(FakeLwlockPadded))) << "10, 12, 14: 14 is held";
  EXPECT_TRUE(LWLockAnyHeldByMe(lock(11), 2, 3 * sizeof(FakeLwlockPadded))) << "11 and 14 are held";
  EXPECT_EQ(InterruptHoldoffCount, 3u);
  // Error recovery sets the holdoff itself; LWLockReleaseAll leaves it so.
  InterruptHoldoffCount = 7;
  LWLockReleaseAll();
  EXPECT_EQ(InterruptHoldoffCount, 7u);
  Visit none;
  ForEachLWLockHeldByMe(visit, &none);
  EXPECT_EQ(none.count, 0);
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(LWLockConditionalAcquire(lock(10 + i), LW_EXCLUSIVE));
  LWLockReleaseAll();
}

TEST_F(LwlockTest, ReleasingALockNotHeldIsPostgresError) {
  if (sigsetjmp(fake_error_jump, 0) == 0) {
    LWLockRelease(lock(1));  // tranche Beta
    FAIL() << "no error raised";
  }
  EXPECT_EQ(fake_error_level, FAKE_ERROR);
  EXPECT_STREQ(fake_error_text, "lock Beta is not held");
}

TEST_F(LwlockTest, TwoHundredAndOneLocksIsPostgresError) {
  for (int i = 0; i < 200; ++i) ASSERT_TRUE(LWLockAcquire(lock(i), LW_EXCLUSIVE));
  if (sigsetjmp(fake_error_jump, 0) == 0) {
    LWLockAcquire(lock(200), LW_EXCLUSIVE);
    FAIL() << "no error raised";
  }
  EXPECT_EQ(fake_error_level, FAKE_ERROR);
  EXPECT_STREQ(fake_error_text, "too many LWLocks taken");
  EXPECT_EQ(InterruptHoldoffCount, 200u) << "the error comes before the holdoff";
  InterruptHoldoffCount = 0;
  LWLockReleaseAll();
  EXPECT_TRUE(LWLockConditionalAcquire(lock(200), LW_EXCLUSIVE));
  LWLockRelease(lock(200));
}

// The state word an exclusively held lock leaves behind, by the variant
// that runs it: PostgreSQL's (and the pg port's) adds the exclusive value to
// RELEASE_OK; the futex lock's count is all ones; the rwsem keeps bit 29
// and sets bit 0 (WRITER_LOCKED); percid marks a main-array lock's word as
// using its side block and runs the rwsem on every other lock.
std::string held_word_problem(FakeLwlock* l, bool in_main_array) {
  uint32_t state = __atomic_load_n(&l->state, __ATOMIC_RELAXED);
  std::string want = expected_variant(GetLWLockIdentifier(FAKE_WAIT_LWLOCK, l->tranche));
  uint32_t expect;
  if (want == "pg")
    expect = (1u << 29) | (1u << 24);
  else if (want == "futex")
    expect = 0x7fffffffu;
  else if (want == "percid" && in_main_array)
    expect = 0x7c1d0002u;
  else if (want == "percid" || want == "rwsem" || want == "rwsem-rspin")
    expect = (1u << 29) | 1u;
  else
    return "no expectation for variant " + want;
  if (state == expect) return "";
  char text[160];
  snprintf(text, sizeof text, "tranche %u (%s, %s the main array): state %#x, want %#x", l->tranche, want.c_str(),
           in_main_array ? "in" : "after", state, expect);
  return text;
}

TEST_F(LwlockTest, EachTrancheRunsItsVariant) {
  for (int t = 0; t < 3; ++t) {
    FakeLwlock* l = lock(t);
    LWLockAcquire(l, LW_EXCLUSIVE);
    EXPECT_EQ(held_word_problem(l, true), "");
    LWLockRelease(l);
  }
}

// percid gives a side block to exactly the locks of MainLWLockArray (the
// fixed ones, then the named tranches'); the locks that follow the array
// within a few KiB (the WAL insertion locks) are not the array's and run
// the rwsem on their own words, under every variant as that variant's.
TEST_F(LwlockTest, ExactlyTheMainArraysLocksRunAsMainArrayLocks) {
  for (int i = 0; i < main_locks(); ++i) {
    LWLockAcquire(lock(i), LW_EXCLUSIVE);
    EXPECT_EQ(held_word_problem(lock(i), true), "") << "lock " << i << " of " << main_locks();
    LWLockRelease(lock(i));
  }
  for (int k = 0; k < kAfter; ++k) {
    LWLockAcquire(lock_after(k), LW_EXCLUSIVE);
    EXPECT_EQ(held_word_problem(lock_after(k), false), "") << "lock " << k << " after the array";
    LWLockRelease(lock_after(k));
    EXPECT_TRUE(LWLockConditionalAcquire(lock_after(k), LW_SHARED));
    LWLockRelease(lock_after(k));
  }
}

// Readers and writers of several processes on `l`: a writer is alone.
void LwlockTest::exclude_one_another(FakeLwlock* l) {
  constexpr int kRounds = 20000;
  pid_t kids[kChildren];
  for (int c = 0; c < kChildren; ++c) {
    kids[c] = start_child([&, c] {
      become(c + 1);
      for (int i = 0; i < kRounds; ++i) {
        if (i % 3 == 0) {
          LWLockAcquire(l, LW_SHARED);
          s_->inside_readers.fetch_add(1);
          CHILD_CHECK(s_->inside_writer.load() == 0);
          s_->inside_readers.fetch_sub(1);
          LWLockRelease(l);
          continue;
        }
        LWLockAcquire(l, LW_EXCLUSIVE);
        CHILD_CHECK(s_->inside_writer.fetch_add(1) == 0);
        CHILD_CHECK(s_->inside_readers.load() == 0);
        ++s_->counter;  // plain: the lock orders it
        s_->inside_writer.fetch_sub(1);
        LWLockRelease(l);
      }
      CHILD_CHECK(InterruptHoldoffCount == 0);
    }, 120);
  }
  for (pid_t k : kids) EXPECT_EQ(finish_child(k, 150'000), 0);
  EXPECT_EQ(s_->counter, long{kChildren} * (kRounds - (kRounds + 2) / 3));
}

// A lock outside the main array (at 4 mod 8, as buffer content locks are)
// and one in it: the percid variant runs its rwsem on the first and its
// reader slots on the second.
TEST_F(LwlockTest, ProcessesExcludeOneAnother) { exclude_one_another(&s_->odd[0]); }
TEST_F(LwlockTest, ProcessesExcludeOneAnotherOnAMainArrayLock) { exclude_one_another(lock(3)); }

// A backend killed while it holds a lock shared leaves it held; PostgreSQL
// then re-creates its shared memory, every LWLock in the initial state, and
// the lock must be free again, whatever the variant keeps outside the lock.
TEST_F(LwlockTest, ALockReinitialisedAfterACrashForgetsItsKilledHolders) {
  for (FakeLwlock* l : {lock(4), &s_->odd[1]}) {
    int rc = run_in_child([&] {
      become(1);
      LWLockAcquire(l, LW_SHARED);
      _exit(0);  // as SIGKILL: nothing released
    });
    ASSERT_EQ(rc, 0);
    EXPECT_FALSE(LWLockConditionalAcquire(l, LW_EXCLUSIVE)) << "the killed reader still holds it";
    fake_lwlock_init(l, l->tranche);
    EXPECT_TRUE(LWLockConditionalAcquire(l, LW_EXCLUSIVE)) << "re-created shared memory: the lock is free";
    LWLockRelease(l);
    EXPECT_TRUE(LWLockAcquire(l, LW_SHARED));
    LWLockRelease(l);
  }
}

// ProcArrayEndTransaction tries ProcArrayLock exclusively at every commit
// (LWLockConditionalAcquire) and, failing, clears its XID by the group
// protocol. While other processes read the lock the try fails; it must not
// make a reader arriving meanwhile wait: LWLockAcquire returns true (got it
// without sleeping) every time.
TEST_F(LwlockTest, AFailingConditionalExclusiveNeverMakesAReaderWait) {
  FakeLwlock* l = lock(4);
  constexpr int kReads = 20000;
  pid_t holder = start_child([&] {
    become(1);
    LWLockAcquire(l, LW_SHARED);
    s_->ready.store(1);
    while (s_->ready.load() != 4) usleep(1000);  // until the trier has stopped
    LWLockRelease(l);
  });
  wait_for_parent_to_hold();
  pid_t trier = start_child([&] {
    become(2);
    s_->ready.store(2);
    while (s_->ready.load() == 2) {
      CHILD_CHECK(!LWLockConditionalAcquire(l, LW_EXCLUSIVE));
      ++s_->counter;  // this process alone writes it
    }
  });
  EXPECT_TRUE(lstest::eventually([&] { return s_->ready.load() == 2; }));
  become(0);
  int slept = 0;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(500);
  for (int i = 0; i < kReads || s_->counter < 1000 || std::chrono::steady_clock::now() < until; ++i) {
    if (!LWLockAcquire(l, LW_SHARED)) ++slept;
    LWLockRelease(l);
  }
  s_->ready.store(3);
  EXPECT_EQ(finish_child(trier), 0);
  s_->ready.store(4);
  EXPECT_EQ(finish_child(holder), 0);
  EXPECT_EQ(slept, 0) << "readers slept behind failing conditional exclusives (" << s_->counter << " tries)";
  EXPECT_TRUE(LWLockConditionalAcquire(l, LW_EXCLUSIVE)) << "free again";
  LWLockRelease(l);
}

TEST_F(LwlockTest, OneLockCountsExactly) {
  constexpr int kRounds = 20000;
  pid_t kids[kChildren];
  for (int c = 0; c < kChildren; ++c)
    kids[c] = start_child([&, c] {
      become(c + 1);
      for (int i = 0; i < kRounds; ++i) {
        LWLockAcquire(lock(5), LW_EXCLUSIVE);
        long v = s_->counter;
        s_->counter = v + 1;
        LWLockRelease(lock(5));
      }
    }, 120);
  for (pid_t k : kids) EXPECT_EQ(finish_child(k, 150'000), 0);
  EXPECT_EQ(s_->counter, long{kChildren} * kRounds);
}

TEST_F(LwlockTest, AWaiterPublishesItsWaitEventAndClearsIt) {
  FakeLwlock* l = lock(2);  // tranche Gamma
  pid_t kid = start_child([&] {
    become(1);
    wait_for_parent_to_hold();
    CHILD_CHECK(!LWLockAcquire(l, LW_SHARED));  // waited: false
    CHILD_CHECK(s_->wait_event[1] == 0);
    LWLockRelease(l);
  });
  hold_then_tell(l, LW_EXCLUSIVE);
  EXPECT_TRUE(lstest::eventually([&] { return __atomic_load_n(&s_->wait_event[1], __ATOMIC_RELAXED) == (FAKE_WAIT_LWLOCK | 2); }))
      << "the waiter never showed wait event LWLock/Gamma";
  LWLockRelease(l);
  EXPECT_EQ(finish_child(kid), 0);
}

TEST_F(LwlockTest, AcquireOrWaitWaitsForFreeWithoutTakingIt) {
  FakeLwlock* l = lock(6);
  pid_t kid = start_child([&] {
    become(1);
    wait_for_parent_to_hold();
    CHILD_CHECK(!LWLockAcquireOrWait(l, LW_EXCLUSIVE));  // waited until free, not taken
    CHILD_CHECK(!LWLockHeldByMe(l));
    CHILD_CHECK(InterruptHoldoffCount == 0);
    CHILD_CHECK(LWLockConditionalAcquire(l, LW_EXCLUSIVE));
    LWLockRelease(l);
  });
  EXPECT_TRUE(LWLockAcquireOrWait(l, LW_EXCLUSIVE)) << "free: taken";
  EXPECT_TRUE(LWLockHeldByMe(l));
  s_->ready.store(1);
  EXPECT_TRUE(lstest::eventually([&] { return s_->wait_event[1] != 0; }));
  LWLockRelease(l);
  EXPECT_EQ(finish_child(kid), 0);
}

TEST_F(LwlockTest, VariableWaitReturnsOnUpdateAndOnRelease) {
  FakeLwlock* l = lock(7);
  s_->var = 5;
  pid_t kid = start_child([&] {
    become(1);
    wait_for_parent_to_hold();
    uint64_t now = 0;
    CHILD_CHECK(!LWLockWaitForVar(l, &s_->var, 5, &now));  // the variable changed
    CHILD_EXPECT_EQ(now, 7);
    s_->ready.store(2);
    CHILD_CHECK(LWLockWaitForVar(l, &s_->var, 7, &now));  // the lock was freed
    CHILD_CHECK(InterruptHoldoffCount == 0);
  });
  hold_then_tell(l, LW_EXCLUSIVE);
  EXPECT_TRUE(lstest::eventually([&] { return s_->wait_event[1] != 0; }));
  LWLockUpdateVar(l, &s_->var, 7);
  EXPECT_TRUE(lstest::eventually([&] { return s_->ready.load() == 2; }));
  usleep(20'000);  // let it wait on 7
  LWLockReleaseClearVar(l, &s_->var, 0);
  EXPECT_EQ(s_->var, 0u);
  EXPECT_EQ(finish_child(kid), 0);
  uint64_t now = 1;
  EXPECT_TRUE(LWLockWaitForVar(l, &s_->var, 0, &now)) << "free: returns at once";
}

TEST_F(LwlockTest, ASharedHolderAsksAgainPastAWaitingWriter) {
  // PostgreSQL lets a shared request in whenever no exclusive holder is
  // there; a queued writer (past its handoff deadline) must not make a
  // shared holder wait for itself.
  FakeLwlock* l = lock(9);
  pid_t kid = start_child([&] {
    become(1);
    wait_for_parent_to_hold();
    CHILD_CHECK(!LWLockAcquire(l, LW_EXCLUSIVE));
    LWLockRelease(l);
  });
  hold_then_tell(l, LW_SHARED);
  EXPECT_TRUE(lstest::eventually([&] { return s_->wait_event[1] != 0; })) << "the writer never queued";
  usleep(20'000);  // past the rwsem's 4 ms handoff deadline
  EXPECT_TRUE(LWLockAcquire(l, LW_SHARED));
  EXPECT_TRUE(LWLockConditionalAcquire(l, LW_SHARED));
  for (int i = 0; i < 3; ++i) LWLockRelease(l);
  EXPECT_EQ(finish_child(kid), 0);
}

TEST_F(LwlockTest, AProcessWithoutPgprocNeverWaits) {
  FakeLwlock* l = lock(8);
  MyProc = nullptr;
  EXPECT_TRUE(LWLockAcquire(l, LW_EXCLUSIVE)) << "uncontended: no wait, no PGPROC needed";
  LWLockRelease(l);
  become(0);
  LWLockAcquire(l, LW_EXCLUSIVE);
  int rc = run_in_child([&] {
    MyProc = nullptr;
    LWLockAcquire(l, LW_SHARED);  // must wait: PANIC
  });
  EXPECT_EQ(rc, FAKE_PANIC_EXIT);
  LWLockRelease(l);
}

}  // namespace
