// preload/stats/stats.cpp — the profiling wrappers behind LOCKSWAP_STATS.
//
// Design
// ------
// install() (called by install_ops() only when statistics are on) copies the
// variant's finished table into `g_inner` and points every slot of `g_ops`
// at a wrapper from `g_wrappers`; with statistics off none of this exists on
// any path. Every wrapper counts its call per API family (striped counters);
// the acquisitions are profiled variant-agnostically, in mutrace's style:
//
//   acquire:  the variant's try function first. Success: uncontended.
//             Busy: the acquisition is contended — a sampled backtrace is
//             taken, then the variant's waiting function is timed
//             (CLOCK_MONOTONIC) until it returns. Counted only on success.
//   hold:     an exclusive acquisition (mutex, write lock) records its start
//             and site in the lock entry; the matching release (depth 0 for
//             recursive mutexes) adds the duration to the lock and that site.
//   cond:     the time inside pthread_cond_*wait is the wait site's wait
//             time. The mutex's hold is closed before the wait and reopened
//             after it, here, for every variant: glibc's condvar re-takes
//             the mutex internally, the native one through g_ops — that
//             nested unlock/lock runs with the "inside statistics" flag set
//             and so reaches the variant unprofiled (nothing is counted twice).
//   sem:      sem_trywait first, then the timed wait; shared, so atomics.
//
// Re-entry: `t_inside` (thread-local) is set around everything the
// statistics themselves call that may take a lock (libunwind,
// preload/stats/backtrace.cpp) and around
// condition waits; a wrapper that finds it set goes straight to the variant.
// No wrapper allocates: entries live in the tables of preload/stats/table.h.
//
// The try-first probe keeps each API's argument checks where glibc has them:
// rwlock and semaphore timed calls with an invalid clock or timeout go
// straight to the variant (they check before trying), a caller that already
// holds the lock exclusively goes straight to the variant (recursion,
// EDEADLK), and any try result other than "busy" is passed on unchanged.
#include "preload/stats/stats.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <atomic>

#include "arch/clock.h"
#include "core/lock_events.h"
#include "core/thread_registry.h"
#include "preload/abi.h"
#include "preload/config/config.h"
#include "preload/diag.h"
#include "preload/config/select.h"
#include "preload/stats/backtrace.h"
#include "preload/stats/table.h"



