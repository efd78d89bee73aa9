// core/rwsem/shared_rep.h — the process-shared host's representation: what
// core/rwsem/rules.h's Rules<Rep> is given to run on three 32-bit words.
//
// Part of core/rwsem/shared_host.cpp's one translation unit: everything here has
// internal linkage, so include it nowhere else but in
// tests/core/rwsem_agreement_test.cpp, which drives the rules through this
// representation and core/rwsem/thread_rep.h's.
//
// The words and the records are core/rwsem/shared.h's (its design block):
// the count with WAIT_LOCK and SPINNERS in it, an owner word that names a
// process (stored XOR 0x7fffffff, so every owner value here is the decoded
// one: setting a decoded bit clears it in the word), a wait list of process
// numbers linked through the records in the side table. A grant or a
// release-only wake takes the record off the list and chains it through
// `wake_next`; its `wait` is cleared once the wait_lock is dropped (flush()).
// A woken writer stays on the list, so its `wait` is cleared under the
// wait_lock. The OSQ's place is a seat on the lock (SPINNERS).
#pragma once
#include <atomic>
#include <cstdint>

#include "arch/atomic.h"
#include "arch/futex.h"
#include "core/backoff.h"
#include "core/lock_events.h"
#include "core/rwsem/rules.h"
#include "core/rwsem/shared.h"
#include "core/spin_budget.h"

namespace lockswap::rwshared {
namespace {

constexpr auto kSeq = std::memory_order_seq_cst;
// Records live in memory several processes map: their futexes are shared.
constexpr bool kSharedFutex = true;

using rwsem_rules::now_ns;
using rwsem_rules::tunables;

// ------------------------------------------------------- the wait_lock

inline void wait_lock(Words& w) {
  for (;;) {
    if (!(w.count.fetch_or(kWaitLock, std::memory_order_acquire) & kWaitLock)) return;
    Backoff backoff;
    while (w.count.load(arch::mo_hint) & kWaitLock) backoff.pause();
  }
}
inline void wait_unlock(Words& w) { w.count.fetch_and(~kWaitLock, std::memory_order_release); }

// ------------------------------------------- the wait list (under WL)

inline int32_t head(const Words& w) { return int32_t(w.waitq.load(arch::mo_hint) ^ kStoredXor) - 1; }
inline void set_head(Words& w, int32_t p) { w.waitq.store(uint32_t(p + 1) ^ kStoredXor, arch::mo_hint); }
inline bool list_empty(const Words& w) { return head(w) == kNoProc; }

inline void add_tail(Words& w, const Records& rs, int32_t p) {
  Waiter& x = rs.at(p);
  int32_t h = head(w);
  if (h == kNoProc) {
    x.next = x.prev = p;
    set_head(w, p);
    return;
  }
  int32_t t = rs.at(h).prev;
  x.next = h;
  x.prev = t;
  rs.at(t).next = p;
  rs.at(h).prev = p;
}

inline void remove(Words& w, const Records& rs, int32_t p) {
  Waiter& x = rs.at(p);
  if (x.next == p) {
    set_head(w, kNoProc);
    return;
  }
  rs.at(x.prev).next = x.next;
  rs.at(x.next).prev = x.prev;
  if (head(w) == p) set_head(w, x.next);
}

// Visit every queued record once, in order; `visit` may remove the one it
// is given (its successor was read before), and returns false to stop.
template <class Visit>
void for_each_queued(const Words& w, const Records& rs, Visit&& visit) {
  int32_t p = head(w);
  if (p == kNoProc) return;
  const int32_t tail = rs.at(p).prev;
  for (;;) {
    const int32_t next = rs.at(p).next;
    const bool last = p == tail;
    if (!visit(p) || last) return;
    p = next;
  }
}

inline bool takes_lock(Kind k) { return k == Kind::reader || k == Kind::writer; }

// rwsem_first_waiter(), among the waiters that take the lock.
inline int32_t first_taker(const Words& w, const Records& rs) {
  int32_t first = kNoProc;
  for_each_queued(w, rs, [&](int32_t p) {
    if (takes_lock(rs.at(p).kind)) first = p;
    return first == kNoProc;
  });
  return first;
}

// rwsem_del_waiter()'s flag update: an empty list has no WAITERS, no HANDOFF.
inline void settle_if_empty(Words& w) {
  if (list_empty(w)) w.count.fetch_and(~(kWaiters | kHandoff), kSeq);
}

// need_resched()'s stand-in here: owner_spin_ns from the start of a spin, on
// a writer owner or on no owner; a writer spinning on readers is bounded by
// the reader phase's threshold alone (the rules' rspin_threshold()), a v5.10
// reader spinner by the deadline in every state. Unlike the thread host's
// SpinBudget, no cap on the whole spin and no preemption detector: a writer
// that was off its CPU before its reader phase began still spins that phase
// to its threshold and marks the lock non-spinnable, which is what ends a
// stream of spinning v5.10 readers (tests/core/rwsem_shared_test.cpp,
// HandoffBoundsWriterStarvation).
struct DeadlineBudget {
  uint64_t deadline;
  bool write;  // a writer's spin: reader phases are not this budget's
  static DeadlineBudget until(uint64_t d) { return {d, true}; }
  bool expired(uint64_t now, bool on_writer_or_none) {
    if ((write && !on_writer_or_none) || now <= deadline) return false;
    lockevent_inc(LockEvent::rwsem_opt_budget);
    return true;
  }
  void credit(uint64_t) {}
};

// The lock as a slow path sees it: its words, the records, and the caller's
// process number (kNoProc for a waker that takes nothing).
struct SharedLock {
  Words& w;
  const Records& rs;
  int32_t me;
};

// The wait_lock held, released when it goes out of scope (or by unlock()).
class WaitList {
 public:
  WaitList(Words& w, const Records& rs) : w_(w), rs_(rs) { lock(); }
  explicit WaitList(const SharedLock& l) : WaitList(l.w, l.rs) {}
  ~WaitList() {
    if (held_) unlock();
  }
  WaitList(const WaitList&) = delete;
  WaitList& operator=(const WaitList&) = delete;
  void lock() {
    wait_lock(w_);
    held_ = true;
  }
  void unlock() {
    held_ = false;
    wait_unlock(w_);
  }

