// core/rwsem/shared.h — the Linux rw_semaphore, process-shared, on three
// 32-bit words whose owner initialises them to 1<<29, 0x7fffffff, 0x7fffffff.
//
// Design
// ------
// The process-shared host of core/rwsem/rules.h, which holds the kernel's
// rules (docs/kernel-algorithms.md §1: wakeups, grants, the handoff rule,
// stealing, spinning) once for this host and the thread's
// (core/rwsem/rwsem.h), with both policies (RwsemSteal, v5.11+; RwsemRspin,
// v5.10) and their deviations from the kernel. This block says what this
// representation adds. It serves locks in memory that several processes map
// at different addresses, with room for three 4-byte words only:
// PostgreSQL's LWLock (+4, +8, +12; preload/lwlock/). No pointer is ever
// stored in a lock: a process is named by its number (`proc`, 0..2^20), and
// each process has one waiter record in a side table (`Records`, shared by
// all processes, indexed by that number). The slow paths are
// core/rwsem/shared_host.cpp; the rules see this representation through
// core/rwsem/shared_rep.h. The kernel's rules only: none of the thread
// host's own (barging, WOKEN, politeness, yield, READER_FIRST, reader polls,
// reader preference, recursion, timeouts, cancellation, fork handling).
//
// Words (each initial value means "unlocked, no waiters, no owner"):
//   count (u32, raw)  bit 0      WRITER_LOCKED
//                     bit 1      WAITERS        the wait list is non-empty
//                     bit 2      HANDOFF        the first lock-taking waiter is owed the lock
//                     bit 3      WAIT_LOCK      the wait list's spinlock (not in the kernel's count)
//                     bits 4-6   SPINNERS       optimistic spinners on this lock (the OSQ stand-in)
//                     bit 7      reserved, 0
//                     bits 8-28  readers        +BIAS per reader that did its add, as in the kernel
//                     bit 29     ONE            constant 1 (the owner's initial value); bits 30-31: 0
//   owner (u32, stored ^ 0x7fffffff)  bits 3-23: proc + 1 of the last owner (0: none or unknown)
//                     | the kernel's flags (core/rwsem/policy.h): bit 0 READER_OWNED | bit 1
//                     NONSPINNABLE (v5.10: RD_NONSPINNABLE) | bit 2 v5.10 only: WR_NONSPINNABLE.
//                     A hint, as in the kernel. Stored XOR: a flag is set by clearing its bit.
//   waitq (u32, stored ^ 0x7fffffff)  proc + 1 of the wait list's head (0: empty). The list
//                     is circular and doubly linked through the records' next/prev.
//
// Waiter kinds: reader, writer (the kernel's), and two the kernel has not:
// until_free (wait until the lock is released, without taking it) and
// var_wait (the same, or until the exclusive holder changes a 64-bit variable
// the caller watches). Neither takes the lock, so neither is ever the "first
// waiter" of the handoff and wake rules (first_taker()); every wake of a
// freed lock (WAKE_ANY) takes all of them off the list and wakes them first.
//
// Transitions ("under WL": with the wait_lock held; wake, grant and handoff
// are the rules'):
//   read fast    count += BIAS (acquire); WRITER|WAITERS|HANDOFF in the result: slow.
//   write fast   CAS: no readers, writer, WAITERS or HANDOFF -> | WRITER (acquire).
//   read unlock  count -= BIAS (release); if only WAITERS remain: wake.
//   write unlock owner = 0; count -= WRITER (release); if WAITERS: wake.
//   grant        a granted reader's record is taken off the list and chained
//                through `wake_next`; its `wait` is cleared (release) and its
//                futex woken once WL is dropped.
//   until_free   under WL: try to take the lock (ignoring WAITERS, as a
//                spinner); else queue, set WAITERS, and sleep unless that
//                RMW's result shows the lock free and no HANDOFF (a lock
//                owed to the first waiter will be released later: a wake).
//   var wait     under WL: lock not write-held -> free; variable (read under
//                WL) changed -> its value; else queue as var_wait and sleep.
//   update var   under WL: store the variable, take every var_wait waiter
//                off and wake it. A var_wait waiter reads the variable under
//                WL and an updater writes it under WL: one sees the other,
//                so no wakeup is lost.
//
// Memory order (the rules' own: core/rwsem/rules.h): this host's queueing
// RMWs of `count` (WAITERS, a queued reader's bias) are sequentially
// consistent. The wait_lock is an acquire fetch_or and a release fetch_and
// of WAIT_LOCK. `owner`, `sleeping`, SPINNERS are hints (relaxed). A
// record's list fields are written under WL only. A record taken off the
// list has its `wait` cleared after WL is dropped, each `wake_next` read
// before that store (the record's process may reuse it at once); a woken
// writer stays on the list, so its `wait` is cleared under WL, while it
// cannot have left for another lock. A futex wake that lands on a reused
// record is a spurious wake: every sleeper re-checks.
//
// What this representation adds to the rules:
//   * WAIT_LOCK lives in `count` (no room for a fourth word), a test-and-set
//     spinlock with core/backoff.h's spin-yield-sleep, where the kernel has a
//     queued raw spinlock with preemption off. Fast paths ignore the bit.
//   * No OSQ (no room for its tail, and its MCS nodes would be per thread):
//     at most max_spinners() spinners per lock (SPINNERS, CPUs - 1, 1..7);
//     a spinner that finds no seat queues. The spinners race on `count`
//     instead of queueing behind one another.
//   * owner_on_cpu() is "the owner's record is not asleep in lockswap"
//     (`sleeping`, kept around every futex sleep); need_resched() is a time
//     budget (owner_spin_ns) per spin on a writer or on no owner, with no
//     cap and no preemption detector (shared_rep.h, DeadlineBudget): a
//     writer spinning on readers runs the reader phase to its threshold and
//     marks the lock non-spinnable, which ends a v5.10 reader stream.
//   * A v5.10 reader that backs its bias out (before it spins, or after a
//     failed attempt while spinning) does it like up_read() (the rules'
//     kBackOutWakes): if that leaves only WAITERS, it wakes, so no backed-out
//     bias hides a release from the wait list. (A waker's grant bias backed
//     out because a writer got in needs no wake: that writer's release sees
//     WAITERS.)
//   * The handoff deadline does not stretch with oversubscription (the
//     thread host's does): the kernel's 4 ms (tunables handoff_ns).
//   * Trylocks are the kernel's down_*_trylock() (fail on WAITERS), but
//     until_free's attempt ignores WAITERS: it is a spinner's attempt.
//   * Sleeps are process-shared futex waits of the waiter's record; a signal
//     only ends the futex wait, the waiter re-checks and sleeps again (no
//     timeout, no cancellation: a lock waiter waits until it is served).
//   * A read unlock that leaves only WAITERS wakes without clearing
//     WR_NONSPINNABLE first (the kernel's up_read() clears it; the queue's
//     own cond_wake() does, and the next writer owner's store).
//   * A process killed anywhere can leave the lock's words inconsistent (a
//     held WAIT_LOCK or bias, a SPINNERS seat, a queued record): its owner
//     re-creates every lock after such a death (PostgreSQL does), so nothing
//     is recovered. Records of other locks are untouched.
#pragma once
#include <atomic>
#include <cstdint>

