// core/percid/thread.h — readers counted per concurrency id; a writer drains them.
//
// Design
// ------
// A read-mostly lock in the spirit of the kernel's percpu_rw_semaphore and of
// BRAVO: a reader that meets no writer touches only a counter of its own,
// `slot[cid]`, on a cache line no other running thread writes; a writer stops
// new fast-path readers, waits for the counters to drain to zero, then owns
// the lock. Readers that meet a writer wait for it on the lock's own rwsem
// (core/rwsem/rwsem.h, v5.11 policy), which also serialises the writers and gives
// them the rwsem's queueing, spinning and handoff.
//
// Where the counters live. A pthread_rwlock_t has 56 bytes and the rwsem uses
// them all but 12 (offsets 36..47 are free, see preload/abi.h), so the lock
// keeps a u32 and a u64 word there (36 and 40, the u64 naturally aligned)
// and its counters in a process-wide arena:
//
//   index (u32)  kNoBlock (0)    never used since init/destroy: the first
//                                lock call assigns a block (under the arena
//                                lock, slow path only)
//                1..kMaxLocks    which block of reader slots the lock uses
//                kPlainRwsem     no block was free: the lock is a plain
//                                rwsem (readers hold the rwsem) until it is
//                                destroyed or re-initialised
//   state (u64)  bit 0 WRITER_PENDING  set under the rwsem write lock: new
//                                      fast-path readers back off
//                bit 1 WRITER_OWNS     the counters drained: write-held
//                bit 2 READERS_WAIT    readers held off by a pending writer
//                                      futex-wait on the low half (which
//                                      holds every flag); the writer's
//                                      release wakes them all
//                bit 3 PREF_BATCH      rule (b) below let a batch of readers
//                                      in during this writer's drain
//                bits 4-63 epoch       bumped by readers entering past a
//                                      pending writer, so a writer's
//                                      "drained" CAS fails if one came in
//                                      meanwhile
//
// The drain flag (a u32 in every reader slot of the block, beside its
// counter): a writer that sleeps while readers drain sets it in every slot
// and futex-waits on the first slot's; a leaving reader, after its
// decrement, reads the flag in its own slot (the line it just wrote) and,
// if set, clears the first slot's and wakes the writer. Never the lock: a
// reader's decrement may be the lock's last hold, after which the writer
// may own, release and destroy the lock and free or unmap its memory. The
// block's memory stays mapped; if the block was handed to another lock
// meanwhile, the reader's wake-up is a spurious one for that lock's writer,
// which counts again and sleeps again.
//
// Why 60 bits: between the writer's load of `state` and its CAS, the epoch
// must not come back to the same value. Every bump is a successful RMW of
// this one cache line, which takes well over a nanosecond; 2^59 ns is 18
// years, so no preemption of the writer, however long, sees a wrap. (A u32
// state left 27 bits: 2^27 bumps of ~20 ns are under 3 s, within reach of a
// writer stopped by a debugger or starved on a loaded machine.) The futex
// compares only the low half, so an unrelated sleeper may miss a change of
// the epoch alone; every wake-up that matters changes a flag as well.
//
// The arena is one mmap (MAP_NORESERVE, pages touched only for blocks in use)
// of kMaxLocks blocks of S slots, S = 2 x CPUs rounded up to a power of two,
// within [kMinSlotsPerLock, kMaxSlotsPerLock]; a slot is one 64-byte line
// holding a u64 counter. Memory bound: kMaxLocks x S x 64 B = 512 KiB on a
// 2-CPU machine, 16 MiB at 128+ CPUs, plus 12 KiB of bookkeeping. A reader
// uses slot spread(cid & (S-1)): ids are dense (core/cid.h), so folding is
// rare and only costs a shared line; spread() keeps the lowest S/2 ids 128
// bytes apart (adjacent-line prefetch) without doubling the memory. Blocks return to a free list at
// pthread_rwlock_destroy of an idle lock; glibc's destroy does nothing, so a
// lock destroyed while held or waited on keeps its block and works on. A lock
// whose memory is re-initialised or reused without (an idle) destroy leaves
// its block owned by its address: the next lock
// assigned at that same address takes it back (the old one cannot be in use
// any more); a block is zeroed whenever it is handed out.
//
// Counters, not flags: a reader increments the slot of its id at lock time
// and decrements the slot of its id at unlock time, which may be another slot
// (the id changed after a sleep, a migration or a scan). Only the sum over the
// block means anything, and it counts the read holders exactly (u64, modular).
//
// Transitions
//   read fast     index has a block; slot += 1 (seq_cst); state has no
//                 PENDING/OWNS -> read-held; else slot -= 1 (leave) and slow.
//   read slow     (a) no block yet: assign, retry fast; (b) plain: rwsem read
//                 lock, held until unlock; (c) the caller already holds read
//                 locks and the kind allows recursion: slot += 1, then CAS
//                 state epoch += 1 unless OWNS -> read-held past the pending
//                 writer (POSIX recursive reads; the writer cannot own while
//                 our earlier hold is counted); (d) otherwise poll `state`
//                 up to kReaderPolls times and retry fast once it is clear
//                 (blocking calls, not the writer-nonrecursive kind); then
//                 (e) default kinds, blocking calls, writer only PENDING (it
//                 drains readers, so the lock is read-held): glibc's default
//                 rwlock prefers readers and a program may hold a read lock
//                 while it waits for another reader to get in, so the reader
//                 enters past the pending writer as in (c) when
//                 core/read_pref.h allows it: (a) a read holder of this lock
//                 sleeps inside lockswap, or (b) it has waited
//                 RwsemTunables::reader_pref_ns, or kLateBatchFactor
//                 times that if a rule-(b) batch was let in before it
//                 arrived (PREF_BATCH: one prompt batch per drain, so a
//                 stream of readers does not keep the writer out).
//                 Meanwhile it sleeps on `state` (READERS_WAIT) in slices of
//                 at most that bound; while the writer OWNS, it sleeps on
//                 `state` until the release and starts over. Not on the
//                 rwsem: the next writer may take the rwsem first and drain a
//                 holder that waits for this very reader (glibc's nptl test
//                 tst-rwlock16), and a reader queued on the rwsem could not
//                 be let in past it. Other kinds (writer-nonrecursive) and
//                 non-blocking calls: rwsem read lock (waits while a writer
//                 holds the rwsem), slot += 1, rwsem read unlock -> read-held.
//   read unlock   slot -= 1 (seq_cst); if the slot's drain flag says a
//                 writer sleeps: exchange the first slot's to 0, FUTEX_WAKE.
//   write lock    rwsem write lock; state |= PENDING; drain: snapshot state,
//                 sum == 0 -> CAS snapshot -> snapshot | OWNS; else spin
//                 kDrainPolls sums and, with spinning on, on until the
//                 kernel's reader-phase budget (rwsem_rspin_threshold(),
//                 rwsem::rspin_budget_ns()) has passed, then set the
//                 drain flags, re-sum, futex-wait on the first; a wake-up spins anew. The kernel's
//                 percpu_down_write() sleeps at once; here a sleep and
//                 wake-up cost more than a reader's critical section while
//                 every new reader waits behind the pending writer
//                 (docs/percid.md, "The writer's drain spin").
//                 Timeout/try failure, or a cancellation unwinding the drain
//                 sleep (DrainGuard): as write unlock.
//   write unlock  state &= ~(writer bits | READERS_WAIT | PREF_BATCH)
//                 (release); wake every reader sleeping on `state` if
//                 READERS_WAIT was set; rwsem write unlock.
//
// Cancellation: lock code runs deferred (core/cancel.h); an asynchronous
// cancellation lands only in a futex sleep. A writer unwound out of its drain
// sleep releases PENDING and the rwsem (DrainGuard); a reader unwound out of
// its sleep on `state` leaves at worst a stale READERS_WAIT (one spurious
// wake-up); a reader unwound out of the rwsem is the rwsem's business.
//
// Memory order. Fast readers and the writer are a Dekker pair: the reader's
// slot RMW precedes its state load, the writer's PENDING RMW precedes its
// slot loads, all seq_cst, so either the writer counts the reader or the
// reader sees PENDING. A sum is not a snapshot, but every increment the
// writer must see is ordered before its scan (a fast reader's by the Dekker
// pair, a slow reader's by the rwsem it held, a recursive reader's by the
// epoch CAS that makes the writer's own CAS fail), and a decrement is only
// seen after its increment, so a sum of zero means no holders. The reader's
// decrement is a release that the writer's sum (seq_cst loads) acquires; the
// writer's release of `state` orders its critical section before readers
// whose seq_cst state load sees it clear, and the rwsem orders it before
// slow readers. The writer's stores of the drain flags precede its re-sum
// and a reader's decrement precedes its load of its slot's flag (seq_cst),
// so a wake is never lost.
//
// Destroy: glibc's destroy of a private rwlock does nothing, so a lock is
// often destroyed (or re-initialised) while held or waited on and used on.
// destroy() gives the block back only when idle() (rwsem word zero, no writer
// phase, counters summing to zero); a busy lock keeps its block and state. A
// reader that wakes after an idle lock lost its block starts over through
// read_slow() (a new block). Left open: a destroy that races with a lock call
// already past its load of `index` (no longer waiting, not yet counted) can
// free the block under that reader; closing it would need a grace period
// before a block is reused.
//
// Fork: blocks are private memory, inherited as they are (a read held by a
// thread that did not survive keeps its count, as with the rwsem's bias);
// the arena lock is reset in the child.
#pragma once
#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cstdint>

