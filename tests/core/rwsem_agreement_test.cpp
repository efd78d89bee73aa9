// tests/core/rwsem_agreement_test.cpp — one rwsem body, two hosts: the same
// operations through both representations, compared step by step.
//
// core/rwsem/rules.h holds the kernel's rw_semaphore rules once, as
// Rules<Rep>; the thread host runs them on core/rwsem/thread_rep.h (64-bit
// words, ThreadSlot* owners, Waiter* records), the process-shared host on
// core/rwsem/shared_rep.h (three 32-bit words, process numbers, records in a
// side table). Each test runs one script through a ThreadHost and a
// SharedHost: acquisitions, trylocks and releases through each host's own API,
// queues staged record by record (single-threaded and deterministic: nobody
// ever sleeps here), then the rules themselves. After every step it writes
// down what the kernel's state says, decoded: the count (writer, readers,
// WAITERS, HANDOFF), the owner (whom it names, READER_OWNED and the
// nonspinnable bits), the queue in order, which waiters own a handoff,
// which were granted or woken, and the kernel lock events counted; the two
// hosts' records must be equal. Where a host has a rule of its own (the
// thread rules WOKEN and READER_FIRST, the process-shared host's wake on a
// backed-out bias, each host's trylock), the test says so and checks that
// rule on its host.
//
// The representation headers are internal to their host's translation unit
// (internal linkage); this test is the one other place that includes them.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "core/rwsem/thread_rep.h"
#include "core/rwsem/shared_rep.h"
#pragma GCC diagnostic pop

#include <gtest/gtest.h>

#include <cerrno>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/rwsem.h"
#include "tests/core/core_test_util.h"

namespace lockswap {
namespace {

using coretest::Events;
using rwsem_rules::OwnerState;
using rwsem_rules::WakeType;

// Actors 0..kActors-1 are other threads (processes) that queue or own the
// lock; kSelf is the test's own thread (process number).
constexpr int kActors = 260;
constexpr int kSelf = kActors;
constexpr int kNobody = -1;
enum class Kind { read, write };

// The other threads' slots: their records' parkers and the owners they name.
// Nobody parks on them (a wake only bumps a park word).
ThreadSlot g_slots[kActors];

// The kernel's lock events, counted by the rules: both hosts count them alike.
constexpr LockEvent kRuleEvents[] = {
    LockEvent::rwsem_wake_reader,   LockEvent::rwsem_wake_writer, LockEvent::rwsem_rlock_handoff,
    LockEvent::rwsem_wlock_handoff, LockEvent::rwsem_opt_lock,    LockEvent::rwsem_opt_rlock,
    LockEvent::rwsem_opt_fail,      LockEvent::rwsem_opt_nospin,  LockEvent::rwsem_opt_owner_off,
    LockEvent::rwsem_opt_budget,    LockEvent::rwsem_opt_norspin, LockEvent::rwsem_rlock_steal,
};

std::string list(const std::vector<int>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? " " : "") + std::to_string(v[i]);
  return s + "]";
}
std::string actor(int a) { return a == kNobody ? "-" : a == kSelf ? "self" : std::to_string(a); }

// One host's record of a script: a line per step.
class Trace {
 public:
  template <class Host>
  void step(Host& h, const std::string& what, const std::string& result = "") {
    std::string line = what + (result.empty() ? "" : " -> " + result) + " | " + h.state() + " | events";
    for (LockEvent e : kRuleEvents)
      if (uint64_t n = ev_(e)) line += " " + std::string(kLockEventNames[static_cast<uint32_t>(e)]) + "=" + std::to_string(n);
    lines_.push_back(line);
    ev_ = Events();
  }
  const std::vector<std::string>& lines() const { return lines_; }

