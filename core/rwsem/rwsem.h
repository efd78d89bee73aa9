// core/rwsem/rwsem.h — the Linux rw_semaphore (kernel/locking/rwsem.c) for a thread's lock.
//
// Design
// ------
// The thread host of core/rwsem/rules.h, which holds the kernel's rules
// (wakeups, grants, the handoff rule, spinning) once for this host and the
// process-shared one (core/rwsem/shared.h), with both policies (RwsemSteal,
// v5.11+; RwsemRspin, v5.10) and their deviations from the kernel. This
// block says what the thread's representation adds: its words, its fast
// paths, and the rules only a lock that threads of one process share can
// have. The kernel facts are in docs/kernel-algorithms.md §1 (the optimistic
// spin queue, §2, is core/osq_lock.h); docs/rwsem.md gives each deviation in
// full, with what it costs and the measurements. The slow paths are
// core/rwsem/thread_host.cpp; the rules see this representation through
// core/rwsem/thread_rep.h.
//
// Words (all zero = unlocked, no waiters, no spinners; preload overlays them
// on zero-filled pthread objects):
//
//   count (u64)  bit 0      WRITER_LOCKED  a writer owns the lock
//                bit 1      WAITERS        the wait queue is non-empty
//                bit 2      HANDOFF        the first waiter is owed the lock
//                bit 3      WOKEN          (thread rule) the head waiter, a
//                                          writer, was woken and will re-check
//                                          the lock before it sleeps again
//                bit 4      READER_FIRST   (thread rule) the head waiter is a
//                                          reader; changed only by the
//                                          wait_lock holder, a hint
//                bits 5-7   reserved
//                bits 8-62  readers        +BIAS per reader that did the
//                                          fetch_add, including readers about
//                                          to back out: readers>0 does NOT
//                                          prove the lock is read-held
//                bit 63     READFAIL       reader count overflowed: no grants
//   owner (u64)  ThreadSlot* of the last owner (64-byte aligned, type-stable:
//                a stale value is always safe to dereference) | the kernel's
//                flags (core/rwsem/policy.h): bit 0 READER_OWNED (a hint:
//                readers never clear it on unlock), bit 1 NONSPINNABLE
//                (v5.10: RD_NONSPINNABLE), bit 2 v5.10 only: WR_NONSPINNABLE
//   waitq (u64)  head of a circular doubly linked list of waiter records
//                (core/rwsem/wait_list.h) | bits 1-5: fork generation of the
//                wait_lock holder, mod 32 | bit 0 = wait_lock (a spinlock that
//                guards the list, WAITERS and HANDOFF transitions)
//   osq   (u32)  slot id of the last optimistic spinner (MCS tail), 0 = none
//
// Transitions (B = BIAS; "slow" = noinline code in core/rwsem/thread_host.cpp;
// the wake, grant and handoff rules are core/rwsem/rules.h's):
//   read_lock     count += B (acquire). No WRITER/WAITERS/HANDOFF/READFAIL in
//                 the result -> owned; else slow: steal / spin / queue.
//   write_lock    CAS 0 -> WRITER (acquire); else slow: spin, then queue.
//   read_unlock   count -= B (release, CAS); if only WAITERS would remain,
//                 the release and the wake happen under the wait_lock.
//   write_unlock  owner = 0; count -= WRITER (release); if WAITERS, wake.
//                 No WRITER bit (a stray unlock of a mutex): nothing changes.
//   downgrade     count += B - WRITER (release); wake queued readers.
//   grant         a queued reader's grant is published by storing nullptr
//                 into its record's `task` (release) under the wait_lock,
//                 where a reader giving up looks for it; its thread is
//                 unparked once the wait_lock is dropped.
//
// Memory order (the rules' own: core/rwsem/rules.h): the empty-queue reader
// shortcut uses an acquire load where the kernel has a relaxed load +
// smp_acquire__after_ctrl_dep(); the reader-preference, recursive and
// tryrdlock CASes that add a bias are acquire. A granted reader's acquire
// load of `task` pairs with the granter's release store. The wait_lock is
// taken with an acquire CAS (also when recovered from a fork ghost) and
// dropped with a release store of the head. Sleeping and waking are a Dekker
// pair on the sleeper's park word and its sleep token (core/rwsem/parking.h),
// so a wakeup is never lost and a runnable waiter is not woken again by every
// unlock. Reader preference rule (a) adds a second Dekker pair
// (core/read_pref.h); a spurious wakeup only re-checks and sleeps again.
//
// Cancellation: lock code runs with deferred cancellation (core/cancel.h:
// preload runs a whole acquisition of an asynchronous caller deferred, fast
// path included; the slow paths also open their own CancelScope for callers
// that did not), so an asynchronous cancellation can land only inside the
// futex sleep of a queued waiter, never between a fast path's atomic and its
// slow path, with the wait_lock held or inside the OSQ. Around that sleep
// WaitCtx::sleep enables the asynchronous type in a function without
// cleanups; the unwind then runs the waiter's QueueGuard
// (core/rwsem/cancel_guards.h), which leaves the queue exactly as a
// timed-out waiter does or, for a reader whose grant was already published,
// gives the read lock back. A cancellation that arrived while deferred acts
// when the caller's type is restored at the end of the slow path; if the
// lock was taken, HeldGuard releases it first. Fast paths make no calls.
//
// Fast paths carry no call, not even on a branch never taken: a call anywhere
// gives the function a stack frame on every path. Every rare branch that must
// call is a tail call to an out-of-line function that finishes the whole
// operation (a thread's first read lock, before it has a slot; the last
// reader leaving with waiters queued; preload's EDEADLK check, its delegation
// to glibc, and the write release). docs/rwsem.md, "Frame-free fast paths".
//
// What this host adds to the rules. Each is a lock event where it acts
// (core/lock_events_list.h), most are a setting (core/rwsem/tunables.h), and
// docs/rwsem.md has the section named in brackets.
//   * Scheduler stand-ins: owner_on_cpu() is "not asleep in lockswap and on
//     a CPU" by LOCKSWAP_ONCPU's source; need_resched() is SpinBudget
//     (core/spin_budget.h): owner_spin_ns on a writer or no owner, reader
//     phases credited back, the whole spin capped, and with
//     LOCKSWAP_ONCPU=rseq a spinner that sees it was preempted stops.
//     Without them a spinner would spin on a preempted owner
//     [Scheduler stand-ins].
//   * Spinner seats: at most max_spinners threads of a process spin at once;
//     the others queue. Spinners beyond the CPUs only keep the owner off them
//     [Spinner seats]. Seat holders then enter the OSQ.
//   * One contended lock (thread rules): barging, a lost race ending the
//     spin, no wakeup for an awake queued writer (WOKEN), politeness. The
//     kernel's rules pass the lock to another CPU on nearly every acquisition,
//     and each pass moves its cache line and the data it guards
//     [One contended lock].
//   * steal_read_held: on default-kind rwlocks a reader steals a read-held
//     lock past a queued writer, as glibc's reader preference does; the head
//     writer bounds its own sleep and asserts HANDOFF itself
//     [Stealing a read-held lock].
//   * Reader polls (RwsemSteal): a reader that meets a running writer polls
//     for it briefly instead of queueing, since a woken reader lands on its
//     waker's CPU and leaves another idle [Readers poll a running writer].
//   * READER_FIRST (thread rule): a reader that gets in past queued waiters
//     takes the wait_lock to bring queued readers along only when a reader
//     heads the queue; the kernel takes it for nothing whenever WAITERS is
//     set [READER_FIRST].
//   * Yield to a woken writer (rwlocks only): a writer that keeps finding the
//     head writer woken and still waiting yields its CPU once, since that
//     writer most likely waits for this very CPU [Yield to a woken writer].
//   * Handoff under oversubscription: the handoff deadline stretches with the
//     threads per CPU, since with many threads per CPU every waiter waits
//     longer than the kernel's deadline for the CPU alone
//     [Handoff under oversubscription].
//   * Bounded busy waits: preemption cannot be disabled, so waits for another
//     thread's store spin, then yield, then sleep [Bounded busy waits].
//   * Trylocks succeed wherever a blocking caller would get in without
//     sleeping (POSIX: fail only if held) [Trylocks].
//   * Timeouts and cancellation: a queued waiter may give up (timed locks,
//     cancellation) and leaves the queue as rwsem_del_wake_waiter() does.
//   * Recursive reads and reader preference (not in the kernel, rwsem::
//     ReadFlags): POSIX recursive reads, and glibc's default kinds' reader
//     preference (core/read_pref.h) [Recursive reads and reader preference].
//   * drop_bias_early: the 2016 RFC "stop active read lock ASAP"
//     [drop_bias_early].
//   * fork(): ghosts of threads lost in fork() are unlinked when met and a
//     wait_lock they held is taken over [fork()].
#pragma once
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "arch/atomic.h"
#include "core/rwsem/policy.h"
#include "core/rwsem/tunables.h"
#include "core/thread_registry.h"
#include "core/trace.h"
#include "core/wait_ctx.h"

