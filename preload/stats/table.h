// preload/stats/table.h — the fixed tables behind per-lock and per-site
// statistics (LOCKSWAP_STATS; wrappers in preload/stats/stats.cpp, output in
// preload/stats/dump.cpp, which also describes the `lockswap-v1` format).
//
// Design
// ------
//   table  | key                        | slots      | entry
//   -------+----------------------------+------------+---------------------------
//   locks  | lock object address        | kLockSlots | counts, wait/hold timing,
//          |                            |            | the exclusive holder
//   sites  | (lock, caller address, op) | kSiteSlots | counts, timing, backtrace
//
// * Both tables are open-addressed (linear probing, at most kMaxProbes
//   slots) in one anonymous mapping made once, when statistics are switched
//   on; entries are never freed or moved, so there is no allocation on any
//   lock path and an entry pointer stays valid for the life of the process.
//   A key that finds no free slot within kMaxProbes runs unprofiled; each
//   such acquisition is counted in the calling thread's own lock event
//   counter (stats_lock_untracked, stats_site_untracked), never in a shared
//   one, and a thread remembers the last few such locks so that it does not
//   probe for them again (preload/stats/stats.cpp).
// * Claiming a slot: CAS `state` empty -> filling, write the key, store
//   `ready` (release). A lookup that meets `filling` waits for `ready`: the
//   filler is three stores away from it.
// * Updates: counters an exclusive holder updates (mutex, write lock) are
//   changed with plain load+store while the lock is held — the lock itself
//   serialises them; shared holders (read locks, semaphores, condition
//   waits) use atomic read-modify-writes. The two never overlap in time on
//   one lock: readers and the writer of a lock are never inside together.
// * Timing histograms: bucket i counts values v with floor(log2(max(v,1))) == i.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace lockswap::stats {

inline constexpr unsigned kHistBuckets = 48;
inline constexpr unsigned kBacktraceDepth = 16;
inline constexpr uint32_t kLockSlots = 1u << 15;
inline constexpr uint32_t kSiteSlots = 1u << 16;
inline constexpr uint32_t kMaxProbes = 64;

// The API family of a lock entry and of a call (the "calls" records).
// wtlock: WiredTiger's rwlocks (preload/wtlock/), profiled like rwlocks.
enum class Kind : uint8_t { mutex, rwlock, cond, sem, wtlock };
inline constexpr unsigned kKinds = 5;
inline constexpr const char* kKindNames[kKinds] = {"mutex", "rwlock", "cond", "sem", "wtlock"};

#define LOCKSWAP_STATS_OPS(X)                                                                      \
  X(lock) X(trylock) X(timedlock) X(clocklock) X(rdlock) X(tryrdlock) X(timedrdlock) X(clockrdlock) \
  X(wrlock) X(trywrlock) X(timedwrlock) X(clockwrlock) X(wait) X(timedwait) X(clockwait) X(sem_wait) \
  X(sem_trywait) X(sem_timedwait) X(sem_clockwait)

enum class Op : uint8_t {
#define X(name) name,
  LOCKSWAP_STATS_OPS(X)
#undef X
};
inline constexpr const char* kOpNames[] = {
#define X(name) #name,
    LOCKSWAP_STATS_OPS(X)
#undef X
};

// Who may be updating an entry concurrently (see the design block).
enum class Access : uint8_t { exclusive, shared };

using Counter = std::atomic<uint64_t>;

inline void bump(Counter& c, uint64_t n, Access a) {
  if (a == Access::exclusive)
    c.store(c.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
  else
    c.fetch_add(n, std::memory_order_relaxed);
}

inline void raise_to(Counter& c, uint64_t v, Access a) {
  uint64_t cur = c.load(std::memory_order_relaxed);
  if (a == Access::exclusive) {
    if (v > cur) c.store(v, std::memory_order_relaxed);
    return;
  }
  while (v > cur && !c.compare_exchange_weak(cur, v, std::memory_order_relaxed)) {
  }
}

inline unsigned log2_bucket(uint64_t v) {
  unsigned b = v <= 1 ? 0 : 63u - static_cast<unsigned>(__builtin_clzll(v));
  return b < kHistBuckets ? b : kHistBuckets - 1;
}

// Sum, maximum and log2 histogram of one kind of duration (ns).
struct Timing {
  Counter sum{0};
  Counter max{0};
  Counter hist[kHistBuckets] = {};
  void add(uint64_t ns, Access a) {
    bump(sum, ns, a);
    raise_to(max, ns, a);
    bump(hist[log2_bucket(ns)], 1, a);
  }
};

enum SlotState : uint32_t { kEmpty = 0, kFilling = 1, kReady = 2 };

struct LockEntry {
  std::atomic<uint32_t> state{kEmpty};
  std::atomic<uint8_t> kind{0};
  std::atomic<uintptr_t> addr{0};
  // The exclusive holder (mutex or write lock), written only by it: its tid,
  // recursion depth, when the outermost hold began and through which site.
  std::atomic<int32_t> owner{0};
  std::atomic<uint32_t> depth{0};
  std::atomic<uint64_t> hold_start{0};
  std::atomic<uint32_t> hold_site{0};  // site slot index + 1; 0 = none
  // Where the lock was initialised (or, never initialised, first taken):
  // the call site LOCKSWAP_SELECT's site: and func: rules match.
  std::atomic<uintptr_t> first_ip{0};
  std::atomic<uint8_t> variant{0};  // its LOCKSWAP_SELECT tag at the last acquisition (0: none)
  Counter acq{0}, contended{0}, rd_acq{0}, rd_contended{0};
  Timing wait, hold;
};

struct SiteEntry {
  std::atomic<uint32_t> state{kEmpty};
  std::atomic<uint8_t> op{0};
  std::atomic<uint32_t> lock_slot{0};  // index of the lock entry
  std::atomic<uintptr_t> lock{0};
  std::atomic<uintptr_t> ip{0};
  Counter acq{0}, contended{0};
  Counter bt_ticket{0};  // contended acquisitions seen by the backtrace sampler
  Timing wait, hold;
  std::atomic<uint32_t> bt_len{0};
  std::atomic<uintptr_t> bt[kBacktraceDepth] = {};
};

// Calls per API family (Kind), for the "calls" records: striped by thread id
// so that threads seldom share a counter's cache line.
inline constexpr uint32_t kCallStripes = 64;
struct alignas(64) CallStripe {
  Counter calls[kKinds] = {};
};

// Where each lock was initialised (pthread_*_init, sem_init), apart from
// the lock table so that a lock never taken uses no lock slot: its first
// acquisition copies the site into its entry (LockEntry::first_ip).
struct InitSite {
  std::atomic<uintptr_t> addr{0};
  std::atomic<uintptr_t> ip{0};
};
inline constexpr uint32_t kInitSlots = 1u << 15;

struct Tables {
  LockEntry locks[kLockSlots];
  SiteEntry sites[kSiteSlots];
  InitSite inits[kInitSlots];
};

// preload/stats/stats.cpp: mapped once when statistics are switched on (null
// before, and when the mapping failed).
extern Tables* g_tables;
extern CallStripe g_calls[kCallStripes];
extern std::atomic<uint64_t> g_start_ns;  // CLOCK_REALTIME at the first lock call (or fork)

}  // namespace lockswap::stats
