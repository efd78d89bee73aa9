// tests/lwlock/adapter_test.cpp — the LOCKSWAP_LWLOCK adapters
// (preload/lwlock/variants.h) and core/percid/shared.h driven directly, in
// one process, where a test can put a lock in exactly the state a race
// would leave it in: no redirection, no server. This file stands in for
// preload/lwlock/lwlock.cpp's host helpers (the PGPROC, the wait-event word,
// the error path). The API as PostgreSQL calls it is tests/lwlock/lwlock_test.cpp.
#include <sys/mman.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "tests/common/test_util.h"
#include "preload/lwlock/variants.h"

namespace lockswap::lwlock {

// What lwlock.cpp defines, for this process alone.
Host g_host;
PercidArea g_percid;
uint32_t g_last_key, g_proc_key;
void* g_keyed_proc;

[[noreturn]] void pg_error(int level, const char* fmt, const char* arg) {
  fprintf(stderr, "pg_error(%d): ", level);
  fprintf(stderr, fmt, arg != nullptr ? arg : "");
  fprintf(stderr, "\n");
  abort();
}
void check_may_wait() {
  if (*g_host.my_proc == nullptr) pg_error(kPanic, "cannot wait without a PGPROC structure");
}
int32_t my_procno() {
  check_may_wait();
  return 1;
}

}  // namespace lockswap::lwlock

namespace {

using namespace lockswap;
using namespace lockswap::lwlock;
using namespace std::chrono_literals;

// One process's host: a PGPROC (never read but for being there), the
// holdoff count, the wait-event word.
char g_proc[256];
void* g_my_proc = g_proc;
volatile uint32_t g_holdoff;
uint32_t g_wait_event;
uint32_t* g_wait_event_ptr = &g_wait_event;

class AdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    g_host.my_proc = &g_my_proc;
    g_host.holdoff = &g_holdoff;
    g_host.wait_event_info = &g_wait_event_ptr;
    g_host.waited = false;
    g_wait_event = 0;
    l_.tranche = 3;
    l_.state.store(kFreeState);
    l_.word8.store(kFreeWord);
    l_.word12.store(kFreeWord);
  }
  PgLwlock l_{};
};

// LWLockAcquire returns true when it got the lock without sleeping, even
// after its first attempt failed (PostgreSQL's contract; WALInsertLockAcquire
// moves to another insertion lock only after a real wait). The adapter's
// slow path runs after a failed try: here the holder let go between the two,
// so the slow path finds the lock free and must report no sleep.
TEST_F(AdapterTest, FutexSlowPathThatFindsTheLockFreeReportsNoSleep) {
  for (Mode m : {pglw::kExclusive, pglw::kShared}) {
    EXPECT_FALSE(LwlockFutex::acquire_slow(l_, m)) << "mode " << int(m) << ": no sleep, yet it says it slept";
    EXPECT_FALSE(g_host.waited) << "mode " << int(m) << ": no wait event for a call that did not wait";
    EXPECT_EQ(g_wait_event, 0u);
    EXPECT_EQ(l_.state.load(), m == pglw::kExclusive ? 0x7fffffffu : kFreeState + 1) << "mode " << int(m) << ": held";
    LwlockFutex::release(l_, m);
    EXPECT_EQ(l_.state.load(), kFreeState);
  }
}

// A sleeper marks the word just as the holder frees it: the free word with
// the sleepers bit (bit 31) is still free, and taken without a sleep.
TEST_F(AdapterTest, FutexSlowPathTakesAFreeWordWithTheSleepersBitWithoutSleeping) {
  l_.state.store(kFreeState | (1u << 31));
  EXPECT_FALSE(LwlockFutex::try_acquire(l_, pglw::kExclusive)) << "the try takes only the bare free word";
  EXPECT_FALSE(LwlockFutex::acquire_slow(l_, pglw::kExclusive));
  EXPECT_TRUE(BasicFutexRwlock<kFreeState>::kWriter == (l_.state.load() & 0x7fffffffu)) << std::hex << l_.state.load();
  LwlockFutex::release(l_, pglw::kExclusive);
  EXPECT_EQ(l_.state.load() & 0x7fffffffu, kFreeState);
}

// And a slow path that does sleep says so, with the wait event up meanwhile.
TEST_F(AdapterTest, FutexSlowPathThatSleepsReportsIt) {
  for (Mode m : {pglw::kExclusive, pglw::kShared}) {
    g_host.waited = false;
    ASSERT_TRUE(LwlockFutex::try_acquire(l_, pglw::kExclusive));
    std::atomic<bool> done{false};
    std::atomic<uint32_t> event_seen{0};
    std::thread holder([&] {
      std::this_thread::sleep_for(100ms);  // the waiter is asleep by then
      event_seen = __atomic_load_n(&g_wait_event, __ATOMIC_RELAXED);
      done = true;
      LwlockFutex::release(l_, pglw::kExclusive);
    });
    EXPECT_TRUE(LwlockFutex::acquire_slow(l_, m)) << "mode " << int(m);
    EXPECT_TRUE(done.load());
    holder.join();
    EXPECT_EQ(event_seen.load(), kWaitLwlock | 3u) << "mode " << int(m) << ": the wait event while asleep";
    EXPECT_EQ(g_wait_event, 0u);
    EXPECT_TRUE(g_host.waited);
    LwlockFutex::release(l_, m);
  }
}

