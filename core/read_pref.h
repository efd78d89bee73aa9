// core/read_pref.h — reader preference where a program may depend on it, for
// the writer-fair rwlocks (rwsem, and any other lock that queues new readers
// behind writers): small helpers, no allocation, nothing on a fast path but
// one bucketed counter per read lock and unlock.
//
// Design
// ------
// glibc's default rwlock prefers readers, so a program may legally hold a read
// lock while it waits for another thread that must first take a read lock of
// the same rwlock. A writer-fair lock deadlocks it as soon as a writer queues
// between the two readers. The writer-fair lock keeps its fairness but lets
// such a reader in when the program can be waiting for it:
//
//   (a) a thread that holds a read lock of (a lock in the same bucket as) this
//       lock sleeps inside lockswap: ReadHolderSleep marks such sleeps, and
//       read_holder_asleep_on(lock) asks for them;
//   (b) after a bounded wait (the caller names the bound; rwsem uses
//       RwsemTunables::reader_pref_ns, 4 ms like the kernel's handoff
//       timeout), for holders that wait outside lockswap;
//   (c) POSIX real-time rule: a SCHED_FIFO/SCHED_RR reader of higher priority
//       than every blocked writer acquires a read-held lock.
//
// Per-thread read holds (ReadHolds): 64 buckets of counters in static TLS,
// indexed by a multiplicative hash of the lock address. Acquiring a read lock
// adds 1 to its bucket, releasing subtracts 1 (never below 0), so "does this
// thread hold a read lock of L" is one TLS load. Two locks in one bucket are
// told apart conservatively: a hold of one counts as a hold of the other (the
// recursive-read exemption or rule (a) may then apply to the other lock too,
// which only costs fairness, never safety). There is no overflow to handle.
//
// Sleeping read holders: g_asleep[bucket] counts threads asleep inside
// lockswap that hold a read lock in that bucket. Readers waiting for rule (a)
// register (slot id + bucket) in a 64-entry table; a holder that goes to
// sleep wakes the registered readers of its buckets, so (a) takes effect at
// once rather than at the next bounded-wait check (a full table only loses
// that promptness).
//
// Memory order: the registration and the asleep count form a Dekker pair
// (both seq_cst RMWs followed by a seq_cst load of the other side): either the
// sleeping holder sees the registered reader and unparks it, or the reader's
// check after registering sees the holder asleep. Everything else is a hint.
#pragma once
#include <pthread.h>
#include <sched.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>

#include "core/thread_registry.h"

namespace lockswap::read_pref {

// ---------------------------------------------------------------------------
// Per-thread read holds
// ---------------------------------------------------------------------------

inline constexpr unsigned kHoldBucketsShift = 6;
inline constexpr unsigned kHoldBuckets = 1u << kHoldBucketsShift;  // 64

struct ReadHolds {
  uint32_t n[kHoldBuckets];
};
// Zero-initialised static TLS: touching it never allocates.
inline __thread ReadHolds t_read_holds __attribute__((tls_model("initial-exec")));

// Fibonacci hashing of the low 32 address bits: one imul and one shift.
inline unsigned hold_bucket(const void* lock) {
  return static_cast<uint32_t>(reinterpret_cast<uintptr_t>(lock)) * 0x9E3779B1u >> (32 - kHoldBucketsShift);
}
// Fast paths: after a read lock of `lock` was taken / before or after it was released.
inline void note_read_acquired(const void* lock) { ++t_read_holds.n[hold_bucket(lock)]; }
inline void note_read_released(const void* lock) {
  uint32_t& c = t_read_holds.n[hold_bucket(lock)];
  c -= c != 0;  // never below 0: a read lock taken before the variant counted, or by another thread
}
// Slow paths: does this thread hold a read lock of `lock` (or of a lock
// sharing its bucket)?
inline bool holds_read_of(const void* lock) { return t_read_holds.n[hold_bucket(lock)] != 0; }
// Bit b set: this thread holds a read lock in bucket b.
inline uint64_t held_buckets() {
  uint64_t mask = 0;
  for (unsigned b = 0; b < kHoldBuckets; ++b) mask |= uint64_t{t_read_holds.n[b] != 0} << b;
  return mask;
}
inline bool holds_any_read() { return held_buckets() != 0; }

// ---------------------------------------------------------------------------
// Read holders asleep inside lockswap, and the readers waiting for them
// ---------------------------------------------------------------------------

inline std::atomic<uint32_t> g_asleep[kHoldBuckets];
inline std::atomic<uint32_t> g_asleep_total{0};

// Readers registered for rule (a): entry = slot id | (bucket + 1) << kWaiterBucketShift.
inline constexpr unsigned kPrefWaiterEntries = 64;
inline constexpr unsigned kWaiterBucketShift = 23;  // slot ids are <= 2^22
static_assert(thread_registry::kMaxThreads < (1u << kWaiterBucketShift), "a slot id fits below the bucket");
inline std::atomic<uint32_t> g_pref_waiter[kPrefWaiterEntries];
inline std::atomic<uint32_t> g_pref_waiters{0};

// Threads asleep inside lockswap while holding a read lock (any rwlock).
inline uint32_t read_holders_asleep() { return g_asleep_total.load(std::memory_order_seq_cst); }
// ... holding a read lock of `lock` (or of a lock sharing its bucket).
inline bool read_holder_asleep_on(const void* lock) {
  return g_asleep[hold_bucket(lock)].load(std::memory_order_seq_cst) != 0;
}

// Unpark the registered readers of the buckets in `mask`.
__attribute__((noinline)) inline void wake_pref_waiters(uint64_t mask) {
  for (auto& e : g_pref_waiter) {
    uint32_t v = e.load(std::memory_order_seq_cst);
    if (v == 0) continue;
    unsigned bucket = (v >> kWaiterBucketShift) - 1;
    if (!(mask >> bucket & 1)) continue;
    if (ThreadSlot* s = slot_of(v & ((1u << kWaiterBucketShift) - 1))) unpark(*s);
  }
}

__attribute__((noinline)) inline void enter_asleep(uint64_t mask) {
  for (uint64_t m = mask; m != 0; m &= m - 1) g_asleep[__builtin_ctzll(m)].fetch_add(1, std::memory_order_seq_cst);
  g_asleep_total.fetch_add(1, std::memory_order_seq_cst);
  if (g_pref_waiters.load(std::memory_order_seq_cst) != 0) wake_pref_waiters(mask);
}
__attribute__((noinline)) inline void leave_asleep(uint64_t mask) {
  g_asleep_total.fetch_sub(1, std::memory_order_relaxed);
  for (uint64_t m = mask; m != 0; m &= m - 1) g_asleep[__builtin_ctzll(m)].fetch_sub(1, std::memory_order_relaxed);
}

// Wrap every sleep inside lockswap (futex wait of a lock, condition wait,
// semaphore wait): while it lives, the calling thread counts as a read holder
// asleep for each bucket it holds. Costs a 64-counter scan when constructed;
// its destructor also runs when a cancellation unwinds through it.
class ReadHolderSleep {
 public:
  ReadHolderSleep() : mask_(held_buckets()) {
    if (mask_ != 0) enter_asleep(mask_);
  }
  ~ReadHolderSleep() {
    if (mask_ != 0) leave_asleep(mask_);
  }
  ReadHolderSleep(const ReadHolderSleep&) = delete;
  ReadHolderSleep& operator=(const ReadHolderSleep&) = delete;