namespace lockswap::stats {

Tables* g_tables = nullptr;
CallStripe g_calls[kCallStripes];
std::atomic<uint64_t> g_start_ns{0};

namespace {

// Bumped by a fork child: per-thread caches of table entries are stale.
std::atomic<uint32_t> g_generation{1};
uint32_t generation() { return g_generation.load(std::memory_order_relaxed); }

__thread bool t_inside __attribute__((tls_model("initial-exec")));

OpsTable g_inner;     // the variant's functions
OpsTable g_wrappers;  // what g_ops points at while statistics are on

// Sets the "inside statistics" flag for a scope.
struct Inside {
  bool prev;
  Inside() : prev(t_inside) { t_inside = true; }
  ~Inside() { t_inside = prev; }
  Inside(const Inside&) = delete;
  Inside& operator=(const Inside&) = delete;
};

uint64_t now_ns() { return arch::monotonic_ns(); }

void count_call(Kind f) {
  uint32_t stripe = static_cast<uint32_t>(current_tid()) & (kCallStripes - 1);
  g_calls[stripe].calls[static_cast<unsigned>(f)].fetch_add(1, std::memory_order_relaxed);
}

// The variant's function for one slot. Written once by install() before the
// wrapper is published; a racing first call on another CPU that sees the
// wrapper early waits for it.
template <class Fn>
Fn inner(Fn OpsTable::*slot) {
  Fn f;
  while ((f = __atomic_load_n(&(g_inner.*slot), __ATOMIC_ACQUIRE)) == nullptr) sched_yield();
  return f;
}

// ------------------------------------------------------------------ tables

uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  return x;
}

uint32_t lock_index(LockEntry* e) { return static_cast<uint32_t>(e - g_tables->locks); }
uint32_t site_index(SiteEntry* e) { return static_cast<uint32_t>(e - g_tables->sites); }

// Waits out a slot another thread is filling; true when it is ready.
bool settled(std::atomic<uint32_t>& state, uint32_t s) {
  while (s == kFilling) s = state.load(std::memory_order_acquire);
  return s == kReady;
}

uint32_t generation();

// Slots of the lock table in use (LOCKSWAP_STATS_LOCK_SLOTS shrinks it for
// tests of the overflow path), minus one.
uint32_t g_lock_mask = kLockSlots - 1;

// Locks that found every slot of their probe window taken. Entries are never
// freed, so such a lock never gets one (until a fork child starts empty):
// each thread remembers the last few, and their acquisitions skip the probe
// and count themselves in the thread's own lock event counter — an
// overflowing table costs no shared cache line and no 64-slot probe per call.
inline constexpr uint32_t kUntrackedCache = 8;
struct UntrackedLocks {
  uint32_t generation;
  uintptr_t addr[kUntrackedCache];
};
__thread UntrackedLocks t_untracked __attribute__((tls_model("initial-exec")));

uint32_t untracked_slot(uintptr_t key) { return static_cast<uint32_t>(mix(key) >> 32) & (kUntrackedCache - 1); }

bool known_untracked(uintptr_t key) {
  UntrackedLocks& u = t_untracked;
  return u.generation == generation() && u.addr[untracked_slot(key)] == key;
}

void remember_untracked(uintptr_t key) {
  UntrackedLocks& u = t_untracked;
  if (u.generation != generation()) u = {generation(), {}};
  u.addr[untracked_slot(key)] = key;
}

// The entry of the lock at `addr`; created when `create` (kind set then).
LockEntry* lock_entry(const void* addr, Kind kind, bool create) {
  auto key = reinterpret_cast<uintptr_t>(addr);
  if (known_untracked(key)) {
    if (create) lockevent_inc(LockEvent::stats_lock_untracked);
    return nullptr;
  }
  uint32_t i = static_cast<uint32_t>(mix(key)) & g_lock_mask;
  for (uint32_t probe = 0; probe < kMaxProbes; ++probe, i = (i + 1) & g_lock_mask) {
    LockEntry& e = g_tables->locks[i];
    uint32_t s = e.state.load(std::memory_order_acquire);
    if (s == kEmpty) {
      if (!create) return nullptr;  // not created yet; there is still room
      if (e.state.compare_exchange_strong(s, kFilling, std::memory_order_acquire)) {
        e.addr.store(key, std::memory_order_relaxed);
        e.kind.store(static_cast<uint8_t>(kind), std::memory_order_relaxed);
        e.state.store(kReady, std::memory_order_release);
        return &e;
      }
    }
    if (settled(e.state, s) && e.addr.load(std::memory_order_relaxed) == key) {
      // Memory reused for another kind of object: the record says what it is now.
      if (create && e.kind.load(std::memory_order_relaxed) != static_cast<uint8_t>(kind))
        e.kind.store(static_cast<uint8_t>(kind), std::memory_order_relaxed);
      return &e;
    }
  }
  remember_untracked(key);
  if (create) lockevent_inc(LockEvent::stats_lock_untracked);
  return nullptr;
}

SiteEntry* site_entry(LockEntry* lock, uintptr_t ip, Op op) {
  uintptr_t key = lock->addr.load(std::memory_order_relaxed);
  auto op8 = static_cast<uint8_t>(op);
  uint32_t i = static_cast<uint32_t>(mix(key ^ (ip * 0x9e3779b97f4a7c15ull) ^ op8)) & (kSiteSlots - 1);
  for (uint32_t probe = 0; probe < kMaxProbes; ++probe, i = (i + 1) & (kSiteSlots - 1)) {
    SiteEntry& e = g_tables->sites[i];
    uint32_t s = e.state.load(std::memory_order_acquire);
    if (s == kEmpty && e.state.compare_exchange_strong(s, kFilling, std::memory_order_acquire)) {
      e.lock.store(key, std::memory_order_relaxed);
      e.ip.store(ip, std::memory_order_relaxed);
      e.op.store(op8, std::memory_order_relaxed);
      e.lock_slot.store(lock_index(lock), std::memory_order_relaxed);
      e.state.store(kReady, std::memory_order_release);
      return &e;
    }
    if (settled(e.state, s) && e.lock.load(std::memory_order_relaxed) == key &&
        e.ip.load(std::memory_order_relaxed) == ip && e.op.load(std::memory_order_relaxed) == op8)
      return &e;
  }
  lockevent_inc(LockEvent::stats_site_untracked);
  return nullptr;
}

// The entries of this thread's last acquisition: a thread that takes the
// same lock at the same site again, or releases what it just took, skips the
// table lookups. Valid while `generation` matches (a fork child's tables
// start empty).
struct LastEntries {
  uintptr_t obj, ip;
  uint8_t op;
  uint32_t generation;
  LockEntry* lock;
  SiteEntry* site;
};
__thread LastEntries t_last __attribute__((tls_model("initial-exec")));

// -------------------------------------------------------------- backtraces


// Sampled: the first contended acquisition of a site, then 1 in
// LOCKSWAP_STATS_BACKTRACE. Innermost frame first, starting at the caller of
// the lock function when it is found in the trace.
__attribute__((noinline)) void sample_backtrace(SiteEntry& s, uintptr_t ip) {
  uint32_t every = g_config.stats_backtrace;
  if (!have_unwinder() || every == 0 || s.bt_ticket.fetch_add(1, std::memory_order_relaxed) % every != 0) return;
  constexpr int kOwnFrames = 4;  // this function, the wrapper, slack
  uintptr_t frames[kBacktraceDepth + kOwnFrames];
  int n;
  {
    Inside guard;  // libunwind takes locks of its own
    n = unwind_frames(frames, static_cast<int>(kBacktraceDepth + kOwnFrames));
  }
  int first = 0;
  for (int i = 0; i < n && i < kOwnFrames; ++i)
    if (frames[i] == ip) first = i;
  uint32_t len = 0;
  s.bt_len.store(0, std::memory_order_relaxed);
  for (int i = first; i < n && len < kBacktraceDepth; ++i, ++len) s.bt[len].store(frames[i], std::memory_order_relaxed);
  s.bt_len.store(len, std::memory_order_release);
}

// ------------------------------------------------------------ acquisitions

struct Attempt {
  const void* obj;
  Kind kind;
  Op op;
  uintptr_t ip;
  Access access;   // exclusive: mutex, write lock
  bool is_try;     // the try function is the whole call
  bool read_side;  // rwlock read acquisition
  int busy;        // what the try function returns when the lock is taken
  bool no_probe = false;  // the call itself, no try first (see mutex_acquire)
};

bool acquired(int rc, Kind kind) { return rc == 0 || (kind == Kind::mutex && rc == EOWNERDEAD); }

void begin_hold(LockEntry& l, SiteEntry* s, int32_t self) {
  l.owner.store(self, std::memory_order_relaxed);
  l.depth.store(1, std::memory_order_relaxed);
  l.hold_site.store(s ? site_index(s) + 1 : 0, std::memory_order_relaxed);
  l.hold_start.store(now_ns(), std::memory_order_relaxed);
}

// A lock's LOCKSWAP_SELECT tag (abi.h), 0 when its family has no rule (then
// the bytes are not a tag); the variant it runs is the tag's variant bits,
// 0 meaning the process-wide variant.
uint8_t raw_tag(const void* obj, Kind kind) {
  using select::Family;
  switch (kind) {
    case Kind::mutex:
      if (!select::active(Family::mutex)) return 0;
      return static_cast<uint8_t>(abi::mutex_tag(
          abi::obj(static_cast<pthread_mutex_t*>(const_cast<void*>(obj))).kind.load(std::memory_order_relaxed)));
    case Kind::rwlock:
      if (!select::active(Family::rwlock)) return 0;
      return static_cast<uint8_t>(
          abi::rwlock_tag(static_cast<pthread_rwlock_t*>(const_cast<void*>(obj))).load(std::memory_order_relaxed));
    case Kind::sem:
      if (!select::active(Family::sem)) return 0;
      return static_cast<uint8_t>(abi::sem_tag(static_cast<sem_t*>(const_cast<void*>(obj))).load(std::memory_order_relaxed));
    default:
      return 0;
  }
}
uint8_t selected_variant(const void* obj, Kind kind) {
  return raw_tag(obj, kind) & abi::kTagVariantMask;
}

// The init-site slot of `obj` (null: none, and no room when `create`).
InitSite* init_site(const void* obj, bool create) {
  auto key = reinterpret_cast<uintptr_t>(obj);
  uint32_t i = static_cast<uint32_t>(mix(key)) & (kInitSlots - 1);
  for (uint32_t probe = 0; probe < kMaxProbes; ++probe, i = (i + 1) & (kInitSlots - 1)) {
    InitSite& e = g_tables->inits[i];
    uintptr_t at = e.addr.load(std::memory_order_acquire);
    if (at == key) return &e;
    if (at == 0) {
      if (!create) return nullptr;
      if (e.addr.compare_exchange_strong(at, key, std::memory_order_acq_rel) || at == key) return &e;
    }
  }
  return nullptr;
}

// A lock's first sight: where it was initialised, else (never initialised
// while the profiler ran) its first acquisition; and the variant it runs.
void note_sight(LockEntry& l, const void* obj, Kind kind, uintptr_t ip, bool init) {
  if (init) {
    l.first_ip.store(ip, std::memory_order_relaxed);
  } else if (l.first_ip.load(std::memory_order_relaxed) == 0) {
    const InitSite* at = init_site(obj, false);
    uintptr_t init_ip = at ? at->ip.load(std::memory_order_relaxed) : 0;
    l.first_ip.store(init_ip ? init_ip : ip, std::memory_order_relaxed);
  }
  uint8_t v = selected_variant(obj, kind);
  if (l.variant.load(std::memory_order_relaxed) != v) l.variant.store(v, std::memory_order_relaxed);
}

void record(const Attempt& a, LockEntry& l, SiteEntry* s, bool contended, uint64_t waited, int32_t self) {
  note_sight(l, a.obj, a.kind, a.ip, false);
  Access x = a.access;
  bump(l.acq, 1, x);
  if (a.read_side) bump(l.rd_acq, 1, x);
  if (contended) {
    bump(l.contended, 1, x);
    if (a.read_side) bump(l.rd_contended, 1, x);
    l.wait.add(waited, x);
  }
  if (s != nullptr) {
    bump(s->acq, 1, x);
    if (contended) {
      bump(s->contended, 1, x);
      s->wait.add(waited, x);
    }
  }
  if (x == Access::exclusive) begin_hold(l, s, self);
}

// The lock's entry (null when the table is full) and its site's, through
// this thread's last-acquisition cache.
LockEntry* entries(const Attempt& a, SiteEntry*& s) {
  LastEntries& c = t_last;
  auto obj = reinterpret_cast<uintptr_t>(a.obj);
  auto op = static_cast<uint8_t>(a.op);
  uint32_t gen = generation();
  if (c.obj == obj && c.ip == a.ip && c.op == op && c.generation == gen) {
    s = c.site;
    return c.lock;
  }
  LockEntry* l = lock_entry(a.obj, a.kind, true);
  s = l ? site_entry(l, a.ip, a.op) : nullptr;
  if (l != nullptr && s != nullptr) c = {obj, a.ip, op, gen, l, s};
  return l;
}

// `try_fn` and `wait_fn` return 0 or an error number (the waiting function
// is the variant's full call, its own fast path included).
template <class Try, class Wait>
int acquire(const Attempt& a, Try&& try_fn, Wait&& wait_fn) {
  SiteEntry* s;
  LockEntry* l = entries(a, s);
  if (l == nullptr) return a.is_try ? try_fn() : wait_fn();
  int32_t self = current_tid();
  if (l->owner.load(std::memory_order_relaxed) == self) {
    // Held exclusively by the caller: a recursive acquisition or the
    // variant's error (EDEADLK, EBUSY); never contention.
    int rc = a.is_try ? try_fn() : wait_fn();
    if (rc == 0 && a.kind == Kind::mutex) {
      l->depth.store(l->depth.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
      bump(l->acq, 1, Access::exclusive);
      if (s != nullptr) bump(s->acq, 1, Access::exclusive);
    }
    return rc;
  }
  int rc = a.no_probe && !a.is_try ? wait_fn() : try_fn();
  bool contended = false;
  uint64_t waited = 0;
  if (rc == a.busy && !a.is_try && !a.no_probe) {
    contended = true;
    if (s != nullptr) sample_backtrace(*s, a.ip);
    uint64_t t0 = now_ns();
    rc = wait_fn();
    waited = now_ns() - t0;
  }
  if (acquired(rc, a.kind)) record(a, *l, s, contended, waited, self);
  return rc;
}

// An exclusive release by the holder closes its hold (the outermost one of a
// recursive mutex); a read release has nothing to close.
void release(const void* obj) {
  const LastEntries& c = t_last;
  LockEntry* l = c.generation == generation() && c.obj == reinterpret_cast<uintptr_t>(obj)
                     ? c.lock
                     : lock_entry(obj, Kind::mutex, false);
  if (l == nullptr || l->owner.load(std::memory_order_relaxed) != current_tid()) return;
  uint32_t d = l->depth.load(std::memory_order_relaxed);
  if (d > 1) {
    l->depth.store(d - 1, std::memory_order_relaxed);
    return;
  }
  uint64_t held = now_ns() - l->hold_start.load(std::memory_order_relaxed);
  l->hold.add(held, Access::exclusive);
  if (uint32_t site = l->hold_site.load(std::memory_order_relaxed))
    g_tables->sites[site - 1].hold.add(held, Access::exclusive);
  l->depth.store(0, std::memory_order_relaxed);
  l->owner.store(0, std::memory_order_relaxed);
}

// The caller of the exported function (preload/config/select.h), also left for
// LOCKSWAP_SELECT's first-sight decision in the mixed entry this wrapper calls.
__attribute__((always_inline)) inline uintptr_t caller_ip(void* ra, void* cfa) {
  return select::t_site_hint = select::caller_ip(ra, cfa);
}
#define LOCKSWAP_CALLER() caller_ip(__builtin_return_address(0), __builtin_dwarf_cfa())

int errno_of(int rc) { return rc == 0 ? 0 : errno; }

// ---------------------------------------------------------------- wrappers

using F = OpsTable;

int supported_clock(clockid_t clock) { return clock == CLOCK_REALTIME || clock == CLOCK_MONOTONIC; }

// Robust mutexes (and destroyed ones, whose kind has every bit set) get no
// try first: glibc's trylock changes the state of a robust mutex that is
// not recoverable (a second trylock reports EBUSY, not ENOTRECOVERABLE), so
// the probe would change what the call itself returns. Their acquisitions
// are counted, never as contended.
bool probe_safe(pthread_mutex_t* m) {
  return (abi::obj(m).kind.load(std::memory_order_relaxed) & abi::kKindRobust) == 0;
}

template <Op kOp, class Wait>
int mutex_acquire(pthread_mutex_t* m, uintptr_t ip, Wait&& wait) {
  count_call(Kind::mutex);
  if (t_inside) return wait();
  Attempt a{m, Kind::mutex, kOp, ip, Access::exclusive, kOp == Op::trylock, false, EBUSY, !probe_safe(m)};
  return acquire(a, [m] { return inner(&F::pthread_mutex_trylock)(m); }, wait);
}

int w_mutex_lock(pthread_mutex_t* m) {
  return mutex_acquire<Op::lock>(m, LOCKSWAP_CALLER(), [m] { return inner(&F::pthread_mutex_lock)(m); });
}
int w_mutex_trylock(pthread_mutex_t* m) {
  return mutex_acquire<Op::trylock>(m, LOCKSWAP_CALLER(), [m] { return inner(&F::pthread_mutex_trylock)(m); });
}
int w_mutex_timedlock(pthread_mutex_t* m, const timespec* t) {
  return mutex_acquire<Op::timedlock>(m, LOCKSWAP_CALLER(),
                                      [m, t] { return inner(&F::pthread_mutex_timedlock)(m, t); });
}
int w_mutex_clocklock(pthread_mutex_t* m, clockid_t c, const timespec* t) {
  auto wait = [m, c, t] { return inner(&F::pthread_mutex_clocklock)(m, c, t); };
  if (!supported_clock(c)) {  // glibc checks the clock before anything else
    count_call(Kind::mutex);
    return wait();
  }
  return mutex_acquire<Op::clocklock>(m, LOCKSWAP_CALLER(), wait);
}
int w_mutex_unlock(pthread_mutex_t* m) {
  count_call(Kind::mutex);
  if (!t_inside) release(m);
  return inner(&F::pthread_mutex_unlock)(m);
}

bool timeout_ok(const timespec* t) { return t->tv_nsec >= 0 && t->tv_nsec < 1'000'000'000; }

template <Op kOp, bool kRead, class Wait>
int rw_acquire(pthread_rwlock_t* l, uintptr_t ip, const timespec* abs, clockid_t clock, Wait&& wait) {
  count_call(Kind::rwlock);
  // glibc validates a timed call's clock and timeout before trying.
  if (t_inside || (abs != nullptr && (!supported_clock(clock) || !timeout_ok(abs)))) return wait();
  constexpr bool is_try = kOp == Op::tryrdlock || kOp == Op::trywrlock;
  Attempt a{l, Kind::rwlock, kOp, ip, kRead ? Access::shared : Access::exclusive, is_try, kRead, EBUSY};
  if constexpr (kRead) return acquire(a, [l] { return inner(&F::pthread_rwlock_tryrdlock)(l); }, wait);
  else return acquire(a, [l] { return inner(&F::pthread_rwlock_trywrlock)(l); }, wait);
}

int w_rdlock(pthread_rwlock_t* l) {
  return rw_acquire<Op::rdlock, true>(l, LOCKSWAP_CALLER(), nullptr, 0,
                                      [l] { return inner(&F::pthread_rwlock_rdlock)(l); });
}
int w_tryrdlock(pthread_rwlock_t* l) {
  return rw_acquire<Op::tryrdlock, true>(l, LOCKSWAP_CALLER(), nullptr, 0,
                                         [l] { return inner(&F::pthread_rwlock_tryrdlock)(l); });
}
int w_timedrdlock(pthread_rwlock_t* l, const timespec* t) {
  return rw_acquire<Op::timedrdlock, true>(l, LOCKSWAP_CALLER(), t, CLOCK_REALTIME,
                                           [l, t] { return inner(&F::pthread_rwlock_timedrdlock)(l, t); });
}
int w_clockrdlock(pthread_rwlock_t* l, clockid_t c, const timespec* t) {
  return rw_acquire<Op::clockrdlock, true>(l, LOCKSWAP_CALLER(), t, c,
                                           [l, c, t] { return inner(&F::pthread_rwlock_clockrdlock)(l, c, t); });
}
int w_wrlock(pthread_rwlock_t* l) {
  return rw_acquire<Op::wrlock, false>(l, LOCKSWAP_CALLER(), nullptr, 0,
                                       [l] { return inner(&F::pthread_rwlock_wrlock)(l); });
}
int w_trywrlock(pthread_rwlock_t* l) {
  return rw_acquire<Op::trywrlock, false>(l, LOCKSWAP_CALLER(), nullptr, 0,
                                          [l] { return inner(&F::pthread_rwlock_trywrlock)(l); });
}
int w_timedwrlock(pthread_rwlock_t* l, const timespec* t) {
  return rw_acquire<Op::timedwrlock, false>(l, LOCKSWAP_CALLER(), t, CLOCK_REALTIME,
                                            [l, t] { return inner(&F::pthread_rwlock_timedwrlock)(l, t); });
}
int w_clockwrlock(pthread_rwlock_t* l, clockid_t c, const timespec* t) {
  return rw_acquire<Op::clockwrlock, false>(l, LOCKSWAP_CALLER(), t, c,
                                            [l, c, t] { return inner(&F::pthread_rwlock_clockwrlock)(l, c, t); });
}
int w_rw_unlock(pthread_rwlock_t* l) {
  count_call(Kind::rwlock);
  if (!t_inside) release(l);  // closes a write hold only: readers never own
  return inner(&F::pthread_rwlock_unlock)(l);
}

// The caller's hold of the mutex, paused for the length of a condition wait.
struct HoldPause {
  LockEntry* l = nullptr;
  int32_t self;
  uint32_t depth = 0, site = 0;
  HoldPause(pthread_mutex_t* m, int32_t tid) : self(tid) {
    LockEntry* e = lock_entry(m, Kind::mutex, false);
    if (e == nullptr || e->owner.load(std::memory_order_relaxed) != self) return;
    depth = e->depth.load(std::memory_order_relaxed);
    site = e->hold_site.load(std::memory_order_relaxed);
    e->depth.store(1, std::memory_order_relaxed);
    release(m);  // closes the hold: the mutex is released inside the wait
    l = e;
  }
  // The wait re-took the mutex (also when it is cancelled: before the
  // caller's cleanup handlers run).
  ~HoldPause() {
    if (l == nullptr) return;
    l->owner.store(self, std::memory_order_relaxed);
    l->depth.store(depth, std::memory_order_relaxed);
    l->hold_site.store(site, std::memory_order_relaxed);
    l->hold_start.store(now_ns(), std::memory_order_relaxed);
  }
  HoldPause(const HoldPause&) = delete;
  HoldPause& operator=(const HoldPause&) = delete;
};

template <Op kOp, class Wait>
int cond_wait(pthread_cond_t* c, pthread_mutex_t* m, uintptr_t ip, Wait&& wait) {
  count_call(Kind::cond);
  if (t_inside) return wait();
  LockEntry* l = lock_entry(c, Kind::cond, true);
  SiteEntry* s = l ? site_entry(l, ip, kOp) : nullptr;
  uint64_t t0, waited;
  int rc;
  {
    HoldPause pause(m, current_tid());
    Inside inside;  // the native condvar releases and re-takes `m` through g_ops
    t0 = now_ns();
    rc = wait();
    waited = now_ns() - t0;
  }
  if (l != nullptr) {
    bump(l->acq, 1, Access::shared);
    l->wait.add(waited, Access::shared);
  }
  if (s != nullptr) {
    bump(s->acq, 1, Access::shared);
    s->wait.add(waited, Access::shared);
  }
  return rc;
}

int w_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) {
  return cond_wait<Op::wait>(c, m, LOCKSWAP_CALLER(), [c, m] { return inner(&F::pthread_cond_wait)(c, m); });
}
int w_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* t) {
  return cond_wait<Op::timedwait>(c, m, LOCKSWAP_CALLER(),
                                  [c, m, t] { return inner(&F::pthread_cond_timedwait)(c, m, t); });
}
int w_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t k, const timespec* t) {
  return cond_wait<Op::clockwait>(c, m, LOCKSWAP_CALLER(),
                                  [c, m, k, t] { return inner(&F::pthread_cond_clockwait)(c, m, k, t); });
}