#include "arch/atomic.h"
#include "arch/clock.h"
#include "arch/futex.h"
#include "arch/relax.h"
#include "core/cid.h"
#include "core/lock_events.h"
#include "core/read_pref.h"
#include "core/rwsem.h"
#include "core/spin_budget.h"
#include "core/wait_ctx.h"

namespace lockswap {

namespace percid {
// --- index word ---
inline constexpr uint32_t kNoBlock = 0;
inline constexpr uint32_t kPlainRwsem = ~0u;
inline constexpr uint32_t kMaxLocks = 1024;
// --- state word (u64; the futex is its low half) ---
inline constexpr uint64_t kWriterPending = 1u << 0;
inline constexpr uint64_t kWriterOwns = 1u << 1;
inline constexpr uint64_t kReadersWait = 1u << 2;
inline constexpr uint64_t kPrefBatch = 1u << 3;
inline constexpr uint64_t kWriterBits = kWriterPending | kWriterOwns;
// Everything a writer's release clears.
inline constexpr uint64_t kWriterPhaseBits = kWriterBits | kReadersWait | kPrefBatch;
inline constexpr uint64_t kEpochOne = uint64_t{1} << 4;
// --- drain flag (ReaderSlot::drain, outside the lock) ---
inline constexpr uint32_t kDrainAwake = 0;
inline constexpr uint32_t kDrainSleeps = 1;
inline constexpr uint64_t kReadersBackOff = kWriterPending | kWriterOwns;
// --- arena ---
inline constexpr uint32_t kMinSlotsPerLock = 8;
inline constexpr uint32_t kMaxSlotsPerLock = 256;
// Sums a writer always polls before it sleeps. Past these it polls on for the
// kernel's reader-phase spin budget (rwsem::rspin_budget_ns()) when spinning
// is on: a futex sleep and wake-up costs more than a reader's critical
// section, and every new reader waits while the writer drains
// (docs/percid.md, "The writer's drain spin").
inline constexpr unsigned kDrainPolls = 32;
// State polls a reader that met a writer spends waiting for it before it
// queues on the rwsem: a write section is usually far shorter than a futex
// sleep and wake-up (docs/percid.md, "Reader polls before queueing").
inline constexpr unsigned kReaderPolls = 128;
// A reader that arrived after this drain's rule-(b) batch enters only after
// this many bounds: the writer gets its turn first, yet a reader the program
// waits for (holding its read lock outside lockswap) is not shut out forever.
inline constexpr uint64_t kLateBatchFactor = 4;

static_assert(kNoBlock == 0, "zero-filled and static-initialised locks have no block yet");
static_assert(kPlainRwsem - 1 >= kMaxLocks, "has_block() rejects both kNoBlock and kPlainRwsem");
static_assert((kWriterPhaseBits & (kEpochOne - 1)) == kWriterPhaseBits, "the epoch counts above the writer bits");
static_assert(kEpochOne < (uint64_t{1} << 32), "every flag is in the futex half of `state`");
static_assert(64 - std::countr_zero(kEpochOne) >= 59, "a 59-bit epoch cannot wrap (design block)");
static_assert(kDrainAwake == 0, "a zero-filled drain flag: no writer sleeps");
static_assert((kMinSlotsPerLock & (kMinSlotsPerLock - 1)) == 0 && (kMaxSlotsPerLock & (kMaxSlotsPerLock - 1)) == 0);
static_assert(kMinSlotsPerLock >= 2, "spread() rotates within at least two slots");
static_assert(kMaxSlotsPerLock <= cid::kMaxCids, "every slot is reachable by some id");

// `drain`: the writer-sleeps flag, in every slot of a block (design block,
// "The drain flag"); the block's first slot's is also the futex word.
struct alignas(64) ReaderSlot {
  std::atomic<uint64_t> readers;
  std::atomic<uint32_t> drain;
};
static_assert(sizeof(ReaderSlot) == 64, "one cache line per slot");

// The slots of one block, here and in core/percid_shared.h.
// The read holders: the sum of the counters (seq_cst loads).
inline uint64_t sum_slots(const ReaderSlot* slots, uint32_t n) {
  uint64_t sum = 0;
  for (uint32_t i = 0; i < n; ++i) sum += slots[i].readers.load(arch::mo_dekker);
  return sum;
}
// A writer about to sleep (kDrainSleeps) or awake again (kDrainAwake), in every slot.
inline void set_drain_slots(ReaderSlot* slots, uint32_t n, uint32_t value) {
  for (uint32_t i = 0; i < n; ++i) slots[i].drain.store(value, arch::mo_dekker);
}
// Free slots: no holder counted, no writer asleep.
inline void clear_slots(ReaderSlot* slots, uint32_t n) {
  for (uint32_t i = 0; i < n; ++i) {
    slots[i].readers.store(0, arch::mo_hint);
    slots[i].drain.store(kDrainAwake, arch::mo_hint);
  }
}

// Written once, under the arena lock, before the first block index is
// published (release); readers reach it only through an acquired index.
struct Geometry {
  ReaderSlot* base = nullptr;
  uint32_t lock_shift = 0;  // log2(slots per lock)
  uint32_t slot_mask = 0;   // slots per lock - 1
};
extern Geometry g_geometry;

inline bool has_block(uint32_t index) { return index - 1 < kMaxLocks; }

// The futex word: the half of `state` that holds the flag bits (and the
// epoch's low bits), so every flag change changes the futex value. Only the
// kernel reads it as 32 bits; lockswap's own accesses are all 64-bit.
inline const std::atomic<uint32_t>* futex_word(const std::atomic<uint64_t>& state) {
  static_assert(sizeof(std::atomic<uint64_t>) == 8 && std::atomic<uint64_t>::is_always_lock_free);
  return reinterpret_cast<const std::atomic<uint32_t>*>(&state) + (std::endian::native == std::endian::big ? 1 : 0);
}
inline uint32_t futex_value(uint64_t state) { return static_cast<uint32_t>(state); }

// Slot of an id within a block: the id's bits rotated left by one, so ids
// 0..S/2-1 (the ones most likely in use together: ids are dense) take the
// even slots and sit 128 bytes apart. x86 adjacent-line prefetchers fetch
// 64-byte lines in pairs, which would make neighbouring ids share traffic.
__attribute__((always_inline)) inline uint32_t spread(uint32_t cid) {
  uint32_t c = cid & g_geometry.slot_mask;
  return ((c << 1) | (c >> (g_geometry.lock_shift - 1))) & g_geometry.slot_mask;
}
__attribute__((always_inline)) inline ReaderSlot& slot_of(uint32_t index, uint32_t cid) {
  return g_geometry.base[((index - 1) << g_geometry.lock_shift) + spread(cid)];
}
__attribute__((always_inline)) inline ReaderSlot& my_slot(uint32_t index) { return slot_of(index, cid::current()); }
inline ReaderSlot* block_of(uint32_t index) { return g_geometry.base + (std::size_t{index - 1} << g_geometry.lock_shift); }
// The futex word a draining writer sleeps on.
inline std::atomic<uint32_t>& drain_futex(uint32_t index) { return block_of(index)[0].drain; }
// Sets (a writer about to sleep) or clears the flag in every slot of the block.
void set_drain(uint32_t index, uint32_t value);

uint64_t readers(uint32_t index);  // the sum (seq_cst loads)
// Under the arena lock: the block already in `index`, a new one, or kPlainRwsem.
uint32_t assign_block(std::atomic<uint32_t>& index, const void* lock);
void release_block(std::atomic<uint32_t>& index, const void* lock);
uint32_t slots_per_lock();
uint32_t blocks_in_use();
void after_fork_in_child();

// A writer's drain: kDrainPolls sums, then (spinning on) until rwsem::rspin_budget_ns() of
// the holders first counted has passed; the clock is read every
// kClockEvery polls. `holders` is a racy sum: a wrapped (huge) one only
// takes the budget's maximum.
struct DrainSpin {
  unsigned polls = 0;
  uint64_t deadline = 0;
  bool goes_on(uint64_t holders) {
    ++polls;
    if (polls <= percid::kDrainPolls) return true;
    if (!g_rwsem_tunables.writer_spin) return false;
    if (deadline == 0) deadline = arch::monotonic_ns() + rwsem::rspin_budget_ns(holders);
    return polls % kClockEvery != 0 || arch::monotonic_ns() < deadline;
  }
};

}  // namespace percid

// S: the rwsem's words (count, owner, waitq, osq) plus `index` and `state`.
template <class S>
struct PercidRwlock {
  using Sem = Rwsem<RwsemSteal, S>;

