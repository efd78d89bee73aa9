// tests/core/percid_agreement_test.cpp — the two hosts of core/percid/body.h
// (core/percid/thread.h, core/percid/shared.h) driven through the same
// deterministic, single-threaded operation sequences: after every step both
// granted or both refused, and the writer state (PENDING, write-held), the
// read holders and the drain flags agree — with each other and with a plain
// model of a reader/writer lock. Agents stand in for processes: the shared
// host gives each its process number and reader key; the thread host runs
// them all on this thread, whose one id counts every read in one slot (only
// the sum means anything).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "core/percid/shared.h"
#include "core/percid/thread.h"
#include "tests/core/core_test_util.h"

namespace lockswap {
namespace {

using namespace coretest;

using ThreadWords = PercidWords;
using ThreadLock = PercidRwlock<ThreadWords>;
using SharedLock = percid_shared::Lock<RwsemSteal>;

enum class Op { read_try, read_again, read_unlock, write_try, write_unlock, writer_sleeps, writer_wakes };
const char* name(Op op) {
  switch (op) {
    case Op::read_try: return "read_try";
    case Op::read_again: return "read_again";
    case Op::read_unlock: return "read_unlock";
    case Op::write_try: return "write_try";
    case Op::write_unlock: return "write_unlock";
    case Op::writer_sleeps: return "writer_sleeps";
    default: return "writer_wakes";
  }
}
struct Step {
  Op op;
  int agent;
};

// What one host shows after a step.
struct View {
  bool granted;
  bool pending;
  bool write_held;
  uint64_t readers;
  bool first_drain_flag;  // the futex word a sleeping drain waits on
  uint32_t drain_flags;   // slots announcing a sleeping writer
  bool operator==(const View&) const = default;
};
std::string describe(const View& v) {
  std::ostringstream o;
  o << "granted " << v.granted << " pending " << v.pending << " write_held " << v.write_held << " readers "
    << v.readers << " first drain flag " << v.first_drain_flag << " drain flags " << v.drain_flags;
  return o.str();
}

// Every operation is a try or a release: nothing here blocks. The two
// writer_* steps stand for a drain asleep and awake again (its drain flags,
// as the body sets and clears them), so that a leaving reader's wake-up is
// compared too.
class ThreadHost {
 public:
  ~ThreadHost() { ThreadLock::destroy(w_); }
  bool apply(Step s) {
    switch (s.op) {
      case Op::read_try: return ThreadLock::read_lock(w_, WaitCtx::try_once(), rwsem::kReadPlain) == 0;
      case Op::read_again: return ThreadLock::read_lock(w_, WaitCtx::try_once(), rwsem::kReadHoldsThis) == 0;
      case Op::read_unlock: return ThreadLock::read_unlock(w_), true;
      case Op::write_try: return ThreadLock::write_lock(w_, WaitCtx::try_once()) == 0;
      case Op::write_unlock: return ThreadLock::write_unlock(w_), true;
      case Op::writer_sleeps: return percid::set_drain(index(), percid::kDrainSleeps), true;
      default: return percid::set_drain(index(), percid::kDrainAwake), true;
    }
  }
  View view(bool granted) {
    const uint32_t i = index();
    const percid::ReaderSlot* slots = percid::block_of(i);
    uint32_t flags = 0;
    for (uint32_t k = 0; k < percid::slots_per_lock(); ++k) flags += slots[k].drain.load() != percid::kDrainAwake;
    return {granted,
            (w_.state.load() & percid::kWriterPending) != 0,
            ThreadLock::write_locked(w_),
            percid::readers(i),
            percid::drain_futex(i).load() != percid::kDrainAwake,
            flags};
  }
  uint32_t index() {
    if (w_.index.load() == percid::kNoBlock) percid::assign_block(w_.index, &w_);
    return w_.index.load();
  }

 private:
  ThreadWords w_;
};

class SharedHost {
 public:
  SharedHost() : slots_(percid::slots_per_lock()) { block_.reset(); }
  bool apply(Step s) {
    const auto key = static_cast<uint32_t>(3 * s.agent);
    switch (s.op) {
      case Op::read_try: return SharedLock::read_try(block_, key);
      case Op::read_again: return SharedLock::read_again(block_, key), true;
      case Op::read_unlock: return SharedLock::read_unlock(block_, key), true;
      case Op::write_try: return SharedLock::write_try(block_, records_, s.agent);
      case Op::write_unlock: return SharedLock::write_unlock(block_, records_), true;
      case Op::writer_sleeps: return percid::set_drain_slots(block_.slots, slots_, percid::kDrainSleeps), true;
      default: return percid::set_drain_slots(block_.slots, slots_, percid::kDrainAwake), true;
    }
  }
  View view(bool granted) const {
    uint32_t flags = 0;
    for (uint32_t k = 0; k < slots_; ++k) flags += block_.slots[k].drain.load() != percid::kDrainAwake;
    return {granted,
            (block_.control->state.load() & percid_shared::kPending) != 0,
            SharedLock::Sem::write_locked(block_.control->sem),
            block_.readers(),
            block_.drain_futex().load() != percid::kDrainAwake,
            flags};
  }