// sem_* report -1 with errno; inside, 0 or an error number. A successful
// wait leaves errno as the caller had it (the failed try set EAGAIN).
template <Op kOp, class Wait>
int sem_acquire(sem_t* s, uintptr_t ip, bool checks_cancel, Wait&& wait) {
  count_call(Kind::sem);
  if (t_inside) return wait();
  int saved = errno;
  if (checks_cancel) pthread_testcancel();  // glibc: even when a unit is available
  Attempt a{s, Kind::sem, kOp, ip, Access::shared, kOp == Op::sem_trywait, false, EAGAIN};
  int rc = acquire(
      a, [s] { return errno_of(inner(&F::sem_trywait)(s)); }, [&wait] { return errno_of(wait()); });
  if (rc == 0) {
    errno = saved;
    return 0;
  }
  errno = rc;
  return -1;
}

int w_sem_wait(sem_t* s) {
  return sem_acquire<Op::sem_wait>(s, LOCKSWAP_CALLER(), true, [s] { return inner(&F::sem_wait)(s); });
}
int w_sem_trywait(sem_t* s) {
  return sem_acquire<Op::sem_trywait>(s, LOCKSWAP_CALLER(), false, [s] { return inner(&F::sem_trywait)(s); });
}
int w_sem_timedwait(sem_t* s, const timespec* t) {
  auto wait = [s, t] { return inner(&F::sem_timedwait)(s, t); };
  if (!timeout_ok(t)) {  // glibc validates before the cancellation check
    count_call(Kind::sem);
    return wait();
  }
  return sem_acquire<Op::sem_timedwait>(s, LOCKSWAP_CALLER(), true, wait);
}
int w_sem_clockwait(sem_t* s, clockid_t c, const timespec* t) {
  auto wait = [s, c, t] { return inner(&F::sem_clockwait)(s, c, t); };
  if (!supported_clock(c) || !timeout_ok(t)) {
    count_call(Kind::sem);
    return wait();
  }
  return sem_acquire<Op::sem_clockwait>(s, LOCKSWAP_CALLER(), false, wait);
}

