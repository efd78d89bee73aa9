// core/sem.h — POSIX semaphores on a 64-bit word plus a futex-kind field: a
// futex reference (FutexSem) and a lockref semaphore (LockrefSem).
//
// Design
// ------
// glibc's semaphore behaviour is in docs/glibc-abi.md ("Semaphores"), the
// lockref in docs/kernel-algorithms.md §3. One body of code,
// `Semaphore<Word>`, serves both; a Word policy says how one unit is taken or
// given on the 64-bit word and where the waiter count lives.
//
// Storage (SemWords; preload lays it over sem_t, preload/abi.h):
//   offset 0  u64 data     value in bits 0..31 (a futex word of its own at
//                          offset 0: waiters sleep there for value != 0),
//                          the policy's bits in 32..63
//   offset 8  i32 private  the futex kind: 0 = process-private, any other
//                          value = process-shared. Which non-zero value is
//                          the caller's to choose (init()'s argument): preload
//                          writes the one glibc writes.
// Valid initial states: value in the low half, zero high half, any private
// field; and all-zero memory (value 0, private futexes).
//
// FutexSem — glibc's algorithm, written by us (the reference):
//   bits 32..63  nwaiters  threads registered as (about to be) sleeping
//   trywait  CAS value -> value-1 while value > 0 (unbounded loop); EAGAIN at 0
//   wait     trywait; else nwaiters+1 (fetch_add), then loop: CAS taking one
//            unit *and* dropping our registration in one step, or futex-wait on
//            the value half while it reads 0
//   post     CAS value -> value+1 (EOVERFLOW at SEM_VALUE_MAX); futex_wake(1)
//            if the nwaiters it replaced was non-zero
//
// LockrefSem, process-private — the same word as a lockref (core/lockref.h):
//   bit 32       kLocked        the lock half is held
//   bit 33       kLockSleepers  threads sleep on the lock half
//   bits 34..63  nwaiters       threads registered on the value futex
//   trywait/post/the waiter's take are lockref updates: the bounded CAS loop
//   (lockref::cmpxchg_loop, lock_mask = kLocked); when its retries run out
//   the unit is taken or given under the lock half (the Lockref sleeping
//   lock, shared code), by a CAS loop on the whole word. Lock-free updaters
//   only CAS while kLocked is clear, so under the lock the value moves only
//   by a signal handler of a thread inside the lock half: sem_post is
//   async-signal-safe, and a handler posting to the semaphore its thread is
//   taking or giving under the lock half is served without the lock
//   (LockrefSemWord::HalfScope, docs/signal-safety.md), never waits for it.
//   nwaiters is only a wake hint and is changed by RMW at any time, lock or
//   no lock (registration, a timed-out or cancelled waiter's cleanup). Finding the
//   lock held with value 0 (trywait) or SEM_VALUE_MAX (post) answers at once:
//   the value read is a valid linearization point.
//
// Process-shared semaphores (private != 0) use FutexSem's word and algorithm,
// which are glibc's bit for bit, under both variants; LockrefSem hands each
// call on one to FutexSem and counts it as delegated_to_glibc. Two reasons:
//   - a peer process running glibc's semaphore (not preloaded, or
//     LOCKSWAP_SEM=glibc) registers a waiter by adding 1 << 32, which the
//     lockref word reads as kLocked: a lockref post would then wait forever
//     for a lock nobody holds. In glibc's word it is a waiter, as glibc meant,
//     so any mix of glibc and lockswap processes shares the semaphore.
//   - nothing to recover from a killed process. Every change is one CAS or
//     fetch_add of the whole word, so a process SIGKILLed at any instruction
//     leaves the old word or the new one. The most it leaves behind is its
//     own waiter registration (nwaiters one too high): later posts make a
//     futex_wake that wakes nobody, as with glibc. A lock half in memory
//     shared with processes that can die would need a holder identity and a
//     liveness check, and the word has no room for a pid.
//
// No lost wakeup: registration, the take, and the post are RMWs on the one
// 64-bit word, so they are totally ordered. A post ordered after a waiter's
// registration sees nwaiters > 0 and wakes; a post ordered before it is seen
// by the waiter's next take (or makes its futex_wait fail with EAGAIN).
//
// Waiting: wait<Sleeper>() sleeps through Sleeper::sleep (preload's makes the
// syscall an asynchronous cancellation point; SemPlainSleeper is the plain
// futex call, which — unlike WaitCtx::sleep — reports EINTR: a signal handler
// without SA_RESTART makes sem_wait fail with EINTR). While registered the
// waiter holds a Registration guard; on a forced unwind (cancellation) its
// destructor drops the registration and, if units are left and others wait,
// passes on a wakeup it may have absorbed (the same job as Cond::WaitGuard).
// A unit that is available is taken even when the deadline has passed; a
// deadline with negative tv_sec is ETIMEDOUT without sleeping (glibc).
//
// Memory order: a take is acquire and a give is release (POSIX makes
// sem_post/sem_wait synchronize memory), including the under-lock RMWs;
// registration and its removal are hints (relaxed).
#pragma once
#include <semaphore.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "arch/atomic.h"
#include "arch/futex.h"
#include "core/lockref.h"
#include "core/thread_registry.h"
#include "core/trace.h"
#include "core/wait_ctx.h"

