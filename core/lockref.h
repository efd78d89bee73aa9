// core/lockref.h — the kernel's lockref (lib/lockref.c): a lock and a count in
// one 64-bit word, updated lock-free while the lock is free.
//
// Design
// ------
// The kernel facts it follows are in docs/kernel-algorithms.md §3. The point of a lockref
// is that a lock-free update succeeds only if its compare-and-swap saw the lock
// *unlocked in the same word*, so a lock holder sees a perfectly stable count.
// core/lockref_rwlock.h and core/sem.h build on the same word and loop.
//
//   bits   | field        | meaning
//   -------+--------------+-------------------------------------------------
//   0..31  | count        | signed 32-bit count (offset 0 on little-endian)
//   32     | kLocked      | the lock half is held
//   33     | kLockSleepers| someone may sleep on the lock half: unlock wakes one
//   34..63 | (users)      | free for users of the word (core/sem.h: nwaiters)
//
// All zero = unlocked, count 0 (zero-filled memory is a valid lockref).
//
// Why count low, lock high (the kernel has it the other way round): a glibc
// sem_t keeps its value in the low 32 bits of its first 64-bit word and zero
// in the high 32 bits, so a semaphore initialised by glibc (sem_init, sem_open,
// a static zero fill) is already a valid, unlocked lockref semaphore. Each half
// is a futex word of its own: the count half at offset 0 (semaphore waiters,
// rwlock drainers), the lock half at offset 4 (lock sleepers). The halves are
// only ever named as futex *addresses*; every access stays a 64-bit load or
// read-modify-write on the whole word.
//
// The CAS loop (written once, cmpxchg_loop below; the kernel's CMPXCHG_LOOP):
//   old = load(word)
//   while (old & lock_mask) == 0:
//     code(old, new)  -> Step::stop: the op cannot succeed from `old` (stopped)
//     CAS(old -> new) -> success: done (old returned)
//                        failure: `old` refreshed; after `retries` failed
//                        attempts: exhausted
//   -> locked: a lock bit was seen set
// The caller decides what `locked`/`exhausted` mean: most ops fall back to
// doing the update under the lock half (lock; change count by RMW; unlock),
// put_return() has no fallback and reports -1.
//
// The retry bound (LockrefTunables::retries, default 100) is 893a7d32e8e0:
// an unbounded loop while the lock is free let heavily contended words spin
// for a long time on ThunderX2 (open/close +60-70% with the bound); results
// were flat up to about 100 retries, so 100 it is. Linus called it "a generic
// safety net that hopefully simply never triggers in practice" — it is not
// hit on x86. 0 restores the pre-2019 unbounded loop. A failed CAS is retried
// at once, without cpu_relax(): on x86 even a failed cmpxchg leaves the line
// exclusive in our cache, so the next attempt is the cheapest (f5fe24ef17b5,
// which removed the relax, measured +18..+423% on will-it-scale).
//
// The lock half is a *sleeping* lock (the kernel's is a spinlock that cannot
// be preempted; ours can): lock() sets kLocked by fetch_or and owns the lock
// if it was clear; otherwise it polls a bounded number of times, then sets
// kLockSleepers and futex-waits on the lock half. Like futex mutex #3, a
// thread that slept once re-acquires with kLocked|kLockSleepers, so waking one
// sleeper never loses the others. unlock() clears both bits (release) and
// wakes one sleeper if kLockSleepers was set. Under the lock the count is
// stable (lock-free updaters only CAS while kLocked is clear), but other bits
// are not (new sleepers set kLockSleepers), so the holder changes the count by
// a 64-bit fetch_xor of the low half's old^new value: one RMW that cannot
// carry into the lock half and keeps concurrent bit changes.
//
// Memory order. The kernel's lockless paths are relaxed: a lockref is a
// counter, not a publication mechanism. Here:
//   get()                      relaxed: the caller already holds a reference,
//                              it learns nothing new from the count;
//   get_not_zero/get_not_dead  acquire: a successful one takes a reference the
//                              caller did not have, and pairs with the release
//                              of whichever put or unlock made the count
//                              what it saw;
//   put_return/put_or_lock     release: the caller's accesses to the object
//                              happen before anyone sees the lower count; a
//                              put_return that reaches 0 adds an acquire load
//                              (like refcount_dec_and_test's acquire) so the
//                              last holder may tear the object down;
//   lock()/unlock()            acquire/release, and the fallbacks run inside
//                              them, so their RMWs can be relaxed.
//
// Deviations from the kernel: count/lock halves swapped (above); the lock
// sleeps; memory order as above instead of all-relaxed; lock() takes `shared`
// to pick process-shared futexes (semaphores), while the Lockref ops' own
// fallbacks use private ones.
#pragma once
#include <atomic>
#include <cstdint>
#include <type_traits>