namespace lockswap {
namespace rwsem {

// --- count word ---
inline constexpr uint64_t kWriterLocked = 1ull << 0;
inline constexpr uint64_t kFlagWaiters = 1ull << 1;
inline constexpr uint64_t kFlagHandoff = 1ull << 2;
inline constexpr uint64_t kFlagWoken = 1ull << 3;
inline constexpr uint64_t kFlagReaderFirst = 1ull << 4;
inline constexpr unsigned kReaderShift = 8;
inline constexpr uint64_t kReaderBias = 1ull << kReaderShift;
inline constexpr uint64_t kFlagReadFail = 1ull << 63;
// Like the kernel's RWSEM_READER_MASK this includes READFAIL.
inline constexpr uint64_t kReaderMask = ~(kReaderBias - 1);
inline constexpr uint64_t kReaderCountMask = kReaderMask & ~kFlagReadFail;
inline constexpr uint64_t kWriterMask = kWriterLocked;
inline constexpr uint64_t kLockMask = kWriterMask | kReaderMask;
// Releasing one read hold from `c` would leave only WAITERS: the lock becomes
// free with waiters queued, none of them known to be awake (WOKEN).
inline constexpr bool last_reader_with_waiters(uint64_t c) {
  return ((c - kReaderBias) & (kLockMask | kFlagWaiters | kFlagWoken)) == kFlagWaiters;
}
inline constexpr uint64_t kReadFailedMask = kWriterMask | kFlagWaiters | kFlagHandoff | kFlagReadFail;
inline constexpr uint64_t kUnlocked = 0;
// One reader in, no flag set: what a read unlock finds most often.
inline constexpr uint64_t kLoneReader = kReaderBias;
static_assert(!last_reader_with_waiters(kLoneReader), "a lone reader without waiters releases on the fast path");

static_assert(((kWriterLocked | kFlagWaiters | kFlagHandoff | kFlagWoken) & kReaderMask) == 0,
              "flag bits sit below the reader field");
static_assert((kLockMask & (kFlagWaiters | kFlagHandoff | kFlagWoken)) == 0, "lock bits and queue flags are disjoint");
static_assert((kFlagWoken & (kWriterLocked | kFlagWaiters | kFlagHandoff)) == 0, "WOKEN has its own bit");
static_assert((kFlagReaderFirst & (kReaderMask | kWriterLocked | kFlagWaiters | kFlagHandoff | kFlagWoken)) == 0,
              "READER_FIRST has its own bit below the reader field");
static_assert((kReadFailedMask & kFlagReaderFirst) == 0, "a reader never fails the fast path because of READER_FIRST");
static_assert((kReadFailedMask & kReaderCountMask) == 0, "a reader never fails because of other readers");
static_assert((kUnlocked & (kLockMask | kFlagWaiters | kFlagHandoff)) == 0, "zero is unlocked, no waiters");
static_assert(kReaderCountMask >> kReaderShift == (1ull << 55) - 1, "55-bit reader field, as in the kernel");

inline constexpr uint64_t reader_count(uint64_t count) { return (count & kReaderCountMask) >> kReaderShift; }

// How a reader may enter (not in the kernel; docs/rwsem.md, "Recursive reads
// and reader preference").
enum ReadFlags : unsigned {
  kReadPlain = 0,          // the kernel's rules
  kReadHoldsThis = 1,      // the caller holds a read lock of this lock: recursive read
  kReadBehindWriters = 2,  // glibc's writer-nonrecursive kind: never pass queued waiters
  kReadReaderPref = 4,     // default kind: reader preference rules (core/read_pref.h)
};
inline constexpr ReadFlags operator|(ReadFlags a, ReadFlags b) {
  return static_cast<ReadFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}

// What the count word lets a reader that has not queued do, stated once for
// the blocking path (which decides after its fetch_add, its own bias in
// `count`: own_bias 1; 0 after drop_bias_early) and the trylock (which
// decides on a loaded count before its CAS: own_bias 0). The owner word
// (stealing's anti-starvation rule, spinning) and the reader-preference
// rules' own conditions are the caller's to ask next.
struct ReaderEntry {
  bool recursive;          // kReadHoldsThis, read-held by others: passes any queue
  bool stays_behind;       // kReadBehindWriters with waiters queued: it queues
  bool unqueued;           // may steal (v5.11) / spin (v5.10): no writer, no handoff, nothing to stay behind
  bool preference;         // kReadReaderPref, read-held by others: rules (a) and (c) may let it in
  uint64_t other_readers;  // readers in besides itself
  constexpr bool operator==(const ReaderEntry&) const = default;
};
constexpr ReaderEntry reader_may_enter(uint64_t count, uint64_t own_bias, ReadFlags flags) {
  const bool held_by_others = !(count & kWriterLocked) && reader_count(count) > own_bias;
  const bool stays_behind = (flags & kReadBehindWriters) && (count & kFlagWaiters);
  return {.recursive = (flags & kReadHoldsThis) && held_by_others,
          .stays_behind = stays_behind,
          .unqueued = !stays_behind && !(count & (kWriterLocked | kFlagHandoff)),
          .preference = (flags & kReadReaderPref) && held_by_others,
          .other_readers = reader_count(count) - own_bias};
}
}  // namespace rwsem

static_assert(alignof(ThreadSlot) > RwsemSteal::kOwnerFlags && alignof(ThreadSlot) > RwsemRspin::kOwnerFlags,
              "owner flags fit below a ThreadSlot pointer");

// Storage for tests; preload uses its own struct with the same members.
struct RwsemWords {
  std::atomic<uint64_t> count{0};
  std::atomic<uint64_t> owner{0};
  std::atomic<uint64_t> waitq{0};
  std::atomic<uint32_t> osq{0};
};

namespace rwsem_detail {

// waitq word: Waiter* (64-byte aligned) | bits 1-5: fork generation of the
// wait_lock holder (mod 32) | bit 0: wait_lock.
namespace wait_lock {
inline constexpr uint64_t kLockBit = 1;
inline constexpr uint64_t kTagMask = 0x3e;
inline constexpr uint64_t tag(uint32_t generation) { return (uint64_t{generation} << 1) & kTagMask; }
}  // namespace wait_lock

// The four words of one lock, whatever struct the caller keeps them in.
struct WordRefs {
  std::atomic<uint64_t>& count;
  std::atomic<uint64_t>& owner;
  std::atomic<uint64_t>& waitq;
  std::atomic<uint32_t>& osq;
  bool exclusive_only;  // only ever taken exclusively (the mutex): its own politeness
};

// Storage S declares kExclusiveOnly when it is a mutex's words. A constant:
// the fast paths' bridges to the slow paths read no tunable.
template <class S>
constexpr bool exclusive_only_of() {
  if constexpr (requires { S::kExclusiveOnly; }) return S::kExclusiveOnly;
  return false;
}
// The politeness of a lock of that kind (read on the writer's queue path only).
inline uint64_t polite_ns_of(const RwsemTunables& t, bool exclusive_only) {
  return exclusive_only ? t.exclusive_polite_ns : t.polite_ns;
}

// Slow paths (core/rwsem/thread_host.cpp), instantiated there for both policies.
template <class Policy>
struct SlowPaths {
  // Fast-path reader failed; `count` is what its fetch_add returned (bias included).
  // WaitCtx by value (16 bytes, two registers): the fast path never spills it.
  static int read(const WordRefs& r, uint64_t count, WaitCtx ctx, rwsem::ReadFlags flags);
  static int read_try(const WordRefs& r, rwsem::ReadFlags flags);
  static int write(const WordRefs& r, WaitCtx ctx);
  static void wake(const WordRefs& r);              // rwsem_wake()
  // up_write() when the count is not exactly WRITER_LOCKED (waiters queued):
  // the release happens under the wait_lock (see write_unlock()).
  // False: no writer held the lock (nothing released).
  static bool write_unlock_slow(const WordRefs& r);
  // up_read() of the last reader with waiters queued: released under the
  // wait_lock, as write_unlock_slow().
  static void read_unlock_last(const WordRefs& r);
  static void downgrade_wake(const WordRefs& r);
};
static_assert(sizeof(WaitCtx) <= 16, "passed in registers to the slow paths");
extern template struct SlowPaths<RwsemSteal>;
extern template struct SlowPaths<RwsemRspin>;

// Waiters currently queued (takes the wait_lock; for tests and diagnostics).
// `count`, if given, gets its queue flags fixed should the wait_lock have to
// be recovered from a thread lost in fork().
std::size_t queued_waiters(std::atomic<uint64_t>& waitq, std::atomic<uint64_t>* count = nullptr);
// Spinner seats (core/rwsem/thread_host.cpp): false when max_spinners threads of the
// process spin already. Every optimistic spin holds one.
bool take_spinner_seat();
void give_back_spinner_seat();
// In a fork child: spinner seats held by threads that did not survive come back.
void after_fork_in_child();

// Mark the lock reader-owned by `who` (slot pointer, maybe with flag bits),
// keeping the bit that tells readers not to spin (v5.11: NONSPINNABLE,
// v5.10: RD_NONSPINNABLE — bit 1 in both).
template <class Policy>
inline void set_reader_owned(std::atomic<uint64_t>& owner, uint64_t who) {
  uint64_t keep = owner.load(arch::mo_hint) & Policy::kRdNonspinnable;
  owner.store(who | rwsem::kReaderOwned | keep, arch::mo_hint);
}

inline uint64_t owner_value(const ThreadSlot& s) { return reinterpret_cast<uint64_t>(&s); }

}  // namespace rwsem_detail

template <class Policy, class S>
struct Rwsem {
  // 0, or ctx.give_up_code() (EBUSY for try_once, ETIMEDOUT for until).
  // Not in the kernel (rwsem::ReadFlags): kReadHoldsThis — the caller holds
  // a read lock of this lock (recursive read: enter past queued writers and
  // HANDOFF); kReadBehindWriters — glibc's writer-nonrecursive kind: with
  // waiters queued, never steal or spin past them; kReadReaderPref — glibc's
  // default kinds: the reader preference rules of core/read_pref.h.
  static int read_lock(S& s, const WaitCtx& ctx, rwsem::ReadFlags flags = rwsem::kReadPlain) {
    if (ctx.mode == WaitCtx::Mode::try_once) return read_try(s, flags);
    uint64_t c;
    if (__builtin_expect(read_fast(s, c), 1)) return 0;
    return read_slow(s, c, ctx, flags);
  }