#include "arch/atomic.h"
#include "core/rwsem/policy.h"
#include "core/wait_ctx.h"

namespace lockswap::rwshared {

// --- count ---
inline constexpr uint32_t kWriterLocked = 1u << 0;
inline constexpr uint32_t kWaiters = 1u << 1;
inline constexpr uint32_t kHandoff = 1u << 2;
inline constexpr uint32_t kWaitLock = 1u << 3;
inline constexpr unsigned kSpinnerShift = 4;
inline constexpr uint32_t kSpinnerOne = 1u << kSpinnerShift;
inline constexpr uint32_t kSpinnerMask = 7u << kSpinnerShift;
inline constexpr unsigned kReaderShift = 8;
inline constexpr uint32_t kReaderBias = 1u << kReaderShift;
inline constexpr uint32_t kReaderMask = ((1u << 21) - 1) << kReaderShift;
inline constexpr uint32_t kOne = 1u << 29;
inline constexpr uint32_t kLockMask = kWriterLocked | kReaderMask;
inline constexpr uint32_t kReadFailed = kWriterLocked | kWaiters | kHandoff;
inline constexpr uint32_t kFreeCount = kOne;
static_assert((kWriterLocked | kWaiters | kHandoff | kWaitLock) == 0xf, "flags in bits 0-3");
static_assert((kSpinnerMask & (0xfu | kReaderMask | kOne)) == 0 && kSpinnerMask >> kSpinnerShift == 7, "3-bit spinner field");
static_assert((kReaderMask & kOne) == 0 && kReaderMask >> kReaderShift == (1u << 21) - 1, "21-bit reader field below bit 29");
static_assert(kReaderMask + kReaderBias == kOne, "the reader field ends where the constant bit starts");
static_assert((kFreeCount & (kLockMask | kWaiters | kHandoff | kWaitLock | kSpinnerMask)) == 0, "the initial value is free");
static_assert((kReadFailed & kWaitLock) == 0, "fast paths ignore the wait_lock");

// --- owner and waitq: stored XOR kStoredXor, so that the initial value decodes to 0 ---
inline constexpr uint32_t kStoredXor = 0x7fffffff;
inline constexpr uint32_t kReaderOwned = 1u << 0;
inline constexpr unsigned kOwnerShift = 3;
inline constexpr int32_t kMaxProcs = 1 << 20;  // process numbers 0 .. kMaxProcs - 1
static_assert(uint32_t{kMaxProcs} << kOwnerShift < (1u << 24), "proc + 1 fits bits 3-23 of the owner");
static_assert(kMaxProcs < (1 << 21) - 1, "every process's bias fits the reader field");
static_assert(uint32_t{RwsemSteal::kOwnerFlags} < (1u << kOwnerShift) && uint32_t{RwsemRspin::kOwnerFlags} < (1u << kOwnerShift),
              "the policies' owner flags sit below the process number");
static_assert(uint32_t{RwsemSteal::kOwnerFlags & rwsem::kReaderOwned} == kReaderOwned, "READER_OWNED is the kernel's bit 0");

inline constexpr int32_t kNoProc = -1;
inline constexpr uint32_t owner_of(int32_t proc) { return proc < 0 ? 0 : uint32_t(proc + 1) << kOwnerShift; }
inline constexpr int32_t owner_proc(uint32_t owner) { return int32_t(owner >> kOwnerShift) - 1; }
static_assert(owner_proc(owner_of(0) | 7) == 0 && owner_proc(0) == kNoProc && owner_of(kNoProc) == 0);

// The lock's three words: count at +0, owner at +4, waitq at +8.
struct Words {
  std::atomic<uint32_t> count;
  std::atomic<uint32_t> owner;
  std::atomic<uint32_t> waitq;
};
static_assert(sizeof(Words) == 12);

enum class Kind : uint32_t { reader, writer, until_free, var_wait };

// One process's waiter record, in the side table.
struct Waiter {
  std::atomic<uint32_t> wait;      // the futex word: 1 while queued, 0 once granted or woken
  std::atomic<uint32_t> sleeping;  // 1 while in a futex sleep: owner_on_cpu()'s stand-in
  Kind kind;
  int32_t next, prev;              // the wait list (under WL)
  int32_t wake_next;               // the waker's chain, once off the list
  uint32_t last_rowner;            // v5.10: the owner seen before spinning
  bool handoff_set;
  uint64_t deadline_ns;            // the handoff deadline
};
static_assert(sizeof(Waiter) == 40);

struct Records {
  Waiter* table;
  Waiter& at(int32_t proc) const { return table[proc]; }
};

// How a waiter sleeps: the WaitCtx (family, shared futex) and the hook run
// before its first sleep (the host's wait event). `slept` says it did.
struct Sleeper {
  WaitCtx ctx;
  void (*first_sleep)(void*) = nullptr;
  void* arg = nullptr;
  bool slept = false;
  // Sleep until the record's `wait` is 0; true if this call slept.
  bool until_woken(Waiter& self);
};

template <class Policy>
struct SharedRwsem {
  static constexpr uint32_t kRdNonspinnable = uint32_t{Policy::kRdNonspinnable};

