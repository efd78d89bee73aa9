// tests/core/percid_shared_test.cpp — core/percid/shared.h tested directly,
// on one block in ordinary memory, threads standing in for processes (each
// with its own process number and reader key): readers share the lock, a
// writer excludes readers and writers, a failing write try leaves no trace
// readers could meet, a reader already counted reads again past a pending
// writer, the last reader wakes a sleeping drain, and a stress loop checks
// mutual exclusion on plain data (so the TSan build checks the
// happens-before edges). The same lock in a real shared mapping, driven by
// PostgreSQL's calls, is tests/lwlock/.
#include "core/percid/shared.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "tests/core/core_test_util.h"

namespace lockswap {
namespace {

using namespace coretest;
using PL = percid_shared::Lock<RwsemSteal>;

// One lock's block (the control line, then the reader slots) and the inner
// rwsem's waiter records, one per process number.
class SharedLock {
 public:
  static constexpr uint32_t kSlots = 8;
  static constexpr int kProcs = 8;

  SharedLock() { block_.reset(); }
  const percid_shared::Block& block() const { return block_; }
  const rwshared::Records& records() const { return records_; }
  bool pending() const { return (block_.control->state.load() & percid_shared::kPending) != 0; }
  bool inner_write_held() const { return PL::Sem::write_locked(block_.control->sem); }
  uint64_t readers() const { return block_.readers(); }
  // How many slots announce a sleeping writer.
  uint32_t drain_flags() const {
    uint32_t n = 0;
    for (uint32_t i = 0; i < kSlots; ++i) n += block_.slots[i].drain.load() != percid::kDrainAwake;
    return n;
  }

  // The calls a process makes, as process `me` with reader key `key`.
  bool read_try(uint32_t key) { return PL::read_try(block_, key); }
  void read(int32_t me, uint32_t key) {
    if (PL::read_try(block_, key)) return;
    rwshared::Sleeper s = sleeper();
    PL::read_slow(block_, key, records_, me, s);
  }
  void read_again(uint32_t key) { PL::read_again(block_, key); }
  void read_unlock(uint32_t key) { PL::read_unlock(block_, key); }
  bool write_try(int32_t me) { return PL::write_try(block_, records_, me); }
  void write(int32_t me) {
    rwshared::Sleeper s = sleeper();
    PL::write_lock(block_, records_, me, s);
  }
  bool write_or_wait(int32_t me) {
    rwshared::Sleeper s = sleeper();
    return PL::write_or_wait(block_, records_, me, s);
  }
  void write_unlock() { PL::write_unlock(block_, records_); }

 private:
  static rwshared::Sleeper sleeper() { return {WaitCtx::blocking(WaitFamily::rwlock)}; }

