// core/rwsem.cpp — rw_semaphore slow paths (design: core/rwsem.h).
//
// Layout follows kernel/locking/rwsem.c: wait list and wake queue, mark_wake,
// optimistic spinning (the OSQ is core/osq_lock.cpp), read slow path, write slow path. Each
// function names the kernel function it stands for.
#include "core/rwsem.h"

#include <pthread.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <ctime>
#include <new>
#include <optional>

#include "arch/clock.h"
#include "arch/futex.h"
#include "arch/relax.h"
#include "core/backoff.h"
#include "core/cancel.h"
#include "core/oncpu.h"
#include "core/osq_lock.h"
#include "core/read_pref.h"
#include "core/spin_budget.h"

namespace lockswap {

RwsemTunables g_rwsem_tunables;

namespace rwsem_detail {
namespace {

using namespace rwsem;

const RwsemTunables& tunables() { return g_rwsem_tunables; }

// jiffies / sched_clock() stand-in.
uint64_t now_ns() { return arch::monotonic_ns(); }

// The whole of one optimistic spin ends after owner_spin_ns plus this, in
// whatever state: where the kernel's spinner would meet need_resched() at
// the latest at the next tick, ours has no such signal.
constexpr uint64_t kSpinCapExtraNs = 4 * kRspinMaxNs;

// The CPUs this process may run on, read once (sched_getaffinity is a system
// call); 2 when it cannot be read.
uint32_t usable_cpus() {
  static std::atomic<uint32_t> cpus{0};
  uint32_t n = cpus.load(std::memory_order_relaxed);
  if (__builtin_expect(n == 0, 0)) {
    cpu_set_t set;
    n = sched_getaffinity(0, sizeof set, &set) == 0 ? static_cast<uint32_t>(CPU_COUNT(&set)) : 2;
    cpus.store(n, std::memory_order_relaxed);
  }
  return n;
}

// When a waiter queued at `now` may ask for HANDOFF: handoff_ns, stretched
// by threads per CPU (core/rwsem.h, "Deviations").
uint64_t handoff_deadline(uint64_t now) {
  const RwsemTunables& t = g_rwsem_tunables;
  uint64_t stretch = rwsem::handoff_stretch(thread_registry::g_attached_threads.load(std::memory_order_relaxed),
                                            usable_cpus(), t.handoff_stretch_max);
  return now + t.handoff_ns * stretch;
}


// ---------------------------------------------------------------------------
// Cancellation
// ---------------------------------------------------------------------------

// The slow paths run with deferred cancellation (core/cancel.h), so an
// asynchronous cancellation can never land while this thread holds the
// wait_lock, is in the OSQ, or is half-way through a list update: only in a
// queued waiter's futex sleep, which WaitCtx::sleep runs in a frame without
// cleanups when the caller had the asynchronous type. Under preload the
// exported call has already made the type deferred and the scope is a no-op.
using CancelScope = cancel::DeferredScope;

// ---------------------------------------------------------------------------
// Wait list (the kernel's wait_lock + wait_list) and wake queue
// ---------------------------------------------------------------------------

enum class WaitType : uint8_t { write, read };
enum class WakeType : uint8_t { any, readers, read_owned };  // RWSEM_WAKE_*

// One waiter. It normally lives in its thread's type-stable ThreadSlot
// (rwsem_waiter), not on the stack: a thread waits on one lock at a time, and
// a record that a fork ghost left linked stays readable in the child however
// the child reuses the ghosts' stacks.
struct alignas(64) Waiter {
  Waiter(ThreadSlot& s, WaitType t, uint64_t now)
      : slot(&s), task(&s), queued_at(now), timeout(handoff_deadline(now)),
        generation(thread_registry::g_fork_generation.load(arch::mo_hint)), type(t) {}

  Waiter* prev = nullptr;        // list links: under wait_lock
  Waiter* next = nullptr;
  ThreadSlot* slot;              // parker; type-stable, so safe after we are gone
  // Non-null while a reader waits; its granter stores nullptr (release) as the
  // very last access to this record.
  std::atomic<ThreadSlot*> task;
  uint64_t queued_at;            // steady ns at enqueue (reader preference bound)
  uint64_t timeout;              // steady ns after which we may ask for HANDOFF
  uint64_t last_rowner = 0;      // v5.10: owner seen at slow-path entry
  uint32_t generation;           // fork generation at enqueue (ghost detection)
  WaitType type;
  // Set (under wait_lock) on the first waiter when it owns the HANDOFF bit; the
  // waiter itself reads it without the lock.
  std::atomic<bool> handoff_set{false};
  // Writers' flags, changed only under wait_lock (one byte: the record fills
  // its slot line):
  //   kPrefBlocked  a batch of readers already entered past this writer after
  //                 the reader-preference bound; no second batch until the
  //                 lock has been free for it (cleared when mark_wake() wakes it)
  //   kWokenMark    the count's WOKEN bit was set for this (head) writer and it
  //                 has not cleared it since; read without the lock by
  //                 park_sleep()
  static constexpr uint8_t kPrefBlocked = 1, kWokenMark = 2;
  std::atomic<uint8_t> writer_flags{0};
  bool has(uint8_t f) const { return (writer_flags.load(arch::mo_hint) & f) != 0; }
  void set(uint8_t f, bool on, std::memory_order mo = arch::mo_hint) {
    uint8_t v = writer_flags.load(arch::mo_hint);
    writer_flags.store(on ? (v | f) : (v & ~f), mo);
  }
  bool in_use = true;            // owner only: the slot's record is taken
};
static_assert(sizeof(Waiter) <= sizeof(ThreadSlot::rwsem_waiter), "the record fits its slot line");
static_assert(alignof(Waiter) == 64, "6 low bits of a Waiter* are free in the waitq word");

// Records for threads on the shared slot (core/thread_registry.h), which has
// no record of its own to give: static, so type-stable like a slot's. One left
// busy by a thread lost in fork() stays busy (it may still be linked).
constexpr unsigned kSharedRecords = 64;
alignas(Waiter) unsigned char g_shared_records[kSharedRecords][sizeof(Waiter)];
std::atomic<bool> g_shared_record_busy[kSharedRecords];

void* take_shared_record() {
  for (unsigned i = 0; i < kSharedRecords; ++i)
    if (!g_shared_record_busy[i].load(arch::mo_hint) && !g_shared_record_busy[i].exchange(true, arch::mo_lock))
      return g_shared_records[i];
  return nullptr;
}

void give_back_shared_record(void* mem) {
  auto i = static_cast<std::size_t>(static_cast<unsigned char*>(mem) - g_shared_records[0]) / sizeof(Waiter);
  g_shared_record_busy[i].store(false, arch::mo_unlock);
}

bool is_shared_record(const void* mem) {
  auto* p = static_cast<const unsigned char*>(mem);
  return p >= g_shared_records[0] && p < g_shared_records[0] + sizeof g_shared_records;
}

// The slot's record; for a thread on the shared slot one from the static
// pool; on the stack when neither is free (a wait nested in a signal handler
// that interrupted another wait, or 64 shared-slot threads queued at once: a
// stack record is unsafe only if its thread is lost in fork() while queued).
class WaiterRecord {
 public:
  WaiterRecord(ThreadSlot& me, WaitType t, uint64_t now) {
    void* mem = nullptr;
    if (__builtin_expect(is_shared(me), 0)) {
      lockevent_inc(LockEvent::rwsem_shared_wait);
      mem = take_shared_record();
    } else if (!std::launder(reinterpret_cast<Waiter*>(me.rwsem_waiter))->in_use) {
      mem = me.rwsem_waiter;
    }
    w_ = new (mem != nullptr ? mem : stack_) Waiter(me, t, now);
  }
  ~WaiterRecord() {
    w_->in_use = false;
    if (__builtin_expect(is_shared_record(w_), 0)) give_back_shared_record(w_);
  }
  WaiterRecord(const WaiterRecord&) = delete;
  WaiterRecord& operator=(const WaiterRecord&) = delete;
  Waiter& get() { return *w_; }

 private:
  Waiter* w_;
  alignas(Waiter) unsigned char stack_[sizeof(Waiter)];
};

// The count's queue flags, all cleared when the queue empties (nobody is
// left to be owed the lock, to be awake or to head it).
constexpr uint64_t kQueueFlags = kFlagWaiters | kFlagHandoff | kFlagWoken | kFlagReaderFirst;

// waitq word: Waiter* head | bits 1-5 fork-generation tag of the wait_lock
// holder | bit 0 wait_lock.
constexpr uint64_t kWaitLockBit = wait_lock::kLockBit;
constexpr uint64_t kTagMask = wait_lock::kTagMask;
constexpr uint64_t kWordFlags = kWaitLockBit | kTagMask;
static_assert(alignof(Waiter) > kWordFlags, "the flag bits sit below a Waiter*");

// A waiter queued before a fork() into this process: its thread is gone.
bool ghost(const Waiter& w) { return w.generation != thread_registry::g_fork_generation.load(arch::mo_hint); }

// Holds the wait_lock (bit 0 of waitq) and caches the list head meanwhile.
class WaitList {
 public:
  explicit WaitList(const WordRefs& r) : word_(r.waitq), count_(&r.count) { lock(); }
  WaitList(std::atomic<uint64_t>& word, std::atomic<uint64_t>* count) : word_(word), count_(count) { lock(); }
  ~WaitList() {
    if (held_) unlock();
  }
  WaitList(const WaitList&) = delete;
  WaitList& operator=(const WaitList&) = delete;