 private:
  std::vector<std::string> lines_;
  Events ev_;
};

// The kernel's view of one lock, whatever the representation.
std::string kernel_state(bool writer, uint64_t readers, bool waiters, bool handoff, int owner, uint64_t owner_flags,
                         const std::vector<int>& queue, const std::vector<int>& handoff_set) {
  return std::string(writer ? "W" : "-") + " readers=" + std::to_string(readers) + (waiters ? " WAITERS" : "") +
         (handoff ? " HANDOFF" : "") + " owner=" + actor(owner) +
         ((owner_flags & rwsem::kReaderOwned) ? " READER_OWNED" : "") + " owner_flags=" + std::to_string(owner_flags) +
         " queue=" + list(queue) + " handoff_set=" + list(handoff_set);
}

std::string rc(bool ok) { return ok ? "ok" : "busy"; }
std::string rc(int e) { return e == 0 ? "ok" : e == EBUSY ? "busy" : "error " + std::to_string(e); }
std::string owner_state_name(OwnerState s) {
  switch (s) {
    case OwnerState::null: return "null";
    case OwnerState::writer: return "writer";
    case OwnerState::reader: return "reader";
    default: return "nonspinnable";
  }
}

// ---------------------------------------------------------------------------
// The thread host: core/rwsem/thread_rep.h
// ---------------------------------------------------------------------------

template <class P>
class ThreadHost {
 public:
  using Rep = rwsem_detail::ThreadRep<P>;
  using K = rwsem_detail::Rules<P>;
  using Api = Rwsem<P, RwsemWords>;
  using WaitList = rwsem_detail::WaitList;
  using WakeQ = rwsem_detail::WakeQ;
  using Waiter = rwsem_detail::Waiter;
  using WaitType = rwsem_detail::WaitType;

  ThreadHost() {
    const uint32_t generation = thread_registry::g_fork_generation.load();
    for (ThreadSlot& s : g_slots) {
      s.generation.store(generation);
      s.blocked.store(0);
    }
    (void)self_slot();  // the first lock call attaches no thread mid-script
  }
  const rwsem_detail::WordRefs& lock() const { return r_; }

  // --- staging -------------------------------------------------------------
  void queue(int a, Kind k, bool overdue) {
    Waiter& w = rec_[a].emplace(g_slots[a], k == Kind::read ? WaitType::read : WaitType::write, rwsem_rules::now_ns());
    w.timeout = overdue ? 0 : UINT64_MAX;
    WaitList wl(r_);
    if (wl.empty()) words_.count.fetch_or(rwsem::kFlagWaiters);
    wl.add_tail(&w);
  }
  void set_last_rowner(int a, uint64_t owner) { rec_[a]->last_rowner = owner; }
  void set_lock(bool writer, uint64_t readers, bool handoff) {
    uint64_t c = words_.count.load() & ~(rwsem::kWriterLocked | rwsem::kReaderCountMask | rwsem::kFlagHandoff);
    words_.count.store(c | (writer ? rwsem::kWriterLocked : 0) | readers * rwsem::kReaderBias |
                       (handoff ? rwsem::kFlagHandoff : 0));
  }
  void set_owner(int a, uint64_t flags) { words_.owner.store(owner_value(a) | flags); }
  void set_asleep(int a, bool asleep) { g_slots[a].blocked.store(asleep ? 1 : 0); }

  // --- what the kernel's state says ----------------------------------------
  std::string state() {
    const uint64_t c = words_.count.load(), o = words_.owner.load();
    std::vector<int> queue, handoff;
    {
      WaitList wl(words_.waitq, nullptr);  // no READER_FIRST update: only looking
      for (Waiter* w = wl.first(); w != nullptr; w = wl.after(w)) queue.push_back(static_cast<int>(w->slot - g_slots));
    }
    for (int a = 0; a < kActors; ++a)
      if (rec_[a] && rec_[a]->handoff_set.load()) handoff.push_back(a);
    return kernel_state(c & rwsem::kWriterLocked, rwsem::reader_count(c), c & rwsem::kFlagWaiters,
                        c & rwsem::kFlagHandoff, actor_of(o & ~P::kOwnerFlags), o & P::kOwnerFlags, queue, handoff);
  }
  // Granted (a reader) or woken (a writer) since it queued.
  bool woken(int a) const {
    const Waiter& w = *rec_[a];
    return w.type == WaitType::read ? w.task.load() == nullptr : w.has(Waiter::kWokenMark);
  }
  uint64_t count() const { return words_.count.load(); }

  // --- the rules, wait_lock held where they want it -------------------------
  std::string mark_wake(WakeType type) {
    return with_list([&](WaitList& wl, WakeQ& q) { K::mark_wake(r_, wl, type, q); });
  }
  std::string cond_wake() {
    return with_list([&](WaitList& wl, WakeQ& q) { K::cond_wake(r_, wl, words_.count.load(), q); });
  }
  bool try_write_lock(int a) {
    WaitList wl(r_);
    return K::try_write_lock(r_, wl, &*rec_[a]);
  }

  // --- the host's own API, as the test's thread ------------------------------
  int read() { return Api::read_lock(words_, WaitCtx::blocking()); }
  int read_try() { return Api::read_lock(words_, WaitCtx::try_once()); }
  int write() { return Api::write_lock(words_, WaitCtx::blocking()); }
  int write_try() { return Api::write_lock(words_, WaitCtx::try_once()); }
  void read_unlock() { Api::read_unlock(words_); }
  void write_unlock() { Api::write_unlock(words_); }