// Test-only pause point, called with a lockref semaphore's lock half held.
// Weak and hidden: only a core test program can define it.
extern "C" void lockswap_test_pause_in_sem_half() __attribute__((weak, visibility("hidden")));

namespace lockswap {

struct SemWords {
  std::atomic<uint64_t> data;  // value (low 32) | policy bits (high 32)
  int32_t private_flag;        // 0 = private futexes, anything else = shared
  uint32_t reserved;
};
static_assert(offsetof(SemWords, data) == 0 && offsetof(SemWords, private_flag) == 8, "the offsets above");
static_assert(std::is_standard_layout_v<SemWords>);

// The plain futex sleep: 0 (woken / spurious), EAGAIN (value moved),
// ETIMEDOUT, or EINTR.
struct SemPlainSleeper {
  static int sleep(const std::atomic<uint32_t>* word, uint32_t expected, const WaitCtx& ctx, bool shared) {
    return sleep_around(word, expected, ctx, shared, [](auto&& futex_call) { return futex_call(); });
  }
  // With `around(futex_call)` wrapped around the system call alone; the raw
  // futex result (EINTR included). A negative deadline is ETIMEDOUT at once.
  template <class Around>
  static int sleep_around(const std::atomic<uint32_t>* word, uint32_t expected, const WaitCtx& ctx, bool shared,
                          Around&& around) {
    return ctx.sleep_raw_around(word, expected, shared, around);
  }
};

namespace sem_detail {
inline constexpr uint32_t value_of(uint64_t d) { return static_cast<uint32_t>(d); }
inline constexpr uint32_t kValueMax = SEM_VALUE_MAX;
static_assert(SEM_VALUE_MAX == INT_MAX, "the value half never reaches the sign bit");
// post()'s result policy: the error code itself (0 or EOVERFLOW). A caller
// that reports errors otherwise (preload: -1 and errno) passes its own `of`.
struct ErrorCode {
  static int of(int err) { return err; }
};
}  // namespace sem_detail

// glibc's word: nwaiters in the whole high half; unbounded CAS loops.
struct FutexSemWord {
  static constexpr uint64_t kWaiterOne = 1ull << 32;
  static constexpr uint64_t waiters_of(uint64_t d) { return d >> 32; }

  // The fast paths' single attempts (Semaphore::take_unit, post).
  static lockref::Once take_once(std::atomic<uint64_t>& d, uint64_t& old) {
    old = d.load(arch::mo_hint);
    if (sem_detail::value_of(old) == 0) return lockref::Once::stopped;
    return d.compare_exchange_strong(old, old - 1, arch::mo_lock, arch::mo_hint) ? lockref::Once::done
                                                                                  : lockref::Once::cas_failed;
  }
  static lockref::Once give_once(std::atomic<uint64_t>& d, uint64_t& old) {
    old = d.load(arch::mo_hint);
    if (sem_detail::value_of(old) >= sem_detail::kValueMax) return lockref::Once::stopped;
    return d.compare_exchange_strong(old, old + 1, arch::mo_unlock, arch::mo_hint) ? lockref::Once::done
                                                                                  : lockref::Once::cas_failed;
  }

  // Take one unit, subtracting `also` (0, or our registration) in the same CAS.
  static bool try_take(std::atomic<uint64_t>& d, uint64_t also, bool, uint32_t /*failed*/ = 0) {
    uint64_t old = d.load(arch::mo_hint);
    while (sem_detail::value_of(old) != 0)
      if (d.compare_exchange_weak(old, old - 1 - also, arch::mo_lock, arch::mo_hint)) return true;
    return false;
  }
  // Give one unit; `old` = the word it replaced (for nwaiters). False at the maximum.
  static bool give(std::atomic<uint64_t>& d, bool, uint64_t& old, uint32_t /*failed*/ = 0) {
    old = d.load(arch::mo_hint);
    do {
      if (sem_detail::value_of(old) >= sem_detail::kValueMax) return false;
    } while (!d.compare_exchange_weak(old, old + 1, arch::mo_unlock, arch::mo_hint));
    return true;
  }
};

// The lockref word: kLocked | kLockSleepers | nwaiters above them.
struct LockrefSemWord {
  static constexpr uint64_t kWaiterOne = 1ull << lockref::kUserShift;
  static constexpr uint64_t waiters_of(uint64_t d) { return d >> lockref::kUserShift; }
  static_assert((kWaiterOne & (lockref::kLockBits | lockref::kCountMask)) == 0, "nwaiters above the lock bits");

