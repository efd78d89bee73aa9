// core/rwsem/wait_list.h — the kernel's wait_lock and wait_list.
//
// Part of core/rwsem/thread_host.cpp's one translation unit: everything here
// has internal linkage, so include it nowhere else (but core/rwsem/
// thread_rep.h, which tests/core/rwsem_agreement_test.cpp includes too).
//
// A waiter record lives in its thread's type-stable ThreadSlot, so that a
// record a thread lost in fork() left linked (a fork ghost) stays readable in
// the child; the wait_lock carries its holder's fork generation so that a
// lock held by a ghost can be taken over. The wake queue, which unparks, is
// in core/rwsem/parking.h.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>

#include "core/backoff.h"
#include "core/lock_events.h"
#include "core/rwsem/deadlines.h"
#include "core/rwsem/rwsem.h"
#include "core/thread_registry.h"

namespace lockswap {
namespace rwsem_detail {
namespace {

using namespace rwsem;

enum class WaitType : uint8_t { write, read };
using rwsem_rules::WakeType;  // RWSEM_WAKE_*

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
  // head first (a hint; docs/rwsem.md, "READER_FIRST").
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

// WOKEN (core/rwsem/rwsem.h) changes only under the wait_lock.
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

}  // namespace
}  // namespace rwsem_detail
}  // namespace lockswap