  int32_t first() const { return head(w_); }
  bool empty() const { return list_empty(w_); }
  bool singular() const {
    const int32_t h = head(w_);
    return h != kNoProc && rs_.at(h).next == h;
  }
  // The record after `p`, or kNoProc at the tail.
  int32_t after(int32_t p) const {
    const int32_t n = rs_.at(p).next;
    return n == head(w_) ? kNoProc : n;
  }

 private:
  Words& w_;
  const Records& rs_;
  bool held_ = false;
};

// The wake_q: records taken off the list (chained through wake_next, their
// `wait` cleared after WL is dropped) and at most one woken writer, which
// stays on the list (its `wait` cleared under WL).
struct WakeList {
  int32_t chain = kNoProc, last = kNoProc, writer = kNoProc;

  void push(const Records& rs, int32_t p) {
    rs.at(p).wake_next = kNoProc;
    if (last == kNoProc)
      chain = p;
    else
      rs.at(last).wake_next = p;
    last = p;
  }
  void take(Words& w, const Records& rs, int32_t p) {
    remove(w, rs, p);
    push(rs, p);
  }
  void wake_writer(const Records& rs, int32_t p) {
    rs.at(p).wait.store(0, std::memory_order_release);
    writer = p;
  }
  void flush(const Records& rs) {
    if (writer != kNoProc) arch::futex_wake(&rs.at(writer).wait, 1, kSharedFutex);
    for (int32_t p = chain; p != kNoProc;) {
      Waiter& x = rs.at(p);
      const int32_t next = x.wake_next;  // before the store lets the record be reused
      x.wait.store(0, std::memory_order_release);
      arch::futex_wake(&x.wait, 1, kSharedFutex);
      p = next;
    }
    chain = last = writer = kNoProc;
  }
};

inline void arm(Waiter& self, Kind kind) {
  self.kind = kind;
  self.handoff_set = false;
  self.deadline_ns = now_ns() + tunables().handoff_ns;
  self.wait.store(1, arch::mo_hint);  // published by the wait_lock's release
}

// A spinner seat on this lock (SPINNERS), the OSQ's stand-in.
inline bool take_seat(Words& w) {
  const uint32_t limit = max_spinners() << kSpinnerShift;
  uint32_t c = w.count.load(arch::mo_hint);
  do {
    if ((c & kSpinnerMask) >= limit) return false;
  } while (!w.count.compare_exchange_weak(c, c + kSpinnerOne, arch::mo_hint, arch::mo_hint));
  return true;
}
inline void give_back_seat(Words& w) { w.count.fetch_sub(kSpinnerOne, arch::mo_hint); }

template <class P>
struct SharedRep {
  using Policy = P;
  static constexpr bool kThreadRules = false;
  static constexpr bool kProcessShared = kSharedFutex;
  static constexpr bool kBackOutWakes = true;  // no backed-out bias hides a release (rules.h)

  using count_t = uint32_t;
  static constexpr count_t kWriterLocked = rwshared::kWriterLocked;
  static constexpr count_t kWaiters = rwshared::kWaiters;
  static constexpr count_t kHandoff = rwshared::kHandoff;
  static constexpr count_t kReaderBias = rwshared::kReaderBias;
  static constexpr count_t kReaderCountMask = rwshared::kReaderMask;
  static constexpr count_t kReadFail = 0;  // the reader field cannot overflow (kMaxProcs)