  // The fast paths' single attempts: lockref::try_once, no call, no frame.
  static lockref::Once take_once(std::atomic<uint64_t>& d, uint64_t& old) {
    return lockref::try_once(d, lockref::kLocked, arch::mo_lock, old, TakeStep{0});
  }
  static lockref::Once give_once(std::atomic<uint64_t>& d, uint64_t& old) {
    return lockref::try_once(d, lockref::kLocked, arch::mo_unlock, old, give_step);
  }

  // `failed`: CAS attempts the caller's single attempt already spent (they
  // count against LOCKSWAP_LOCKREF_RETRIES).
  static bool try_take(std::atomic<uint64_t>& d, uint64_t also, bool shared, uint32_t failed = 0) {
    uint64_t old;
    auto r = loop(d, arch::mo_lock, failed, old, TakeStep{also});
    if (r == lockref::LoopResult::done) return true;
    if (r == lockref::LoopResult::stopped || sem_detail::value_of(old) == 0) return false;
    return take_locked(d, also, shared, r);
  }

  static bool give(std::atomic<uint64_t>& d, bool shared, uint64_t& old, uint32_t failed = 0) {
    auto r = loop(d, arch::mo_unlock, failed, old, give_step);
    if (r == lockref::LoopResult::done) return true;
    if (r == lockref::LoopResult::stopped || sem_detail::value_of(old) >= sem_detail::kValueMax) return false;
    return give_locked(d, shared, old, r);
  }

 private:
  struct TakeStep {  // one unit, and `also` (0, or a registration) in the same CAS
    uint64_t also;
    lockref::Step operator()(uint64_t o, uint64_t& n) const {
      if (sem_detail::value_of(o) == 0) return lockref::Step::stop;
      n = o - 1 - also;
      return lockref::Step::attempt;
    }
  };
  static lockref::Step give_step(uint64_t o, uint64_t& n) {
    if (sem_detail::value_of(o) >= sem_detail::kValueMax) return lockref::Step::stop;
    n = o + 1;
    return lockref::Step::attempt;
  }
  // The bounded loop, after `failed` attempts of the caller's own.
  template <class Code>
  static lockref::LoopResult loop(std::atomic<uint64_t>& d, std::memory_order mo, uint32_t failed, uint64_t& old,
                                  Code&& code) {
    if (failed != 0) lockevent_inc(LockEvent::lockref_cas_fail);
    uint32_t retries = lockref::retries_after(failed);
    if (retries == lockref::kRetriesSpent) {
      old = d.load(arch::mo_hint);
      return lockref::LoopResult::exhausted;
    }
    return lockref::cmpxchg_loop_bounded(d, lockref::kLocked, mo, retries, old, code);
  }

  // The fallbacks: the unit is taken or given under the lock half, by
  // FutexSemWord's unbounded CAS on the whole word. Lock-free updaters keep
  // off while kLocked is set, so that loop only races nwaiters RMWs and a
  // signal handler's call on this thread (below); it converges.
  __attribute__((noinline)) static bool take_locked(std::atomic<uint64_t>& d, uint64_t also, bool shared,
                                                    lockref::LoopResult why) {
    HalfScope half{d};
    if (half.reentered) return FutexSemWord::try_take(d, also, shared);
    lockref::lock_half(d, shared);
    if (lockswap_test_pause_in_sem_half) lockswap_test_pause_in_sem_half();
    bool took = FutexSemWord::try_take(d, also, shared);
    if (took && why == lockref::LoopResult::exhausted) lockevent_inc(LockEvent::lockref_fallback);
    lockref::unlock_half(d, shared);
    return took;
  }
  __attribute__((noinline)) static bool give_locked(std::atomic<uint64_t>& d, bool shared, uint64_t& old,
                                                    lockref::LoopResult why) {
    HalfScope half{d};
    if (half.reentered) return FutexSemWord::give(d, shared, old);
    lockref::lock_half(d, shared);
    if (lockswap_test_pause_in_sem_half) lockswap_test_pause_in_sem_half();
    bool gave = FutexSemWord::give(d, shared, old);
    if (gave && why == lockref::LoopResult::exhausted) lockevent_inc(LockEvent::lockref_fallback);
    lockref::unlock_half(d, shared);
    return gave;
  }