  // The fast path alone: true = read-held. Never blocks, so try uses it too.
  // Always inlined (as read_unlock): with cid::current() inside, the compiler
  // would otherwise outline it and pay a call and register saves per lock.
  __attribute__((always_inline)) static bool read_fast(S& s) {
    uint32_t index = s.index.load(arch::mo_lock);  // acquire: the arena geometry
    if (__builtin_expect(!percid::has_block(index), 0)) return false;
    percid::ReaderSlot& slot = percid::my_slot(index);
    slot.readers.fetch_add(1, arch::mo_dekker);
    if (__builtin_expect((s.state.load(arch::mo_dekker) & percid::kReadersBackOff) == 0, 1)) return true;
    leave(index, slot);
    return false;
  }

  // 0 or ctx.give_up_code(). The flags as in Rwsem (core/rwsem.h):
  // kReadHoldsThis, kReadBehindWriters; kReadReaderPref selects read-slow
  // case (e) (the default rwlock kinds).
  static int read_lock(S& s, const WaitCtx& ctx, rwsem::ReadFlags flags = rwsem::kReadPlain) {
    if (read_fast(s)) return 0;
    return read_slow(s, ctx, flags);
  }

  __attribute__((noinline)) static int read_slow(S& s, WaitCtx ctx, rwsem::ReadFlags flags) {
    const bool caller_holds_reads = flags & rwsem::kReadHoldsThis, behind_writers = flags & rwsem::kReadBehindWriters;
    uint32_t index = s.index.load(arch::mo_lock);
    if (index == percid::kNoBlock) {
      index = percid::assign_block(s.index, &s);
      if (read_fast(s)) return 0;
    }
    if (!percid::has_block(index)) return Sem::read_lock(s, ctx, sem_flags(caller_holds_reads, behind_writers));
    if (caller_holds_reads && !behind_writers && enter_past_pending_writer(s, index)) return 0;
    if (ctx.may_block() && !behind_writers) {
      if (wait_out_short_writer(s)) return 0;
      if (flags & rwsem::kReadReaderPref) return read_past_pending_writer(s, index, ctx, caller_holds_reads);
    }
    return read_after_writer(s, index, ctx, caller_holds_reads, behind_writers);
  }