// Every other function: counted, then the variant's.
template <auto Slot, Kind Fam>
struct Counted;
template <class R, class... A, R (*F::*Slot)(A...), Kind Fam>
struct Counted<Slot, Fam> {
  static R call(A... args) {
    count_call(Fam);
    (void)LOCKSWAP_CALLER();  // the site LOCKSWAP_SELECT sees (an init call's, above all)
    return inner(Slot)(args...);
  }
};

// Initialisation: counted, and the lock's init site kept for the report's
// selectors.
void note_init(const void* obj, Kind kind, uintptr_t ip) {
  if (t_inside || g_tables == nullptr) return;
  if (InitSite* at = init_site(obj, true)) at->ip.store(ip, std::memory_order_relaxed);
  if (LockEntry* l = lock_entry(obj, kind, false)) note_sight(*l, obj, kind, ip, true);  // initialised again
}
template <auto Slot, Kind kKind>
struct InitWrapper;
template <class Obj, class... A, int (*F::*Slot)(Obj*, A...), Kind kKind>
struct InitWrapper<Slot, kKind> {
  static int call(Obj* o, A... args) {
    uintptr_t ip = LOCKSWAP_CALLER();
    count_call(kKind);
    int rc = inner(Slot)(o, args...);
    if (rc == 0) note_init(o, kKind, ip);
    return rc;
  }
};

