// core/percid/thread.h — the percid lock (core/percid/body.h) for the
// threads of one process: a pthread rwlock's words, or WiredTiger's.
//
// Design
// ------
// The body's lock (core/percid/body.h: the slots, the drain, the memory
// order, the deviations from the kernel). Its inner rwsem is the threads'
// own (core/rwsem.h, v5.11 policy), on the lock's count/owner/waitq/osq
// words. This host adds where the counters live, reader preference and
// recursion for glibc's rwlock kinds, timeouts, tries and cancellation.
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
// (percid::ReaderSlot). Memory bound: kMaxLocks x S x 64 B = 512 KiB on a
// 2-CPU machine, 16 MiB at 128+ CPUs, plus 12 KiB of bookkeeping. A reader
// uses slot spread(cid & (S-1)): ids are dense (core/cid.h), so folding is
// rare and only costs a shared line; spread() keeps the lowest S/2 ids 128
// bytes apart (adjacent-line prefetch) without doubling the memory. The
// arena is never unmapped, which is what the body's drain flag needs of a
// block. Blocks return to a free list at
// pthread_rwlock_destroy of an idle lock; glibc's destroy does nothing, so a
// lock destroyed while held or waited on keeps its block and works on. A lock
// whose memory is re-initialised or reused without (an idle) destroy leaves
// its block owned by its address: the next lock
// assigned at that same address takes it back (the old one cannot be in use
// any more); a block is zeroed whenever it is handed out.
//
// Transitions (the body's, with these words)
//   read fast     index has a block; the body's read try with back-off mask
//                 PENDING|OWNS -> read-held; else slow.
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
//                 non-blocking calls: the body's read behind a writer (the
//                 rwsem read lock fails at once for a try) -> read-held.
//   read unlock   the body's leave.
//   write lock    rwsem write lock; state |= PENDING (seq_cst); the body's
//                 drain, whose claim is a CAS of the `state` looked at before
//                 the sum to itself | OWNS.
//                 Timeout/try failure, or a cancellation unwinding the drain
//                 sleep (DrainGuard): as write unlock.
//   write unlock  state &= ~(writer bits | READERS_WAIT | PREF_BATCH)
//                 (release); wake every reader sleeping on `state` if
//                 READERS_WAIT was set; rwsem write unlock.
//
// Memory order, beyond the body's: the increment of a reader entering past a
// pending writer (cases (c), (e)) follows PENDING, so the Dekker pair does
// not order it before the writer's scan; its epoch CAS does. If the CAS
// precedes the writer's look at `state`, so does the increment, and the sum
// (after the look) sees it; if it falls between the look and the writer's
// claim, the claim's CAS fails and the writer looks and sums again; if the
// claim comes first, the reader's CAS sees OWNS and the reader leaves.
//
// Cancellation: lock code runs deferred (core/cancel.h); an asynchronous
// cancellation lands only in a futex sleep. A writer unwound out of its drain
// sleep clears the drain flags (the body's DrainClear) and releases PENDING
// and the rwsem (DrainGuard); a reader unwound out of its sleep on `state`
// leaves at worst a stale READERS_WAIT (one spurious wake-up); a reader
// unwound out of the rwsem is the rwsem's business.
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
#include "core/percid/body.h"
#include "core/read_pref.h"
#include "core/rwsem.h"
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
// The read try's back-off mask (core/percid/body.h).
inline constexpr uint64_t kReadersBackOff = kWriterPending | kWriterOwns;
// --- arena ---
inline constexpr uint32_t kMinSlotsPerLock = 8;
inline constexpr uint32_t kMaxSlotsPerLock = 256;
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
static_assert((kMinSlotsPerLock & (kMinSlotsPerLock - 1)) == 0 && (kMaxSlotsPerLock & (kMaxSlotsPerLock - 1)) == 0);
static_assert(kMinSlotsPerLock >= 2, "spread() rotates within at least two slots");
static_assert(kMaxSlotsPerLock <= cid::kMaxCids, "every slot is reachable by some id");

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