  static bool read_trylock(Words& w, int32_t me) {
    uint32_t c = w.count.load(arch::mo_hint);
    while (!(c & kReadFailed))
      if (w.count.compare_exchange_weak(c, c + kReaderBias, arch::mo_lock, arch::mo_hint)) {
        set_reader_owned(w, me);
        return true;
      }
    return false;
  }
  // The fast path ignores WAIT_LOCK and SPINNERS: one CAS from a loaded
  // value, where the kernel CASes from the one unlocked value.
  static bool write_trylock(Words& w, int32_t me) {
    uint32_t c = w.count.load(arch::mo_hint);
    while (!(c & (kLockMask | kWaiters | kHandoff)))
      if (w.count.compare_exchange_weak(c, c | kWriterLocked, arch::mo_lock, arch::mo_hint)) {
        set_owner(w, owner_of(me));
        return true;
      }
    return false;
  }
  // A read lock for a caller that holds one already (not in the kernel):
  // no writer can hold the lock, so the bias goes in past WAITERS and
  // HANDOFF. Queueing behind a waiting writer would wait for ourselves.
  static void read_again(Words& w) { w.count.fetch_add(kReaderBias, arch::mo_lock); }
  // down_read / down_write (me: this process's record, >= 0).
  static void read_lock(Words& w, const Records& rs, int32_t me, Sleeper& s) {
    uint32_t c = w.count.fetch_add(kReaderBias, arch::mo_lock) + kReaderBias;
    if (__builtin_expect(!(c & kReadFailed), 1)) return set_reader_owned(w, me);
    read_slow(w, rs, me, c, s);
  }
  static void write_lock(Words& w, const Records& rs, int32_t me, Sleeper& s) {
    if (!write_trylock(w, me)) write_slow(w, rs, me, s);
  }
  static void read_unlock(Words& w, const Records& rs) {
    uint32_t c = w.count.fetch_sub(kReaderBias, arch::mo_unlock) - kReaderBias;
    if (__builtin_expect((c & (kLockMask | kWaiters)) == kWaiters, 0)) wake(w, rs);
  }
  static void write_unlock(Words& w, const Records& rs) {
    set_owner(w, 0);
    uint32_t c = w.count.fetch_sub(kWriterLocked, arch::mo_unlock) - kWriterLocked;
    if (__builtin_expect(c & kWaiters, 0)) wake(w, rs);
  }