  __attribute__((always_inline)) static void read_unlock(S& s) {
    uint32_t index = s.index.load(arch::mo_hint);  // our lock call acquired it
    if (__builtin_expect(!percid::has_block(index), 0)) return Sem::read_unlock(s);
    leave(index, percid::my_slot(index));
  }

  __attribute__((noinline)) static int write_lock(S& s, const WaitCtx& ctx) {
    uint32_t index = s.index.load(arch::mo_lock);
    if (index == percid::kNoBlock) index = percid::assign_block(s.index, &s);
    if (!percid::has_block(index)) return Sem::write_lock(s, ctx);
    if (int rc = Sem::write_lock(s, ctx)) return rc;
    s.state.fetch_or(percid::kWriterPending, arch::mo_dekker);
    DrainGuard guard{s};
    int rc = drain_readers(s, index, ctx);
    guard.armed = false;
    if (rc != 0) release_writer(s);
    return rc;
  }

  static void write_unlock(S& s) {
    if (!percid::has_block(s.index.load(arch::mo_hint))) return Sem::write_unlock(s);
    release_writer(s);
  }

  static bool write_locked(const S& s) {
    if (s.index.load(arch::mo_hint) == percid::kPlainRwsem) return Sem::write_locked(s);
    return (s.state.load(arch::mo_hint) & percid::kWriterOwns) != 0;
  }

