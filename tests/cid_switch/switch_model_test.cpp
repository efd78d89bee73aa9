// tests/cid_switch/switch_model_test.cpp — the concurrency-id switch model
// (core/cid.h "Switch model") on the allocators: lockswap's own sleeps
// switch out and in, a thread holds an id while it runs, global gives it
// back while it sleeps (so the ids in use are bounded by the threads that
// run), forked relatives share one id space, a dead one leaks nothing.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <barrier>
#include <set>
#include <thread>
#include <vector>

#include "core/cid.h"
#include "core/wait_ctx.h"
#include "tests/core/core_test_util.h"
#include "tests/core/kill_test_util.h"

// The test-only pause point inside the cid_lock (core/cid.h): a test that
// sets g_wait_inside_cid_lock makes it act as a signal handler that waits
// (and so switches out and in) while its thread holds the cid_lock.
namespace {
std::atomic<bool> g_wait_inside_cid_lock{false};
}  // namespace
extern "C" void lockswap_test_pause_in_cid_lock() {
  if (!g_wait_inside_cid_lock.exchange(false)) return;
  lockswap::cid::switch_out();
  lockswap::cid::switch_in();
}

namespace lockswap {
namespace {

using namespace coretest;

class SwitchModel : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(cid::select(CidMode::global), CidMode::global); }
  void TearDown() override {
    cid::set_switch_model(false);
    cid::select(CidMode::thread);
  }
};

class SwitchModelEvery : public SwitchModel, public ::testing::WithParamInterface<CidMode> {
 protected:
  void SetUp() override { cid::select(GetParam()); }
};

// A futex sleep in lockswap that returns at once (deadline passed).
void lock_sleep() { sleep_in_lockswap(); }

TEST_F(SwitchModel, OffByDefaultNoSwitchAtALockSleep) {
  ASSERT_FALSE(cid::switch_model());
  Events ev;
  lock_sleep();
  EXPECT_EQ(ev(LockEvent::cid_switch_out), 0u);
  EXPECT_EQ(ev(LockEvent::cid_switch_in), 0u);
}

TEST_P(SwitchModelEvery, EveryLockSleepSwitchesOutThenIn) {
  cid::set_switch_model(true);
  Events ev;
  for (int i = 0; i < 5; ++i) lock_sleep();
  if (kEvents) {
    EXPECT_EQ(ev(LockEvent::cid_switch_out), 5u);
    EXPECT_EQ(ev(LockEvent::cid_switch_in), 5u);
  }
}

TEST_P(SwitchModelEvery, SwitchingKeepsErrno) {
  cid::set_switch_model(true);
  errno = EDOM;
  cid::switch_out();
  EXPECT_EQ(errno, EDOM);
  cid::switch_in();
  EXPECT_EQ(errno, EDOM);
}

INSTANTIATE_TEST_SUITE_P(Cid, SwitchModelEvery, every_cid(), cid_param_name);

TEST_F(SwitchModel, GlobalHoldsAnIdWhileRunningAndNoneWhileBlocked) {
  cid::set_switch_model(true);
  EXPECT_EQ(cid::ids_in_use(), 1u) << "switching the model on: the calling thread runs, it holds an id";
  Events ev;
  cid::switch_out();
  EXPECT_EQ(cid::ids_in_use(), 0u);
  cid::switch_in();
  EXPECT_EQ(cid::ids_in_use(), 1u);
  if (kEvents) {
    EXPECT_EQ(ev(LockEvent::cid_free), 1u);
    EXPECT_EQ(ev(LockEvent::cid_alloc), 1u);
  }
}

// Threads blocked in a lockswap sleep hold no id; when they run they do,
// and the ids are 0..running-1.
TEST_F(SwitchModel, GlobalIdsAreDenseAndBoundedByRunningThreads) {
  cid::set_switch_model(true);
  constexpr int kThreads = 8;
  std::atomic<uint32_t> gate{0};
  std::atomic<int> asleep{0};
  std::vector<uint32_t> ids(kThreads);
  std::barrier all_run(kThreads + 1);
  std::vector<std::thread> ts;
  for (int i = 0; i < kThreads; ++i)
    ts.emplace_back([&, i] {
      cid::switch_in();  // it runs
      ++asleep;
      while (gate.load() == 0) WaitCtx::blocking().sleep(&gate, 0);
      ids[static_cast<size_t>(i)] = cid::current();
      all_run.arrive_and_wait();  // every thread runs, holding its id
      all_run.arrive_and_wait();
    });
  ASSERT_TRUE(eventually([&] { return asleep.load() == kThreads; }));
  // Each either sleeps (switched out) or is about to (it holds its id for an
  // instant): bounded by the running ones, the main thread among them.
  EXPECT_TRUE(eventually([] { return cid::ids_in_use() == 1; })) << cid::ids_in_use() << " ids while all sleep";
  gate.store(1);
  arch::futex_wake(&gate, arch::futex_wake_all);
  all_run.arrive_and_wait();
  EXPECT_EQ(cid::ids_in_use(), static_cast<uint32_t>(kThreads + 1));
  std::set<uint32_t> distinct(ids.begin(), ids.end());
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kThreads));
  for (uint32_t id : ids) EXPECT_LE(id, static_cast<uint32_t>(kThreads)) << "ids are not dense";
  all_run.arrive_and_wait();
  for (auto& t : ts) t.join();
  EXPECT_EQ(cid::ids_in_use(), 1u) << "thread exit gives the id back";
}

