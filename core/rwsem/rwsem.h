// core/rwsem/rwsem.h — the Linux rw_semaphore (kernel/locking/rwsem.c), in userspace.
//
// Design
// ------
// A faithful port of the kernel's non-PREEMPT_RT rw_semaphore; the kernel
// facts it relies on are in docs/kernel-algorithms.md §1 (the optimistic spin
// queue, §2, is core/osq_lock.h). Two policies share one
// body of code and differ only in `if constexpr (Policy::reader_spinning)`:
//
//   RwsemSteal       Linux >= v5.11: readers never spin (here they poll a
//                    running writer briefly: "reader polls"); a reader that fails
//                    the fast path may "steal" the lock when no writer holds
//                    it and no HANDOFF is pending (1a728dff855a), except when
//                    the lock is very likely reader-owned (2f06f702925b).
//   RwsemRspin       Linux v5.3..v5.10: failed readers spin optimistically
//                    like writers, record `last_rowner`, retry once in a new
//                    reader phase, and reader spinning is adaptively disabled
//                    per lock with RD_NONSPINNABLE. Kept as in v5.10: spinning
//                    readers ignore queued writers, so while readers overlap
//                    and the count never reaches 0 a sleeping writer is never
//                    woken to assert HANDOFF (the starvation 2f06f702925b
//                    fixed in v5.11); adaptive disabling (alive: a writer's
//                    reader-phase threshold is not cut short by
//                    owner_spin_ns) usually breaks it.
// Everything else (handoff, wakeups, trylock) follows the current kernel
// (v5.19 / v6.3 rules) for both policies; see "Deviations" below.
//
// Words (all zero = unlocked, no waiters, no spinners; preload overlays them
// on zero-filled pthread objects):
//
//   count (u64)  bit 0      WRITER_LOCKED  a writer owns the lock
//                bit 1      WAITERS        the wait queue is non-empty
//                bit 2      HANDOFF        the first waiter is owed the lock
//                bit 3      WOKEN          (not in the kernel) the first waiter,
//                                          a writer, was woken and will re-check
//                                          the lock before it sleeps again:
//                                          unlocks release without the wait_lock
//                                          and wake nobody (see "Deviations")
//                bit 4      READER_FIRST   (not in the kernel) the first waiter
//                                          is a reader: published by the
//                                          wait_lock holder as it drops the
//                                          lock, cleared with WAITERS; a
//                                          reader that got in takes the
//                                          wait_lock to bring queued readers
//                                          along only then (see "Deviations")
//                bits 5-7   reserved
//                bits 8-62  readers        +BIAS (256) per reader that did the
//                                          fetch_add, including readers about
//                                          to back out: readers>0 does NOT
//                                          prove the lock is read-held
//                bit 63     READFAIL       reader count overflowed: no grants
//   owner (u64)  ThreadSlot* of the last owner (64-byte aligned, type-stable:
//                a stale value is always safe to dereference) | flags:
//                bit 0      READER_OWNED   last owner was a reader (a hint:
//                                          readers never clear it on unlock)
//                bit 1      NONSPINNABLE   (v5.10: RD_NONSPINNABLE) spinning on
//                                          this reader-owned lock timed out
//                bit 2      v5.10 only: WR_NONSPINNABLE
//   waitq (u64)  head of a circular doubly linked list of waiter records
//                (64-byte aligned; each lives in its thread's type-stable
//                ThreadSlot, on the stack only for a wait nested in a signal
//                handler) | bits 1-5: fork generation of the wait_lock
//                holder, mod 32 | bit 0 = wait_lock (a spinlock that guards
//                the list, WAITERS and HANDOFF transitions)
//   osq   (u32)  slot id of the last optimistic spinner (MCS tail), 0 = none
//
// Transitions (B = BIAS; "slow" = noinline code in core/rwsem.cpp):
//   read_lock     count += B (acquire). No WRITER/WAITERS/HANDOFF/READFAIL in
//                 the result -> owned; else slow: steal / spin / queue.
//   write_lock    CAS 0 -> WRITER (acquire); else slow: spin, then queue.
//   read_unlock   count -= B (release, CAS); if only WAITERS would remain,
//                 the release and the wake happen under the wait_lock.
//   write_unlock  owner = 0; count -= WRITER (release); if WAITERS, wake.
//                 No WRITER bit (a stray unlock of a mutex): nothing changes.
//   downgrade     count += B - WRITER (release); wake queued readers.
//   wake          under wait_lock: head writer -> wake it (it must win the
//                 lock itself); head reader -> grant the lock to up to 256
//                 queued readers, skipping writers, in one count update, then
//                 publish each grant (task = nullptr, release) and unpark.
//   handoff       a waiter queued longer than handoff_ns sets HANDOFF: fast
//                 paths, stealing readers, spinners and non-first writers
//                 then fail, so the first waiter gets the lock next.
//
// Memory order: every change of `count` is a read-modify-write, so the
// release sequence of an unlock runs through all later changes and any
// acquire RMW or acquire load that sees the lock free synchronizes with the
// last release (the empty-queue reader shortcut uses an acquire load where the
// kernel has a relaxed load + smp_acquire__after_ctrl_dep()). Lock RMWs are acquire, unlock RMWs are
// release; that includes the reader-preference, recursive and tryrdlock CASes
// that add a bias. A granted reader does not touch `count` itself: the granter's
// count RMW is acquire, and its release store of waiter.task pairs with the
// reader's acquire load, so the reader's critical section follows the last
// writer's. `owner` is only a hint and is accessed relaxed; the wait_lock is
// taken with an acquire CAS (also when recovered from a fork ghost) and
// dropped with a release store of the head. Parking: a sleeper reads its
// park word (acquire) before re-checking its condition, sets its slot's
// `blocked` flag and futex-waits on the value it read; a waker bumps the word
// after changing the condition and makes the futex_wake syscall only if it is
// the one that clears `blocked` (a seq_cst Dekker pair with the sleeper's
// flag store and futex_wait's barrier), so a wakeup is never lost and a
// runnable waiter is not woken again by every unlock. Reader preference rule
// (a) adds a second Dekker pair (core/read_pref.h): a queued reader registers
// (seq_cst) and then reads the asleep count; a read holder going to sleep
// bumps the asleep count (seq_cst) and then reads the registrations and
// unparks; other unparks only bump the park word, which the protocol above
// tolerates (a spurious wakeup re-checks and sleeps again).
//
// Cancellation: lock code runs with deferred cancellation (core/cancel.h:
// preload runs a whole acquisition of an asynchronous caller deferred, fast
// path included; the slow paths also open their own CancelScope for callers
// that did not), so an asynchronous cancellation can land only inside the
// futex sleep of a queued waiter, never between a fast path's atomic and its
// slow path, with the wait_lock held or inside the OSQ. Around that sleep
// WaitCtx::sleep enables the asynchronous type in a function without
// cleanups; the unwind then runs the waiter's QueueGuard,
// which leaves the queue exactly as a timed-out waiter does (HANDOFF and
// wakeups passed on) or, for a reader whose grant was already published,
// gives the read lock back. A cancellation that arrived while deferred acts
// when the caller's type is restored at the end of the slow path; if the
// lock was taken, HeldGuard releases it first. Fast paths make no calls.
//
// Fast-path cost (instructions of an idle lock+unlock pair through preload,
// counted by examples/bench/fastpath_callgrind.sh): a fast path that contains
// a call anywhere, even on a branch that is never taken, gets a stack frame
// on every path (the compiler sets the frame up where the branches that call
// meet), about 2 instructions per function. So every rarely taken branch that
// has to call is a tail call to an out-of-line function that finishes the
// whole operation: a thread's first read lock, before it has a slot
// (read_fast() fails and SlowPaths::read only records the owner); the last reader
// leaving with waiters queued (preload's read_unlock_last, bookkeeping
// included); preload's EDEADLK check of a write-held rwlock, its delegation
// to glibc, and the write release (out of line so that the read release
// keeps no frame). docs/measurements.md, "Frame-free fast paths", has the
// counts.
//
// Deviations from the kernel (userspace has no scheduler hooks):
//   * owner_on_cpu() -> !ghost and may_be_running(owner slot): not asleep in
//     lockswap, and on a CPU by LOCKSWAP_ONCPU's source (core/oncpu.h: exact
//     from the sched_switch eBPF map, else "not last seen on our CPU"); it is
//     also what stops an OSQ waiter whose predecessor is off CPU
//     (vcpu_is_preempted()). Polled every 16 spins, as the clock is.
//   * need_resched() -> (a) owner_spin_ns (5 us) of spinning on a writer
//     owner or on no owner, per optimistic spin (time in a reader phase is
//     credited back: that phase is bounded by rwsem_rspin_threshold()'s
//     10 us + 0.5 us/reader as in the kernel, so rwsem_opt_nospin,
//     set_nonspinnable and v5.10's adaptive disabling can fire again);
//     (b) owner_spin_ns + 100 us for the whole spin in any state, where the
//     kernel's spinner would meet a tick; (c) LOCKSWAP_ONCPU=rseq: the
//     spinner saw a clock gap of 50 us between two polls (it was preempted);
//     (d) with the bpf map, an owner that is runnable but off CPU stops the
//     spin through (owner_on_cpu), giving the CPU back to it. Events
//     rwsem_opt_owner_off / _budget / _preempted say which stopped a spin.
//     The OSQ wait and the HANDOFF waiter's spin are bounded by (a) too.
//   * spinner seats: at most max_spinners threads of a process spin at once
//     (default: its CPUs minus one, at least one; LOCKSWAP_RWSEM_SPINNERS);
//     the others queue and sleep at once (event rwsem_opt_crowded). The
//     kernel needs no such cap: spinners beyond the CPUs would meet
//     need_resched(); ours would only keep runnable threads, the owner
//     among them, off the CPUs (docs/measurements.md, "Spinner seats").
//   * one contended lock, few CPUs (the `sysbench mutex` shape): the kernel's
//     rules pass the lock to another CPU on nearly every acquisition — a
//     spinner or a woken waiter takes it the moment it is released — and
//     each pass moves the lock's cache line and the data it guards. Where a
//     cache-line transfer costs hundreds of ns (virtual CPUs: see
//     docs/measuring.md) that costs far more than the critical section, and
//     glibc, whose waiters sleep while the releaser re-takes the lock, runs
//     2-4x faster. Four rules keep the lock with the thread whose cache has
//     it, each a lock event (core/lock_events_list.h):
//       - barging (rwsem_wlock_barge): a writer entering the slow path takes
//         a free lock without HANDOFF at once. The kernel's writer does so in
//         the first round of rwsem_optimistic_spin(); our spinner seats
//         would otherwise send it to the queue behind a sleeping waiter.
//       - a lost race ends the spin (rwsem_opt_lost, spin_lost_races): a
//         spinner that saw the owner let go and still failed to take the
//         lock lost it to a thread that re-took it; it queues.
//       - an awake queued writer is not woken (rwsem_wake_awake): it
//         re-checks the lock after publishing its sleep token (a Dekker pair
//         with the unlocker's fence), so unlocks stop paying a wakeup and
//         stop bumping its park word, which kept it from ever sleeping. The
//         count's WOKEN bit says so without the wait_lock: set when the head
//         writer is woken, cleared under the wait_lock when it goes back to
//         sleep, takes the lock or leaves the head; while it is set an unlock
//         releases with one CAS, and readers of a read-mostly lock with a
//         writer queued stop taking the wait_lock on every last unlock.
//       - politeness (polite_ns, 50 us): a queued writer that was woken and
//         still lost the lock to the releaser (a writer, or a lone reader
//         while nobody else waits), or that finds it free just before
//         sleeping, sleeps up to polite_ns before trying again
//         (rwsem_polite_backoff / _woken / _timeout). Not after losing to
//         stealing readers with others queued: they hold it until the last
//         one's unlock, which wakes the writer anyway (backing off from them
//         cost read-mostly rwlocks 10-30% at 64 threads; docs/measurements.md,
//         "Read-mostly rwlocks"). A lock only ever taken exclusively (the
//         mutex: storage with kExclusiveOnly) waits exclusive_polite_ns,
//         500 us: the releaser runs on with the line on its CPU, which took
//         the 2-thread mutex from 0.6-0.8x the unpreloaded program to
//         1.4-2.0x in the slow placement mode, at 0-8% of the 64-thread mutex
//         (docs/measurements.md, "The 2-thread rwsem mutex, slow mode").
//     HANDOFF (handoff_ns) still bounds every waiter's wait. Each is a
//     setting (LOCKSWAP_RWSEM_BARGE, _LOST_RACES, _POLITE_US and
//     _MUTEX_POLITE_US; 0 restores the kernel's rule); measurements in
//     docs/measurements.md ("One contended lock").
//   * read-mostly, more threads than CPUs (steal_read_held,
//     LOCKSWAP_RWSEM_STEAL_READ_HELD, default-kind rwlocks only): a reader
//     steals a read-held lock past a queued writer (rwsem_rlock_steal_held),
//     as glibc's reader-preferring default lets it, where v5.11 refuses
//     (2f06f702925b) so that a stream of stealers cannot keep the count
//     above zero and leave the head writer unwoken forever. Here the head
//     writer instead sleeps no longer than its handoff deadline while
//     readers hold the lock, and then sets HANDOFF itself
//     (rwsem_handoff_timer), which ends the stealing: the kernel's bound on
//     a writer's wait, kept without a waker. On 2 CPUs with 16-64 threads
//     the kernel rule queued readers behind every writer and left a CPU
//     idle (docs/measurements.md, "Read-mostly rwlocks").
//   * reader polls (RwsemSteal; LOCKSWAP_RWSEM_SPIN=0 turns them off with
//     the writers' spinning): a reader that meets a writer owner polls for
//     it to leave, for at most owner_spin_ns and while that writer may be
//     running, keeping its bias, before it queues (rwsem_rlock_writer_poll).
//     v5.11 dropped reader spinning, and its readers sleep behind a writer.
//     Here a sleeping reader is woken onto its waker's CPU (no shared cache
//     exposed on the VMs measured), and with more threads than CPUs the
//     other CPU sat idle 40% of the time ("Where the time goes", below).
//     Polling keeps the reader on its CPU: at 90% reads rwsem went from
//     0.99x to 1.30x
//     the unpreloaded program (geometric mean; 1.32x glibc), every cell at
//     or above glibc, and 1.06x its previous self at 50% reads
//     (docs/measurements.md, "Readers poll a running writer").
//   * a reader that gets in past queued waiters (a steal, a v5.10 spin, a
//     read trylock) as the first reader takes the wait_lock to bring the
//     queued readers along only when READER_FIRST says a reader heads the
//     queue. The kernel takes it whenever WAITERS is set, and then its
//     rwsem_mark_wake(READ_OWNED) does nothing if a writer is first. On a
//     read-mostly lock with a writer queued that was nearly every read:
//     at 90% reads, 16 threads on 2 CPUs, 99% of reads were steals
//     (docs/measurements.md, "Read-mostly rwlocks"), each a wait_lock round
//     trip for nothing. Skipping on a stale READER_FIRST loses no wakeup: a
//     reader that queues on a read-held lock grants itself
//     (cond_wake_waiter()), and on a write-held one the writer's unlock,
//     which takes the wait_lock after the reader's, wakes it.
//   * yield to a woken writer (woken_yield_ns, LOCKSWAP_RWSEM_WOKEN_YIELD_US,
//     default 1 ms; rwlocks only): a writer entering the slow path that has
//     found the head writer woken (WOKEN) and still without the lock for
//     woken_yield_ns, through its whole run of barges and steals, calls
//     sched_yield() once before it barges again (rwsem_yield_woken). Where
//     no shared cache is exposed the woken writer lands on its waker's CPU,
//     behind the thread that keeps barging; nothing tells a userspace
//     barger (no need_resched()) that the thread it woke waits for its
//     CPU, so it runs out its time slice, and the woken writer cannot even
//     assert HANDOFF. With more threads than CPUs that made a
//     thread's share a matter of luck: runs of a whole time slice for some,
//     and at 64 threads on 2 vCPUs the least-served thread often did 2-10%
//     of the mean; with the yield 0.2-0.55. The price is in one place: with
//     frequent writes and tiny critical sections, where the lock otherwise
//     stays on one vCPU, the yielded thread moves to the other and the
//     lock's line starts crossing (50% reads, CS 1: 12-13% in the slow
//     placement mode; docs/measurements.md, "Yield to a woken writer").
//     The mutex keeps the kernel's rule: a releaser that runs on is what it
//     wants (exclusive_polite_ns), and the yield cost it 30-44%.
//   * handoff under oversubscription (handoff_stretch_max,
//     LOCKSWAP_RWSEM_HANDOFF_STRETCH, default 16): a waiter's handoff
//     deadline is handoff_ns times the process's threads per usable CPU
//     (core/thread_registry.h counts the attached threads), between 1 and
//     the maximum. The kernel's 4 ms is a few scheduler time slices for a
//     waiter among few runnable tasks; with 32 threads per CPU every thread
//     waits longer than that for the CPU alone, so nearly every queued
//     writer set HANDOFF (1,017 in 0.5 s at 64 threads, 90% reads, CS 100),
//     and each one stopped all stealing until the preempted read holders
//     had run again: rwsem lost 8-12% to glibc there, and the mutex at 64
//     threads ran 1.35x none with 4 ms against 1.62x with 50 ms
//     (docs/measurements.md, "Handoff under oversubscription"). With
//     threads <= CPUs nothing changes.
//   * preemption is not disabled, so loops that wait for another thread's
//     store (wait_lock, OSQ neighbours) spin 64 polls, yield 64 times, then
//     sleep 10 us doubling to 1 ms: never an unbounded busy loop. No
//     rt_task(): HANDOFF is requested only on timeout.
//   * write trylock succeeds whenever a spinner could take the lock (no lock
//     bits, no HANDOFF), not only from count == 0, so a free lock with a
//     waiter being woken does not report EBUSY (POSIX: fail only if held).
//     Read trylock likewise succeeds wherever a blocking reader would get in
//     without sleeping (v5.11 steal / v5.10 spin past queued waiters, the
//     recursive rule, reader preference (a) and (c)); the kernel's fails on
//     any WAITERS bit.
//   * kReadHoldsThis (not in the kernel): a thread that holds a read lock
//     of this lock re-enters it while read-held, even past queued writers or
//     HANDOFF (POSIX recursive reads). "Of this lock" is per lock bucket of
//     core/read_pref.h (64 per thread): a hold of another lock in the same
//     bucket counts too, costing fairness only.
//   * reader preference (glibc's default kinds only, kReadReaderPref): a reader
//     that would queue behind writers on a read-held lock enters when (a) a
//     thread holding a read lock of it sleeps inside lockswap, or (c) it is
//     SCHED_FIFO/RR above every queued writer (POSIX); a queued one also
//     after (b) reader_pref_ns (4 ms) of waiting, bringing every queued reader
//     along, once per read phase (pref_blocked on the first queued writer,
//     cleared when that writer is woken to a free lock). Queued default-kind
//     readers sleep in slices (the bound, doubling to 16 bounds) to re-check.
//     Each entry is a lock event (rwsem_rlock_reader_pref, _reader_pref_wait,
//     rwsem_rlock_rt). The writer-nonrecursive kind keeps the kernel's rules.
//   * drop_bias_early: the 2016 RFC "stop active read lock ASAP", applied to
//     this slow path (bias dropped first, re-taken by CAS when stealing).
//   * fork(): waiters whose thread did not survive are unlinked when met (their
//     records, in ghost slots, stay readable); a ghost tail in `osq` is reset;
//     a wait_lock whose holder tag is another fork generation is taken over
//     with an empty list (only ghosts can be queued behind a lost holder).
//     Tags are 5 bits: 32 nested forks with the same lock held across the
//     first would be missed. A reader bias a lost thread was giving back is
//     not recovered, and a lock a lost thread held stays held (as glibc).
//   * RwsemRspin uses the current handoff and wake rules, not v5.10's
//     writer_wait_state (d257cc8cb8d5 was backported to 5.10.y anyway). Its
//     rwsem_set_nonspinnable() sets RD|WR, and like 5.10.13 does nothing
//     when either one is already set.
//
// Where the time goes with more threads than CPUs (read-mostly, 16-64
// threads on 2 vCPUs; docs/measurements.md, "Where the time goes at 16 and
// 64 threads"): most threads sleep in the queue (writers waiting while
// barging writers and stealing readers take the lock), the few runnable
// ones gather on one CPU, and the scheduler leaves the other idle 40% of the
// time (no shared cache exposed: a woken thread is not steered to an idle
// CPU, a recently run one is not pulled). rwsem without reader polls did the
// most work per CPU-second of any lock measured on 1.1 CPUs; the futex lock's
// polling writers keep 2 CPUs busy at two thirds of the efficiency and lead.
// Keeping rwsem's queued writers runnable (yielding, short sleeps, polling,
// waking more writers) raised the CPUs used and lowered the throughput
// every time, so they sleep as the kernel's do; a reader meeting a running
// writer polls it instead (above), which helped.
#pragma once
#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstddef>
#include <cstdint>