  // pthread_rwlock_destroy: the block of an idle lock goes back to the free
  // list. glibc's destroy does nothing, so programs that destroy a lock still
  // held or waited on find it working on: a busy lock keeps its block (owned
  // by its address, as after a re-init without destroy).
  static void destroy(S& s) {
    if (!idle(s)) return;
    if (s.index.load(arch::mo_hint) != percid::kNoBlock) percid::release_block(s.index, &s);
    s.state.store(0, arch::mo_hint);
  }

  // No holder and no waiter: the rwsem is free with nobody queued, no writer
  // phase is under way (nobody sleeps on `state`), the counters sum to zero.
  static bool idle(const S& s) {
    if (s.count.load(arch::mo_dekker) != rwsem::kUnlocked) return false;
    if (s.state.load(arch::mo_dekker) & percid::kWriterPhaseBits) return false;
    uint32_t index = s.index.load(arch::mo_lock);
    return !percid::has_block(index) || percid::readers(index) == 0;
  }

 private:
  // Gives up a read hold. After the decrement the lock may already be gone
  // (design block, "The drain flag"): only the block's memory is touched.
  // The flag is read in the reader's own slot, the line its decrement holds.
  __attribute__((always_inline)) static void leave(uint32_t index, percid::ReaderSlot& slot) {
    slot.readers.fetch_sub(1, arch::mo_dekker);
    if (__builtin_expect(slot.drain.load(arch::mo_dekker) != percid::kDrainAwake, 0)) wake_writer(index);
  }