 private:
  uint64_t mask_;
};

// A reader blocked on `lock` that wants to be unparked when a holder of that
// lock falls asleep (rule (a)). Register first, then check
// read_holder_asleep_on(): see the Dekker note in the header.
class PrefWaiter {
 public:
  PrefWaiter() = default;
  ~PrefWaiter() { unregister(); }
  PrefWaiter(const PrefWaiter&) = delete;
  PrefWaiter& operator=(const PrefWaiter&) = delete;

  bool registered() const { return entry_ != nullptr; }
  // False when the table is full (rule (a) then acts at the next bounded check).
  bool register_for(const ThreadSlot& me, const void* lock) {
    if (entry_ != nullptr) return true;
    uint32_t v = me.id | ((hold_bucket(lock) + 1) << kWaiterBucketShift);
    for (auto& e : g_pref_waiter) {
      uint32_t cur = e.load(std::memory_order_relaxed);
      // An entry of a thread lost in fork() is free.
      bool free = cur == 0;
      if (!free) {
        ThreadSlot* s = slot_of(cur & ((1u << kWaiterBucketShift) - 1));
        free = s != nullptr && is_ghost(*s);
      }
      if (free && e.compare_exchange_strong(cur, v, std::memory_order_seq_cst)) {
        entry_ = &e;
        g_pref_waiters.fetch_add(1, std::memory_order_seq_cst);
        return true;
      }
    }
    return false;
  }
  void unregister() {
    if (entry_ == nullptr) return;
    g_pref_waiters.fetch_sub(1, std::memory_order_relaxed);
    entry_->store(0, std::memory_order_relaxed);
    entry_ = nullptr;
  }

 private:
  std::atomic<uint32_t>* entry_ = nullptr;
};

// ---------------------------------------------------------------------------
// Real-time scheduling (rule (c))
// ---------------------------------------------------------------------------

// 1..99 for SCHED_FIFO / SCHED_RR, 0 for every other policy, -1 if unknown
// (the thread has exited). Two system calls: for slow paths only.
inline int rt_priority_of_tid(pid_t tid) {
  int policy = sched_getscheduler(tid);
  if (policy < 0) return -1;
  policy &= ~SCHED_RESET_ON_FORK;
  if (policy != SCHED_FIFO && policy != SCHED_RR) return 0;
  sched_param sp;
  if (sched_getparam(tid, &sp) != 0) return -1;
  return sp.sched_priority;
}

// The calling thread's RT priority, cached per thread and re-read from the
// kernel at most every kSchedCacheNs (a policy change is seen that late):
// a normal-policy thread pays one compare per call in between. `now_ns` is
// any monotonic clock reading the caller already has.
inline constexpr uint64_t kSchedCacheNs = 50'000'000;
struct SchedCache {
  uint64_t read_at;  // now_ns of the last read + 1 (0 = never read)
  int prio;
};
inline __thread SchedCache t_sched_cache __attribute__((tls_model("initial-exec")));
inline int self_rt_priority(uint64_t now_ns) {
  SchedCache& c = t_sched_cache;
  if (c.read_at == 0 || now_ns - (c.read_at - 1) > kSchedCacheNs) {
    int p = rt_priority_of_tid(0);
    c.prio = p < 0 ? 0 : p;
    c.read_at = now_ns + 1;
  }
  return c.prio;
}
// Forget the cached value (tests; or after the thread changed its policy).
inline void forget_sched_cache() { t_sched_cache.read_at = 0; }

}  // namespace lockswap::read_pref