#include "arch/atomic.h"
#include "core/thread_registry.h"
#include "core/trace.h"
#include "core/wait_ctx.h"

namespace lockswap {

// Set once by preload at start-up; read with plain loads on slow paths only.
struct RwsemTunables {
  uint64_t handoff_ns = 4'000'000;   // RWSEM_WAIT_TIMEOUT analogue (kernel: >= 4 ms)
  // Not in the kernel (see "Deviations"): with more threads than CPUs the
  // handoff deadline stretches by threads per CPU, up to this factor
  // (1: the kernel's fixed deadline).
  uint32_t handoff_stretch_max = 16;
  // Spin budget on a writer owner (or on no owner) per optimistic spin: the
  // need_resched() stand-in while that owner looks on-CPU (reader-owned
  // spinning has the kernel's own threshold; see "Deviations"). Without the
  // eBPF map an owner's preemption is seen only on our own CPU, so the bound
  // must be short (docs/measurements.md, "Owner spin budget").
  uint64_t owner_spin_ns = 5'000;
  bool writer_spin = true;           // optimistic spinning (and the handoff spin, reader polls) on/off
  uint32_t max_spinners = 0;         // threads of the process spinning at once (0: CPUs - 1, at least 1)
  bool drop_bias_early = false;      // 2016 RFC: failed fast-path reader drops its bias at once
  // Not in the kernel (see "Deviations"): a writer spin ends once it has seen
  // the lock released and taken by another thread this many times (0: never).
  uint32_t spin_lost_races = 1;
  // Not in the kernel: a writer entering the slow path takes a free lock
  // (no HANDOFF) at once, before spinning or queueing, seat or no seat.
  bool barge = true;
  // Not in the kernel: a queued writer that finds the lock free just before
  // sleeping sleeps this long (or until the next unlock) before retrying.
  uint64_t polite_ns = 50'000;
  // The same for a lock that is only ever taken exclusively (storage that
  // declares kExclusiveOnly: the mutex): longer, since no reader can be
  // kept waiting by it (docs/measurements.md, "The 2-thread rwsem mutex").
  uint64_t exclusive_polite_ns = 500'000;
  // Not in the kernel (see "Deviations": yield to a woken writer): a writer
  // entering the slow path that has found the head writer woken and still
  // not holding the lock for this long yields its CPU before it barges
  // (0: never).
  uint64_t woken_yield_ns = 1'000'000;
  // Reader preference bound (core/read_pref.h rule (b), default-kind rwlocks
  // only): a queued reader that waited this long while readers held the lock
  // enters past queued writers. The kernel's RWSEM_WAIT_TIMEOUT, 4 ms.
  uint64_t reader_pref_ns = 4'000'000;
  // Not in the kernel (see "Deviations"): on a default-kind rwlock a reader
  // steals a read-held lock past a queued writer (glibc's reader preference),
  // and the head writer bounds its sleep by its handoff deadline so that it
  // asserts HANDOFF, which ends the stealing, without a waker.
  bool steal_read_held = true;
};
extern RwsemTunables g_rwsem_tunables;

namespace rwsem {
// The handoff deadline's factor: threads per CPU (rounded down), within
// [1, stretch_max] (see "Deviations": handoff under oversubscription).
inline constexpr uint64_t handoff_stretch(uint32_t threads, uint32_t cpus, uint32_t stretch_max) {
  const uint64_t per_cpu = cpus == 0 ? 1 : threads / cpus;
  const uint64_t cap = stretch_max < 1 ? 1 : stretch_max;
  return std::clamp<uint64_t>(per_cpu, 1, cap);
}
static_assert(handoff_stretch(2, 2, 16) == 1 && handoff_stretch(64, 2, 16) == 16 && handoff_stretch(16, 2, 16) == 8);
static_assert(handoff_stretch(64, 2, 1) == 1 && handoff_stretch(1, 8, 16) == 1 && handoff_stretch(5, 0, 16) == 1);

// rwsem_rspin_threshold(): how long a writer may spin on a reader-owned
// lock before it sleeps: 10 µs plus 0.5 µs per reader, at most 25 µs
// (30 readers). Also the percid writer's drain spin (core/percid_rwlock.h).
inline constexpr uint64_t kRspinBaseNs = 10'000;
inline constexpr uint64_t kRspinPerReaderNs = 500;
inline constexpr uint64_t kRspinMaxReaders = 30;
inline constexpr uint64_t kRspinMaxNs = kRspinBaseNs + kRspinMaxReaders * kRspinPerReaderNs;
inline constexpr uint64_t rspin_budget_ns(uint64_t readers) {
  return kRspinBaseNs + std::min(readers, kRspinMaxReaders) * kRspinPerReaderNs;
}
static_assert(rspin_budget_ns(0) == 10'000 && rspin_budget_ns(1000) == kRspinMaxNs && kRspinMaxNs == 25'000);

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

// --- owner word (the nonspinnable bits are per policy, below) ---
inline constexpr uint64_t kReaderOwned = 1ull << 0;

// Readers granted by one wakeup (MAX_READERS_WAKEUP, d3681e269fff).
inline constexpr uint32_t kMaxReadersWakeup = 256;

inline constexpr uint64_t reader_count(uint64_t count) { return (count & kReaderCountMask) >> kReaderShift; }

// How a reader may enter (not in the kernel; see "Deviations").
enum ReadFlags : unsigned {
  kReadPlain = 0,          // the kernel's rules
  kReadHoldsThis = 1,      // the caller holds a read lock of this lock: recursive read
  kReadBehindWriters = 2,  // glibc's writer-nonrecursive kind: never pass queued waiters
  kReadReaderPref = 4,     // default kind: reader preference rules (core/read_pref.h)
};
inline constexpr ReadFlags operator|(ReadFlags a, ReadFlags b) {
  return static_cast<ReadFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
}  // namespace rwsem

// Linux >= v5.11: reader lock stealing, no reader spinning, one NONSPINNABLE bit.
struct RwsemSteal {
  static constexpr bool reader_spinning = false;
  static constexpr uint64_t kRdNonspinnable = 1ull << 1;  // both names are the one
  static constexpr uint64_t kWrNonspinnable = 1ull << 1;  // RWSEM_NONSPINNABLE bit
  static constexpr uint64_t kNonspinnable = kRdNonspinnable | kWrNonspinnable;
  static constexpr uint64_t kOwnerFlags = rwsem::kReaderOwned | kNonspinnable;
};

// Linux v5.10: reader optimistic spinning with adaptive disabling.
struct RwsemRspin {
  static constexpr bool reader_spinning = true;
  static constexpr uint64_t kRdNonspinnable = 1ull << 1;  // readers may not spin
  static constexpr uint64_t kWrNonspinnable = 1ull << 2;  // writers may not spin
  static constexpr uint64_t kNonspinnable = kRdNonspinnable | kWrNonspinnable;
  static constexpr uint64_t kOwnerFlags = rwsem::kReaderOwned | kNonspinnable;
};

static_assert(alignof(ThreadSlot) > RwsemSteal::kOwnerFlags && alignof(ThreadSlot) > RwsemRspin::kOwnerFlags,
              "owner flags fit below a ThreadSlot pointer");
static_assert((RwsemSteal::kNonspinnable & rwsem::kReaderOwned) == 0 &&
                  (RwsemRspin::kNonspinnable & rwsem::kReaderOwned) == 0,
              "nonspinnable bits never alias READER_OWNED");
static_assert(RwsemSteal::kRdNonspinnable == RwsemRspin::kRdNonspinnable,
              "bit 1 is what a new reader owner keeps, in both versions");

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

// Slow paths (core/rwsem.cpp), instantiated there for both policies.
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
// Spinner seats (core/rwsem.cpp): false when max_spinners threads of the
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
  // guess costs a second locked instruction (docs/measurements.md, "Read
  // unlock guesses the count").
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