  // Test-and-test-and-set with a bounded spin (Backoff). The holder's fork
  // generation goes into the word with the lock bit.
  void lock() {
    const uint64_t mine = kWaitLockBit | wait_lock::tag(thread_registry::g_fork_generation.load(arch::mo_hint));
    for (Backoff b;; b.pause()) {
      uint64_t v = word_.load(arch::mo_hint);
      if (v & kWaitLockBit) {
        if ((v & kTagMask) != (mine & kTagMask) && recover(v, mine)) return;
        continue;
      }
      if (word_.compare_exchange_weak(v, v | mine, arch::mo_lock, arch::mo_hint)) {
        head_ = reinterpret_cast<Waiter*>(v & ~kWordFlags);
        held_ = true;
        return;
      }
    }
  }
  // Nobody else writes the word while we hold it, so a store both publishes
  // the new head and drops the lock (and the tag). READER_FIRST follows the
  // head first (a hint; see core/rwsem.h).
  void unlock() {
    held_ = false;
    if (count_ != nullptr) publish_reader_first();
    word_.store(reinterpret_cast<uint64_t>(head_), arch::mo_unlock);
  }

  Waiter* first() const { return head_; }
  bool empty() const { return head_ == nullptr; }
  bool singular() const { return head_ != nullptr && head_->next == head_; }
  // The waiter after `w`, or nullptr at the tail.
  Waiter* after(const Waiter* w) const { return w->next == head_ ? nullptr : w->next; }

  void add_tail(Waiter* w) {
    if (head_ == nullptr) {
      w->prev = w->next = w;
      head_ = w;
      return;
    }
    Waiter* tail = head_->prev;
    w->prev = tail;
    w->next = head_;
    tail->next = w;
    head_->prev = w;
  }
  // Unlink `w`; true if the list is still non-empty.
  bool remove(Waiter* w) {
    if (w->next == w) {
      head_ = nullptr;
      return false;
    }
    w->prev->next = w->next;
    w->next->prev = w->prev;
    if (head_ == w) head_ = w->next;
    return true;
  }

 private:
  // The lock is held with another fork generation's tag: its holder is a
  // thread that did not survive fork() (generations only change in a child,
  // and the forking thread never forks while holding it). Nothing in this
  // process can queue without the lock, so every waiter it guards is a ghost
  // too: take the lock over with an empty list, which needs neither WAITERS
  // nor HANDOFF. (A reader bias such a ghost was giving back is not
  // recovered; a lock it held stays held, as with glibc.)
  bool recover(uint64_t v, uint64_t mine) {
    if (!word_.compare_exchange_strong(v, mine, arch::mo_lock, arch::mo_hint)) return false;
    head_ = nullptr;
    held_ = true;
    if (count_ != nullptr) count_->fetch_and(~kQueueFlags, arch::mo_hint);
    lockevent_inc(LockEvent::rwsem_wait_lock_recover);
    return true;
  }

  // Only the wait_lock holder changes READER_FIRST. The head is a reader or a
  // writer whether or not it is a ghost: first_live() unlinks ghosts later.
  void publish_reader_first() {
    const bool reader_first = head_ != nullptr && head_->type == WaitType::read;
    const uint64_t c = count_->load(arch::mo_hint);
    if (((c & kFlagReaderFirst) != 0) == reader_first) return;
    if (reader_first)
      count_->fetch_or(kFlagReaderFirst, arch::mo_hint);
    else
      count_->fetch_and(~kFlagReaderFirst, arch::mo_hint);
  }