void fill_wrappers() {
#define X(name, ret, params, args, sleeps, family) g_wrappers.name = &Counted<&F::name, Kind::family>::call;
  LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
  g_wrappers.pthread_mutex_init = InitWrapper<&F::pthread_mutex_init, Kind::mutex>::call;
  g_wrappers.pthread_rwlock_init = InitWrapper<&F::pthread_rwlock_init, Kind::rwlock>::call;
  g_wrappers.sem_init = InitWrapper<&F::sem_init, Kind::sem>::call;
  g_wrappers.pthread_mutex_lock = w_mutex_lock;
  g_wrappers.pthread_mutex_trylock = w_mutex_trylock;
  g_wrappers.pthread_mutex_timedlock = w_mutex_timedlock;
  g_wrappers.pthread_mutex_clocklock = w_mutex_clocklock;
  g_wrappers.pthread_mutex_unlock = w_mutex_unlock;
  g_wrappers.pthread_rwlock_rdlock = w_rdlock;
  g_wrappers.pthread_rwlock_tryrdlock = w_tryrdlock;
  g_wrappers.pthread_rwlock_timedrdlock = w_timedrdlock;
  g_wrappers.pthread_rwlock_clockrdlock = w_clockrdlock;
  g_wrappers.pthread_rwlock_wrlock = w_wrlock;
  g_wrappers.pthread_rwlock_trywrlock = w_trywrlock;
  g_wrappers.pthread_rwlock_timedwrlock = w_timedwrlock;
  g_wrappers.pthread_rwlock_clockwrlock = w_clockwrlock;
  g_wrappers.pthread_rwlock_unlock = w_rw_unlock;
  g_wrappers.pthread_cond_wait = w_cond_wait;
  g_wrappers.pthread_cond_timedwait = w_cond_timedwait;
  g_wrappers.pthread_cond_clockwait = w_cond_clockwait;
  g_wrappers.sem_wait = w_sem_wait;
  g_wrappers.sem_trywait = w_sem_trywait;
  g_wrappers.sem_timedwait = w_sem_timedwait;
  g_wrappers.sem_clockwait = w_sem_clockwait;
}