#include "arch/atomic.h"
#include "arch/futex.h"
#include "core/thread_registry.h"

namespace lockswap {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "count half at offset 0, lock half at offset 4");

// Set once at start-up (preload reads LOCKSWAP_* settings); read with plain
// loads at the start of every CAS loop.
struct LockrefTunables {
  // Failed compare-and-swaps before falling back to the lock half; 0 =
  // unbounded (the kernel before 893a7d32e8e0). See the design block.
  uint32_t retries = 100;
};
extern LockrefTunables g_lockref_tunables;

namespace lockref {

// --- bits of the word ---
inline constexpr unsigned kHalfShift = 32;
inline constexpr uint64_t kCountMask = (1ull << kHalfShift) - 1;
inline constexpr uint64_t kLocked = 1ull << 32;
inline constexpr uint64_t kLockSleepers = 1ull << 33;
inline constexpr uint64_t kLockBits = kLocked | kLockSleepers;
// First bit free for users of the word (core/sem.h keeps nwaiters there).
inline constexpr unsigned kUserShift = 34;

static_assert((kLockBits & kCountMask) == 0, "the lock half never overlaps the count");
static_assert((kLockBits >> kUserShift) == 0, "user bits start above the lock bits");

// Polls of the lock half before sleeping on it (glibc's adaptive budget).
inline constexpr unsigned kLockSpins = 100;

// --- the two halves ---
inline constexpr int32_t count_of(uint64_t w) { return static_cast<int32_t>(static_cast<uint32_t>(w)); }
inline constexpr uint32_t low_of(uint64_t w) { return static_cast<uint32_t>(w); }
inline constexpr uint32_t high_of(uint64_t w) { return static_cast<uint32_t>(w >> kHalfShift); }
inline constexpr uint64_t with_count(uint64_t w, int32_t c) {
  return (w & ~kCountMask) | static_cast<uint32_t>(c);
}

// Futex addresses of the halves. Only passed to the kernel: never accessed
// through these pointers (all accesses are 64-bit, on `w`).
inline const std::atomic<uint32_t>* count_futex(const std::atomic<uint64_t>& w) {
  return reinterpret_cast<const std::atomic<uint32_t>*>(&w);
}
inline const std::atomic<uint32_t>* lock_futex(const std::atomic<uint64_t>& w) {
  return reinterpret_cast<const std::atomic<uint32_t>*>(reinterpret_cast<const char*>(&w) + 4);
}
static_assert(sizeof(std::atomic<uint64_t>) == 8 && alignof(std::atomic<uint64_t>) == 8);

// --- the CAS loop, written once ---
enum class Step : uint8_t { attempt, stop };
enum class LoopResult : uint8_t {
  done,       // the CAS succeeded; `old` is the value it replaced
  stopped,    // code() said the op cannot succeed from `old`
  locked,     // a bit of lock_mask was set in `old`
  exhausted,  // `retries` CAS attempts failed; `old` is the last value seen
};

// code(uint64_t old, uint64_t& next) -> Step: fill `next` from `old` (next
// starts as a copy of old) and say whether to attempt the CAS. It runs once
// per attempt and must not keep state across calls except what it resets.
// `retries`: failed attempts allowed (0 = unbounded); cmpxchg_loop() below
// passes the tunable. A caller that already made attempts of its own (an
// inline first attempt) passes what is left: retries_after().
template <class Code>
inline LoopResult cmpxchg_loop_bounded(std::atomic<uint64_t>& w, uint64_t lock_mask, std::memory_order success_mo,
                                       uint32_t retries, uint64_t& old, Code&& code) {
  old = w.load(arch::mo_hint);
  while ((old & lock_mask) == 0) {
    uint64_t next = old;
    if (code(old, next) == Step::stop) return LoopResult::stopped;
    if (w.compare_exchange_strong(old, next, success_mo, arch::mo_hint)) {
      lockevent_inc(LockEvent::lockref_lockless);
      return LoopResult::done;
    }
    lockevent_inc(LockEvent::lockref_cas_fail);
    if (retries != 0 && --retries == 0) return LoopResult::exhausted;
  }
  return LoopResult::locked;
}

template <class Code>
inline LoopResult cmpxchg_loop(std::atomic<uint64_t>& w, uint64_t lock_mask, std::memory_order success_mo,
                               uint64_t& old, Code&& code) {
  return cmpxchg_loop_bounded(w, lock_mask, success_mo, g_lockref_tunables.retries, old, code);
}

// Failed attempts left to a loop after `failed` failures of the caller's own
// (0 = unbounded, as the tunable); kRetriesSpent when the bound is used up.
inline constexpr uint32_t kRetriesSpent = UINT32_MAX;
inline uint32_t retries_after(uint32_t failed) {
  uint32_t bound = g_lockref_tunables.retries;
  if (bound == 0) return 0;
  return failed >= bound ? kRetriesSpent : bound - failed;
}

// One lock-free attempt for an inline fast path: no call on any branch, so
// the caller keeps no stack frame (the rest of the bounded loop is the
// caller's out-of-line slow path, which passes retries_after(1) after a
// failed CAS). The lockless event is counted with a plain add on the
// thread's own slot; a thread without one (its first lock call: attaching
// is a call) or on the shared slot is `not_tried`.
enum class Once : uint8_t { done, stopped, not_tried, cas_failed };
template <class Code>
inline Once try_once(std::atomic<uint64_t>& w, uint64_t lock_mask, std::memory_order success_mo, uint64_t& old,
                     Code&& code) {
#if LOCKSWAP_LOCK_EVENTS
  ThreadSlot* me = t_local.slot;
  if (__builtin_expect(me == nullptr || is_shared(*me), 0)) return Once::not_tried;
#endif
  old = w.load(arch::mo_hint);
  if (__builtin_expect((old & lock_mask) != 0, 0)) return Once::not_tried;
  uint64_t next = old;
  if (code(old, next) == Step::stop) return Once::stopped;
  if (__builtin_expect(!w.compare_exchange_strong(old, next, success_mo, arch::mo_hint), 0)) return Once::cas_failed;
#if LOCKSWAP_LOCK_EVENTS
  auto& ev = me->events[static_cast<uint32_t>(LockEvent::lockref_lockless)];
  ev.store(ev.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
#endif
  return Once::done;
}

// --- the sleeping lock half (kLocked, kLockSleepers), shared with core/sem.h ---
void lock_half_slow(std::atomic<uint64_t>& w, bool shared);  // core/lockref.cpp

inline void lock_half(std::atomic<uint64_t>& w, bool shared) {
  if (__builtin_expect((w.fetch_or(kLocked, arch::mo_lock) & kLocked) == 0, 1)) return;
  lock_half_slow(w, shared);
}

inline void unlock_half(std::atomic<uint64_t>& w, bool shared) {
  if (w.fetch_and(~kLockBits, arch::mo_unlock) & kLockSleepers) arch::futex_wake(lock_futex(w), 1, shared);
}

inline bool half_locked(const std::atomic<uint64_t>& w) { return (w.load(arch::mo_hint) & kLocked) != 0; }

// Holder of the lock half: set the count to `c` (one RMW, see design block).
inline void set_count_locked(std::atomic<uint64_t>& w, int32_t c) {
  uint64_t old = w.load(arch::mo_hint);
  w.fetch_xor(static_cast<uint64_t>(low_of(old) ^ static_cast<uint32_t>(c)), arch::mo_hint);
}

}  // namespace lockref

class Lockref {
 public:
  static constexpr int32_t kDead = -128;