 private:
  uint32_t slots_;
  std::unique_ptr<percid_shared::Control> control_ = std::make_unique<percid_shared::Control>();
  std::unique_ptr<percid::ReaderSlot[]> memory_ = std::make_unique<percid::ReaderSlot[]>(slots_);
  percid_shared::Block block_{control_.get(), memory_.get(), slots_ - 1};
  std::unique_ptr<rwshared::Waiter[]> waiters_ = std::make_unique<rwshared::Waiter[]>(8);
  rwshared::Records records_{waiters_.get()};
};

// A reader/writer lock as a specification: who holds it, and what a try
// gets. The drain flags: set by writer_sleeps in every slot, the first one
// cleared by a leaving reader's wake-up, all cleared by writer_wakes.
struct Model {
  std::vector<int> reads = std::vector<int>(4, 0);
  int writer = -1;
  bool drain_set = false, first_flag_set = false;

  uint64_t readers() const {
    uint64_t n = 0;
    for (int r : reads) n += r;
    return n;
  }
  bool apply(Step s) {
    switch (s.op) {
      case Op::read_try:
        if (writer >= 0) {
          first_flag_set = false;  // its back-out is a leave, which wakes a sleeping drain
          return false;
        }
        ++reads[s.agent];
        return true;
      case Op::read_again:
      case Op::read_unlock:
        reads[s.agent] += s.op == Op::read_again ? 1 : -1;
        if (s.op == Op::read_unlock) first_flag_set = false;  // the slot flag said "wake", and it did
        return true;
      case Op::write_try:
        if (writer >= 0 || readers() != 0) return false;
        writer = s.agent;
        return true;
      case Op::write_unlock:
        writer = -1;
        return true;
      case Op::writer_sleeps:
        drain_set = first_flag_set = true;
        return true;
      default:
        drain_set = first_flag_set = false;
        return true;
    }
  }
  // The steps allowed now: releases only of what an agent holds, read
  // again only by a reader, a drain asleep only while readers hold.
  std::vector<Step> legal() const {
    std::vector<Step> steps;
    for (int a = 0; a < 4; ++a) {
      steps.push_back({Op::read_try, a});
      steps.push_back({Op::write_try, a});
      if (reads[a] > 0) steps.push_back({Op::read_again, a}), steps.push_back({Op::read_unlock, a});
      if (writer == a) steps.push_back({Op::write_unlock, a});
    }
    if (readers() != 0 && !drain_set) steps.push_back({Op::writer_sleeps, 0});
    if (drain_set) steps.push_back({Op::writer_wakes, 0});
    return steps;
  }
};

// Runs `steps` through both hosts and the model; every step must agree.
void run(const std::vector<Step>& steps, Model& model, ThreadHost& thread, SharedHost& shared) {
  const uint32_t slots = percid::slots_per_lock();
  for (size_t i = 0; i < steps.size(); ++i) {
    const Step s = steps[i];
    const bool expected = model.apply(s);
    const View t = thread.view(thread.apply(s));
    const View p = shared.view(shared.apply(s));
    SCOPED_TRACE(::testing::Message() << "step " << i << ": " << name(s.op) << " by agent " << s.agent);
    ASSERT_EQ(t, p) << "thread host: " << describe(t) << "\nshared host: " << describe(p);
    EXPECT_EQ(t.granted, expected);
    EXPECT_EQ(t.pending, model.writer >= 0) << "PENDING outside a write hold";
    EXPECT_EQ(t.write_held, model.writer >= 0);
    EXPECT_EQ(t.readers, model.readers());
    EXPECT_EQ(t.first_drain_flag, model.first_flag_set);
    EXPECT_EQ(t.drain_flags, model.drain_set ? slots - (model.first_flag_set ? 0 : 1) : 0u);
    if (::testing::Test::HasFailure()) return;
  }
}

class PercidAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override { cid::select(CidMode::thread); }
  Model model_;
  ThreadHost thread_;
  SharedHost shared_;
};

TEST_F(PercidAgreementTest, ReadersThenAWriter) {
  run({{Op::read_try, 0},
       {Op::read_try, 1},
       {Op::write_try, 2},  // read-held: refused, nothing left behind
       {Op::read_unlock, 0},
       {Op::write_try, 2},
       {Op::read_unlock, 1},
       {Op::write_try, 2},  // free: owned
       {Op::read_try, 0},   // write-held: refused
       {Op::write_try, 3},
       {Op::write_unlock, 2},
       {Op::read_try, 3},
       {Op::read_unlock, 3}},
      model_, thread_, shared_);
}

TEST_F(PercidAgreementTest, ReadAgainAndALeavingReadersWakeUp) {
  run({{Op::read_try, 1},
       {Op::read_again, 1},
       {Op::writer_sleeps, 0},
       {Op::read_unlock, 1},  // the slot's flag says a writer sleeps: the first slot's is cleared
       {Op::write_try, 2},    // one hold left: refused
       {Op::read_unlock, 1},
       {Op::writer_wakes, 0},
       {Op::write_try, 2},
       {Op::write_unlock, 2}},
      model_, thread_, shared_);
}

TEST_F(PercidAgreementTest, GeneratedSequences) {
  std::mt19937 rng(20261207);  // fixed: the same sequence every run
  std::vector<Step> steps;
  Model planner;
  for (int i = 0; i < 4000; ++i) {
    const std::vector<Step> legal = planner.legal();
    const Step s = legal[rng() % legal.size()];
    planner.apply(s);
    steps.push_back(s);
  }
  run(steps, model_, thread_, shared_);
}

}  // namespace
}  // namespace lockswap