// ------------------------------------------------ percid's conditional exclusive

// One percid block (core/percid/shared.h) and the rwsem's waiter records.
struct PercidBlock {
  static constexpr uint32_t kSlots = 8;
  void* mem = nullptr;
  percid_shared::Block b{};
  rwshared::Records rs{};
  PercidBlock() {
    const size_t bytes = 64 * (1 + kSlots) + 8 * sizeof(rwshared::Waiter);
    mem = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    auto* p = static_cast<std::byte*>(mem);
    b = {reinterpret_cast<percid_shared::Control*>(p), reinterpret_cast<percid::ReaderSlot*>(p + 64), kSlots - 1};
    rs = {reinterpret_cast<rwshared::Waiter*>(p + 64 * (1 + kSlots))};
    b.reset();
  }
  ~PercidBlock() { munmap(mem, 64 * (1 + kSlots) + 8 * sizeof(rwshared::Waiter)); }
};
using PL = percid_shared::Lock<RwsemSteal>;

// ProcArrayEndTransaction tries ProcArrayLock exclusively at every commit.
// While readers hold the lock each try fails; it must fail without a trace a
// reader could meet: a reader arriving meanwhile takes the fast path, never
// the inner rwsem (where it would sleep behind a writer that never owns the
// lock).
TEST(PercidSharedTest, AFailingTryLeavesArrivingReadersOnTheFastPath) {
  PercidBlock pb;
  ASSERT_TRUE(PL::read_try(pb.b, 0));  // a reader holds the lock throughout
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> tries{0}, pending_seen{0};
  std::thread trier([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (PL::write_try(pb.b, pb.rs, 2)) {
        ADD_FAILURE() << "a try succeeded while a reader held the lock";
        PL::write_unlock(pb.b, pb.rs);
      }
      tries.fetch_add(1, std::memory_order_relaxed);
    }
  });
  uint64_t entered = 0, refused = 0;
  const auto until = std::chrono::steady_clock::now() + 1500ms;
  while (std::chrono::steady_clock::now() < until || tries.load() < 1000) {
    for (int i = 0; i < 1000; ++i) {
      if (pb.b.control->state.load() & percid_shared::kPending) pending_seen.fetch_add(1, std::memory_order_relaxed);
      if (PL::read_try(pb.b, 3)) {
        ++entered;
        PL::read_unlock(pb.b, 3);
      } else {
        ++refused;
      }
    }
  }
  stop = true;
  trier.join();
  EXPECT_EQ(refused, 0u) << "readers sent to the inner rwsem by failing tries (" << entered << " entered, "
                         << tries.load() << " tries)";
  EXPECT_EQ(pending_seen.load(), 0u) << "PENDING seen while only readers held the lock";
  PL::read_unlock(pb.b, 0);
  EXPECT_TRUE(PL::write_try(pb.b, pb.rs, 2)) << "no reader left: the try owns the lock";
  PL::write_unlock(pb.b, pb.rs);
}

// A successful try still excludes every reader: readers and trying writers
// of several threads, the readers entering only by the fast path (retrying
// it), each writer alone inside.
TEST(PercidSharedTest, ASuccessfulTryExcludesEveryReader) {
  PercidBlock pb;
  ASSERT_TRUE(PL::write_try(pb.b, pb.rs, 1));
  EXPECT_FALSE(PL::read_try(pb.b, 0)) << "an owned lock refuses readers";
  EXPECT_FALSE(PL::write_try(pb.b, pb.rs, 2)) << "and other writers";
  PL::write_unlock(pb.b, pb.rs);
  ASSERT_TRUE(PL::read_try(pb.b, 0));
  PL::read_unlock(pb.b, 0);

  std::atomic<int> writers{0}, readers{0};
  std::atomic<uint64_t> writes{0};
  std::atomic<bool> stop{false}, broken{false};
  auto reader = [&](uint32_t key) {
    while (!stop.load(std::memory_order_relaxed)) {
      if (!PL::read_try(pb.b, key)) continue;
      readers.fetch_add(1);
      if (writers.load() != 0) broken = true;
      readers.fetch_sub(1);
      PL::read_unlock(pb.b, key);
    }
  };
  auto writer = [&](int32_t me) {
    while (!stop.load(std::memory_order_relaxed)) {
      if (!PL::write_try(pb.b, pb.rs, me)) continue;
      if (writers.fetch_add(1) != 0 || readers.load() != 0) broken = true;
      writers.fetch_sub(1);
      writes.fetch_add(1);
      PL::write_unlock(pb.b, pb.rs);
    }
  };
  std::thread t[] = {std::thread(reader, 0u), std::thread(reader, 5u), std::thread(writer, 1), std::thread(writer, 2)};
  const auto until = std::chrono::steady_clock::now() + 1000ms;
  while (std::chrono::steady_clock::now() < until || writes.load() < 100) std::this_thread::sleep_for(10ms);
  stop = true;
  for (auto& th : t) th.join();
  EXPECT_FALSE(broken.load()) << "a writer shared the lock";
  EXPECT_EQ(pb.b.readers(), 0u);
}

}  // namespace