 private:
  static uint64_t owner_value(int a) {
    return a == kNobody ? 0 : a == kSelf ? rwsem_detail::owner_value(self_slot()) : rwsem_detail::owner_value(g_slots[a]);
  }
  static int actor_of(uint64_t o) {
    if (o == 0) return kNobody;
    if (o == owner_value(kSelf)) return kSelf;
    return static_cast<int>(reinterpret_cast<ThreadSlot*>(o) - g_slots);
  }
  int actor_of(const ThreadSlot* s) const { return s == &self_slot() ? kSelf : static_cast<int>(s - g_slots); }

  // Runs `f` with the wait_lock held, then names what it decided and wakes.
  template <class F>
  std::string with_list(F&& f) {
    WakeQ q;
    {
      WaitList wl(r_);
      f(wl, q);
    }
    std::vector<int> granted;
    for (uint32_t i = q.writer ? 1 : 0; i < q.n; ++i) granted.push_back(actor_of(q.slots[i]));
    std::string d = "granted " + list(granted) + " writer woken " + (q.writer ? actor(actor_of(q.slots[0])) : "-");
    q.wake();
    return d;
  }

  RwsemWords words_;
  rwsem_detail::WordRefs r_{words_.count, words_.owner, words_.waitq, words_.osq, false};
  std::optional<Waiter> rec_[kActors];
};

// ---------------------------------------------------------------------------
// The process-shared host: core/rwsem/shared_rep.h
// ---------------------------------------------------------------------------

template <class P>
class SharedHost {
 public:
  using Rep = rwshared::SharedRep<P>;
  using K = rwshared::Rules<P>;
  using Api = rwshared::SharedRwsem<P>;
  using WaitList = rwshared::WaitList;
  using WakeList = rwshared::WakeList;

  SharedHost() {
    words_.count.store(rwshared::kFreeCount);
    words_.owner.store(rwshared::kStoredXor);
    words_.waitq.store(rwshared::kStoredXor);
  }
  rwshared::SharedLock lock() { return {words_, rs_, kSelf}; }

  // --- staging -------------------------------------------------------------
  void queue(int a, Kind k, bool overdue) {
    rwshared::arm(table_[a], k == Kind::read ? rwshared::Kind::reader : rwshared::Kind::writer);
    table_[a].deadline_ns = overdue ? 0 : UINT64_MAX;
    table_[a].last_rowner = 0;
    WaitList wl(words_, rs_);
    if (wl.empty()) words_.count.fetch_or(rwshared::kWaiters);
    rwshared::add_tail(words_, rs_, a);
  }
  void set_last_rowner(int a, uint64_t owner) { table_[a].last_rowner = static_cast<uint32_t>(owner); }
  void set_lock(bool writer, uint64_t readers, bool handoff) {
    uint32_t c = words_.count.load() & ~(rwshared::kWriterLocked | rwshared::kReaderMask | rwshared::kHandoff);
    words_.count.store(c | (writer ? rwshared::kWriterLocked : 0) | static_cast<uint32_t>(readers) * rwshared::kReaderBias |
                       (handoff ? rwshared::kHandoff : 0));
  }
  void set_owner(int a, uint64_t flags) {
    Api::set_owner(words_, rwshared::owner_of(a == kNobody ? rwshared::kNoProc : a) | static_cast<uint32_t>(flags));
  }
  void set_asleep(int a, bool asleep) { table_[a].sleeping.store(asleep ? 1 : 0); }

  // --- what the kernel's state says ----------------------------------------
  std::string state() {
    const uint32_t c = words_.count.load();
    const uint32_t o = Api::owner(words_);
    std::vector<int> queue, handoff;
    {
      WaitList wl(words_, rs_);
      rwshared::for_each_queued(words_, rs_, [&](int32_t p) { return queue.push_back(p), true; });
    }
    for (int a = 0; a < kActors; ++a)
      if (table_[a].handoff_set) handoff.push_back(a);
    const int32_t proc = rwshared::owner_proc(o);
    EXPECT_EQ(c & rwshared::kSpinnerMask, 0u) << "a spinner seat left taken";
    return kernel_state(c & rwshared::kWriterLocked, (c & rwshared::kReaderMask) >> rwshared::kReaderShift,
                        c & rwshared::kWaiters, c & rwshared::kHandoff, proc == rwshared::kNoProc ? kNobody : proc,
                        o & P::kOwnerFlags, queue, handoff);
  }
  bool woken(int a) const { return table_[a].wait.load() == 0; }
  uint64_t count() const { return words_.count.load(); }