// The body's representation here (core/percid/body.h): a block is named by
// its index (the reader's cold path too: it finds the drain futex from it),
// sleeps are private futex waits of a WaitCtx (tries, deadlines), and a
// drain sleep counts as a read holder's sleep for core/read_pref.h rule (a).
struct ThreadRep {
  using Where = uint32_t;
  using Wake = uint32_t;
  using Sleeper = const WaitCtx;
  static constexpr bool kSharedFutex = false;
  static constexpr bool kTriesAndTimeouts = true;
  static uint32_t wake_of(uint32_t index) { return index; }
  static std::atomic<uint32_t>& drain_futex(uint32_t index) { return percid::drain_futex(index); }
  static uint64_t readers(uint32_t index) { return percid::readers(index); }
  static void set_drain(uint32_t index, uint32_t value) { percid::set_drain(index, value); }
  static int sleep(const WaitCtx& ctx, const std::atomic<uint32_t>& futex, uint32_t expected) {
    read_pref::ReadHolderSleep holder_asleep;  // rule (a) for the read locks we hold
    return ctx.sleep(&futex, expected);
  }
};
using ThreadBody = Body<ThreadRep>;

}  // namespace percid

// S: the rwsem's words (count, owner, waitq, osq) plus `index` and `state`.
template <class S>
struct PercidRwlock {
  using Sem = Rwsem<RwsemSteal, S>;
  using Body = percid::ThreadBody;

  // The fast path alone: true = read-held. Never blocks, so try uses it too.
  // Always inlined (as read_unlock): with cid::current() inside, the compiler
  // would otherwise outline it and pay a call and register saves per lock.
  __attribute__((always_inline)) static bool read_fast(S& s) {
    uint32_t index = s.index.load(arch::mo_lock);  // acquire: the arena geometry
    if (__builtin_expect(!percid::has_block(index), 0)) return false;
    return Body::enter(index, percid::my_slot(index), s.state, percid::kReadersBackOff);
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
    Body::leave(index, percid::my_slot(index));
  }

  __attribute__((noinline)) static int write_lock(S& s, const WaitCtx& ctx) {
    uint32_t index = s.index.load(arch::mo_lock);
    if (index == percid::kNoBlock) index = percid::assign_block(s.index, &s);
    if (!percid::has_block(index)) return Sem::write_lock(s, ctx);
    if (int rc = Sem::write_lock(s, ctx)) return rc;
    s.state.fetch_or(percid::kWriterPending, arch::mo_dekker);  // the writer's half of the Dekker pair
    DrainGuard guard{s};
    int rc = Body::drain(index, ctx, Claim{s});
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
  // Read-slow case (c): we hold read locks, a writer is pending but cannot
  // own while our earlier hold (if on this lock) is counted.
  static bool enter_past_pending_writer(S& s, uint32_t index,
                                        LockEvent ev = LockEvent::percid_rlock_recursive) {
    percid::ReaderSlot& slot = percid::my_slot(index);
    slot.readers.fetch_add(1, arch::mo_dekker);
    uint64_t st = s.state.load(arch::mo_dekker);
    do {
      if (st & percid::kWriterOwns) {
        Body::leave(index, slot);
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

  // Read-slow case (d): wait for the writer on the rwsem (the body's read
  // behind a writer). The rwsem underneath: reader preference for every
  // kind but the writer-nonrecursive one.
  static rwsem::ReadFlags sem_flags(bool caller_holds_reads, bool behind_writers) {
    return (caller_holds_reads ? rwsem::kReadHoldsThis : rwsem::kReadPlain) |
           (behind_writers ? rwsem::kReadBehindWriters : rwsem::kReadReaderPref);
  }
  static int read_after_writer(S& s, uint32_t index, const WaitCtx& ctx, bool caller_holds_reads,
                               bool behind_writers) {
    return Body::read_behind_writer(
        [&] { return Sem::read_lock(s, ctx, sem_flags(caller_holds_reads, behind_writers)); },
        [&]() -> percid::ReaderSlot& { return percid::my_slot(index); }, [&] { Sem::read_unlock(s); });
  }

  // The writer's claim on a drained lock (the body's drain): OWNS by a CAS
  // from the `state` looked at before the sum, which fails if a reader
  // entering past it (read-slow (c), (e)) or a waker changed `state`
  // meanwhile (design block, "Memory order").
  struct Claim {
    S& s;
    uint64_t look() const { return s.state.load(arch::mo_dekker); }
    bool own(uint64_t seen) const {
      return s.state.compare_exchange_strong(seen, seen | percid::kWriterOwns, arch::mo_dekker);
    }
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