// ------------------------------------------------------------------- setup

std::atomic<int> g_setup{0};  // 0 none, 1 running, 2 done

uint64_t realtime_ns() { return arch::clock_ns(CLOCK_REALTIME); }

Tables* map_tables() {
  void* p = mmap(nullptr, sizeof(Tables), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) {
    diag("lockswap: cannot map the statistics tables; per-lock statistics are off\n");
    return nullptr;
  }
  return static_cast<Tables*>(p);  // zero pages are empty entries
}

// Once per process: the tables (zero-filled memory is a valid empty table,
// so no constructor runs) and the wrapper table.
bool set_up() {
  int s = 0;
  if (g_setup.compare_exchange_strong(s, 1, std::memory_order_acquire)) {
    g_tables = map_tables();
    if (uint32_t slots = g_config.stats_lock_slots) g_lock_mask = (1u << (31 - __builtin_clz(slots))) - 1;
    fill_wrappers();
    g_start_ns.store(realtime_ns(), std::memory_order_relaxed);
    g_setup.store(2, std::memory_order_release);
  }
  while (g_setup.load(std::memory_order_acquire) != 2) sched_yield();
  return g_tables != nullptr;
}

}  // namespace

void install(OpsTable& ops) {
  // LOCKSWAP_STATS=counts (and a bare LOCKSWAP_STATS_FILE): the lock event
  // counters are all there is, and the variant's table stays untouched.
  if (!g_config.profile || !set_up()) return;
  // Every inner pointer first, then the wrappers: a wrapper reached through
  // g_ops never finds its inner slot unset on this CPU's order of stores.
#define X(name, ret, params, args, sleeps, family) \
  if (ops.name != g_wrappers.name) __atomic_store_n(&g_inner.name, ops.name, __ATOMIC_RELEASE);
  LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
#define X(name, ret, params, args, sleeps, family) __atomic_store_n(&ops.name, g_wrappers.name, __ATOMIC_RELEASE);
  LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
}