  // --- the rules -------------------------------------------------------------
  std::string mark_wake(WakeType type) {
    return with_list([&](WaitList& wl, WakeList& q) { K::mark_wake(lock(), wl, type, q); });
  }
  std::string cond_wake() {
    return with_list([&](WaitList& wl, WakeList& q) { K::cond_wake(lock(), wl, words_.count.load(), q); });
  }
  bool try_write_lock(int a) {
    WaitList wl(words_, rs_);
    return K::try_write_lock(lock(), wl, a);
  }

  // --- the host's own API, as the test's process -----------------------------
  int read() {
    Api::read_lock(words_, rs_, kSelf, sleeper_);
    return 0;
  }
  bool read_try() { return Api::read_trylock(words_, kSelf); }
  int write() {
    Api::write_lock(words_, rs_, kSelf, sleeper_);
    return 0;
  }
  bool write_try() { return Api::write_trylock(words_, kSelf); }
  void read_unlock() { Api::read_unlock(words_, rs_); }
  void write_unlock() { Api::write_unlock(words_, rs_); }

 private:
  template <class F>
  std::string with_list(F&& f) {
    WakeList q;
    {
      WaitList wl(words_, rs_);
      f(wl, q);
    }
    std::vector<int> granted;
    for (int32_t p = q.chain; p != rwshared::kNoProc; p = table_[p].wake_next) granted.push_back(p);
    std::string d = "granted " + list(granted) + " writer woken " + (q.writer == rwshared::kNoProc ? "-" : actor(q.writer));
    q.flush(rs_);
    return d;
  }

  rwshared::Words words_{};
  rwshared::Waiter table_[kActors + 1]{};
  rwshared::Records rs_{table_};
  rwshared::Sleeper sleeper_{WaitCtx::blocking(WaitFamily::rwlock)};
};

// ---------------------------------------------------------------------------
// The scripts
// ---------------------------------------------------------------------------

template <class P>
class RwsemAgreementTest : public ::testing::Test {
 protected:
  void SetUp() override { g_rwsem_tunables = RwsemTunables{}; }

  // Runs `script(host, trace)` on both hosts and compares the traces line by line.
  template <class Script>
  void agree(Script&& script) {
    auto t = std::make_unique<ThreadHost<P>>();
    auto s = std::make_unique<SharedHost<P>>();
    Trace tt;
    script(*t, tt);
    Trace ts;  // counts events from here
    script(*s, ts);
    ASSERT_EQ(tt.lines().size(), ts.lines().size());
    for (size_t i = 0; i < tt.lines().size(); ++i)
      EXPECT_EQ(tt.lines()[i], ts.lines()[i]) << "step " << i << ": the thread host, then the process-shared host";
  }

