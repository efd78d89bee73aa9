// tests/core/osq_lock_test.cpp — core/osq_lock.h, the optimistic spin queue,
// tested directly (no rwsem around it).
//
// The queue is observed through its tail word and the OSQ fields of the
// threads' registry slots (osq_next, osq_prev), which are the whole state
// (core/osq_lock.h, "Words"). A queued spinner leaves when its budget runs
// out or when its predecessor cannot be running; the scenario tests make
// each of those happen on purpose:
//   * the budget: a spinner whose deadline passes while it is queued;
//   * "not running": the predecessor's slot says it sleeps in lockswap
//     (ThreadSlot::blocked), which is what a spinner reads first.
// Everywhere else a queued spinner must take its predecessor as running, so
// the scenario threads hide their CPU from the others (cpu_word null, as on a
// kernel without rseq): on this machine's few CPUs two threads often share
// one, and a spinner would then rightly give up behind a neighbour that the
// test needs it to wait for. The stress test leaves the CPUs visible.
// The critical sections write plain data: the TSan build checks that the
// handover (osq_locked := 1, release; read with acquire) orders them.
#include "core/osq_lock.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "arch/clock.h"
#include "core/thread_registry.h"
#include "tests/core/core_test_util.h"

namespace lockswap {
namespace {

using namespace std::chrono_literals;
using namespace coretest;

constexpr uint64_t kMs = 1'000'000;
// Long enough that no spinner in a scenario gives up unless the test makes
// it; short enough that a broken handover fails the test instead of hanging.
constexpr uint64_t kPatientNs = 3'000 * kMs;

SpinBudget budget_of(uint64_t ns) { return SpinBudget::until(arch::monotonic_ns() + ns); }

uint32_t my_id() { return self_slot().id; }
ThreadSlot& slot(uint32_t id) { return *slot_of(id); }

// From now on the calling thread's CPU is unknown to spinners queued behind
// it (they take it as running), as on a kernel without rseq. A spinner
// thread keeps it hidden until it exits (the registry retracts the pointer
// then): a neighbour that read its id just before it left may still judge
// it, and must not find a CPU published again.
void hide_cpu_for_good() { self_slot().cpu_word.store(nullptr); }

// The same for a scope of the test's main thread (it judges no one after).
class CpuHidden {
 public:
  CpuHidden() : slot_(self_slot()), saved_(slot_.cpu_word.exchange(nullptr)) {}
  ~CpuHidden() { slot_.cpu_word.store(saved_); }
  CpuHidden(const CpuHidden&) = delete;
  CpuHidden& operator=(const CpuHidden&) = delete;

 private:
  ThreadSlot& slot_;
  const volatile uint32_t* saved_;
};

// While alive, the calling thread looks asleep in lockswap to the spinner
// queued behind it (may_be_running() reads `blocked` first).
class LooksAsleep {
 public:
  LooksAsleep() { self_slot().blocked.store(1); }
  ~LooksAsleep() { self_slot().blocked.store(0); }
  LooksAsleep(const LooksAsleep&) = delete;
  LooksAsleep& operator=(const LooksAsleep&) = delete;
};

// A thread that queues once on `tail` with the given budget, with its CPU
// hidden. If it becomes the head it checks what the previous head wrote,
// then unlocks at once.
class Spinner {
 public:
  Spinner(std::atomic<uint32_t>& tail, uint64_t budget_ns, const int* handed = nullptr)
      : thread_([this, &tail, budget_ns, handed] {
          hide_cpu_for_good();
          id_.store(my_id());
          SpinBudget budget = budget_of(budget_ns);
          bool head = osq_lock(tail, budget);
          if (head) {
            if (handed != nullptr) seen_ = *handed;
            osq_unlock(tail);
          }
          got_turn_.store(head);
          done_.store(true);
        }) {}
  ~Spinner() { join(); }
  Spinner(const Spinner&) = delete;
  Spinner& operator=(const Spinner&) = delete;

  uint32_t id() {
    EXPECT_TRUE(eventually([&] { return id_.load() != 0; }));
    return id_.load();
  }
  bool done() const { return done_.load(); }
  // Waits for the thread to finish; true if it became the head.
  bool got_turn() {
    join();
    return got_turn_.load();
  }
  int seen() {
    join();
    return seen_;
  }