// A fork child's first thread runs and holds an id of the one shared space
// (preload's atfork handler calls after_fork_in_child); two children of one
// ancestor, unrelated to each other, hold distinct ids of it at once.
TEST_F(SwitchModel, GlobalIsOneIdSpaceForTheAncestorAndAllItsChildren) {
  cid::set_switch_model(true);
  uint32_t mine = cid::current();
  int ready[2], go[2];
  ASSERT_EQ(pipe(ready), 0);
  ASSERT_EQ(pipe(go), 0);
  pid_t kids[2];
  for (pid_t& kid : kids) {
    kid = fork();
    if (kid == 0) {
      after_fork_in_child();
      cid::after_fork_in_child();  // switches in: takes an id
      uint32_t id = cid::current();
      if (write(ready[1], &id, sizeof id) != sizeof id) _exit(90);
      char b;
      if (read(go[0], &b, 1) != 1) _exit(91);  // both children hold their ids until now
      cid::switch_out();
      _exit(0);
    }
  }
  std::set<uint32_t> ids{mine};
  for (int i = 0; i < 2; ++i) {
    uint32_t id = 0;
    ASSERT_EQ(read(ready[0], &id, sizeof id), static_cast<ssize_t>(sizeof id));
    ids.insert(id);
  }
  EXPECT_EQ(ids.size(), 3u) << "the children and their ancestor hold distinct ids";
  EXPECT_EQ(cid::ids_in_use(), 3u) << "the ancestor sees its children's ids: one space";
  EXPECT_EQ(*ids.rbegin(), 2u) << "dense: 0, 1, 2";
  ASSERT_EQ(write(go[1], "gg", 2), 2);
  for (pid_t kid : kids) {
    int status = 0;
    waitpid(kid, &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  EXPECT_EQ(cid::ids_in_use(), 1u) << "the children switched out: their ids are free again";
  for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
}

// A relative killed while it runs (holding its id) leaks nothing: the id is
// reclaimed (as the first allocation that finds the space full does).
TEST_F(SwitchModel, GlobalIdOfAChildKilledWhileRunningIsReclaimed) {
  cid::set_switch_model(true);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t kid = fork();
  if (kid == 0) {
    after_fork_in_child();
    cid::after_fork_in_child();
    char b = 1;
    if (write(ready[1], &b, 1) != 1) _exit(90);
    for (;;) pause();
  }
  char b;
  ASSERT_EQ(read(ready[0], &b, 1), 1);
  EXPECT_EQ(cid::ids_in_use(), 2u);
  kill(kid, SIGKILL);
  waitpid(kid, nullptr, 0);
  EXPECT_EQ(cid::ids_in_use(), 2u) << "killed: its exit handler never ran";
  EXPECT_EQ(cid::reclaim_dead_processes(), 1u);
  EXPECT_EQ(cid::ids_in_use(), 1u);
  close(ready[0]);
  close(ready[1]);
}

// A handler that waits while its thread is inside a switch (holding the
// cid_lock) must not switch again: the lock's holder is its own process, so
// it would spin on itself forever.
TEST_F(SwitchModel, GlobalWaitInsideASwitchDoesNotSwitchAgain) {
  cid::set_switch_model(true);
  int rc = exit_status_within(10s, [] {
    after_fork_in_child();
    cid::after_fork_in_child();
    Events ev;
    cid::switch_out();
    g_wait_inside_cid_lock = true;
    cid::switch_in();  // takes the cid_lock; the "handler" runs inside it
    if (g_wait_inside_cid_lock) return 1;  // the pause point never ran
    if (kEvents && ev(LockEvent::cid_switch_in) != 1) return 2;  // the nested one was skipped
    return 0;
  });
  EXPECT_EQ(rc, 0) << (rc == -1 ? "the nested switch spun on the process's own cid_lock" : "");
}

// percpu parks the id in the CPU's slot at switch-out (the v6.4 lazy
// scheme): nothing is given back, the next switch-in on that CPU reads it.
TEST_F(SwitchModel, PercpuSwitchOutKeepsTheIdCached) {
  cid::select(CidMode::percpu);
  cid::set_switch_model(true);
  uint32_t before = cid::ids_in_use();
  Events ev;
  for (int i = 0; i < 10; ++i) lock_sleep();
  EXPECT_EQ(cid::ids_in_use(), before);
  if (kEvents) {
    EXPECT_EQ(ev(LockEvent::cid_free), 0u);
  }
}

}  // namespace
}  // namespace lockswap