  coretest::Restore<RwsemTunables> restore_{g_rwsem_tunables};
};

constexpr const char* kPolicyNames[] = {"v5_11_Steal", "v5_10_ReaderSpin"};
using Policies = ::testing::Types<RwsemSteal, RwsemRspin>;
TYPED_TEST_SUITE(RwsemAgreementTest, Policies, coretest::NamesInTypeOrder<kPolicyNames>);

// Acquire, try and release through each host's API, nobody queued.
TYPED_TEST(RwsemAgreementTest, UncontendedAcquireTryRelease) {
  this->agree([](auto& h, Trace& tr) {
    tr.step(h, "start");
    tr.step(h, "read", rc(h.read()));
    tr.step(h, "read", rc(h.read()));
    tr.step(h, "write try", rc(h.write_try()));
    tr.step(h, "read try", rc(h.read_try()));
    for (int i = 0; i < 3; ++i) {
      h.read_unlock();
      tr.step(h, "read unlock");
    }
    tr.step(h, "write", rc(h.write()));
    tr.step(h, "read try", rc(h.read_try()));
    tr.step(h, "write try", rc(h.write_try()));
    h.write_unlock();
    tr.step(h, "write unlock");
  });
}

// A writer's release grants every queued reader (skipping the writer among
// them) in one count update; the last of those readers to leave wakes the
// writer, which then takes the lock and, alone on the list, clears WAITERS.
TYPED_TEST(RwsemAgreementTest, ReleasesWakeQueuedReadersThenTheWriter) {
  this->agree([](auto& h, Trace& tr) {
    tr.step(h, "write", rc(h.write()));
    h.queue(0, Kind::read, false);
    h.queue(1, Kind::read, false);
    h.queue(2, Kind::write, false);
    h.queue(3, Kind::read, false);
    tr.step(h, "queue R0 R1 W2 R3");
    h.write_unlock();
    tr.step(h, "write unlock", std::string("woken ") + (h.woken(0) ? "0 " : "") + (h.woken(1) ? "1 " : "") +
                                   (h.woken(2) ? "2 " : "") + (h.woken(3) ? "3" : ""));
    for (int i = 0; i < 3; ++i) {
      h.read_unlock();  // a granted reader leaves
      tr.step(h, "read unlock", h.woken(2) ? "W2 woken" : "W2 asleep");
    }
    tr.step(h, "W2 tries", rc(h.try_write_lock(2)));
    h.write_unlock();
    tr.step(h, "write unlock");
  });
}

// A queued writer past its deadline sets HANDOFF on a read-held lock: fast
// paths and trylocks fail, the last reader's release wakes it, it takes the
// lock and clears HANDOFF.
TYPED_TEST(RwsemAgreementTest, AnOverdueWriterSetsHandoffAndGetsTheLockNext) {
  this->agree([](auto& h, Trace& tr) {
    tr.step(h, "read", rc(h.read()));
    h.queue(0, Kind::write, true);
    tr.step(h, "queue W0 (overdue)");
    tr.step(h, "W0 tries", rc(h.try_write_lock(0)));
    tr.step(h, "read try", rc(h.read_try()));
    tr.step(h, "write try", rc(h.write_try()));
    h.read_unlock();
    tr.step(h, "read unlock", h.woken(0) ? "W0 woken" : "W0 asleep");
    tr.step(h, "W0 tries", rc(h.try_write_lock(0)));
    h.write_unlock();
    tr.step(h, "write unlock");
  });
}

// v6.3: any queued writer past its deadline may set HANDOFF, and the handoff
// belongs to the first waiter; others yield to it, also once the lock is free.
TYPED_TEST(RwsemAgreementTest, TheHandoffBelongsToTheFirstWaiter) {
  this->agree([](auto& h, Trace& tr) {
    tr.step(h, "read", rc(h.read()));
    h.queue(0, Kind::write, false);
    h.queue(1, Kind::write, true);
    tr.step(h, "queue W0, W1 (overdue)");
    tr.step(h, "W1 tries", rc(h.try_write_lock(1)));
    tr.step(h, "W1 tries", rc(h.try_write_lock(1)));
    h.read_unlock();
    tr.step(h, "read unlock", h.woken(0) ? "W0 woken" : "W0 asleep");
    tr.step(h, "W1 tries", rc(h.try_write_lock(1)));
    tr.step(h, "W0 tries", rc(h.try_write_lock(0)));
    h.write_unlock();
    tr.step(h, "write unlock", h.woken(1) ? "W1 woken" : "W1 asleep");
    tr.step(h, "W1 tries", rc(h.try_write_lock(1)));
    h.write_unlock();
    tr.step(h, "write unlock");
  });
}

// A HANDOFF the first waiter does not own (6eebd5fb2083) bars nobody.
TYPED_TEST(RwsemAgreementTest, AHandoffTheFirstWaiterDoesNotOwnBarsNobody) {
  this->agree([](auto& h, Trace& tr) {
    h.queue(0, Kind::write, false);
    h.queue(1, Kind::write, false);
    h.set_lock(false, 0, true);
    tr.step(h, "queue W0, W1; HANDOFF, owned by nobody");
    tr.step(h, "W1 tries", rc(h.try_write_lock(1)));
    h.write_unlock();
    tr.step(h, "write unlock", h.woken(0) ? "W0 woken" : "W0 asleep");
    tr.step(h, "W0 tries", rc(h.try_write_lock(0)));
    h.write_unlock();
    tr.step(h, "write unlock");
  });
}

// A wake's first bias meets a writer that got in: it is backed out, and the
// head reader past its deadline asks for HANDOFF in the same add, once. The
// writer's release then grants the readers, which clears HANDOFF.
TYPED_TEST(RwsemAgreementTest, AHeadReaderBeatenByAWriterAsksForHandoff) {
  this->agree([](auto& h, Trace& tr) {
    tr.step(h, "write", rc(h.write()));
    h.queue(0, Kind::read, true);
    h.queue(1, Kind::write, false);
    h.queue(2, Kind::read, false);
    tr.step(h, "queue R0 (overdue), W1, R2");
    tr.step(h, "mark_wake(readers)", h.mark_wake(WakeType::readers));
    tr.step(h, "mark_wake(any)", h.mark_wake(WakeType::any));
    h.write_unlock();
    tr.step(h, "write unlock", std::string(h.woken(0) ? "R0 " : "") + (h.woken(2) ? "R2" : ""));
    h.read_unlock();
    tr.step(h, "read unlock", h.woken(1) ? "W1 woken" : "W1 asleep");
    h.read_unlock();
    tr.step(h, "read unlock", h.woken(1) ? "W1 woken" : "W1 asleep");
  });
}

// One wakeup grants at most kMaxReadersWakeup readers (MAX_READERS_WAKEUP).
TYPED_TEST(RwsemAgreementTest, OneWakeGrantsAtMostMaxReadersWakeup) {
  static_assert(kActors > int{rwsem::kMaxReadersWakeup} + 2);
  this->agree([](auto& h, Trace& tr) {
    for (int a = 0; a <= int{rwsem::kMaxReadersWakeup} + 2; ++a) h.queue(a, a == 100 ? Kind::write : Kind::read, false);
    tr.step(h, "queue 258 readers with W100 among them");
    tr.step(h, "mark_wake(any)", h.mark_wake(WakeType::any));
  });
}

// rwsem_cond_wake_waiter(): nothing under a writer, readers under readers,
// anyone on a free lock (after clearing the writers' NONSPINNABLE).
TYPED_TEST(RwsemAgreementTest, CondWakeWakesWhatTheCountAllows) {
  using P = TypeParam;
  this->agree([](auto& h, Trace& tr) {
    h.queue(0, Kind::read, false);
    h.queue(1, Kind::write, false);
    h.set_lock(true, 0, false);
    h.set_owner(5, 0);
    tr.step(h, "R0, W1 queued; W5 holds", h.cond_wake());
    h.set_lock(false, 2, false);
    h.set_owner(5, rwsem::kReaderOwned | P::kWrNonspinnable);
    tr.step(h, "two readers hold", h.cond_wake());
    h.set_lock(false, 0, false);
    h.set_owner(0, rwsem::kReaderOwned | P::kWrNonspinnable);
    tr.step(h, "free", h.cond_wake());
  });
}

// WAKE_READ_OWNED: a reader that got in brings the queued readers along; it
// adds no bias of its own and leaves the owner as it is.
TYPED_TEST(RwsemAgreementTest, ReadOwnedWakeAddsNoBias) {
  this->agree([](auto& h, Trace& tr) {
    tr.step(h, "read", rc(h.read()));
    h.queue(0, Kind::read, false);
    h.queue(1, Kind::read, false);
    tr.step(h, "queue R0 R1");
    tr.step(h, "mark_wake(read_owned)", h.mark_wake(WakeType::read_owned));
    for (int i = 0; i < 3; ++i) {
      h.read_unlock();
      tr.step(h, "read unlock");
    }
  });
}

// A new reader owner keeps the current RD_NONSPINNABLE (v5.10: bit 1, as
// v5.11's NONSPINNABLE) and, v5.10, carries its own last_rowner's.
TYPED_TEST(RwsemAgreementTest, GrantedReaderOwnersKeepReaderSpinningOff) {
  using P = TypeParam;
  this->agree([](auto& h, Trace& tr) {
    h.set_owner(7, rwsem::kReaderOwned | P::kRdNonspinnable);
    h.queue(0, Kind::read, false);
    tr.step(h, "queue R0; owner says readers may not spin");
    tr.step(h, "mark_wake(any)", h.mark_wake(WakeType::any));
    h.read_unlock();
    h.set_owner(kNobody, 0);
    h.queue(1, Kind::read, false);
    h.set_last_rowner(1, rwsem::kReaderOwned | P::kRdNonspinnable);
    tr.step(h, "queue R1, which saw reader spinning off");
    tr.step(h, "mark_wake(any)", h.mark_wake(WakeType::any));
    h.read_unlock();
    tr.step(h, "read unlock");
  });
}

// The owner word, encoded by each host and decoded by the rules: its state,
// whether a spinner may spin on it, and how a spin on it ends.
TYPED_TEST(RwsemAgreementTest, OwnerStateAndSpinOnOwner) {
  using P = TypeParam;
  this->agree([](auto& h, Trace& tr) {
    using K = typename std::remove_reference_t<decltype(h)>::K;
    using Budget = typename std::remove_reference_t<decltype(h)>::Rep::Budget;
    auto ask = [&](const std::string& what) {
      const uint64_t o = std::remove_reference_t<decltype(h)>::Rep::owner(h.lock());
      std::string r = "state(wr)=" + owner_state_name(K::owner_state(o, P::kWrNonspinnable)) +
                      " state(rd)=" + owner_state_name(K::owner_state(o, P::kRdNonspinnable)) +
                      " can_spin(wr)=" + rc(K::can_spin_on_owner(h.lock(), P::kWrNonspinnable)) +
                      " can_spin(rd)=" + rc(K::can_spin_on_owner(h.lock(), P::kRdNonspinnable));
      Budget spent = Budget::until(0);
      r += " spin_on_owner(spent budget)=" + owner_state_name(K::spin_on_owner(h.lock(), P::kWrNonspinnable, spent));
      tr.step(h, what, r);
    };
    ask("no owner");
    h.set_owner(3, 0);
    ask("writer 3, running");
    h.set_asleep(3, true);
    ask("writer 3, asleep");
    h.set_asleep(3, false);
    h.set_owner(3, rwsem::kReaderOwned);
    ask("readers, last 3");
    h.set_owner(3, rwsem::kReaderOwned | P::kRdNonspinnable);
    ask("readers, reader spinning off");
    h.set_owner(3, rwsem::kReaderOwned | P::kNonspinnable);
    ask("readers, all spinning off");
  });
}

// rwsem_set_nonspinnable() only on a reader-owned lock; clear_nonspinnable()
// and v5.10's rwsem_disable_reader_optspin().
TYPED_TEST(RwsemAgreementTest, NonspinnableBits) {
  this->agree([](auto& h, Trace& tr) {
    using K = typename std::remove_reference_t<decltype(h)>::K;
    h.set_owner(4, 0);
    K::set_nonspinnable(h.lock());
    tr.step(h, "set_nonspinnable, writer-owned");
    h.set_owner(4, rwsem::kReaderOwned);
    K::set_nonspinnable(h.lock());
    tr.step(h, "set_nonspinnable, reader-owned");
    K::clear_nonspinnable(h.lock());
    tr.step(h, "clear_nonspinnable");
    h.set_owner(4, 0);
    K::disable_reader_spinning(h.lock());
    tr.step(h, "disable_reader_spinning");
  });
}

// Taking the lock without queueing: rwsem_try_write_lock_unqueued() and
// v5.10's rwsem_try_read_lock_unqueued(), past WAITERS but never past
// HANDOFF or a writer; a failed reader backs its bias out.
TYPED_TEST(RwsemAgreementTest, UnqueuedAttempts) {
  this->agree([](auto& h, Trace& tr) {
    using K = typename std::remove_reference_t<decltype(h)>::K;
    tr.step(h, "write, unqueued", rc(K::try_write_lock_unqueued(h.lock(), false)));
    tr.step(h, "read, unqueued", rc(K::try_read_lock_unqueued(h.lock())));
    h.write_unlock();
    tr.step(h, "read, unqueued", rc(K::try_read_lock_unqueued(h.lock())));
    tr.step(h, "read, unqueued", rc(K::try_read_lock_unqueued(h.lock())));
    tr.step(h, "write, unqueued", rc(K::try_write_lock_unqueued(h.lock(), false)));
    h.read_unlock();
    h.read_unlock();
    h.queue(0, Kind::write, false);
    tr.step(h, "queue W0", std::string("write, unqueued, past WAITERS: ") + rc(K::try_write_lock_unqueued(h.lock(), true)));
    h.write_unlock();
    h.set_lock(false, 0, true);
    tr.step(h, "HANDOFF", "write, unqueued: " + rc(K::try_write_lock_unqueued(h.lock(), false)));
  });
}

// rwsem_optimistic_spin() where its outcome does not depend on timing: a
// free lock is taken at once; a sleeping writer owner ends the spin at once.
TYPED_TEST(RwsemAgreementTest, OptimisticSpin) {
  this->agree([](auto& h, Trace& tr) {
    using K = typename std::remove_reference_t<decltype(h)>::K;
    tr.step(h, "spin, free lock", rc(K::template optimistic_spin<true>(h.lock())));
    h.write_unlock();
    h.set_lock(true, 0, false);
    h.set_owner(3, 0);
    h.set_asleep(3, true);
    tr.step(h, "spin, writer 3 asleep", rc(K::template optimistic_spin<true>(h.lock())));
    h.set_asleep(3, false);
  });
}

// v5.11 stealing: the verdict is one function of the owner word and the
// readers in besides the stealer. A default-kind rwlock's reader may also
// steal a read-held lock (steal_read_held, a thread rule: the process-shared
// host has no such kind).
TYPED_TEST(RwsemAgreementTest, StealVerdict) {
  using P = TypeParam;
  using KT = typename ThreadHost<P>::K;
  using KS = typename SharedHost<P>::K;
  for (uint64_t owner : {uint64_t{0}, rwsem::kReaderOwned, rwsem::kReaderOwned | P::kRdNonspinnable})
    for (uint64_t others : {0, 1, 5}) {
      EXPECT_EQ(KT::steal_verdict(owner, others, false), KS::steal_verdict(owner, others, false))
          << "owner " << owner << ", " << others << " other readers";
      const bool read_held = (owner & rwsem::kReaderOwned) && others >= 1;
      EXPECT_EQ(KT::steal_verdict(owner, others, true),
                read_held ? LockEvent::rwsem_rlock_steal_held : LockEvent::rwsem_rlock_steal);
      EXPECT_EQ(KS::steal_verdict(owner, others, true), KS::steal_verdict(owner, others, false));
    }
}

// ---------------------------------------------------------------------------
// Where the hosts differ on purpose, each rule on its own host
// ---------------------------------------------------------------------------

// Thread rules (core/rwsem/rules.h, Deviations): WOKEN marks the head writer
// woken (unlocks then release without waking it again) until it takes the
// lock; READER_FIRST says a reader heads the queue, and only then does a
// reader that got in bring the queue along. The process-shared host asks
// WAITERS, as the kernel does.
TYPED_TEST(RwsemAgreementTest, ThreadRulesWokenAndReaderFirst) {
  using P = TypeParam;
  ThreadHost<P> t;
  auto s = std::make_unique<SharedHost<P>>();
  t.queue(0, Kind::write, false);
  s->queue(0, Kind::write, false);
  EXPECT_FALSE(t.count() & rwsem::kFlagReaderFirst);
  EXPECT_FALSE(ThreadHost<P>::K::readers_may_follow(t.count())) << "a writer heads the queue";
  EXPECT_TRUE(SharedHost<P>::K::readers_may_follow(static_cast<uint32_t>(s->count())));
  EXPECT_EQ(t.mark_wake(WakeType::any), s->mark_wake(WakeType::any));
  EXPECT_TRUE(t.count() & rwsem::kFlagWoken);
  EXPECT_TRUE(t.woken(0));
  EXPECT_TRUE(t.try_write_lock(0));
  EXPECT_FALSE(t.count() & rwsem::kFlagWoken) << "WOKEN goes with the head that took the lock";
  t.write_unlock();
  t.queue(1, Kind::read, false);
  EXPECT_TRUE(t.count() & rwsem::kFlagReaderFirst) << "published when the wait_lock is dropped";
  EXPECT_TRUE(ThreadHost<P>::K::readers_may_follow(t.count()));
  t.mark_wake(WakeType::any);
  EXPECT_EQ(t.count() & (rwsem::kFlagReaderFirst | rwsem::kFlagWaiters), 0u) << "the queue emptied";
  t.read_unlock();
}

// A reader that backs its bias out to spin (v5.10 rwsem_down_read_slowpath())
// and so leaves only WAITERS: the process-shared host wakes the queue
// (Rep::kBackOutWakes), the thread host leaves that to the reader's own
// queueing, as the kernel does. Both then take the free lock by spinning.
TYPED_TEST(RwsemAgreementTest, BackedOutBiasWakesOnlyOnTheProcessSharedHost) {
  using P = TypeParam;
  auto run = [](auto& h) {
    using K = typename std::remove_reference_t<decltype(h)>::K;
    h.queue(0, Kind::write, false);
    h.set_lock(false, 1, false);  // the failed fast path's bias
    bool have_bias = true;
    uint64_t last_rowner = 0;
    EXPECT_TRUE(K::read_spin(h.lock(), have_bias, last_rowner));
    EXPECT_FALSE(have_bias);
    return h.woken(0);
  };
  ThreadHost<P> t;
  auto s = std::make_unique<SharedHost<P>>();
  EXPECT_FALSE(run(t));
  EXPECT_TRUE(run(*s));
  EXPECT_EQ(t.state(), s->state()) << "the lock itself is left alike";
}

// Trylocks (each host's design block): the thread host's succeed wherever a
// blocking caller would get in without sleeping, past queued waiters; the
// process-shared host's are the kernel's down_*_trylock(), which fail on
// WAITERS.
TYPED_TEST(RwsemAgreementTest, TrylocksPastQueuedWaiters) {
  using P = TypeParam;
  ThreadHost<P> t;
  auto s = std::make_unique<SharedHost<P>>();
  t.queue(0, Kind::write, false);
  s->queue(0, Kind::write, false);
  EXPECT_EQ(t.write_try(), 0);
  EXPECT_FALSE(s->write_try());
  t.write_unlock();
  EXPECT_EQ(t.state(), s->state());
}

}  // namespace
}  // namespace lockswap