bool outside_ready() { return g_config.profile && set_up(); }

int outside_acquire(const OutsideAttempt& o, OutsideCall try_fn, OutsideCall wait_fn, void* arg) {
  auto kind = static_cast<Kind>(o.kind);
  count_call(kind);
  auto try_it = [&] { return try_fn(arg); };
  auto wait = [&] { return wait_fn(arg); };
  if (t_inside) return o.is_try ? try_it() : wait();
  Attempt a{o.lock, kind, static_cast<Op>(o.op), o.ip, o.read ? Access::shared : Access::exclusive,
            o.is_try, o.read, o.busy};
  return acquire(a, try_it, wait);
}

void outside_release(const void* lock, uint8_t kind) {
  count_call(static_cast<Kind>(kind));
  if (!t_inside) release(lock);
}

void outside_init(const void* lock, uint8_t kind, uintptr_t ip) {
  count_call(static_cast<Kind>(kind));
  note_init(lock, static_cast<Kind>(kind), ip);
}

void mark_start() {
  uint64_t unset = 0;
  g_start_ns.compare_exchange_strong(unset, realtime_ns(), std::memory_order_relaxed);
}

void after_fork_in_child() {
  if (g_tables != nullptr) madvise(g_tables, sizeof(Tables), MADV_DONTNEED);  // zero again
  g_generation.fetch_add(1, std::memory_order_relaxed);                      // forget cached entries
  for (CallStripe& c : g_calls)
    for (Counter& n : c.calls) n.store(0, std::memory_order_relaxed);
  g_start_ns.store(realtime_ns(), std::memory_order_relaxed);
}

}  // namespace lockswap::stats
