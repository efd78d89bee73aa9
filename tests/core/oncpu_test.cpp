// tests/core/oncpu_test.cpp — the owner-on-CPU map (core/oncpu.h) read by
// the library, and what the rwsem's spinner does with it. Needs the map:
// runs under `lockswap-oncpu exec` (tests/oncpu/oncpu_bpf_test.sh, as root);
// skipped with the reason otherwise.
#include <gtest/gtest.h>

#include <stdlib.h>
#include <unistd.h>

#include <atomic>
#include <thread>

#include "core/oncpu.h"
#include "core/rwsem.h"
#include "tests/core/core_test_util.h"

namespace lockswap {
namespace {

using namespace coretest;

class OncpuTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* fd = getenv(ONCPU_FD_ENV);
    if (fd == nullptr) GTEST_SKIP() << ONCPU_FD_ENV " not set: run under `lockswap-oncpu exec` (as root)";
    if (oncpu::g_map.bytes == nullptr) {
      const char* why = oncpu::attach(atoi(fd));
      ASSERT_EQ(why, nullptr) << why;
    }
    saved_source_ = oncpu::g_source;
    oncpu::g_source = oncpu::Source::bpf;
  }
  void TearDown() override {
    oncpu::g_source = saved_source_;
  }

  static oncpu::State state_of_self() { return oncpu::state_of(current_tid()); }

  oncpu::Source saved_source_ = oncpu::Source::off;
  Restore<RwsemTunables> tunables_{g_rwsem_tunables};
};

// A thread that publishes its tid, then runs `body` until told to stop.
class Worker {
 public:
  template <class Body>
  explicit Worker(Body body)
      : t_([this, body] {
          tid_.store(current_tid());
          while (!stop_.load()) body();
        }) {
    while (tid_.load() == 0) std::this_thread::yield();
  }
  ~Worker() {
    stop_.store(true);
    t_.join();
  }
  int32_t tid() const { return tid_.load(); }

 private:
  std::atomic<bool> stop_{false};
  std::atomic<int32_t> tid_{0};
  std::thread t_;
};

TEST_F(OncpuTest, TheReaderItselfIsOnCpu) {
  // Whoever reads its own byte is running: exact, whatever the load.
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(state_of_self(), oncpu::State::running);
}

TEST_F(OncpuTest, SleepingThreadIsBlockedAndBusyThreadIsSeenRunning) {
  Worker sleeper([] { std::this_thread::sleep_for(100ms); });
  Worker busy([] {});
  // The sleeper is in nanosleep nearly all the time; the busy thread may be
  // preempted most of the time (2 CPUs under a parallel build: measured 7%
  // on a CPU), but must be seen on a CPU at some point, and only ever
  // running or waiting for a CPU.
  EXPECT_TRUE(eventually([&] { return oncpu::state_of(sleeper.tid()) == oncpu::State::blocked; }));
  bool seen_blocked = false;
  EXPECT_TRUE(eventually(
      [&] {
        for (int i = 0; i < 1'000'000; ++i) {
          oncpu::State st = oncpu::state_of(busy.tid());
          seen_blocked |= st == oncpu::State::blocked;
          if (st == oncpu::State::running) return true;
        }
        return false;
      },
      30s));
  EXPECT_FALSE(seen_blocked) << "a thread that never sleeps read as blocked";
  EXPECT_EQ(oncpu::state_of(0), oncpu::State::unknown) << "idle tasks are not recorded";
}

// The owner holds the write lock and sleeps outside lockswap (nanosleep:
// its `blocked` flag stays clear, so only the map can tell). With a spin
// budget far longer than the sleep, a spinner that did not know would take
// the lock by spinning; the map must make it queue instead.
TEST_F(OncpuTest, SpinnerOnASleepingOwnerStopsSpinning) {
  if (!kEvents) GTEST_SKIP() << "built without lock events";
  using L = Rwsem<RwsemSteal, RwsemWords>;
  RwsemWords w;
  g_rwsem_tunables.owner_spin_ns = 60'000'000'000;  // a minute: only owner_on_cpu() can stop the spin
  g_rwsem_tunables.handoff_ns = 60'000'000'000;     // and no HANDOFF spin either
  std::atomic<bool> held{false};
  std::thread owner([&] {
    ASSERT_EQ(L::write_lock(w, WaitCtx::blocking()), 0);
    held.store(true);
    std::this_thread::sleep_for(300ms);
    L::write_unlock(w);
  });
  while (!held.load()) std::this_thread::yield();
  std::this_thread::sleep_for(20ms);  // the owner is in its nanosleep now
  Events ev;
  ASSERT_EQ(L::write_lock(w, WaitCtx::blocking()), 0);
  L::write_unlock(w);
  owner.join();
  EXPECT_GE(ev(LockEvent::rwsem_opt_owner_off), 1u);
  EXPECT_EQ(ev(LockEvent::rwsem_opt_lock), 0u) << "took the lock by spinning on a sleeping owner";
  EXPECT_EQ(ev(LockEvent::rwsem_opt_budget), 0u);
  EXPECT_GE(ev(LockEvent::rwsem_sleep_writer), 1u);
  EXPECT_EQ(ev(LockEvent::rwsem_wlock), 1u);
}

}  // namespace
}  // namespace lockswap