  __attribute__((noinline)) static void wake_writer(uint32_t index) {
    std::atomic<uint32_t>& futex = percid::drain_futex(index);
    if (futex.exchange(percid::kDrainAwake, arch::mo_dekker) != percid::kDrainAwake) arch::futex_wake(&futex, 1);
  }

  // Read-slow case (c): we hold read locks, a writer is pending but cannot
  // own while our earlier hold (if on this lock) is counted.
  static bool enter_past_pending_writer(S& s, uint32_t index,
                                        LockEvent ev = LockEvent::percid_rlock_recursive) {
    percid::ReaderSlot& slot = percid::my_slot(index);
    slot.readers.fetch_add(1, arch::mo_dekker);
    uint64_t st = s.state.load(arch::mo_dekker);
    do {
      if (st & percid::kWriterOwns) {
        leave(index, slot);
        return false;
      }
    } while (!s.state.compare_exchange_weak(st, st + percid::kEpochOne, arch::mo_dekker));
    lockevent_inc(ev);
    return true;
  }

  // Read-slow case (d), first part: poll for a short write to end. Not for
  // the writer-nonrecursive kind, whose readers queue behind writers.
  static bool wait_out_short_writer(S& s) {
    for (unsigned polls = 0; polls < percid::kReaderPolls; ++polls) {
      if ((s.state.load(arch::mo_hint) & percid::kReadersBackOff) == 0) return read_fast(s);
      arch::cpu_relax();
    }
    return false;
  }