  // down_read's fast path on its own, for callers that keep per-thread
  // bookkeeping around it: true = acquired; false = `c` (the count after our
  // fetch_add, bias still held) must go to read_slow().
  // A thread's first lock call has no slot yet: read_slow() sees a `c`
  // without failure bits and only records the owner (attaching the thread is
  // a call, which would cost every fast path a stack frame).
  static bool read_fast(S& s, uint64_t& c) {
    c = s.count.fetch_add(rwsem::kReaderBias, arch::mo_lock) + rwsem::kReaderBias;
    if (__builtin_expect((c & rwsem::kReadFailedMask) != 0, 0)) return false;
    ThreadSlot* me = t_local.slot;
    if (__builtin_expect(me == nullptr, 0)) return false;
    rwsem_detail::set_reader_owned<Policy>(s.owner, rwsem_detail::owner_value(*me));
    return true;
  }

  // Out-of-line bridges to the slow paths: the WordRefs (four references) is built
  // here, not in the inline fast paths, so those need no stack frame.
  __attribute__((noinline)) static int read_slow(S& s, uint64_t c, WaitCtx ctx,
                                                 rwsem::ReadFlags flags = rwsem::kReadPlain) {
    LOCKSWAP_TRACE_ACQUIRE_BEGIN(&s, kTraceRead);
    int rc = SlowPaths::read(ref(s), c, ctx, flags);
    LOCKSWAP_TRACE_ACQUIRE_END(&s, kTraceRead, rc);
    return rc;
  }
  __attribute__((noinline)) static int read_try(S& s, rwsem::ReadFlags flags = rwsem::kReadPlain) {
    return SlowPaths::read_try(ref(s), flags);
  }