  struct alignas(64) Memory {
    percid_shared::Control control;
    percid::ReaderSlot slots[kSlots];
  };
  std::unique_ptr<Memory> memory_ = std::make_unique<Memory>();
  std::unique_ptr<rwshared::Waiter[]> waiters_ = std::make_unique<rwshared::Waiter[]>(kProcs);
  percid_shared::Block block_{&memory_->control, memory_->slots, kSlots - 1};
  rwshared::Records records_{waiters_.get()};
};

TEST(PercidSharedTest, ReadersHoldTheLockTogether) {
  SharedLock l;
  constexpr int kReaders = 4;
  std::atomic<int> inside{0};
  std::atomic<bool> all_seen{false};
  std::vector<std::thread> readers;
  for (int i = 0; i < kReaders; ++i)
    readers.emplace_back([&, i] {
      l.read(i, 3 * i);
      inside.fetch_add(1);
      EXPECT_TRUE(eventually([&] { return all_seen.load(); })) << "reader " << i << " alone";
      l.read_unlock(3 * i);
    });
  EXPECT_TRUE(eventually([&] { return inside.load() == kReaders; })) << "readers waited for one another";
  EXPECT_EQ(l.readers(), uint64_t{kReaders});
  EXPECT_FALSE(l.pending());
  all_seen = true;
  for (auto& t : readers) t.join();
  EXPECT_EQ(l.readers(), 0u);
  EXPECT_TRUE(l.write_try(0)) << "the last reader gone, a writer owns it at once";
  l.write_unlock();
}

TEST(PercidSharedTest, AWriterExcludesReadersAndWriters) {
  SharedLock l;
  l.write(0);
  EXPECT_TRUE(l.pending());
  EXPECT_TRUE(l.inner_write_held());
  EXPECT_FALSE(l.read_try(5)) << "a reader's try meets PENDING";
  EXPECT_EQ(l.readers(), 0u) << "and backs its count out";
  EXPECT_FALSE(l.write_try(1));

  std::atomic<bool> reader_in{false}, writer_in{false}, overlap{false};
  std::thread reader([&] {
    l.read(1, 1);
    reader_in = true;
    if (writer_in) overlap = true;
    std::this_thread::sleep_for(20ms);
    if (writer_in) overlap = true;
    reader_in = false;
    l.read_unlock(1);
  });
  std::thread writer([&] {
    l.write(2);
    writer_in = true;
    if (reader_in) overlap = true;
    std::this_thread::sleep_for(20ms);
    if (reader_in) overlap = true;
    writer_in = false;
    l.write_unlock();
  });
  std::this_thread::sleep_for(50ms);
  EXPECT_FALSE(reader_in.load()) << "a blocking reader got in past the owner";
  EXPECT_FALSE(writer_in.load()) << "a second writer got in";
  l.write_unlock();
  reader.join();
  writer.join();
  EXPECT_FALSE(overlap.load()) << "the reader and the writer held the lock together";
  EXPECT_EQ(l.readers(), 0u);
  EXPECT_FALSE(l.pending());
  EXPECT_FALSE(l.inner_write_held());
}

// The try's rules (core/percid/shared.h, "The try"): failing on a reader, it
// writes nothing (no PENDING, the inner rwsem untouched); succeeding, it
// owns the lock as a write lock does.
TEST(PercidSharedTest, AFailingWriteTryLeavesNoTraceForReaders) {
  SharedLock l;
  ASSERT_TRUE(l.read_try(0));
  EXPECT_FALSE(l.write_try(1));
  EXPECT_FALSE(l.pending()) << "a failing try set PENDING";
  EXPECT_FALSE(l.inner_write_held()) << "a failing try kept the inner rwsem";
  EXPECT_TRUE(l.read_try(4)) << "a reader after the failing try takes the fast path";
  l.read_unlock(4);
  l.read_unlock(0);

  ASSERT_TRUE(l.write_try(1)) << "no reader: the try owns the lock";
  EXPECT_TRUE(l.pending());
  EXPECT_FALSE(l.read_try(0));
  EXPECT_FALSE(l.write_try(2));
  l.write_unlock();
  EXPECT_FALSE(l.pending());
  EXPECT_FALSE(l.inner_write_held());
}

// The same while other processes keep trying: a reader holds the lock
// throughout, so every try fails at its first sum and the readers arriving
// meanwhile are never sent to the inner rwsem.
TEST(PercidSharedTest, TriesThatFailNeverTurnReadersAway) {
  SharedLock l;
  ASSERT_TRUE(l.read_try(0));
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> tries{0};
  std::thread trier([&] {
    while (!stop.load(std::memory_order_relaxed)) {
      if (l.write_try(2)) {
        ADD_FAILURE() << "a try succeeded while a reader held the lock";
        l.write_unlock();
      }
      tries.fetch_add(1, std::memory_order_relaxed);
    }
  });
  uint64_t refused = 0;
  const auto until = std::chrono::steady_clock::now() + 300ms;
  while (std::chrono::steady_clock::now() < until || tries.load() < 100) {
    if (l.read_try(3))
      l.read_unlock(3);
    else
      ++refused;
  }
  stop = true;
  trier.join();
  EXPECT_EQ(refused, 0u) << "readers turned away by failing tries (" << tries.load() << " tries)";
  l.read_unlock(0);
}

// A process that holds the lock shared asks again (read again): it enters
// past a pending writer, which cannot own before both holds are gone, while
// a new reader's try backs off.
TEST(PercidSharedTest, ReadAgainPassesAPendingWriter) {
  SharedLock l;
  l.read(0, 0);
  std::atomic<bool> writer_in{false};
  std::thread writer([&] {
    l.write(1);
    writer_in = true;
    l.write_unlock();
  });
  ASSERT_TRUE(eventually([&] { return l.pending(); })) << "the writer never got to drain";
  EXPECT_FALSE(l.read_try(5)) << "a new reader backs off a pending writer";
  l.read_again(5);
  EXPECT_EQ(l.readers(), 2u);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(writer_in.load()) << "the writer owns the lock with two reads held";
  l.read_unlock(0);
  std::this_thread::sleep_for(20ms);
  EXPECT_FALSE(writer_in.load()) << "the writer owns the lock with one read held";
  l.read_unlock(5);
  writer.join();
  EXPECT_TRUE(writer_in.load());
  EXPECT_EQ(l.readers(), 0u);
}

// A writer whose drain sleeps (spinning off: it sleeps after its polls)
// announces it in every slot; the last reader, leaving by another slot than
// it came in by, wakes it, and the flags are clear once the writer owns.
TEST(PercidSharedTest, TheLastReaderWakesASleepingDrain) {
  Restore<bool> spin(g_rwsem_tunables.writer_spin);
  g_rwsem_tunables.writer_spin = false;
  SharedLock l;
  Events events;
  l.read(0, 1);
  std::atomic<bool> writer_in{false};
  std::thread writer([&] {
    l.write(1);
    writer_in = true;
  });
  ASSERT_TRUE(eventually([&] { return l.drain_flags() == SharedLock::kSlots; })) << "the drain never slept";
  if (kEvents) {
    EXPECT_TRUE(eventually([&] { return events(LockEvent::percid_wlock_sleep) >= 1; }));
  }
  EXPECT_FALSE(writer_in.load());
  l.read_unlock(6);
  EXPECT_TRUE(eventually([&] { return writer_in.load(); })) << "the leaving reader did not wake the drain";
  writer.join();
  EXPECT_EQ(l.drain_flags(), 0u) << "the drain flags outlived the sleep";
  EXPECT_EQ(l.readers(), 0u);
  l.write_unlock();
}

// Readers, writers, tries and read-agains of several processes on one lock:
// writers change a plain counter, readers read it twice and compare; only
// the lock orders those accesses.
TEST(PercidSharedTest, StressKeepsWritersAlone) {
  SharedLock l;
  constexpr int kThreads = 4;
  const int rounds = kUnderTsan ? 2000 : 20000;
  uint64_t counter = 0;  // plain: the lock is all that protects it
  std::atomic<int> readers_in{0}, writers_in{0};
  std::atomic<uint64_t> writes{0};
  std::atomic<bool> broken{false};

  auto as_writer = [&] {
    if (writers_in.fetch_add(1) != 0 || readers_in.load() != 0) broken = true;
    counter = counter + 1;
    writes.fetch_add(1, std::memory_order_relaxed);
    writers_in.fetch_sub(1);
  };
  auto as_reader = [&] {
    readers_in.fetch_add(1);
    const uint64_t seen = counter;
    if (writers_in.load() != 0) broken = true;
    if (counter != seen) broken = true;
    readers_in.fetch_sub(1);
  };
  auto process = [&](int32_t me) {
    uint32_t rng = 0x9e3779b9u * (me + 1);
    uint32_t key = me;
    for (int i = 0; i < rounds; ++i) {
      rng = rng * 1664525u + 1013904223u;
      switch ((rng >> 24) % 8) {
        case 0:
        case 1:
        case 2:
          l.read(me, key);
          as_reader();
          l.read_unlock(key);
          break;
        case 3:  // read again, and leave by another key (only the sum counts)
          l.read(me, key);
          l.read_again(key + 1);
          as_reader();
          l.read_unlock(key);
          l.read_unlock(key + 5);
          break;
        case 4:
          if (l.read_try(key)) {
            as_reader();
            l.read_unlock(key);
          }
          break;
        case 5:
          l.write(me);
          as_writer();
          l.write_unlock();
          break;
        case 6:
          if (l.write_try(me)) {
            as_writer();
            l.write_unlock();
          }
          break;
        default:
          if (l.write_or_wait(me)) {
            as_writer();
            l.write_unlock();
          }
          break;
      }
      key += (rng & 1);  // the key moves now and then, as an id does
    }
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) threads.emplace_back(process, t);
  for (auto& t : threads) t.join();
  EXPECT_FALSE(broken.load()) << "a writer shared the lock";
  EXPECT_EQ(counter, writes.load());
  EXPECT_EQ(l.readers(), 0u);
  EXPECT_FALSE(l.pending());
  EXPECT_FALSE(l.inner_write_held());
  EXPECT_EQ(l.drain_flags(), 0u);
}

}  // namespace
}  // namespace lockswap