  std::atomic<uint64_t>& word_;
  std::atomic<uint64_t>* count_;
  Waiter* head_ = nullptr;
  bool held_ = false;
};

// Parking. A waiter reads its park word, re-checks its condition, then sleeps
// while the word is unchanged; a waker changes the condition, then bumps the
// word. Unlike unpark(), a sleeper is sent at most one futex_wake per sleep:
// a queued writer is re-woken by every unlock that sees WAITERS, also while
// it is already runnable, and in userspace each of those would be a syscall.
//
// While asleep the waiter publishes in `blocked` which park value it sleeps
// on (sleep_token(seen)). Only the bump that moves park away from exactly that
// value owes it a wake; that waker claims it by resetting `blocked` to 0.
// Bumps made before the waiter read `seen` must not claim anything: the
// waiter's own re-check already saw their change, and letting them clear
// `blocked` would leave the real sleep without a waker (found as a hang: all
// writers asleep on a free lock with HANDOFF set).
// Dekker pair: the sleeper stores its token, then futex_wait reads park (the
// syscall orders them); the waker bumps park, then reads `blocked`. Either
// the waker sees the token and wakes, or futex_wait sees the new value.
constexpr uint32_t kSleepingOn = 1u << 31;
constexpr uint32_t sleep_token(uint32_t park_value) { return park_value | kSleepingOn; }
static_assert(sleep_token(0) != 0, "a sleeping thread never reads as not blocked");

// Returns 0 or ETIMEDOUT. The sleep is the one place an asynchronous
// cancellation may land (WaitCtx::sleep, core/cancel.h). While asleep a
// thread holding read locks counts as a sleeping read holder (reader
// preference rule (a), core/read_pref.h).
// The shared slot (core/thread_registry.h) may have several sleepers: its
// `blocked` is never set (one token cannot name them all), and every wake is
// a wake-all. Its sleepers read park before re-checking, so the bump after the
// condition changed is seen either by that read or by futex_wait.
//
// `writer` (queued writers): after publishing the token the sleeper looks
// at the count once more and does not sleep if the lock is free. That makes
// wakeups of a writer optional while it is awake (wake_writer()). A queued
// writer also passes its Waiter's flags, whose kWokenMark says that the
// count's WOKEN bit was set for it (mark_wake()) since it last cleared it:
// unlocks then release without waking anyone, so it must not sleep on an old
// `seen`. Threads of the shared slot publish no token but make the same two
// checks: a release they miss here bumps their park word after `seen`.

// The lock went free between a queued writer's failed attempt and its sleep.
// Not in the kernel (whose woken writer tries again at once): a blocking
// waiter sleeps up to polite_ns first, so that the thread that just released
// the lock, whose cache holds it and the data it guards, can take it again;
// that thread's next unlock wakes us (our token is published). Timed waiters
// retry at once.
// Sleeps on the park word (while it reads `seen`) for at most polite_ns (the
// lock's: polite_ns_of()): 0, or ETIMEDOUT.
int sleep_polite_ns(ThreadSlot& me, uint32_t seen, uint64_t polite_ns) {
  timespec end = arch::timespec_at(now_ns() + polite_ns);
  return WaitCtx::until(CLOCK_MONOTONIC, &end).sleep(&me.park, seen);
}

int polite_sleep(ThreadSlot& me, uint32_t seen, const WaitCtx& ctx, uint64_t polite_ns) {
  if (ctx.mode == WaitCtx::Mode::forever && polite_ns != 0) {
    int rc = sleep_polite_ns(me, seen, polite_ns);
    lockevent_inc(rc == ETIMEDOUT ? LockEvent::rwsem_polite_timeout : LockEvent::rwsem_polite_woken);
  }
  me.blocked.store(0, arch::mo_hint);
  return 0;
}

// What a queued writer's park_sleep() re-checks after publishing its token
// (see above), and how long it leaves a free lock to the releaser.
struct WriterRecheck {
  const std::atomic<uint64_t>& count;
  const std::atomic<uint8_t>& writer_flags;
  uint64_t polite_ns;
};

// park_sleep(): see above polite_sleep().
int park_sleep(ThreadSlot& me, uint32_t seen, const WaitCtx& ctx, const WriterRecheck* writer = nullptr) {
  read_pref::ReadHolderSleep holder_asleep;
  const bool shared = is_shared(me);
  if (!shared) me.blocked.store(sleep_token(seen), arch::mo_dekker);  // also tells spinners we are not running
  if (writer != nullptr) {
    bool marked = (writer->writer_flags.load(arch::mo_dekker) & Waiter::kWokenMark) != 0;
    if (marked || !(writer->count.load(arch::mo_dekker) & kLockMask)) {
      if (!marked && !shared) return polite_sleep(me, seen, ctx, writer->polite_ns);
      if (!shared) me.blocked.store(0, arch::mo_hint);
      return 0;
    }
  }
  int rc = ctx.sleep(&me.park, seen);
  if (!shared) me.blocked.store(0, arch::mo_hint);
  return rc;
}

void wake_parked(ThreadSlot& s) {
  if (__builtin_expect(is_shared(s), 0)) return unpark(s);
  uint32_t before = s.park.fetch_add(1, arch::mo_dekker);
  uint32_t owed = sleep_token(before);
  if (s.blocked.load(arch::mo_dekker) == owed && s.blocked.compare_exchange_strong(owed, 0, arch::mo_dekker))
    arch::futex_wake(&s.park, 1);
}

// Not in the kernel: a queued writer that is awake (no sleep token) is not
// sent a wakeup. It re-checks the lock after publishing its token
// (park_sleep()'s `writer` re-check), so this is a Dekker pair, all four accesses
// seq_cst: the waker's count change (the slow unlocks' release RMW, or the
// WOKEN fetch_or of mark_wake()), then its read of `blocked`; the sleeper's
// token store, then its read of the count — one of the two sees the other.
// The kernel's wake_up_process() of a running task is nearly free; here every
// unlock that finds WAITERS would bump the park word, and a writer that read
// the word before its attempt then never sleeps at all: it spins through the
// wait_lock against the owner (docs/measurements.md, "One contended lock").
// Slots shared by several threads are always woken.
void wake_writer(ThreadSlot& s) {
  if (!is_shared(s)) {
    if (s.blocked.load(arch::mo_dekker) == 0) {
      lockevent_inc(LockEvent::rwsem_wake_awake);
      return;
    }
  }
  wake_parked(s);
}

// Threads to wake once the wait_lock is dropped (the kernel's wake_q). One
// mark_wake() adds one writer or at most kMaxReadersWakeup readers.
struct WakeQ {
  ThreadSlot* slots[kMaxReadersWakeup];
  uint32_t n = 0;
  bool writer = false;  // slots[0] is a queued writer (wake_writer())
  void add(ThreadSlot* s) { slots[n++] = s; }
  void add_writer(ThreadSlot* s) {
    writer = n == 0;
    add(s);
  }
  bool empty() const { return n == 0; }
  void wake() {
    for (uint32_t i = 0; i < n; ++i) (i == 0 && writer) ? wake_writer(*slots[i]) : wake_parked(*slots[i]);
    n = 0;
    writer = false;
  }
};

// WOKEN (core/rwsem.h) changes only under the wait_lock.
void clear_woken(const WordRefs& r) {
  if (r.count.load(arch::mo_hint) & kFlagWoken) r.count.fetch_and(~kFlagWoken, arch::mo_hint);
}

// rwsem_del_waiter(): unlink; when the queue empties, clear WAITERS and
// HANDOFF together (nobody is left to be owed the lock), and READER_FIRST.
// True if non-empty.
// WOKEN belongs to the head: it goes when the head does.
bool del_waiter(const WordRefs& r, WaitList& wl, Waiter* w) {
  if (wl.first() == w) clear_woken(r);
  if (wl.remove(w)) return true;
  r.count.fetch_and(~kQueueFlags, arch::mo_hint);
  return false;
}

// rwsem_first_waiter(), unlinking ghosts at the head first: a ghost can never
// take a lock or pass on a wakeup, so leaving it first would stall the queue.
Waiter* first_live(const WordRefs& r, WaitList& wl) {
  Waiter* w;
  while ((w = wl.first()) != nullptr && ghost(*w)) del_waiter(r, wl, w);
  return w;
}

// ---------------------------------------------------------------------------
// Owner word helpers
// ---------------------------------------------------------------------------

template <class P>
ThreadSlot* owner_slot(uint64_t owner) {
  return reinterpret_cast<ThreadSlot*>(owner & ~P::kOwnerFlags);
}

// The budget of one optimistic spin (core/spin_budget.h): owner_spin_ns
// bounds spinning on a writer owner or on no owner (time in a reader phase is
// credited back: rspin_threshold() bounds that, as in the kernel);
// kSpinCapExtraNs more bounds the whole spin.
SpinBudget starting_budget(uint64_t now) {
  uint64_t d = now + tunables().owner_spin_ns;
  return {d, d + kSpinCapExtraNs};
}

// Spinner seats (not in the kernel): at most max_spinners threads of the
// process spin at once, by default the CPUs it may run on minus one (the
// owner needs a CPU to release the lock), at least one. Others queue and
// sleep at once. In the kernel, spinners beyond that would meet
// need_resched() as soon as the tasks they keep off the CPUs are woken or
// ticked in; a userspace spinner never sees that flag, and with more
// runnable threads than CPUs every extra spinner only delays the owner and
// the threads with work to do (docs/measurements.md, "Spinner seats").
// Reset in a fork child (a thread lost in fork may have held a seat).
std::atomic<uint32_t> g_spinners{0};
uint32_t spinner_limit() {
  if (uint32_t l = tunables().max_spinners) return l;
  uint32_t n = usable_cpus();
  return n > 2 ? n - 1 : 1;
}
}  // namespace

// Relaxed: a seat is a count, not a lock; nothing is published through it.
bool take_spinner_seat() {
  uint32_t n = g_spinners.load(std::memory_order_relaxed);
  do {
    if (n >= spinner_limit()) return false;
  } while (!g_spinners.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
  return true;
}
void give_back_spinner_seat() { g_spinners.fetch_sub(1, std::memory_order_relaxed); }

namespace {

// rwsem_set_nonspinnable(): only while the lock is still reader-owned.
template <class P>
void set_nonspinnable(const WordRefs& r) {
  uint64_t o = r.owner.load(arch::mo_hint);
  do {
    // v5.10 too stops when EITHER bit is set (RWSEM_NONSPINNABLE = RD|WR,
    // tested with `owner & RWSEM_NONSPINNABLE`, 5.10.13).
    if (!(o & kReaderOwned) || (o & P::kNonspinnable) != 0) return;
  } while (!r.owner.compare_exchange_weak(o, o | P::kNonspinnable, arch::mo_hint, arch::mo_hint));
}

// clear_nonspinnable() (v5.10: clear_wr_nonspinnable()): the readers are gone.
template <class P>
void clear_nonspinnable(const WordRefs& r) {
  if (r.owner.load(arch::mo_hint) & P::kWrNonspinnable) r.owner.fetch_and(~P::kWrNonspinnable, arch::mo_hint);
}

// ---------------------------------------------------------------------------
// rwsem_mark_wake() — wait_lock held, list non-empty
// ---------------------------------------------------------------------------

// The head reader's pre-grant lost to a writer: undo it, and if that reader
// has waited too long, ask for HANDOFF in the same atomic add.
void reader_handoff(const WordRefs& r, Waiter* first, uint64_t old) {
  uint64_t undo = kReaderBias;
  if (now_ns() > first->timeout) {
    if (!(old & kFlagHandoff)) {
      undo -= kFlagHandoff;  // count += HANDOFF - BIAS
      lockevent_inc(LockEvent::rwsem_rlock_handoff);
      LOCKSWAP_TRACE_HANDOFF(&r.count, kTraceRead);
    }
    first->handoff_set.store(true, arch::mo_hint);
  }
  r.count.fetch_sub(undo, arch::mo_hint);
}

// Move every queued reader (skipping writers, dropping ghosts) onto a private
// chain, at most kMaxReadersWakeup of them. Returns how many.
uint32_t collect_readers(WaitList& wl, Waiter*& chain) {
  uint32_t woken = 0;
  Waiter** tail = &chain;
  for (Waiter* w = wl.first(); w != nullptr;) {
    Waiter* next = wl.after(w);
    if (ghost(*w)) {
      wl.remove(w);
    } else if (w->type == WaitType::read) {
      wl.remove(w);
      w->next = nullptr;
      *tail = w;
      tail = &w->next;
      if (++woken >= kMaxReadersWakeup) break;
    }
    w = next;
  }
  return woken;
}

// Grant every queued reader (up to kMaxReadersWakeup, skipping writers), in
// one count update with the flag changes, then publish the grants.
// `pregranted`: a bias the caller already added for the first of them.
// `clear_handoff`: readers got the lock, so writers need not be forced any
// more (mark_wake); the reader-preference batch keeps the writer's HANDOFF.
void grant_readers(const WordRefs& r, WaitList& wl, uint64_t pregranted, bool clear_handoff, WakeQ& q) {
  Waiter* chain = nullptr;
  uint32_t woken = collect_readers(wl, chain);
  lockevent_add(LockEvent::rwsem_wake_reader, woken);

  // One count update for all grants and flags (unsigned wrap-around is the
  // intended two's-complement arithmetic). WAITERS and HANDOFF only change
  // under wait_lock, so reading them here and subtracting later is safe.
  uint64_t adjustment = woken * kReaderBias - pregranted;
  uint64_t old = r.count.load(arch::mo_hint);
  if (wl.empty()) {
    adjustment -= kFlagWaiters;
    if (old & kFlagHandoff) adjustment -= kFlagHandoff;
    if (old & kFlagReaderFirst) adjustment -= kFlagReaderFirst;
  } else if (clear_handoff && woken != 0 && (old & kFlagHandoff)) {
    adjustment -= kFlagHandoff;
  }
  if (adjustment != 0) r.count.fetch_add(adjustment, arch::mo_handover);

  // Second pass, only now that the count covers every granted reader: one of
  // them may run and unlock as soon as it sees its grant.
  for (Waiter* w = chain; w != nullptr;) {
    Waiter* next = w->next;
    ThreadSlot* s = w->slot;
    w->task.store(nullptr, arch::mo_unlock);  // last touch of *w
    q.add(s);
    w = next;
  }
}

template <class P>
void mark_wake(const WordRefs& r, WaitList& wl, WakeType type, WakeQ& q) {
  Waiter* first = first_live(r, wl);
  if (first == nullptr) return;

  if (first->type == WaitType::write) {
    // Not a grant: the writer must still win the lock, so a spinner may steal
    // it meanwhile (readers cannot: WAITERS is set).
    if (type == WakeType::any) {
      // The lock is free for it now: a reader-preference batch may pass it
      // again only in a later read phase (see read_pref_queued()).
      first->set(Waiter::kPrefBlocked, false);
      first->set(Waiter::kWokenMark, true, arch::mo_dekker);  // Dekker pair with park_sleep()
      if (!(r.count.load(arch::mo_hint) & kFlagWoken)) r.count.fetch_or(kFlagWoken, arch::mo_dekker);
      q.add_writer(first->slot);
      lockevent_inc(LockEvent::rwsem_wake_writer);
    }
    return;
  }
  if (r.count.load(arch::mo_hint) & kFlagReadFail) return;  // too many readers already

  // Grant the head reader first, so that a writer that stole the lock is
  // noticed before anything else is done. acq_rel: seeing the lock free here
  // is what orders the granted readers after the previous writer.
  uint64_t pregranted = 0;
  if (type != WakeType::read_owned) {
    pregranted = kReaderBias;
    uint64_t old = r.count.fetch_add(kReaderBias, arch::mo_handover);
    if (old & kWriterLocked) {
      reader_handoff(r, first, old);
      return;
    }
    uint64_t who = owner_value(*first->slot);
    if constexpr (P::reader_spinning) {
      if (first->last_rowner & P::kRdNonspinnable) {  // adaptive disabling carries over
        who |= P::kRdNonspinnable;
        lockevent_inc(LockEvent::rwsem_opt_norspin);
      }
    }
    set_reader_owned<P>(r.owner, who);
  }
  grant_readers(r, wl, pregranted, true, q);
}

// rwsem_cond_wake_waiter() (v5.19+): wake what the current count allows.
template <class P>
void cond_wake_waiter(const WordRefs& r, WaitList& wl, uint64_t count, WakeQ& q) {
  if (count & kWriterMask) return;
  if (count & kReaderMask) {
    mark_wake<P>(r, wl, WakeType::readers, q);
  } else {
    clear_nonspinnable<P>(r);
    mark_wake<P>(r, wl, WakeType::any, q);
  }
}

// rwsem_del_wake_waiter(): a waiter gives up. If it was first and others
// remain, wake them: they may now be eligible, or inherit the handoff.
template <class P>
void del_wake_waiter(const WordRefs& r, WaitList& wl, Waiter* w, WakeQ& q) {
  bool first = first_live(r, wl) == w;
  if (del_waiter(r, wl, w) && first) mark_wake<P>(r, wl, WakeType::any, q);
}

// rwsem_wake() and rwsem_downgrade_wake().
template <class P>
void wake_queue(const WordRefs& r, WakeType type) {
  WakeQ q;
  {
    WaitList wl(r);
    if (!wl.empty()) mark_wake<P>(r, wl, type, q);
  }
  q.wake();
}

// up_read() / up_write() from inside the slow paths (a cancelled or
// cancellation-pending thread gives back what it was granted).
template <class P>
void read_unlock_ref(const WordRefs& r) {
  uint64_t c = r.count.load(arch::mo_hint);
  while (!last_reader_with_waiters(c))
    if (r.count.compare_exchange_weak(c, c - kReaderBias, arch::mo_unlock, arch::mo_hint)) return;
  // The last reader with waiters queued: release under the wait_lock (see
  // SlowPaths::read_unlock_last()).
  WakeQ q;
  {
    WaitList wl(r);
    c = r.count.fetch_sub(kReaderBias, arch::mo_dekker) - kReaderBias;  // seq_cst: see wake_writer()
    if ((c & (kLockMask | kFlagWaiters)) == kFlagWaiters) {
      clear_nonspinnable<P>(r);
      if (!wl.empty()) mark_wake<P>(r, wl, WakeType::any, q);
    }
  }
  q.wake();
}
// False when no writer held the lock: a mutex unlocked while unlocked (glibc
// tolerates that on its default kinds) is left as it was. Clearing the bit
// instead of subtracting it keeps such a stray unlock from wrapping the count
// into "locked forever".
template <class P>
bool write_unlock_ref(const WordRefs& r) {
  r.owner.store(0, arch::mo_hint);
  uint64_t c = kWriterLocked;
  if (r.count.compare_exchange_strong(c, kUnlocked, arch::mo_unlock, arch::mo_hint)) return true;
  // The head writer is awake (WOKEN): nobody to wake, no wait_lock.
  while ((c & (kWriterLocked | kFlagWoken)) == (kWriterLocked | kFlagWoken))
    if (r.count.compare_exchange_weak(c, c & ~kWriterLocked, arch::mo_unlock, arch::mo_hint)) return true;
  // Waiters queued: release under the wait_lock (see SlowPaths::write_unlock_slow()).
  WakeQ q;
  uint64_t old;
  {
    WaitList wl(r);
    old = r.count.fetch_and(~kWriterLocked, arch::mo_dekker);  // seq_cst: see wake_writer()
    if ((old & kWriterLocked) && (old & kFlagWaiters) && !wl.empty()) mark_wake<P>(r, wl, WakeType::any, q);
  }
  q.wake();
  return old & kWriterLocked;
}

// A queued waiter is being unwound by a cancellation (its futex sleep is the
// only place one can land: see CancelScope). Leave exactly as a timed-out
// waiter does, or, for a reader whose grant was already published, give the
// read lock back. Never called with the wait_lock held.
template <class P>
__attribute__((noinline)) void leave_cancelled(const WordRefs& r, Waiter& w) {
  if (!is_shared(*w.slot)) w.slot->blocked.store(0, arch::mo_hint);
  WakeQ q;
  bool granted;
  {
    WaitList wl(r);
    granted = w.type == WaitType::read && w.task.load(arch::mo_lock) == nullptr;
    if (!granted) del_wake_waiter<P>(r, wl, &w, q);
  }
  q.wake();
  if (granted) read_unlock_ref<P>(r);
  lockevent_inc(LockEvent::rwsem_cancel);
}

// Armed while a waiter is queued and may sleep; its destructor runs only when
// a cancellation unwinds through the wait (every normal exit disarms it).
template <class P>
struct QueueGuard {
  const WordRefs& r;
  Waiter& w;
  bool armed = true;
  ~QueueGuard() {
    if (armed) leave_cancelled<P>(r, w);
  }
};

// The lock is ours and the caller's asynchronous type is being restored: a
// cancellation that arrived while we were deferred acts now, and this guard
// gives the lock back first (as if it had acted while we still waited).
template <class P>
struct HeldGuard {
  const WordRefs& r;
  bool write;
  bool armed = true;
  ~HeldGuard() {
    if (!armed) return;
    if (write)
      write_unlock_ref<P>(r);
    else
      read_unlock_ref<P>(r);
    lockevent_inc(LockEvent::rwsem_cancel);
  }
};

template <class P>
void restore_cancel(const CancelScope& cs, const WordRefs& r, int rc, bool write) {
  if (!cs.async()) return;
  if (rc != 0) {
    cs.restore();
    return;
  }
  HeldGuard<P> g{r, write};
  cs.restore();
  g.armed = false;
}

// ---------------------------------------------------------------------------
// Optimistic spinning
// ---------------------------------------------------------------------------

enum class OwnerState : uint8_t { null, writer, reader, nonspinnable };

template <class P>
OwnerState owner_state(uint64_t owner, uint64_t nonspinnable) {
  if (owner & nonspinnable) return OwnerState::nonspinnable;
  if (owner & kReaderOwned) return OwnerState::reader;
  return owner_slot<P>(owner) != nullptr ? OwnerState::writer : OwnerState::null;
}

// rwsem_can_spin_on_owner(): a reader-owned or free lock is spinnable; a
// writer-owned one only while that writer may be running.
template <class P>
bool can_spin_on_owner(const WordRefs& r, uint64_t nonspinnable) {
  uint64_t o = r.owner.load(arch::mo_hint);
  bool ok = !(o & nonspinnable);
  if (ok && !(o & kReaderOwned)) {
    ThreadSlot* s = owner_slot<P>(o);
    if (s != nullptr && !slot_running(*s)) {
      ok = false;
      lockevent_inc(LockEvent::rwsem_opt_owner_off);
    }
  }
  if (!ok) lockevent_inc(LockEvent::rwsem_opt_fail);
  return ok;
}

// rwsem_spin_on_owner(): while a writer owns the lock and may be running,
// wait for the owner word to change; report the state it changed to.
template <class P>
OwnerState spin_on_owner(const WordRefs& r, uint64_t nonspinnable, SpinBudget& budget) {
  uint64_t o = r.owner.load(arch::mo_hint);
  OwnerState st = owner_state<P>(o, nonspinnable);
  if (st != OwnerState::writer) return st;
  ThreadSlot& os = *owner_slot<P>(o);  // type-stable: safe even if stale
  for (unsigned i = 1;; ++i) {
    uint64_t now_owner = r.owner.load(arch::mo_hint);
    if (now_owner != o) return owner_state<P>(now_owner, nonspinnable);
    bool off_cpu = os.blocked.load(arch::mo_hint) != 0 || (i % kClockEvery == 0 && !slot_running(os));
    if (off_cpu) {
      lockevent_inc(LockEvent::rwsem_opt_owner_off);
      return OwnerState::nonspinnable;
    }
    if (i % kClockEvery == 0 && budget.expired(now_ns(), true)) return OwnerState::nonspinnable;
    arch::cpu_relax();
  }
}

// rwsem_try_write_lock_unqueued(): take a free lock past queued waiters
// unless HANDOFF reserves it for the first of them.
bool try_write_lock_unqueued(const WordRefs& r, bool spinning) {
  uint64_t c = r.count.load(arch::mo_hint);
  while (!(c & (kLockMask | kFlagHandoff))) {
    if (r.count.compare_exchange_weak(c, c | kWriterLocked, arch::mo_lock, arch::mo_hint)) {
      r.owner.store(owner_value(self_slot()), arch::mo_hint);
      if (spinning) lockevent_inc(LockEvent::rwsem_opt_lock);
      return true;
    }
  }
  return false;
}

// v5.10 rwsem_try_read_lock_unqueued(). Backing out needs no wakeup check:
// every caller afterwards either holds the lock or queues and re-checks.
template <class P>
bool try_read_lock_unqueued(const WordRefs& r) {
  if (r.count.load(arch::mo_hint) & (kWriterLocked | kFlagHandoff)) return false;
  uint64_t c = r.count.fetch_add(kReaderBias, arch::mo_lock);
  if (!(c & (kWriterLocked | kFlagHandoff))) {
    set_reader_owned<P>(r.owner, owner_value(self_slot()));
    lockevent_inc(LockEvent::rwsem_opt_rlock);
    return true;
  }
  r.count.fetch_sub(kReaderBias, arch::mo_unlock);
  return false;
}

// rwsem_rspin_threshold(): the reader phase starting `now` may be spun on
// until the returned time.
uint64_t rspin_threshold(const WordRefs& r, uint64_t now) {
  return now + rspin_budget_ns(reader_count(r.count.load(arch::mo_hint)));
}

// Not in the kernel: the spinner saw the owner let go and still failed to
// take the lock, so another thread re-took it first (typically the releaser,
// through its fast path). Where that keeps happening the lock is passed back
// and forth between CPUs on every acquisition, and each pass moves its cache
// line (and the data it guards) across; a sleeping waiter lets the owner keep
// both in its cache. See "Deviations" in core/rwsem.h.
bool lost_race_ends_spin(unsigned lost) {
  uint32_t limit = tunables().spin_lost_races;
  if (limit == 0 || lost < limit) return false;
  lockevent_inc(LockEvent::rwsem_opt_lost);
  return true;
}

// The body of rwsem_optimistic_spin(), run as head of the OSQ.
template <class P, bool kWrite>
bool spin_for_lock(const WordRefs& r, uint64_t nonspinnable, SpinBudget& budget) {
  OwnerState prev = OwnerState::null;
  uint64_t rspin_start = 0, rspin_deadline = 0;
  unsigned reader_loops = 0, lost = 0;
  for (unsigned i = 1;; ++i) {
    OwnerState st = spin_on_owner<P>(r, nonspinnable, budget);
    if (st == OwnerState::nonspinnable) return false;
    if (kWrite ? try_write_lock_unqueued(r, true) : try_read_lock_unqueued<P>(r)) return true;
    if (kWrite && st == OwnerState::null && lost_race_ends_spin(++lost)) return false;

    // Time-based spinning on a reader-owned lock, bounded by its own
    // threshold (not by owner_spin_ns), which restarts at each new reader
    // phase so a writer can slip in between two phases.
    if (kWrite && st == OwnerState::reader) {
      if (prev != OwnerState::reader) {
        if (r.owner.load(arch::mo_hint) & nonspinnable) return false;
        rspin_start = now_ns();
        rspin_deadline = rspin_threshold(r, rspin_start);
        reader_loops = 0;
      } else if (++reader_loops % kClockEvery == 0 && now_ns() > rspin_deadline) {
        set_nonspinnable<P>(r);
        lockevent_inc(LockEvent::rwsem_opt_nospin);
        return false;
      }
    } else if (kWrite && prev == OwnerState::reader) {
      budget.credit(now_ns() - rspin_start);
    }
    // need_resched() stand-in (a writer owner's time is checked inside
    // spin_on_owner()).
    if (st != OwnerState::writer && i % kClockEvery == 0 && budget.expired(now_ns(), st == OwnerState::null))
      return false;
    prev = st;
    arch::cpu_relax();
  }
}

// rwsem_optimistic_spin(): only the head of the OSQ spins on the lock.
template <class P, bool kWrite>
bool optimistic_spin(const WordRefs& r) {
  const uint64_t nonspinnable = kWrite ? P::kWrNonspinnable : P::kRdNonspinnable;
  SpinBudget budget = starting_budget(now_ns());
  bool taken = false;
  // The OSQ node is per thread: the shared slot's threads never spin.
  if (!take_spinner_seat()) {
    lockevent_inc(LockEvent::rwsem_opt_crowded);
  } else {
    if (!is_shared(self_slot()) && osq_lock(r.osq, budget)) {
      taken = spin_for_lock<P, kWrite>(r, nonspinnable, budget);
      osq_unlock(r.osq);
    }
    give_back_spinner_seat();
  }
  if (!taken) lockevent_inc(LockEvent::rwsem_opt_fail);
  return taken;
}

// ---------------------------------------------------------------------------
// Yield to a woken writer (not in the kernel; core/rwsem.h, "Deviations")
// ---------------------------------------------------------------------------

// A thread's run of slow paths past a woken head writer ends when it sees
// WOKEN clear, spins, queues or yields; the next one starts its clock anew.
inline void end_woken_run() { t_local.woken_seen_ns = 0; }

// Yields once the head writer was woken (WOKEN) and has not taken the lock
// in the woken_yield_ns since this thread's run of writer slow paths that
// found it so began: most likely it
// is runnable on this thread's CPU, where the scheduler placed it (no shared
// cache exposed), while this thread barges and steals through its time
// slice. One sched_yield() lets it run; with nothing else runnable here it
// returns at once. Rwlocks only: the mutex keeps the lock with the releaser
// on purpose (exclusive_polite_ns).
void yield_to_woken_writer(const WordRefs& r) {
  const uint64_t limit = tunables().woken_yield_ns;
  if (limit == 0 || r.exclusive_only) return;
  if (!(r.count.load(arch::mo_hint) & kFlagWoken)) {
    end_woken_run();
    return;
  }
  const uint64_t now = now_ns();
  if (t_local.woken_seen_ns == 0) {
    t_local.woken_seen_ns = now;
    return;
  }
  if (now - t_local.woken_seen_ns < limit) return;
  end_woken_run();
  lockevent_inc(LockEvent::rwsem_yield_woken);
  sched_yield();
}

// ---------------------------------------------------------------------------
// Read slow path
// ---------------------------------------------------------------------------

// Queued readers follow a reader that just got the lock (wake type READ_OWNED).
// Only a reader heading the queue can be woken that way (mark_wake()), so a
// reader that got in asks READER_FIRST before taking the wait_lock (a
// deviation: see core/rwsem.h).
bool readers_queued_first(uint64_t count) {
  return (count & (kFlagWaiters | kFlagReaderFirst)) == (kFlagWaiters | kFlagReaderFirst);
}
template <class P>
void wake_readers_behind_me(const WordRefs& r) {
  wake_queue<P>(r, WakeType::read_owned);
}

// Not in the kernel: a thread that already holds read locks must not wait
// behind a queued writer for a lock that readers hold (POSIX recursive reads).
template <class P>
bool read_recursive(const WordRefs& r, uint64_t count, bool have_bias) {
  if (have_bias) {
    // Our bias with WRITER clear already is a read hold; others must be there too.
    if ((count & kWriterLocked) || reader_count(count) < 2) return false;
  } else {
    uint64_t c = r.count.load(arch::mo_hint);
    do {
      if ((c & kWriterLocked) || reader_count(c) < 1) return false;
    } while (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint));
  }
  set_reader_owned<P>(r.owner, owner_value(self_slot()));
  lockevent_inc(LockEvent::rwsem_rlock_recursive);
  return true;
}

// v5.11+ reader lock stealing (1a728dff855a) with the anti-starvation rule
// (2f06f702925b): don't steal from a lock that is very likely reader-owned,
// or a stream of stealers would keep the count above 0 and no waiter could
// ever be woken to assert HANDOFF.
// Deviation (steal_read_held, default-kind locks only): the reader steals
// even then, as glibc's reader-preferring default does; the head writer's
// bounded sleep (write_queue()) sets HANDOFF in its place.
// The rule itself, for a reader that did not queue and finds `other_readers`
// readers in besides itself: the event its steal counts, or none when it
// may not steal. read_steal() and the read trylock ask here.
std::optional<LockEvent> steal_verdict(uint64_t owner, uint64_t other_readers, bool reader_pref) {
  if (!((owner & kReaderOwned) && other_readers >= 1)) return LockEvent::rwsem_rlock_steal;
  if (reader_pref && tunables().steal_read_held) return LockEvent::rwsem_rlock_steal_held;
  return std::nullopt;
}

template <class P>
bool read_steal(const WordRefs& r, uint64_t count, bool have_bias, bool reader_pref) {
  uint64_t rcnt = reader_count(count) + (have_bias ? 0 : 1);  // including us
  if (count & (kWriterLocked | kFlagHandoff)) return false;
  std::optional<LockEvent> ev = steal_verdict(r.owner.load(arch::mo_hint), rcnt - 1, reader_pref);
  if (!ev) return false;
  if (!have_bias) {  // drop_bias_early: take a bias back, on the same terms
    uint64_t c = r.count.load(arch::mo_hint);
    do {
      if (c & (kWriterLocked | kFlagHandoff)) return false;
    } while (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint));
    count = c + kReaderBias;
    rcnt = reader_count(count);
  }
  set_reader_owned<P>(r.owner, owner_value(self_slot()));
  lockevent_inc(*ev);
  // First reader in: bring the queued readers along.
  if (rcnt == 1 && readers_queued_first(count)) wake_readers_behind_me<P>(r);
  return true;
}

// Deviation (reader polls; v5.11+ readers never spin): a reader that met a
// writer owner polls for it to leave, for at most owner_spin_ns and only
// while that writer may be running (a writer spinner's rule, without a seat
// or the OSQ: at most one poller per CPU is running anyway). It keeps its
// bias, so it holds the read lock the moment the writer's release clears
// WRITER_LOCKED, and the acquire load that sees it orders the critical
// section after the writer's. The alternative, queueing, puts the reader to
// sleep and its waker's wake-up places it on the waker's CPU: with more
// threads than CPUs the other CPU then sat idle (docs/measurements.md,
// "Where the time goes at 16 and 64 threads", "Readers poll a running
// writer"). True when WRITER_LOCKED cleared without HANDOFF; `count` then
// holds what was seen.
template <class P>
bool read_poll_writer(const WordRefs& r, uint64_t& count) {
  if (!tunables().writer_spin) return false;
  const uint64_t o = r.owner.load(arch::mo_hint);
  ThreadSlot* writer = (o & kReaderOwned) ? nullptr : owner_slot<P>(o);  // not yet recorded: poll on
  const uint64_t deadline = now_ns() + tunables().owner_spin_ns;
  for (unsigned polls = 1;; ++polls) {
    arch::cpu_relax();
    uint64_t c = r.count.load(arch::mo_lock);
    if (c & kFlagHandoff) return false;
    if (!(c & kWriterLocked)) {
      count = c;
      lockevent_inc(LockEvent::rwsem_rlock_writer_poll);
      return true;
    }
    if (polls % kClockEvery == 0 && (now_ns() > deadline || (writer != nullptr && !slot_running(*writer))))
      return false;
  }
}

// v5.10 reader optimistic spinning, then one retry if a new reader phase
// began meanwhile (rwsem_reader_phase_trylock()).
template <class P>
bool read_spin(const WordRefs& r, bool& have_bias, uint64_t& last_rowner) {
  uint64_t o = r.owner.load(arch::mo_hint);
  last_rowner = (o & kReaderOwned) ? o : (o & P::kRdNonspinnable);
  if (!tunables().writer_spin || !can_spin_on_owner<P>(r, P::kRdNonspinnable)) return false;
  if (have_bias) {  // spinning is done without a bias
    r.count.fetch_sub(kReaderBias, arch::mo_unlock);
    have_bias = false;
  }
  if (optimistic_spin<P, false>(r)) {
    if (readers_queued_first(r.count.load(arch::mo_hint))) wake_readers_behind_me<P>(r);
    return true;
  }
  o = r.owner.load(arch::mo_hint);
  if ((o & kReaderOwned) && ((o ^ last_rowner) & ~P::kOwnerFlags) && try_read_lock_unqueued<P>(r)) {
    lockevent_inc(LockEvent::rwsem_opt_rlock2);
    lockevent_add(LockEvent::rwsem_opt_fail, ~uint64_t{0});  // it was not a failure after all: -1
    return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// Reader preference (not in the kernel; core/read_pref.h), default kind only
// ---------------------------------------------------------------------------

// Read-held: no writer, and readers besides `own_bias` of ours.
bool read_held(uint64_t c, uint64_t own_bias) { return !(c & kWriterLocked) && reader_count(c) > own_bias; }

// The highest SCHED_FIFO/RR priority among the queued (blocked) writers, 0 if
// none is real-time; INT_MAX when there are too many to ask (conservative).
// Asked only for a real-time reader; the priorities are read outside the
// wait_lock (two system calls per writer).
int max_queued_writer_rt_priority(const WordRefs& r) {
  constexpr unsigned kMaxAsked = 16;
  pid_t tids[kMaxAsked];
  unsigned n = 0;
  {
    WaitList wl(r);
    for (Waiter* w = wl.first(); w != nullptr; w = wl.after(w)) {
      if (w->type != WaitType::write || ghost(*w)) continue;
      // Too many to ask, or a writer on the shared slot (no tid): assume it outranks us.
      if (n == kMaxAsked || w->slot->tid <= 0) return INT_MAX;
      tids[n++] = w->slot->tid;
    }
  }
  int max = 0;
  for (unsigned i = 0; i < n; ++i) max = std::max(max, read_pref::rt_priority_of_tid(tids[i]));  // -1: gone
  return max;
}

// Rule (c): a real-time reader above every queued writer. A normal-policy
// thread pays one compare (the policy is cached per thread).
bool rt_reader_beats_writers(const WordRefs& r, uint64_t now) {
  int me = read_pref::self_rt_priority(now);
  if (me <= 0) return false;
  CancelScope cs;  // takes the wait_lock (read_try runs without a scope)
  int writers = max_queued_writer_rt_priority(r);
  cs.restore();
  return me > writers;
}

// A reader about to queue (no record yet): rules (a) and (c). With our bias
// still in the count and no writer in it we already hold a read lock; without
// one (drop_bias_early, v5.10 spinners) take it back by CAS while read-held.
template <class P>
bool read_pref_arrival(const WordRefs& r, uint64_t count, bool have_bias) {
  if (!read_held(have_bias ? count : r.count.load(arch::mo_hint), have_bias ? 1 : 0)) return false;
  LockEvent ev;
  if (read_pref::read_holder_asleep_on(&r.count))
    ev = LockEvent::rwsem_rlock_reader_pref;
  else if (rt_reader_beats_writers(r, now_ns()))
    ev = LockEvent::rwsem_rlock_rt;
  else
    return false;
  if (!have_bias) {
    uint64_t c = r.count.load(arch::mo_hint);
    do {
      if (!read_held(c, 0)) return false;
    } while (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint));
  }
  set_reader_owned<P>(r.owner, owner_value(self_slot()));
  lockevent_inc(ev);
  return true;
}

// The first queued writer that is not a ghost, or nullptr.
Waiter* first_writer(const WaitList& wl) {
  for (Waiter* w = wl.first(); w != nullptr; w = wl.after(w))
    if (w->type == WaitType::write && !ghost(*w)) return w;
  return nullptr;
}

enum class Admit : uint8_t { none, granted, asleep, waited, rt };

// A queued reader re-checks rules (a), (b) and (c). On success it has left the
// queue holding a read lock. Rule (b) also lets in every other queued reader
// (the program may wait for more than one), and then no further batch until
// the lock has been free for the first queued writer (pref_blocked, cleared
// when mark_wake() wakes that writer): one batch per read phase. A writer
// that then loses the free lock to a stealing reader sets HANDOFF once it is
// overdue, and takes the lock the next time it is free.
template <class P>
Admit read_pref_queued(const WordRefs& r, Waiter& w, uint64_t now, WakeQ& q) {
  if (!read_held(r.count.load(arch::mo_hint), 0)) return Admit::none;
  Admit why = Admit::none;
  if (read_pref::read_holder_asleep_on(&r.count))
    why = Admit::asleep;
  else if (rt_reader_beats_writers(r, now))
    why = Admit::rt;
  else if (now - w.queued_at >= tunables().reader_pref_ns)
    why = Admit::waited;
  if (why == Admit::none) return Admit::none;

  WaitList wl(r);
  if (w.task.load(arch::mo_lock) == nullptr) return Admit::granted;
  if (why == Admit::waited) {
    Waiter* fw = first_writer(wl);
    if (fw != nullptr && fw->has(Waiter::kPrefBlocked)) return Admit::none;
  }
  uint64_t c = r.count.load(arch::mo_hint);
  do {
    if (!read_held(c, 0)) return Admit::none;
  } while (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint));
  bool was_first = first_live(r, wl) == &w;
  if (why == Admit::waited) {
    wl.remove(&w);
    if (Waiter* fw = first_writer(wl)) fw->set(Waiter::kPrefBlocked, true);
    grant_readers(r, wl, 0, false, q);  // clears WAITERS (and HANDOFF) if the queue empties
  } else if (del_waiter(r, wl, &w) && was_first) {
    mark_wake<P>(r, wl, WakeType::read_owned, q);
  }
  set_reader_owned<P>(r.owner, owner_value(*w.slot));
  return why;
}

// Queued default-kind readers sleep at most this long at a time, to re-check
// the rules (rule (a) also unparks them at once when a holder falls asleep).
constexpr uint64_t kPrefSliceMinNs = 100'000;
constexpr unsigned kPrefSliceMaxShift = 4;  // slices double up to 16 bounds


// ---------------------------------------------------------------------------
// Queued readers
// ---------------------------------------------------------------------------

// Sleep until granted; on timeout leave the queue unless a grant raced in.
template <class P>
int read_wait(const WordRefs& r, Waiter& w, const WaitCtx& ctx, bool pref) {
  ThreadSlot& me = *w.slot;
  QueueGuard<P> guard{r, w};
  read_pref::PrefWaiter watch;
  const uint64_t bound = std::max(tunables().reader_pref_ns, kPrefSliceMinNs);
  uint64_t slice = bound;
  LockEvent got = LockEvent::rwsem_rlock;
  bool timed_out = false;
  for (;;) {
    uint32_t seen = me.park.load(arch::mo_lock);  // before the check: see header
    if (w.task.load(arch::mo_lock) == nullptr) break;
    uint64_t now = 0;
    if (pref) {
      now = now_ns();
      // Register before checking rule (a) (Dekker pair with ReadHolderSleep).
      if (read_held(r.count.load(arch::mo_hint), 0)) watch.register_for(me, &r.count);
      WakeQ q;
      Admit a = read_pref_queued<P>(r, w, now, q);
      q.wake();
      if (a == Admit::granted) break;
      if (a != Admit::none) {
        got = a == Admit::asleep ? LockEvent::rwsem_rlock_reader_pref
              : a == Admit::rt   ? LockEvent::rwsem_rlock_rt
                                 : LockEvent::rwsem_rlock_reader_pref_wait;
        break;
      }
    }
    if (timed_out) {
      WaitList wl(r);
      if (w.task.load(arch::mo_lock) == nullptr) break;  // granted meanwhile: keep it
      WakeQ q;
      del_wake_waiter<P>(r, wl, &w, q);
      wl.unlock();
      q.wake();
      guard.armed = false;
      lockevent_inc(LockEvent::rwsem_rlock_fail);
      return ctx.give_up_code();
    }
    if (pref && (ctx.mode == WaitCtx::Mode::forever || arch::ns_until(ctx.clock, *ctx.abs) > slice)) {
      // A bounded sleep; its end is not the caller's timeout.
      timespec end = arch::timespec_at(now + slice);
      park_sleep(me, seen, WaitCtx::until(CLOCK_MONOTONIC, &end));
      timed_out = ctx.mode == WaitCtx::Mode::until && ctx.expired();
      slice = std::min(slice * 2, bound << kPrefSliceMaxShift);
    } else {
      timed_out = park_sleep(me, seen, ctx) == ETIMEDOUT;
    }
    lockevent_inc(LockEvent::rwsem_sleep_reader);
  }
  guard.armed = false;
  lockevent_inc(got);
  return 0;
}

template <class P>
int read_queue(const WordRefs& r, bool have_bias, uint64_t last_rowner, const WaitCtx& ctx, ReadFlags flags) {
  end_woken_run();
  ThreadSlot& me = self_slot();
  WaiterRecord rec(me, WaitType::read, now_ns());
  Waiter& w = rec.get();
  w.last_rowner = last_rowner;
  uint64_t adjustment = have_bias ? 0 - kReaderBias : 0;

  WaitList wl(r);
  if (wl.empty()) {
    // Nobody queued and no writer: the bias we still hold is a read lock.
    // (HANDOFF is always clear with an empty queue.) An acquire load rather
    // than the kernel's relaxed load + smp_acquire__after_ctrl_dep(): the same
    // code on x86, and visible to TSan, which ignores fences.
    if (have_bias && !(r.count.load(arch::mo_lock) & kWriterMask)) {
      wl.unlock();
      set_reader_owned<P>(r.owner, owner_value(me));
      lockevent_inc(LockEvent::rwsem_rlock_fast);
      return 0;
    }
    adjustment += kFlagWaiters;
  }
  wl.add_tail(&w);
  uint64_t c = adjustment != 0 ? r.count.fetch_add(adjustment, arch::mo_handover) + adjustment
                               : r.count.load(arch::mo_hint);
  WakeQ q;
  cond_wake_waiter<P>(r, wl, c, q);  // giving back our bias may have freed the lock
  wl.unlock();
  q.wake();
  return read_wait<P>(r, w, ctx, (flags & kReadReaderPref) != 0);
}

// ---------------------------------------------------------------------------
// Write slow path
// ---------------------------------------------------------------------------

// rwsem_try_write_lock() (v6.3 rules), wait_lock held. Takes the lock, or sets
// HANDOFF for the first waiter once `w` has waited past its timeout.
template <class P>
bool try_write_lock(const WordRefs& r, WaitList& wl, Waiter& w) {
  Waiter* first = first_live(r, wl);
  uint64_t c = r.count.load(arch::mo_hint);
  uint64_t next;
  int waited_too_long = -1;  // lazily: -1 unknown, 0 no, 1 yes
  do {
    bool has_handoff = (c & kFlagHandoff) != 0;
    // Yield only to a handoff that the first waiter owns (6eebd5fb2083).
    if (has_handoff && first->handoff_set.load(arch::mo_hint) && &w != first) return false;
    next = c;
    if (c & kLockMask) {
      if (has_handoff) return false;
      if (waited_too_long < 0) waited_too_long = now_ns() > w.timeout;
      if (!waited_too_long) return false;
      next |= kFlagHandoff;
    } else {
      next |= kWriterLocked;
      next &= ~kFlagHandoff;
      if (&w == first) next &= ~kFlagWoken;
      if (wl.singular()) next &= ~(kFlagWaiters | kFlagReaderFirst);
    }
  } while (!r.count.compare_exchange_weak(c, next, arch::mo_lock, arch::mo_hint));

  if (next & kFlagHandoff) {
    first->handoff_set.store(true, arch::mo_hint);  // the handoff belongs to the head
    lockevent_inc(LockEvent::rwsem_wlock_handoff);
    LOCKSWAP_TRACE_HANDOFF(&r.count, kTraceWrite);
    return false;
  }
  wl.remove(&w);
  r.owner.store(owner_value(*w.slot), arch::mo_hint);
  return true;
}

// The first waiter that owns HANDOFF spins on a running writer owner instead
// of sleeping, and retries at once when the owner lets go (OWNER_NULL).
template <class P>
bool handoff_spin(const WordRefs& r, uint64_t& spin_deadline) {
  if (!tunables().writer_spin) return false;
  uint64_t now = now_ns();
  if (spin_deadline == 0)
    spin_deadline = now + tunables().owner_spin_ns;
  else if (now > spin_deadline)
    return false;
  SpinBudget budget = SpinBudget::until(spin_deadline);
  return spin_on_owner<P>(r, P::kNonspinnable, budget) == OwnerState::null;
}

// Not in the kernel: a queued writer was woken by an unlock and still found
// the lock taken, so a thread that did not queue (typically the releaser,
// through its fast path or as a barger) re-took it first. Being woken by
// every unlock would make it retry against that thread at the rate the lock
// changes hands, and each success moves the lock's cache line, and the data
// it guards, to another CPU. So it sleeps polite_ns without a sleep token
// (no unlock wakes it, no unlock pays for a wakeup) and then tries again;
// a failure after its next ordinary sleep brings it back here. HANDOFF,
// which it sets after handoff_ns of waiting, still bounds how long it waits.
void lost_to_barger(ThreadSlot& me, uint64_t polite_ns) {
  read_pref::ReadHolderSleep holder_asleep;  // a sleep like park_sleep()'s
  sleep_polite_ns(me, me.park.load(arch::mo_lock), polite_ns);
  lockevent_inc(LockEvent::rwsem_polite_backoff);
}

// Deviation (steal_read_held): readers of a default-kind lock steal past
// queued writers, so no reader unlock need ever find the count at zero and
// wake the head writer. The head writer without HANDOFF therefore sleeps no
// longer than its handoff deadline (or its own deadline, if earlier), then
// sets HANDOFF itself (try_write_lock()), which ends the stealing. Only while
// readers hold the lock: a writer owner's unlock wakes the head, and a mutex
// (the write side alone) never arms the timer.
bool needs_handoff_timer(const WaitCtx& ctx, const Waiter& w, bool first, uint64_t count) {
  return first && ctx.may_block() && tunables().steal_read_held && reader_count(count) != 0 &&
         !(count & (kWriterLocked | kFlagHandoff)) && !w.handoff_set.load(arch::mo_hint);
}

enum class WriterWake : uint8_t { woken, timed_out, handoff_due };

// A queued writer's sleep, bounded by its handoff deadline when `handoff_timer`.
WriterWake writer_sleep(const WordRefs& r, ThreadSlot& me, uint32_t seen, const Waiter& w, const WaitCtx& ctx,
                        bool handoff_timer, uint64_t polite_ns) {
  const WriterRecheck recheck{r.count, w.writer_flags, polite_ns};
  if (handoff_timer) {
    uint64_t now = now_ns();
    uint64_t to_handoff = w.timeout >= now ? w.timeout - now + 1 : 1;
    if (ctx.mode == WaitCtx::Mode::forever || arch::ns_until(ctx.clock, *ctx.abs) > to_handoff) {
      timespec due = arch::timespec_at(now + to_handoff);
      if (park_sleep(me, seen, WaitCtx::until(CLOCK_MONOTONIC, &due), &recheck) != ETIMEDOUT)
        return WriterWake::woken;
      lockevent_inc(LockEvent::rwsem_handoff_timer);
      return WriterWake::handoff_due;
    }
  }
  return park_sleep(me, seen, ctx, &recheck) == ETIMEDOUT ? WriterWake::timed_out : WriterWake::woken;
}

// The polite backoff is for a writer that lost the lock to the thread that
// released it (as on a mutex): to a writer, or to a lone reader while nobody
// else waits (one thread taking turns with us). Readers that stole the lock
// with others queued hold it until the last one leaves, and that unlock
// wakes us; backing off from them only delays us and everyone queued behind.
bool lost_to_the_releaser(const WordRefs& r, const WaitList& wl) {
  uint64_t c = r.count.load(arch::mo_hint);
  return (c & kWriterLocked) || (reader_count(c) == 1 && wl.singular());
}

template <class P>
int write_queue(const WordRefs& r, const WaitCtx& ctx, bool disable_rspin) {
  ThreadSlot& me = self_slot();
  WaiterRecord rec(me, WaitType::write, now_ns());
  Waiter& w = rec.get();

  WaitList wl(r);
  wl.add_tail(&w);
  if (first_live(r, wl) != &w) {
    WakeQ q;
    cond_wake_waiter<P>(r, wl, r.count.load(arch::mo_hint), q);
    if (!q.empty()) {  // keep wait_lock hold times short while waking many
      wl.unlock();
      q.wake();
      wl.lock();
    }
  } else {
    r.count.fetch_or(kFlagWaiters, arch::mo_handover);
  }

  QueueGuard<P> guard{r, w};  // the wait_lock is never held where it can fire
  const uint64_t polite_ns = polite_ns_of(tunables(), r.exclusive_only);
  bool timed_out = false, woken = false;
  uint64_t spin_deadline = 0;
  for (;;) {
    uint32_t seen = me.park.load(arch::mo_lock);  // before the attempt: see header
    if (try_write_lock<P>(r, wl, w)) break;
    if (woken && ctx.mode == WaitCtx::Mode::forever && polite_ns != 0 && lost_to_the_releaser(r, wl)) {
      wl.unlock();  // WOKEN stays: no unlock needs to wake us meanwhile
      woken = false;
      lost_to_barger(me, polite_ns);
      wl.lock();
      continue;
    }
    if (w.has(Waiter::kWokenMark)) {  // unlocks must wake us again
      w.set(Waiter::kWokenMark, false);
      clear_woken(r);
    }
    const bool handoff_timer = needs_handoff_timer(ctx, w, first_live(r, wl) == &w, r.count.load(arch::mo_hint));
    wl.unlock();
    if (timed_out) {
      wl.lock();
      WakeQ q;
      del_wake_waiter<P>(r, wl, &w, q);
      wl.unlock();
      q.wake();
      guard.armed = false;
      lockevent_inc(LockEvent::rwsem_wlock_fail);
      return ctx.give_up_code();
    }
    if (!(w.handoff_set.load(arch::mo_hint) && handoff_spin<P>(r, spin_deadline))) {
      spin_deadline = 0;
      WriterWake why = writer_sleep(r, me, seen, w, ctx, handoff_timer, polite_ns);
      timed_out = why == WriterWake::timed_out;
      woken = why != WriterWake::handoff_due;
      lockevent_inc(LockEvent::rwsem_sleep_writer);
    }
    wl.lock();
  }
  guard.armed = false;
  if (disable_rspin) {  // v5.10 rwsem_disable_reader_optspin()
    r.owner.fetch_or(P::kRdNonspinnable, arch::mo_hint);
    lockevent_inc(LockEvent::rwsem_opt_norspin);
  }
  wl.unlock();
  lockevent_inc(LockEvent::rwsem_wlock);
  return 0;
}

}  // namespace

// ---------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------

template <class P>
int read_impl(const WordRefs& r, uint64_t count, const WaitCtx& ctx, ReadFlags flags) {
  bool have_bias = true;
  if (!(count & kFlagWoken)) end_woken_run();
  if (count & kFlagReadFail) set_nonspinnable<P>(r);  // the kernel WARNs here
  if (tunables().drop_bias_early) {
    // 2016 RFC: a writer spinning for a free count should not wait for us.
    count = r.count.fetch_sub(kReaderBias, arch::mo_unlock) - kReaderBias;
    have_bias = false;
    lockevent_inc(LockEvent::rwsem_rlock_bias_drop);
  }
  if ((flags & kReadHoldsThis) && read_recursive<P>(r, count, have_bias)) return 0;

  uint64_t last_rowner = 0;
  // glibc's writer-nonrecursive kind: a queued writer keeps new readers out,
  // so neither v5.11 stealing nor v5.10 spinning may pass the queue.
  if ((flags & kReadBehindWriters) && (count & kFlagWaiters))
    return read_queue<P>(r, have_bias, last_rowner, ctx, flags);
  if constexpr (P::reader_spinning) {
    if (read_spin<P>(r, have_bias, last_rowner)) return 0;
  } else {
    if (read_steal<P>(r, count, have_bias, flags & kReadReaderPref)) return 0;
    if (have_bias && (count & kWriterLocked) && !(count & kFlagHandoff) && read_poll_writer<P>(r, count) &&
        read_steal<P>(r, count, have_bias, flags & kReadReaderPref))
      return 0;
  }
  if ((flags & kReadReaderPref) && read_pref_arrival<P>(r, count, have_bias)) return 0;
  return read_queue<P>(r, have_bias, last_rowner, ctx, flags);
}

template <class P>
__attribute__((noinline)) int SlowPaths<P>::read(const WordRefs& r, uint64_t count, WaitCtx ctx, ReadFlags flags) {
  if ((count & kReadFailedMask) == 0) {  // granted; the fast path only lacked a slot (read_fast())
    set_reader_owned<P>(r.owner, owner_value(self_slot()));
    return 0;
  }
  CancelScope cs;
  int rc = read_impl<P>(r, count, ctx, flags);
  restore_cancel<P>(cs, r, rc, false);
  return rc;
}

// Would a blocking reader take this lock at once, without queueing? `c` has
// no WRITER, HANDOFF or READFAIL. v5.11: it steals unless the lock is very
// likely reader-owned already; v5.10: it spins, unless reader spinning is off.
template <class P>
bool unqueued_reader_would_get_it(const WordRefs& r, uint64_t c, bool reader_pref) {
  uint64_t o = r.owner.load(arch::mo_hint);
  if constexpr (P::reader_spinning)
    return tunables().writer_spin && !(o & P::kRdNonspinnable);
  else
    return steal_verdict(o, reader_count(c), reader_pref).has_value();
}

// down_read_trylock() (v5.16+: read the count first). Not in the kernel: it
// succeeds wherever a blocking reader would get in without sleeping —
// recursion, v5.11 stealing / v5.10 spinning past queued waiters, and the
// reader-preference rules (a) and (c) — so a lock nobody holds is not EBUSY
// just because waiters are queued (glibc's default rwlock succeeds there).
template <class P>
__attribute__((noinline)) int SlowPaths<P>::read_try(const WordRefs& r, ReadFlags flags) {
  enum class Why : uint8_t { plain, recursive, steal, asleep, rt };
  const bool holds = flags & kReadHoldsThis, behind = flags & kReadBehindWriters, pref = flags & kReadReaderPref;
  int pref_rule = -1;  // lazily: 0 none, 1 (a), 2 (c)
  uint64_t c = r.count.load(arch::mo_hint);
  for (;;) {
    Why why;
    if (!(c & kReadFailedMask)) {
      why = Why::plain;
    } else if (holds && read_held(c, 0)) {
      why = Why::recursive;
    } else if (!(c & (kWriterLocked | kFlagHandoff | kFlagReadFail)) && !(behind && (c & kFlagWaiters)) &&
               unqueued_reader_would_get_it<P>(r, c, pref)) {
      why = Why::steal;
    } else if (pref && !(c & kFlagReadFail) && read_held(c, 0)) {
      if (pref_rule < 0)
        pref_rule = read_pref::read_holder_asleep_on(&r.count) ? 1 : rt_reader_beats_writers(r, now_ns()) ? 2 : 0;
      if (pref_rule == 0) break;
      why = pref_rule == 1 ? Why::asleep : Why::rt;
    } else {
      break;
    }
    if (!r.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint)) continue;
    set_reader_owned<P>(r.owner, owner_value(self_slot()));
    switch (why) {
      case Why::plain: break;
      case Why::recursive: lockevent_inc(LockEvent::rwsem_rlock_recursive); break;
      case Why::steal: lockevent_inc(LockEvent::rwsem_rlock_steal); break;
      case Why::asleep: lockevent_inc(LockEvent::rwsem_rlock_reader_pref); break;
      case Why::rt: lockevent_inc(LockEvent::rwsem_rlock_rt); break;
    }
    // First reader in past queued waiters: bring the queued readers along,
    // as a stealing reader does.
    if (why == Why::steal && reader_count(c) == 0 && readers_queued_first(c)) {
      CancelScope cs;
      wake_readers_behind_me<P>(r);
      restore_cancel<P>(cs, r, 0, false);
    }
    return 0;
  }
  lockevent_inc(LockEvent::rwsem_rlock_fail);
  return EBUSY;
}