  // lockref_init (v6.14): unlocked, count `c`. Not for a lockref in use.
  void init(int32_t c = 1) { word_.store(static_cast<uint32_t>(c), arch::mo_unlock); }

  // lockref_get: count++ (the caller already holds a reference).
  void get() {
    uint64_t old;
    auto r = lockref::cmpxchg_loop(word_, lockref::kLocked, arch::mo_hint, old, [](uint64_t o, uint64_t& n) {
      n = lockref::with_count(o, lockref::count_of(o) + 1);
      return lockref::Step::attempt;
    });
    if (r == lockref::LoopResult::done) return;
    fallback_event(r);
    lock();
    lockref::set_count_locked(word_, count() + 1);
    unlock();
  }

  // lockref_get_not_zero: count++ unless count <= 0 (dead counts as zero).
  bool get_not_zero() { return get_if([](int32_t c) { return c > 0; }); }

  // lockref_get_not_dead: count++ unless the lockref is dead (count < 0).
  bool get_not_dead() { return get_if([](int32_t c) { return c >= 0; }); }

  // lockref_put_return: count-- and the new count, or -1 when the lock-free
  // path is unavailable (lock held, retries exhausted) or count <= 0. No
  // fallback: the caller takes the lock itself.
  int32_t put_return() {
    uint64_t old;
    auto r = lockref::cmpxchg_loop(word_, lockref::kLocked, arch::mo_unlock, old, [](uint64_t o, uint64_t& n) {
      int32_t c = lockref::count_of(o);
      if (c <= 0) return lockref::Step::stop;
      n = lockref::with_count(o, c - 1);
      return lockref::Step::attempt;
    });
    if (r != lockref::LoopResult::done) return -1;
    int32_t now = lockref::count_of(old) - 1;
    // The last holder may tear the object down: acquire everyone's puts. An
    // acquire load of the word reads our CAS or a later RMW, all inside the
    // release sequences of the earlier puts (a fence would do the same, but
    // ThreadSanitizer does not model fences).
    if (now == 0) (void)word_.load(arch::mo_lock);
    return now;
  }