  // Take the lock (exclusive or shared) if it can be taken at once, else
  // sleep until it is released. True: taken.
  static bool acquire_or_wait(Words& w, const Records& rs, int32_t me, bool exclusive, Sleeper& s);
  // LWLockWaitForVar: true when the lock is not write-held; false with
  // *newval when *var no longer equals `old`.
  static bool wait_for_var(Words& w, const Records& rs, int32_t me, const uint64_t* var, uint64_t old,
                           uint64_t* newval, Sleeper& s);
  // By the exclusive holder: set the variable, wake its waiters.
  static void update_var(Words& w, const Records& rs, uint64_t* var, uint64_t value);
  // Set the variable under the wait_lock (before a release).
  static void set_var(Words& w, uint64_t* var, uint64_t value);

  static bool write_locked(const Words& w) { return w.count.load(arch::mo_hint) & kWriterLocked; }
  static uint32_t readers(const Words& w) { return (w.count.load(arch::mo_hint) & kReaderMask) >> kReaderShift; }
  static uint32_t owner(const Words& w) { return w.owner.load(arch::mo_hint) ^ kStoredXor; }
  static void set_owner(Words& w, uint32_t o) { w.owner.store(o ^ kStoredXor, arch::mo_hint); }
  // rwsem_set_reader_owned(): keeps the bit that stops readers spinning.
  static void set_reader_owned(Words& w, int32_t proc) {
    set_owner(w, owner_of(proc) | kReaderOwned | (owner(w) & kRdNonspinnable));
  }

  static void read_slow(Words& w, const Records& rs, int32_t me, uint32_t c, Sleeper& s);
  static void write_slow(Words& w, const Records& rs, int32_t me, Sleeper& s);
  static void wake(Words& w, const Records& rs);  // rwsem_wake()
};

extern template struct SharedRwsem<RwsemSteal>;
extern template struct SharedRwsem<RwsemRspin>;

// Queued records of a lock (takes the wait_lock; tests and diagnostics).
unsigned queued(Words& w, const Records& rs);
// Spinners allowed on one lock at once: CPUs - 1, within 1..7.
uint32_t max_spinners();

}  // namespace lockswap::rwshared