  static int write_lock(S& s, const WaitCtx& ctx) {
    if (__builtin_expect(write_fast(s), 1)) return 0;
    return write_slow(s, ctx);
  }

  // down_write's fast path on its own: CAS 0 -> WRITER_LOCKED.
  static bool write_fast(S& s) {
    uint64_t expected = rwsem::kUnlocked;
    if (!s.count.compare_exchange_strong(expected, rwsem::kWriterLocked, arch::mo_lock, arch::mo_hint)) return false;
    s.owner.store(rwsem_detail::owner_value(self_slot()), arch::mo_hint);
    return true;
  }

  // Like write_unlock(): the last reader leaving a lock with waiters queued
  // releases it under the wait_lock (SlowPaths::read_unlock_last()), so that no
  // woken waiter can destroy and unmap the lock while this thread still
  // touches it. A fetch_sub cannot tell beforehand whether it is that last
  // reader, so the release is a CAS (a retry only when another reader or a
  // waiter changed the count in between).
  static void read_unlock(S& s) {
    if (__builtin_expect(!read_release_fast(s), 0)) read_unlock_last(s);
  }
  // read_unlock() without its slow path: false (nothing done) when this is
  // the last reader with waiters queued, which read_unlock_last() releases.
  // The first CAS guesses the count (this reader alone, nothing queued)
  // instead of loading it: a load of a line another CPU wrote takes it
  // shared and the CAS must then fetch it again for writing, two
  // core-to-core transfers where the guess costs one, right or wrong (a
  // failed lock cmpxchg owns the line too and returns the count). A wrong
  // guess costs a second locked instruction (docs/rwsem.md, "Read unlock
  // guesses the count").
  static bool read_release_fast(S& s) {
    uint64_t c = rwsem::kLoneReader;
    while (!s.count.compare_exchange_weak(c, c - rwsem::kReaderBias, arch::mo_unlock, arch::mo_hint))
      if (__builtin_expect(rwsem::last_reader_with_waiters(c), 0)) return false;
    return true;
  }
  __attribute__((noinline)) static void read_unlock_last(S& s) { SlowPaths::read_unlock_last(ref(s)); }