  // lockref_put_or_lock: count-- unless count <= 1; then return false WITH
  // THE LOCK HELD and the count untouched.
  bool put_or_lock() {
    uint64_t old;
    auto r = lockref::cmpxchg_loop(word_, lockref::kLocked, arch::mo_unlock, old, [](uint64_t o, uint64_t& n) {
      int32_t c = lockref::count_of(o);
      if (c <= 1) return lockref::Step::stop;
      n = lockref::with_count(o, c - 1);
      return lockref::Step::attempt;
    });
    if (r == lockref::LoopResult::done) return true;
    fallback_event(r);
    lock();
    int32_t c = count();
    if (c <= 1) return false;
    lockref::set_count_locked(word_, c - 1);
    unlock();
    return true;
  }

  // lockref_mark_dead: the caller holds the lock.
  void mark_dead() { lockref::set_count_locked(word_, kDead); }
  // __lockref_is_dead: reliable only under the lock.
  bool is_dead() const { return count() < 0; }

  void lock(bool shared = false) { lockref::lock_half(word_, shared); }
  void unlock(bool shared = false) { lockref::unlock_half(word_, shared); }
  bool is_locked() const { return lockref::half_locked(word_); }

  int32_t count() const { return lockref::count_of(word_.load(arch::mo_hint)); }

  // The word, for lock holders that change the count themselves (the
  // kernel's `lockref->count--` under the lock: lockref::set_count_locked).
  std::atomic<uint64_t>& word() { return word_; }

 private:
  template <class Pred>
  bool get_if(Pred ok) {
    uint64_t old;
    auto r = lockref::cmpxchg_loop(word_, lockref::kLocked, arch::mo_lock, old, [&](uint64_t o, uint64_t& n) {
      int32_t c = lockref::count_of(o);
      if (!ok(c)) return lockref::Step::stop;
      n = lockref::with_count(o, c + 1);
      return lockref::Step::attempt;
    });
    if (r == lockref::LoopResult::done) return true;
    if (r == lockref::LoopResult::stopped) return false;
    fallback_event(r);
    lock();
    int32_t c = count();
    bool took = ok(c);
    if (took) lockref::set_count_locked(word_, c + 1);
    unlock();
    return took;
  }

  static void fallback_event(lockref::LoopResult r) {
    if (r == lockref::LoopResult::exhausted) lockevent_inc(LockEvent::lockref_fallback);
  }

  std::atomic<uint64_t> word_;
};
static_assert(sizeof(Lockref) == 8);
static_assert(std::is_standard_layout_v<Lockref>);

}  // namespace lockswap