template <class P>
__attribute__((noinline)) int SlowPaths<P>::write(const WordRefs& r, WaitCtx ctx) {
  if (!ctx.may_block()) {  // trylock: never queue, never spin
    if (try_write_lock_unqueued(r, false)) return 0;
    lockevent_inc(LockEvent::rwsem_wlock_fail);
    return EBUSY;
  }
  yield_to_woken_writer(r);
  if (tunables().barge && try_write_lock_unqueued(r, false)) {
    lockevent_inc(LockEvent::rwsem_wlock_barge);
    return 0;
  }
  end_woken_run();  // spinning or queueing
  CancelScope cs;
  int rc = 0;
  if (!(tunables().writer_spin && can_spin_on_owner<P>(r, P::kWrNonspinnable) && optimistic_spin<P, true>(r))) {
    // v5.10: having seen spinning disabled, disable reader spinning once we own it.
    bool disable_rspin = P::reader_spinning && (r.owner.load(arch::mo_hint) & P::kNonspinnable) != 0;
    rc = write_queue<P>(r, ctx, disable_rspin);
  }
  restore_cancel<P>(cs, r, rc, true);
  return rc;
}

template <class P>
__attribute__((noinline)) void SlowPaths<P>::wake(const WordRefs& r) {
  CancelScope cs;
  wake_queue<P>(r, WakeType::any);
  cs.restore();
}