 private:
  void join() {
    if (thread_.joinable()) thread_.join();
  }
  std::atomic<uint32_t> id_{0};
  std::atomic<bool> got_turn_{false};
  std::atomic<bool> done_{false};
  int seen_ = 0;
  std::thread thread_;  // last: starts after the fields it writes exist
};

bool tail_becomes(const std::atomic<uint32_t>& tail, uint32_t id) {
  return eventually([&] { return tail.load() == id; });
}

// --- one thread --------------------------------------------------------------

TEST(OsqLock, AnEmptyQueueMakesTheCallerHeadAtOnce) {
  std::atomic<uint32_t> tail{0};
  SpinBudget budget = budget_of(0);  // no patience needed: nobody is queued
  ASSERT_TRUE(osq_lock(tail, budget));
  EXPECT_EQ(tail.load(), my_id()) << "the head is the tail of a queue of one";
  osq_unlock(tail);
  EXPECT_EQ(tail.load(), 0u) << "the last one out empties the queue";
}

TEST(OsqLock, LockUnlockSequencesOnSeveralQueuesLeaveEachEmpty) {
  std::atomic<uint32_t> tails[3] = {};
  for (int round = 0; round < 1000; ++round) {
    std::atomic<uint32_t>& tail = tails[round % 3];  // one queue at a time, as a spinner is on one lock
    SpinBudget budget = budget_of(kPatientNs);
    ASSERT_TRUE(osq_lock(tail, budget)) << "round " << round;
    ASSERT_EQ(tail.load(), my_id());
    osq_unlock(tail);
    for (auto& t : tails) ASSERT_EQ(t.load(), 0u) << "round " << round;
  }
  EXPECT_EQ(self_slot().osq_next.load(), 0u) << "no successor left behind in the node";
}

// --- scenarios with queued spinners ---------------------------------------------

TEST(OsqLock, TheQueuedSpinnerGetsTheTurnWithWhatTheHeadWrote) {
  CpuHidden hidden;
  std::atomic<uint32_t> tail{0};
  SpinBudget budget = budget_of(kPatientNs);
  ASSERT_TRUE(osq_lock(tail, budget));
  int handed = 0;
  Spinner next(tail, kPatientNs, &handed);
  ASSERT_TRUE(tail_becomes(tail, next.id()));
  EXPECT_EQ(self_slot().osq_next.load(), next.id()) << "the spinner linked itself behind the head";
  handed = 42;  // plain: the handover must publish it
  osq_unlock(tail);
  EXPECT_TRUE(next.got_turn());
  EXPECT_EQ(next.seen(), 42);
  EXPECT_EQ(tail.load(), 0u);
}

TEST(OsqLock, TheLastSpinnerGivingUpMovesTheTailBackToItsPredecessor) {
  CpuHidden hidden;
  std::atomic<uint32_t> tail{0};
  SpinBudget budget = budget_of(kPatientNs);
  ASSERT_TRUE(osq_lock(tail, budget));
  Spinner quitter(tail, 20 * kMs);
  EXPECT_FALSE(quitter.got_turn()) << "the head never unlocked: the budget ended the spin";
  EXPECT_EQ(tail.load(), my_id()) << "unqueue step B: the tail names the head again";
  EXPECT_EQ(self_slot().osq_next.load(), 0u) << "unqueue step A: the head has no successor";
  osq_unlock(tail);
  EXPECT_EQ(tail.load(), 0u);
}

TEST(OsqLock, ASpinnerWhosePredecessorIsNotRunningGivesUp) {
  CpuHidden hidden;
  std::atomic<uint32_t> tail{0};
  SpinBudget budget = budget_of(kPatientNs);
  ASSERT_TRUE(osq_lock(tail, budget));
  Events events;
  auto start = std::chrono::steady_clock::now();
  {
    LooksAsleep asleep;
    Spinner quitter(tail, kPatientNs);
    EXPECT_FALSE(quitter.got_turn());
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, 2s) << "it gave up on the predecessor, not on its budget";
  if (kEvents) {
    EXPECT_GE(events(LockEvent::rwsem_opt_owner_off), 1u);
  }
  EXPECT_EQ(tail.load(), my_id());
  osq_unlock(tail);
  EXPECT_EQ(tail.load(), 0u);
}

// head <- middle <- last: the middle one's budget runs out while `last` is
// queued behind it. It must link `last` to the head (unqueue step C), so that
// the head's unlock reaches `last`. Whether `last` queued before the middle
// one's deadline depends on the scheduler; a round where it did not is
// played again with a longer deadline.
TEST(OsqLock, ASpinnerLeavingFromTheMiddleLinksItsNeighbours) {
  CpuHidden hidden;
  for (uint64_t deadline_ms = 100; deadline_ms <= 1600; deadline_ms *= 2) {
    std::atomic<uint32_t> tail{0};
    SpinBudget budget = budget_of(kPatientNs);
    ASSERT_TRUE(osq_lock(tail, budget));
    const uint64_t middle_deadline = arch::monotonic_ns() + deadline_ms * kMs;
    Spinner middle(tail, deadline_ms * kMs);
    ASSERT_TRUE(tail_becomes(tail, middle.id()));
    Spinner last(tail, kPatientNs);
    ASSERT_TRUE(tail_becomes(tail, last.id()));
    // The middle one spins until its deadline (the head runs, its CPU hidden),
    // so before it `last` queued behind it.
    const bool last_was_behind_middle = arch::monotonic_ns() < middle_deadline;
    EXPECT_FALSE(middle.got_turn());
    if (last_was_behind_middle) {
      EXPECT_EQ(tail.load(), last.id()) << "the tail is not the leaver's to move";
      EXPECT_EQ(self_slot().osq_next.load(), last.id()) << "step C: head -> last";
      EXPECT_EQ(slot(last.id()).osq_prev.load(), my_id()) << "step C: last -> head";
      EXPECT_FALSE(last.done()) << "last still waits for its turn";
    }
    osq_unlock(tail);
    EXPECT_TRUE(last.got_turn()) << "the head's unlock reached the spinner behind the one that left";
    EXPECT_EQ(tail.load(), 0u);
    if (last_was_behind_middle) return;
  }
  GTEST_SKIP() << "the scheduler never let the last spinner queue within the middle one's deadline";
}

// --- stress --------------------------------------------------------------------

// Threads queue over and over with budgets from none to generous, so heads
// hand over while others give up from every position. Mutual exclusion of
// the heads is checked with a plain counter (and by TSan), and the queue
// must end empty.
TEST(OsqLock, StressHeadsAreExclusiveWhileSpinnersGiveUp) {
  constexpr int kThreads = 4;
  const auto run_for = kUnderTsan ? 400ms : 1000ms;
  const uint64_t budgets_ns[] = {0, 20'000, 200'000, 5 * kMs};
  std::atomic<uint32_t> tail{0};
  std::atomic<int> heads_inside{0};
  std::atomic<bool> overlap{false};
  uint64_t plain_count = 0;  // written by heads only
  std::atomic<uint64_t> turns{0}, give_ups{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (unsigned i = static_cast<unsigned>(t); !stop.load(std::memory_order_relaxed); ++i) {
        SpinBudget budget = budget_of(budgets_ns[i % std::size(budgets_ns)]);
        if (!osq_lock(tail, budget)) {
          give_ups.fetch_add(1, std::memory_order_relaxed);
          continue;
        }
        if (heads_inside.fetch_add(1) != 0) overlap.store(true);
        ++plain_count;
        if (i % 8 == 0) std::this_thread::yield();  // a head that lingers: a queue forms
        heads_inside.fetch_sub(1);
        osq_unlock(tail);
        turns.fetch_add(1, std::memory_order_relaxed);
      }
    });
  std::this_thread::sleep_for(run_for);
  stop.store(true);
  for (auto& th : threads) th.join();
  EXPECT_FALSE(overlap.load()) << "two heads at once";
  EXPECT_EQ(plain_count, turns.load());
  EXPECT_EQ(tail.load(), 0u) << "every spinner left or unlocked";
  EXPECT_GT(turns.load(), 0u);
  RecordProperty("turns", std::to_string(turns.load()));
  RecordProperty("give_ups", std::to_string(give_ups.load()));
}

}  // namespace
}  // namespace lockswap