  // Read-slow case (e): the writer is only pending (draining readers): enter
  // past it under core/read_pref.h rules (a) and (b), sleep on `state`
  // meanwhile; once it owns the lock, wait for it on the rwsem.
  static int read_past_pending_writer(S& s, uint32_t index, const WaitCtx& ctx, bool caller_holds_reads) {
    const uint64_t bound = g_rwsem_tunables.reader_pref_ns;
    const uint64_t start = arch::monotonic_ns();
    bool batch_before_me = true;  // set from the first look at `state`
    bool first = true;
    for (;;) {
      uint64_t st = s.state.load(arch::mo_dekker);
      if (first) batch_before_me = (st & percid::kPrefBatch) != 0;
      first = false;
      if ((st & percid::kReadersBackOff) == 0) {
        if (read_fast(s)) return 0;
        // An idle lock destroyed meanwhile (glibc's destroy leaves it usable)
        // has no block until its next first use.
        if (!percid::has_block(s.index.load(arch::mo_lock)))
          return read_slow(s, ctx, (caller_holds_reads ? rwsem::kReadHoldsThis : rwsem::kReadPlain) | rwsem::kReadReaderPref);
        continue;
      }
      if (st & percid::kWriterOwns) {
        if (ctx.mode == WaitCtx::Mode::until && ctx.expired()) return ETIMEDOUT;
        sleep_on_state(s, st, ctx, kUntilReleased);
        continue;
      }
      uint64_t waited = arch::monotonic_ns() - start;
      if (read_pref::read_holder_asleep_on(&s)) {
        if (enter_past_pending_writer(s, index, LockEvent::percid_rlock_reader_pref)) return 0;
        continue;
      }
      const bool late = batch_before_me && (st & percid::kPrefBatch);
      if (waited >= (late ? bound * percid::kLateBatchFactor : bound)) {
        open_pref_batch(s);
        if (enter_past_pending_writer(s, index, LockEvent::percid_rlock_reader_pref_wait)) return 0;
        continue;
      }
      if (ctx.mode == WaitCtx::Mode::until && ctx.expired()) return ETIMEDOUT;
      sleep_on_state(s, st, ctx, std::min(bound, (late ? bound * percid::kLateBatchFactor : bound) - waited));
    }
  }

  // The first rule-(b) reader of a drain marks it and wakes the readers
  // already waiting: they arrived before the batch and belong to it.
  static void open_pref_batch(S& s) {
    uint64_t st = s.state.fetch_or(percid::kPrefBatch, arch::mo_dekker);
    if (!(st & percid::kPrefBatch) && (st & percid::kReadersWait)) arch::futex_wake(percid::futex_word(s.state), arch::futex_wake_all);
  }

  // Sleep on `state` until it changes (the writer's release wakes us), at
  // most `slice_ns` (kUntilReleased: no slice) and never past the caller's
  // deadline.
  static constexpr uint64_t kUntilReleased = ~uint64_t{0};
  static void sleep_on_state(S& s, uint64_t st, const WaitCtx& ctx, uint64_t slice_ns) {
    uint64_t waiting = st | percid::kReadersWait;
    if (st != waiting && !s.state.compare_exchange_strong(st, waiting, arch::mo_dekker)) return;
    read_pref::ReadHolderSleep holder_asleep;  // rule (a) for the read locks we hold
    if (slice_ns == kUntilReleased) {
      ctx.sleep(percid::futex_word(s.state), percid::futex_value(waiting));
      return;
    }
    if (ctx.mode == WaitCtx::Mode::until) slice_ns = std::min(slice_ns, arch::ns_until(ctx.clock, *ctx.abs));
    uint64_t until = arch::monotonic_ns() + slice_ns;
    timespec end = arch::timespec_at(until);
    WaitCtx::until(CLOCK_MONOTONIC, &end, ctx.family).sleep(percid::futex_word(s.state), percid::futex_value(waiting));
  }