// up_write() + rwsem_wake() with the release inside the wait_lock: a queued
// waiter can only take the lock through the wait_lock (spinners that take it
// meanwhile are not its last user while waiters are queued), so nobody can
// destroy the lock before the store that drops the wait_lock, this thread's
// last access to it. The wakeups go to thread slots afterwards.
template <class P>
__attribute__((noinline)) bool SlowPaths<P>::write_unlock_slow(const WordRefs& r) {
  CancelScope cs;
  bool held = write_unlock_ref<P>(r);
  cs.restore();
  return held;
}

// up_read() + rwsem_wake() of the last reader, with the release inside the
// wait_lock for the reason given at write_unlock_slow().
template <class P>
__attribute__((noinline)) void SlowPaths<P>::read_unlock_last(const WordRefs& r) {
  CancelScope cs;
  read_unlock_ref<P>(r);
  cs.restore();
}

template <class P>
__attribute__((noinline)) void SlowPaths<P>::downgrade_wake(const WordRefs& r) {
  CancelScope cs;
  wake_queue<P>(r, WakeType::read_owned);
  cs.restore();
}

template struct SlowPaths<RwsemSteal>;
template struct SlowPaths<RwsemRspin>;

void after_fork_in_child() { g_spinners.store(0, std::memory_order_relaxed); }

std::size_t queued_waiters(std::atomic<uint64_t>& waitq, std::atomic<uint64_t>* count) {
  CancelScope cs;
  WaitList wl(waitq, count);
  std::size_t n = 0;
  for (Waiter* w = wl.first(); w != nullptr; w = wl.after(w)) ++n;
  wl.unlock();
  cs.restore();
  return n;
}

}  // namespace rwsem_detail
}  // namespace lockswap
