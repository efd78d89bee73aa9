// tests/core/rwsem_shared_test.cpp — core/rwsem/shared.h across processes:
// fork() children on words in a MAP_SHARED mapping laid out like
// PostgreSQL's LWLock (initial 1<<29, 0x7fffffff, 0x7fffffff), both policies.
#include "core/rwsem/shared.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <functional>
#include <vector>

#include "arch/clock.h"
#include "tests/core/core_test_util.h"
#include "tests/core/kill_test_util.h"

namespace lockswap::rwshared {
namespace {

using coretest::kill_and_reap;
using std::chrono::milliseconds;

constexpr int kProcs = 16;
constexpr uint32_t kInitCount = 1u << 29;
constexpr uint32_t kInitWord = 0x7fffffff;

// One LWLock: a 2-byte tranche, padding, then the three words at +4.
struct alignas(8) Lwlock {
  uint16_t tranche;
  uint16_t padding;
  Words words;
};
static_assert(sizeof(Lwlock) == 16);

// Everything the processes share.
struct Area {
  Lwlock lock[2];
  uint64_t var;
  uint64_t counter;             // written only by writers, no atomics: exclusion checks it
  std::atomic<int32_t> writers_in, readers_in, max_readers;
  std::atomic<uint32_t> violations, stop, ready;
  Waiter records[kProcs];
};

void init_lock(Lwlock& l) {
  l.words.count.store(kInitCount);
  l.words.owner.store(kInitWord);
  l.words.waitq.store(kInitWord);
}

class SharedArea {
 public:
  SharedArea() {
    void* p = mmap(nullptr, sizeof(Area), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    EXPECT_NE(p, MAP_FAILED);
    a_ = static_cast<Area*>(p);
    init_lock(a_->lock[0]);
    init_lock(a_->lock[1]);
  }
  ~SharedArea() { munmap(a_, sizeof(Area)); }
  Area& operator*() const { return *a_; }
  Area* operator->() const { return a_; }
  Records records() const { return {a_->records}; }

 private:
  Area* a_;
};

Sleeper sleeper() { return {WaitCtx::blocking(WaitFamily::rwlock)}; }

// Fork `n` children running body(i) (exit status = its result); true when
// all exit 0 within `limit` (a hang, a lost wakeup, fails instead of blocking).
bool run_children(int n, milliseconds limit, const std::function<int(int)>& body) {
  std::vector<pid_t> pids;
  for (int i = 0; i < n; ++i) {
    pid_t pid = fork();
    if (pid == 0) _exit(body(i));
    pids.push_back(pid);
  }
  auto end = std::chrono::steady_clock::now() + limit;
  bool ok = true;
  for (pid_t pid : pids) {
    int status = 0;
    while (waitpid(pid, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > end) {
        for (pid_t p : pids) kill(p, SIGKILL);
        waitpid(pid, &status, 0);
        ok = false;
        break;
      }
      usleep(1000);
    }
    ok = ok && WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return ok;
}

template <class P>
class RwsemSharedTest : public ::testing::Test {
 protected:
  using S = SharedRwsem<P>;
  SharedArea area;
  Area& a = *area;
  Records rs = area.records();

  // Mixed readers and writers on lock `which`; every 8th operation writes.
  void stress(int procs, int iters, int which, milliseconds limit) {
    Words& w = a.lock[which].words;
    ASSERT_TRUE(run_children(procs, limit, [&](int me) {
      for (int i = 0; i < iters; ++i) {
        Sleeper s = sleeper();
        if ((i + me) % 8 == 0) {
          S::write_lock(w, rs, me, s);
          if (a.writers_in.fetch_add(1) != 0 || a.readers_in.load() != 0) a.violations.fetch_add(1);
          ++a.counter;
          if (i % 64 == 0) sched_yield();  // let others queue behind a holder
          a.writers_in.fetch_sub(1);
          S::write_unlock(w, rs);
        } else {
          S::read_lock(w, rs, me, s);
          int32_t in = a.readers_in.fetch_add(1) + 1;
          if (a.writers_in.load() != 0) a.violations.fetch_add(1);
          int32_t seen = a.max_readers.load();
          while (in > seen && !a.max_readers.compare_exchange_weak(seen, in)) {
          }
          if (i % 32 == 0) sched_yield();
          a.readers_in.fetch_sub(1);
          S::read_unlock(w, rs);
        }
      }
      return 0;
    })) << "a child failed or hung (a lost wakeup)";
    EXPECT_EQ(a.violations.load(), 0u);
    uint64_t writes = 0;
    for (int me = 0; me < procs; ++me)
      for (int i = 0; i < iters; ++i) writes += (i + me) % 8 == 0;
    EXPECT_EQ(a.counter, writes);
    expect_free(w);
  }

  void expect_free(Words& w) {
    EXPECT_EQ(w.count.load() & ~kSpinnerMask, kInitCount) << std::hex << w.count.load();
    EXPECT_EQ(w.waitq.load(), kInitWord);
    EXPECT_EQ(queued(w, rs), 0u);
  }

  static void expect_clean_exit(pid_t pid) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
  }
};

constexpr const char* kSharedPolicyNames[] = {"steal", "rspin"};
using SharedPolicies = ::testing::Types<RwsemSteal, RwsemRspin>;
using SharedPolicyNames = coretest::NamesInTypeOrder<kSharedPolicyNames>;
TYPED_TEST_SUITE(RwsemSharedTest, SharedPolicies, SharedPolicyNames);

TYPED_TEST(RwsemSharedTest, PostgresInitialStateIsFree) {
  using S = typename TestFixture::S;
  Words& w = this->a.lock[0].words;
  EXPECT_EQ(S::owner(w), 0u);
  EXPECT_TRUE(S::read_trylock(w, 3));
  EXPECT_TRUE(S::read_trylock(w, 4));
  EXPECT_EQ(S::readers(w), 2u);
  EXPECT_FALSE(S::write_trylock(w, 5));
  S::read_unlock(w, this->rs);
  S::read_unlock(w, this->rs);
  EXPECT_TRUE(S::write_trylock(w, 5));
  EXPECT_EQ(owner_proc(S::owner(w)), 5);
  EXPECT_FALSE(S::read_trylock(w, 3));
  S::write_unlock(w, this->rs);
  this->expect_free(w);
}

TYPED_TEST(RwsemSharedTest, WritersExclusiveReadersConcurrent) {
  this->stress(8, coretest::kUnderTsan ? 300 : 4000, 0, milliseconds(60000));
}

// Every operation sleeps at least once now and then: the wake paths run.
TYPED_TEST(RwsemSharedTest, NoLostWakeupWithWritersOnly) {
  using S = typename TestFixture::S;
  Area& a = this->a;
  const Records& rs = this->rs;
  Words& w = a.lock[1].words;
  constexpr int kIters = 2000;
  ASSERT_TRUE(run_children(6, milliseconds(60000), [&](int me) {
    for (int i = 0; i < kIters; ++i) {
      Sleeper s = sleeper();
      S::write_lock(w, rs, me, s);
      ++a.counter;
      if (i % 16 == 0) usleep(50);
      S::write_unlock(w, rs);
    }
    return 0;
  }));
  EXPECT_EQ(a.counter, 6u * kIters);
  this->expect_free(w);
}

// A writer among readers that keep the lock read-held gets in within a
// bound: HANDOFF stops the stealers and the fast paths.
TYPED_TEST(RwsemSharedTest, HandoffBoundsWriterStarvation) {
  using S = typename TestFixture::S;
  Area& a = this->a;
  const Records& rs = this->rs;
  Words& w = a.lock[0].words;
  constexpr int kReaders = 4;
  std::atomic<uint64_t>* waited_ns = reinterpret_cast<std::atomic<uint64_t>*>(&a.var);
  ASSERT_TRUE(run_children(kReaders + 1, milliseconds(30000), [&](int me) {
    if (me == kReaders) {  // the writer
      while (a.ready.load() < kReaders) usleep(100);
      usleep(20000);
      uint64_t t0 = arch::monotonic_ns();
      Sleeper s = sleeper();
      S::write_lock(w, rs, me, s);
      waited_ns->store(arch::monotonic_ns() - t0);
      a.stop.store(1);
      S::write_unlock(w, rs);
      return 0;
    }
    a.ready.fetch_add(1);
    while (!a.stop.load()) {  // overlapping read holds: never free without HANDOFF
      Sleeper s = sleeper();
      S::read_lock(w, rs, me, s);
      uint64_t until = arch::monotonic_ns() + 200'000;
      while (arch::monotonic_ns() < until) {
      }
      S::read_unlock(w, rs);
    }
    return 0;
  }));
  EXPECT_LT(waited_ns->load(), 2'000'000'000u) << "writer waited " << waited_ns->load() << " ns";
  this->expect_free(w);
}

TYPED_TEST(RwsemSharedTest, WaitUntilFree) {
  using S = typename TestFixture::S;
  Area& a = this->a;
  const Records& rs = this->rs;
  Words& w = a.lock[0].words;
  Sleeper s0 = sleeper();
  EXPECT_TRUE(S::acquire_or_wait(w, rs, 0, true, s0)) << "a free lock is taken";
  EXPECT_FALSE(s0.slept);
  // Held by us (record 0): three waiters (one shared, two exclusive) wait
  // until it is free, without taking it, and wake only at the release.
  std::vector<pid_t> pids;
  for (int i = 0; i < 3; ++i) {
    pid_t pid = fork();
    if (pid == 0) {
      Sleeper s = sleeper();
      a.ready.fetch_add(1);
      bool taken = S::acquire_or_wait(w, rs, i + 1, i != 0, s);
      _exit(taken ? 10 : !s.slept ? 11 : a.stop.load() != 1 ? 12 : 0);
    }
    pids.push_back(pid);
  }
  while (queued(w, rs) < 3) usleep(1000);
  usleep(20000);
  a.stop.store(1);
  S::write_unlock(w, rs);
  for (pid_t pid : pids) this->expect_clean_exit(pid);
  this->expect_free(w);
}

TYPED_TEST(RwsemSharedTest, VariableWait) {
  using S = typename TestFixture::S;
  Area& a = this->a;
  const Records& rs = this->rs;
  Words& w = a.lock[0].words;
  a.var = 0;
  Sleeper s0 = sleeper();
  uint64_t nv = 0;
  EXPECT_TRUE(S::wait_for_var(w, rs, 0, &a.var, 0, &nv, s0)) << "free: no wait";
  S::write_lock(w, rs, 0, s0);
  pid_t pid = fork();
  if (pid == 0) {
    Sleeper s = sleeper();
    uint64_t v = 0;
    if (S::wait_for_var(w, rs, 1, &a.var, 0, &v, s) || v != 5) _exit(10);
    a.ready.store(1);
    if (!S::wait_for_var(w, rs, 1, &a.var, 5, &v, s)) _exit(11);  // until the release
    _exit(a.stop.load() == 1 ? 0 : 12);
  }
  while (queued(w, rs) < 1) usleep(1000);
  S::update_var(w, rs, &a.var, 5);
  while (a.ready.load() == 0) usleep(1000);
  while (queued(w, rs) < 1) usleep(1000);
  a.stop.store(1);
  S::set_var(w, &a.var, 7);  // LWLockReleaseClearVar: set, then release
  S::write_unlock(w, rs);
  this->expect_clean_exit(pid);
  this->expect_free(w);
}

// Variable waiters against a stream of updates and releases: none is left
// sleeping (each ends within the time limit).
TYPED_TEST(RwsemSharedTest, VariableWaitStress) {
  using S = typename TestFixture::S;
  Area& a = this->a;
  const Records& rs = this->rs;
  Words& w = a.lock[1].words;
  ASSERT_TRUE(run_children(5, milliseconds(30000), [&](int me) {
    Sleeper s = sleeper();
    for (int i = 0; i < 3000; ++i) {
      if (me == 0) {
        S::write_lock(w, rs, me, s);
        S::update_var(w, rs, &a.var, a.var + 1);
        S::update_var(w, rs, &a.var, a.var + 1);
        S::set_var(w, &a.var, a.var + 1);
        S::write_unlock(w, rs);
      } else {
        uint64_t v, old = __atomic_load_n(&a.var, __ATOMIC_RELAXED);
        S::wait_for_var(w, rs, me, &a.var, old, &v, s);
      }
    }
    return 0;
  }));
  this->expect_free(w);
}

// A process killed holding the lock or queued on it: the lock is lost (its
// owner re-creates it), nothing else is: the other lock and the records work.
TYPED_TEST(RwsemSharedTest, KilledHolderOrWaiterLeavesOthersIntact) {
  using S = typename TestFixture::S;
  Area& a = this->a;
  const Records& rs = this->rs;
  Words& w = a.lock[0].words;
  pid_t holder = coretest::fork_stopped_inside([&](int fd) {
    Sleeper s = sleeper();
    S::write_lock(w, rs, 1, s);
    coretest::report_inside(fd);
    pause();
  });
  ASSERT_GT(holder, 0);
  pid_t waiter = fork();
  if (waiter == 0) {
    Sleeper s = sleeper();
    S::read_lock(w, rs, 2, s);
    _exit(0);
  }
  while (queued(w, rs) < 1) usleep(1000);
  EXPECT_TRUE(kill_and_reap(waiter));
  EXPECT_TRUE(kill_and_reap(holder));
  // Lock 1 in the meantime, and lock 0 once re-created, with the same records.
  this->stress(4, 500, 1, milliseconds(30000));
  init_lock(a.lock[0]);
  a.counter = 0;
  this->stress(4, 500, 0, milliseconds(30000));
}

}  // namespace
}  // namespace lockswap::rwshared