  // Read-slow case (d): wait for the writer on the rwsem. While we hold the
  // rwsem for reading no writer can be pending, so our count is safe to add.
  // The rwsem underneath: reader preference for every kind but the
  // writer-nonrecursive one.
  static rwsem::ReadFlags sem_flags(bool caller_holds_reads, bool behind_writers) {
    return (caller_holds_reads ? rwsem::kReadHoldsThis : rwsem::kReadPlain) |
           (behind_writers ? rwsem::kReadBehindWriters : rwsem::kReadReaderPref);
  }
  static int read_after_writer(S& s, uint32_t index, const WaitCtx& ctx, bool caller_holds_reads,
                               bool behind_writers) {
    if (int rc = Sem::read_lock(s, ctx, sem_flags(caller_holds_reads, behind_writers))) return rc;
    percid::my_slot(index).readers.fetch_add(1, arch::mo_dekker);
    Sem::read_unlock(s);
    lockevent_inc(LockEvent::percid_rlock_slow);
    return 0;
  }

  // 0 = we own it. No reader in: own it at once; else wait_for_readers().
  static int drain_readers(S& s, uint32_t index, const WaitCtx& ctx) {
    uint64_t st = s.state.load(arch::mo_dekker);
    if (percid::readers(index) == 0 && own_drained(s, st)) return 0;
    return wait_for_readers(s, index, ctx);
  }

  // The sum was zero after `st` was read: OWNS, unless a recursive reader or
  // a waker changed `state` meanwhile (then sum again).
  static bool own_drained(S& s, uint64_t st) {
    return s.state.compare_exchange_strong(st, st | percid::kWriterOwns, arch::mo_dekker);
  }

  // Spin, then sleep, until the readers are gone. Each sleep starts a new
  // spin, as the kernel's writer spins again once woken. Out of line: the
  // idle write pair does not pay for the spin's state.
  __attribute__((noinline)) static int wait_for_readers(S& s, uint32_t index, const WaitCtx& ctx) {
    percid::DrainSpin spin;
    for (;;) {
      uint64_t st = s.state.load(arch::mo_dekker);
      const uint64_t holders = percid::readers(index);
      if (holders == 0) {
        if (own_drained(s, st)) return 0;
        continue;
      }
      if (!ctx.may_block()) return EBUSY;
      if (spin.goes_on(holders)) {
        arch::cpu_relax();
        continue;
      }
      if (sleep_while_readers(index, ctx) == ETIMEDOUT) return ETIMEDOUT;
      spin = percid::DrainSpin{};
    }
  }

  // Announce the sleep in every slot's drain flag, re-check (Dekker with
  // leave()), sleep on the first slot's. The flags are cleared on the way
  // out, woken or not, so later readers do not wake a writer that no longer
  // sleeps.
  static int sleep_while_readers(uint32_t index, const WaitCtx& ctx) {
    DrainClear clear{index};
    percid::set_drain(index, percid::kDrainSleeps);
    if (percid::readers(index) == 0) return 0;
    lockevent_inc(LockEvent::percid_wlock_sleep);
    read_pref::ReadHolderSleep holder_asleep;  // rule (a) for the read locks we hold
    return ctx.sleep(&percid::drain_futex(index), percid::kDrainSleeps);
  }

  // Every way out of the drain sleep, a cancellation's unwinding included.
  struct DrainClear {
    uint32_t index;
    ~DrainClear() { percid::set_drain(index, percid::kDrainAwake); }
  };

  static void release_writer(S& s) {
    uint64_t st = s.state.fetch_and(~percid::kWriterPhaseBits, arch::mo_unlock);
    if (st & percid::kReadersWait) arch::futex_wake(percid::futex_word(s.state), arch::futex_wake_all);
    Sem::write_unlock(s);
  }

  // A cancellation unwinding the writer out of its drain sleep gives the
  // lock back as a timed-out writer does (normal exits disarm it).
  struct DrainGuard {
    S& s;
    bool armed = true;
    ~DrainGuard() {
      if (armed) release_writer(s);
    }
  };
};

}  // namespace lockswap