  // Marks this thread as taking or holding `d`'s lock half. sem_post is
  // async-signal-safe: a handler that interrupts the mark's owner and posts
  // to the same semaphore would wait for a lock half its own thread holds,
  // for ever. It finds the mark instead and updates the word lock-free, as
  // if it were a second holder: its thread is stopped meanwhile, and the
  // holder's CAS sees the handler's change. The previous mark is restored (a
  // handler may interrupt a handler; marks nest on the stack).
  struct HalfScope {
    const void* outer;
    bool reentered;
    explicit HalfScope(const std::atomic<uint64_t>& d) : outer(t_local.sem_half), reentered(outer == &d) {
      t_local.sem_half = &d;
      std::atomic_signal_fence(std::memory_order_seq_cst);  // marked before the lock half is touched
    }
    ~HalfScope() {
      std::atomic_signal_fence(std::memory_order_seq_cst);
      t_local.sem_half = outer;
    }
    HalfScope(const HalfScope&) = delete;
    HalfScope& operator=(const HalfScope&) = delete;
  };
};

// A handle on one semaphore's words (preload: Sem{words(sem)}).
template <class Word>
class Semaphore {
 public:
  static constexpr int kValueMax = SEM_VALUE_MAX;

  explicit Semaphore(SemWords& w) : w_(w) {}

  // Value above kValueMax (EINVAL) is the caller's check. `private_flag`:
  // 0 for a process-private semaphore, the caller's ABI's non-zero value for a
  // shared one. Returns 0.
  static int init(SemWords& w, unsigned value, int32_t private_flag) {
    w.private_flag = private_flag;
    w.reserved = 0;
    w.data.store(value, arch::mo_unlock);
    return 0;
  }

  // 0 or EAGAIN.
  int trywait() { return take_unit() ? 0 : EAGAIN; }

  // 0, ETIMEDOUT, EINTR (signal without SA_RESTART), or EAGAIN for try_once.
  template <class Sleeper = SemPlainSleeper>
  int wait(const WaitCtx& ctx) {
    if (__builtin_expect(take_unit(), 1)) return 0;
    if (!ctx.may_block()) return EAGAIN;
    if (ctx.mode == WaitCtx::Mode::until && ctx.abs->tv_sec < 0) return ETIMEDOUT;
    return wait_slow<Sleeper>(ctx);
  }

  // Result::of(0 or EOVERFLOW) (value at SEM_VALUE_MAX). Fast path: one
  // attempt, then 0 or a tail call (no stack frame): the out-of-line parts
  // apply Result themselves. The futex kind is read before the unit is given:
  // once it is, a waiter may take it, destroy the semaphore and unmap its
  // memory (glibc reads `private` first for the same reason); the wake on a
  // gone address is a harmless EFAULT, a load from it would fault.
  template <class Result = sem_detail::ErrorCode>
  int post() {
    const int32_t kind = w_.private_flag;
    uint64_t old;
    lockref::Once r = Word::give_once(w_.data, old);
    if (__builtin_expect(r == lockref::Once::done, 1)) {
      if (__builtin_expect(Word::waiters_of(old) == 0, 1)) return 0;
      return wake_one<Result>(w_.data, kind);
    }
    return post_slow<Result>(w_.data, kind, r);
  }

  // Never negative (sleepers are not counted, as in glibc).
  int value() const { return static_cast<int>(sem_detail::value_of(w_.data.load(arch::mo_hint))); }
  // Registered waiters (a hint; for tests and diagnostics).
  uint64_t waiters() const { return Word::waiters_of(w_.data.load(arch::mo_hint)); }
  bool shared() const { return w_.private_flag != 0; }