  using Lock = SharedLock;
  using List = WaitList;
  using WakeQ = WakeList;
  using Handle = int32_t;
  static constexpr Handle kNoWaiter = kNoProc;
  using OwnerRef = int32_t;
  static constexpr OwnerRef kNoOwner = kNoProc;

  static std::atomic<uint32_t>& count(const Lock& l) { return l.w.count; }

  // The owner word is stored XOR kStoredXor: a decoded bit is set by
  // clearing it in the word, and cleared by setting it.
  static uint64_t owner(const Lock& l) { return l.w.owner.load(arch::mo_hint) ^ kStoredXor; }
  static void set_owner(const Lock& l, uint64_t o) { l.w.owner.store(uint32_t(o) ^ kStoredXor, arch::mo_hint); }
  static void owner_set_bits(const Lock& l, uint64_t bits) { l.w.owner.fetch_and(~uint32_t(bits), arch::mo_hint); }
  static void owner_clear_bits(const Lock& l, uint64_t bits) { l.w.owner.fetch_or(uint32_t(bits), arch::mo_hint); }
  static bool owner_cas(const Lock& l, uint64_t& expected, uint64_t desired) {
    uint32_t stored = uint32_t(expected) ^ kStoredXor;
    if (l.w.owner.compare_exchange_weak(stored, uint32_t(desired) ^ kStoredXor, arch::mo_hint, arch::mo_hint))
      return true;
    expected = stored ^ kStoredXor;
    return false;
  }
  static OwnerRef owner_ref(uint64_t o) { return owner_proc(uint32_t(o)); }
  // owner_on_cpu()'s stand-in: the owner's record is not in a futex sleep.
  static bool owner_blocked(const Lock& l, OwnerRef p) { return l.rs.at(p).sleeping.load(arch::mo_hint) != 0; }
  static bool owner_running(const Lock& l, OwnerRef p) { return !owner_blocked(l, p); }
  static uint64_t self_owner_value(const Lock& l) { return owner_of(l.me); }
  static uint64_t owner_value_of(const Lock&, Handle p) { return owner_of(p); }

  static bool is_reader(const Lock& l, Handle p) { return l.rs.at(p).kind == Kind::reader; }
  static bool ghost(const Lock&, Handle) { return false; }  // a killed process's lock is re-created
  static uint64_t deadline(const Lock& l, Handle p) { return l.rs.at(p).deadline_ns; }
  static bool handoff_set(const Lock& l, Handle p) { return l.rs.at(p).handoff_set; }
  static void set_handoff(const Lock& l, Handle p) { l.rs.at(p).handoff_set = true; }
  static uint64_t last_rowner(const Lock& l, Handle p) { return l.rs.at(p).last_rowner; }

  // The first waiter that takes the lock: until_free and var_wait waiters
  // are never "first" for the handoff and wake rules.
  static Handle first(const Lock& l, List&) { return first_taker(l.w, l.rs); }
  static Handle head(const List& wl) { return wl.first(); }
  static Handle after(const List& wl, Handle p) { return wl.after(p); }
  static bool empty(const List& wl) { return wl.empty(); }
  static bool singular(const List& wl) { return wl.singular(); }
  static void remove(const Lock& l, List&, Handle p) { rwshared::remove(l.w, l.rs, p); }
  static void settle_if_empty(const Lock& l, List&) { rwshared::settle_if_empty(l.w); }
  // A freed lock (WAKE_ANY) first wakes every waiter that only waited for a
  // release: until_free and var_wait.
  static void wake_release_waiters(const Lock& l, List&, WakeQ& q) {
    for_each_queued(l.w, l.rs, [&](int32_t p) {
      if (!takes_lock(l.rs.at(p).kind)) q.take(l.w, l.rs, p);
      return true;
    });
  }

  static Handle chain_next(const Lock& l, Handle p) { return l.rs.at(p).wake_next; }
  static void set_chain_next(const Lock& l, Handle p, Handle next) { l.rs.at(p).wake_next = next; }
  static void grant(const Lock& l, WakeQ& q, Handle p) { q.push(l.rs, p); }  // published by flush()
  static void wake_writer(const Lock& l, WakeQ& q, Handle p) { q.wake_writer(l.rs, p); }
  static void flush(const Lock& l, WakeQ& q) { q.flush(l.rs); }

  using Budget = DeadlineBudget;
  static DeadlineBudget spin_budget(uint64_t start, bool write) { return {start + tunables().owner_spin_ns, write}; }
  static bool spin_enter(const Lock& l, Budget&) { return take_seat(l.w); }
  static void spin_leave(const Lock& l) { give_back_seat(l.w); }
  // A process's spins are not filed as waits (its sleeps are: Sleeper).
  static void account_spin(const Lock&, uint64_t) {}
};

// The rules of core/rwsem/rules.h on a process-shared lock.
template <class P>
using Rules = rwsem_rules::Rules<SharedRep<P>>;

}  // namespace
}  // namespace lockswap::rwshared