  // Not the kernel's fetch_sub-then-wake: with waiters queued, the release
  // happens while the wait_lock is held, so that no queued waiter can take
  // the lock, release it, destroy and unmap it (POSIX allows that to the last
  // user) before this thread's wakeup has stopped touching the lock's memory.
  // The uncontended path is one CAS, as many instructions as the fetch_sub.
  // Returns false when no writer held the lock (nothing changed): the mutex
  // variant keeps glibc's account of such stray unlocks.
  static bool write_release(S& s) {
    s.owner.store(0, arch::mo_hint);  // ordered before the release below
    uint64_t expected = rwsem::kWriterLocked;
    if (__builtin_expect(s.count.compare_exchange_strong(expected, rwsem::kUnlocked, arch::mo_unlock, arch::mo_hint), 1))
      return true;
    return write_unlock_slow(s);
  }
  static void write_unlock(S& s) { write_release(s); }

  // Write -> read without a window in which another writer could get in.
  static void downgrade(S& s) {
    uint64_t old = s.count.fetch_add(rwsem::kReaderBias - rwsem::kWriterLocked, arch::mo_unlock);
    rwsem_detail::set_reader_owned<Policy>(s.owner, rwsem_detail::owner_value(self_slot()));
    if (old & rwsem::kFlagWaiters) SlowPaths::downgrade_wake(ref(s));
  }

  static bool write_locked(const S& s) { return (s.count.load(arch::mo_hint) & rwsem::kWriterLocked) != 0; }
  // Reader biases in the count (includes readers about to back out).
  static uint64_t readers(const S& s) { return rwsem::reader_count(s.count.load(arch::mo_hint)); }
  static std::size_t waiters(S& s) { return rwsem_detail::queued_waiters(s.waitq, &s.count); }

 private:
  using SlowPaths = rwsem_detail::SlowPaths<Policy>;
  static rwsem_detail::WordRefs ref(S& s) {
    return {s.count, s.owner, s.waitq, s.osq, rwsem_detail::exclusive_only_of<S>()};
  }
  __attribute__((noinline)) static int write_slow(S& s, WaitCtx ctx) {
    LOCKSWAP_TRACE_ACQUIRE_BEGIN(&s, kTraceWrite);
    int rc = SlowPaths::write(ref(s), ctx);
    LOCKSWAP_TRACE_ACQUIRE_END(&s, kTraceWrite, rc);
    return rc;
  }
  __attribute__((noinline)) static bool write_unlock_slow(S& s) { return SlowPaths::write_unlock_slow(ref(s)); }
};

}  // namespace lockswap