 private:
  // One unit at once (trywait, and wait's first try): the single attempt
  // inline, the rest of the word's loop out of line. The out-of-line parts
  // are static on the words, so the handle never needs a home in memory and
  // the fast paths keep no stack frame.
  bool take_unit() {
    uint64_t old;
    lockref::Once r = Word::take_once(w_.data, old);
    if (__builtin_expect(r == lockref::Once::done, 1)) return true;
    if (r == lockref::Once::stopped) return false;
    return take_unit_slow(w_, r);
  }
  __attribute__((noinline)) static bool take_unit_slow(SemWords& w, lockref::Once r) {
    return Word::try_take(w.data, 0, w.private_flag != 0, r == lockref::Once::cas_failed ? 1 : 0);
  }
  template <class Result>
  __attribute__((noinline)) static int post_slow(std::atomic<uint64_t>& d, int32_t kind, lockref::Once r) {
    const bool sh = kind != 0;
    if (r == lockref::Once::stopped) return Result::of(EOVERFLOW);
    uint64_t old;
    if (!Word::give(d, sh, old, r == lockref::Once::cas_failed ? 1 : 0)) return Result::of(EOVERFLOW);
    if (Word::waiters_of(old) != 0) wake(d, sh);
    return Result::of(0);
  }
  template <class Result>
  __attribute__((noinline)) static int wake_one(std::atomic<uint64_t>& d, int32_t kind) {
    wake(d, kind != 0);
    return Result::of(0);
  }
  static void wake(std::atomic<uint64_t>& d, bool sh) {
    lockevent_inc(LockEvent::sem_post_wake);
    arch::futex_wake(lockref::count_futex(d), 1, sh);
  }

  // Drops a registration; passes a wakeup on when units are left for others.
  static void unregister(std::atomic<uint64_t>& d, bool shared) {
    uint64_t old = d.fetch_sub(Word::kWaiterOne, arch::mo_hint);
    if (sem_detail::value_of(old) != 0 && Word::waiters_of(old) > 1)
      arch::futex_wake(lockref::count_futex(d), 1, shared);
  }

  // Held while registered; its destructor only acts on a forced unwind.
  struct Registration {
    std::atomic<uint64_t>& d;
    bool shared;
    bool armed = true;
    ~Registration() {
      if (armed) unregister(d, shared);
    }
  };

  template <class Sleeper>
  __attribute__((noinline)) int wait_slow(WaitCtx ctx) {
    LOCKSWAP_TRACE_ACQUIRE_BEGIN(&w_.data, kTraceSem);
    int rc = wait_queued<Sleeper>(ctx);
    LOCKSWAP_TRACE_ACQUIRE_END(&w_.data, kTraceSem, rc);
    return rc;
  }

  template <class Sleeper>
  int wait_queued(WaitCtx ctx) {
    const bool sh = shared();
    w_.data.fetch_add(Word::kWaiterOne, arch::mo_hint);
    Registration reg{w_.data, sh};
    for (;;) {
      if (Word::try_take(w_.data, Word::kWaiterOne, sh)) {  // takes a unit and drops the registration
        reg.armed = false;
        return 0;
      }
      lockevent_inc(LockEvent::sem_wait_sleep);
      int rc = Sleeper::sleep(lockref::count_futex(w_.data), 0, ctx, sh);
      if (rc == ETIMEDOUT || rc == EINTR) {
        reg.armed = false;
        unregister(w_.data, sh);
        return rc;
      }
    }
  }

  SemWords& w_;
};

using FutexSem = Semaphore<FutexSemWord>;

// The lockref semaphore: the lockref word when process-private; glibc's word
// and algorithm (FutexSem) when process-shared, each such call counted as
// delegated_to_glibc (see "Process-shared" in the design block).
class LockrefSem {
 public:
  static constexpr int kValueMax = SEM_VALUE_MAX;

  explicit LockrefSem(SemWords& w) : w_(w) {}

  static int init(SemWords& w, unsigned value, int32_t private_flag) { return FutexSem::init(w, value, private_flag); }

  int trywait() { return shared() ? glibc_word().trywait() : lockref_word().trywait(); }
  template <class Sleeper = SemPlainSleeper>
  int wait(const WaitCtx& ctx) {
    return shared() ? glibc_word().template wait<Sleeper>(ctx) : lockref_word().template wait<Sleeper>(ctx);
  }
  template <class Result = sem_detail::ErrorCode>
  int post() {
    return shared() ? glibc_word().template post<Result>() : lockref_word().template post<Result>();
  }

  int value() const { return static_cast<int>(sem_detail::value_of(w_.data.load(arch::mo_hint))); }
  uint64_t waiters() const {
    uint64_t d = w_.data.load(arch::mo_hint);
    return shared() ? FutexSemWord::waiters_of(d) : LockrefSemWord::waiters_of(d);
  }
  bool shared() const { return w_.private_flag != 0; }

 private:
  Semaphore<LockrefSemWord> lockref_word() { return Semaphore<LockrefSemWord>{w_}; }
  FutexSem glibc_word() {
    lockevent_inc(LockEvent::delegated_to_glibc);
    return FutexSem{w_};
  }

  SemWords& w_;
};

}  // namespace lockswap
