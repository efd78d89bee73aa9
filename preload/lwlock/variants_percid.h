// preload/lwlock/variants_percid.h — LOCKSWAP_LWLOCK=percid: readers counted
// per concurrency id (core/percid/shared.h) for the locks of PostgreSQL's
// main LWLock array; every other LWLock runs the process-shared rwsem.
//
// Which locks. The per-lock state (an inner rwsem, a flag, a drain word and
// S reader slots of 64 bytes) cannot live in the LWLock's 12 bytes, and no
// pointer may be stored in a lock; a lock needs a block of the side area
// that every process finds by itself. The locks of MainLWLockArray (the
// individual locks such as ProcArrayLock, XidGenLock and WALWriteLock, the
// buffer-mapping, lock-manager and predicate-lock partitions, the named
// tranches of extensions) are at the same address in every process, each
// in a 128-byte slot (LWLOCK_PADDED_SIZE): block = (lock - array) / 128, for
// the array's own locks only (the first kBlocks of them). Where the array
// ends is PostgreSQL's fact, read once (pg15.h, main_array_locks()):
// locks 128-byte aligned a few KiB after it (the WAL insertion locks, ~42
// KiB on) are other LWLocks, and a window of fixed size would take them for
// the array's. It is read on the rare path of the first lock that looks
// like the array's (set_up, before the lock's word says its block is in
// use), so the fast path compares with one number: kBlocks until then
// (every lock on the array's 128-byte grid in its first kBlocks slots is a
// candidate, and each candidate's first use reads the bound before it
// claims anything), the array's length after. Buffer content locks, WAL insertion locks and the locks in
// dynamic shared memory (parallel query, dshash) are elsewhere: they run
// LOCKSWAP_LWLOCK=rwsem on their own words (the same inner algorithm,
// without the reader slots). `lockswap report` shows per tranche which
// locks those are.
//
// When a block is reset. PostgreSQL re-creates its shared memory after a
// backend crash, with every LWLock in its initial free state, while the
// side area (made before the postmaster forked) lives on with the counts of
// killed readers. So the lock's state word (+4) says whether its block
// belongs to this incarnation of the lock: PostgreSQL's free value = not
// yet (the first user CASes it to kSettingUp, resets the block and stores
// kLive; others wait for kLive), kLive = in use. The block's own words never
// are in the lock; the lock's +8 and +12 are unused.
//
// The reader's slot. Concurrency ids are per process under `percpu`,
// `rseq` and `thread`, as the kernel's mm_cid is per mm: every
// single-threaded backend would have id 0 and all readers would share one
// counter. So the slot key is the id plus the process number (PGPROC's
// pgprocno), spreading backends over the slots as the 2025 read-biased
// ProcArrayLock patch spread them by process; under `global` (one id space
// for the whole process tree, core/cid.h) the id alone. The postmaster (no
// PGPROC) uses the id. A deviation from core/percid/thread.h, which keys by
// the id alone. Under `thread` and `rseq` the id of a single-threaded
// process never changes (its one thread keeps its registry id; the kernel
// gives the one thread of an mm mm_cid 0), so the key is computed once per
// PGPROC and every read lock reads it from one word; `percpu` and `global`
// ids move, and are read at each read lock. A stale key would cost only
// spreading: a release may count down any slot, only the sum means anything.
#pragma once
#include <dlfcn.h>
#include <sched.h>

#include <bit>
#include <cstring>

#include "core/cid.h"
#include "core/percid/shared.h"
#include "preload/lwlock/host.h"
#include "preload/lwlock/pg15.h"
#include "preload/lwlock/variants_rwsem.h"

namespace lockswap::lwlock {

inline constexpr uint32_t kSettingUp = 0x7c1d0001u;
inline constexpr uint32_t kLive = 0x7c1d0002u;
static_assert(kSettingUp != kFreeState && kLive != kFreeState && kSettingUp != kLive,
              "the three states of a main-array lock's word are distinct");

// &MainLWLockArray, or the address of a null pointer where the program has
// none: the lock paths read the array's address through it without a test.
// Set by lwlock.cpp's resolve_host, before the first LWLock call.
inline void* const g_no_main_array = nullptr;
inline void* const* g_array_ref = &g_no_main_array;

// The side area's percid blocks (preload/lwlock/lwlock.cpp maps them).
struct PercidArea {
  std::byte* base = nullptr;  // kBlocks blocks of (1 + slots) cache lines
  uint32_t slot_mask = 0;
  std::size_t block_bytes = 0;
  static constexpr uint32_t kBlocks = 512;  // MainLWLockArray: 208 fixed locks + extensions' named ones
  static_assert(kBlocks >= kFixedLwlocks, "every fixed lock has a block");
  // Called once, at start-up, before the first LWLock call
  // (lwlock.cpp's map_side_area).
  void set_slots(uint32_t slots) {
    slot_mask = slots - 1;
    block_bytes = (std::size_t{slots} + 1) * 64;
  }
  // Where a key's slot lies from its block's start.
  uintptr_t slot_offset(uint32_t key) const { return (uintptr_t{key & slot_mask} + 1) * 64; }
  percid_shared::Block block(uint32_t i) const {
    std::byte* b = base + i * block_bytes;
    return {reinterpret_cast<percid_shared::Control*>(b), reinterpret_cast<percid::ReaderSlot*>(b + 64), slot_mask};
  }
};
extern PercidArea g_percid;
// Makes the side area, base included, if this process has not
// (preload/lwlock/lwlock.cpp): a block's first use may be the server's
// first LWLock call (the postmaster's ShmemIndexLock).
void side_area_ready();
// Per process (PostgreSQL's processes are single-threaded): the last reader
// key, and the process number of the PGPROC it was read from.
extern uint32_t g_last_key, g_proc_key;
extern void* g_keyed_proc;
// The reader key is computed once per PGPROC (header comment, "The
// reader's slot"): g_last_key then always holds it. g_last_slot is where
// g_last_key's slot lies in a block (PercidArea::slot_offset), kept with it.
inline bool g_key_fixed;
inline uintptr_t g_last_slot = 64;

// The number of locks in MainLWLockArray, from what PostgreSQL exports
// (pg15.h): NamedLWLockTrancheArray lies right after the array's last lock
// (the named tranches'), in the same allocation; without named tranches it
// is NULL and the array is the fixed locks alone. Anything unexpected (a
// symbol missing, an array pointer that is not past the fixed locks on a
// 128-byte line) leaves the fixed locks alone: every process computes the
// same, so a lock is never the array's in one and not in another.
inline uint32_t main_array_locks(const void* array) {
  const auto* requests = static_cast<const int*>(dlsym(RTLD_DEFAULT, kNamedTrancheRequestsSymbol));
  const auto* named = static_cast<void* const*>(dlsym(RTLD_DEFAULT, kNamedTrancheArraySymbol));
  if (requests == nullptr || named == nullptr || *requests <= 0 || *named == nullptr) return kFixedLwlocks;
  const uintptr_t end = reinterpret_cast<uintptr_t>(*named) - reinterpret_cast<uintptr_t>(array);
  if (end % kPaddedSize != 0 || end / kPaddedSize <= kFixedLwlocks || end / kPaddedSize > (1u << 20)) return kFixedLwlocks;
  return static_cast<uint32_t>(end / kPaddedSize);
}

// The main array's locks that have blocks. kBlocks until the first use of
// a candidate lock has read the array's length (set_up; CreateLWLocks sets
// MainLWLockArray and NamedLWLockTrancheArray after the preload constructor
// has run, before the first LWLock call on the array, the postmaster's
// ShmemIndexLock); then the same in every process of the server, and
// across a crash restart (the named tranches are requested once, at
// start-up).
inline uintptr_t g_main_array_locks = PercidArea::kBlocks;
inline bool g_main_array_known;

struct LwlockPercid : SharedWaits {
  using P = percid_shared::Lock<RwsemSteal>;
  using Plain = LwlockRwsemSteal;

  // The fast paths inline (the idle pair is the cost every LWLock call
  // pays); the writer's and everything that may wait out of line.
  //
  // The shared try on a live main-array lock with a fixed key is the hot
  // path and calls nothing: every other case (the block's first use, an
  // exclusive try, a key to compute, a writer met) leaves for an
  // out-of-line function that finishes the try, so no value of the hot
  // path has to outlive a call (a call inside it costs a callee-saved
  // register, saved and restored on every acquisition).
  __attribute__((always_inline)) static bool try_acquire(PgLwlock& l, Mode m) {
    uintptr_t index;
    if (!candidate(l, index)) return Plain::try_acquire(l, m);
    if (__builtin_expect(m != pglw::kShared || l.state.load(arch::mo_lock) != kLive, 0)) return try_rare(l, m);
    if (__builtin_expect(*g_host.my_proc != g_keyed_proc || !g_key_fixed, 0)) return try_rare(l, m);
    std::byte* const block = g_percid.base + index * g_percid.block_bytes;
    reinterpret_cast<percid::ReaderSlot*>(block + g_last_slot)->readers.fetch_add(1, arch::mo_dekker);
    const auto* control = reinterpret_cast<const percid_shared::Control*>(block);
    if (__builtin_expect((control->state.load(arch::mo_dekker) & percid_shared::kPending) == 0, 1)) return true;
    return read_backed_out(l);
  }
  static bool acquire_slow(PgLwlock& l, Mode m) {
    percid_shared::Block b;
    if (!block_of(l, b)) return Plain::acquire_slow(l, m);
    const int32_t me = my_procno();
    rwshared::Sleeper s = sleeper(l);
    if (m == pglw::kExclusive)
      P::write_lock(b, records(), me, s);
    else
      P::read_slow(b, reader_key(), records(), me, s);
    return finish(s);
  }
  static bool acquire_or_wait_slow(PgLwlock& l, Mode m) {
    percid_shared::Block b;
    if (!block_of(l, b)) return Plain::acquire_or_wait_slow(l, m);
    if (m != pglw::kExclusive) return acquire_slow(l, m), true;
    const int32_t me = my_procno();
    rwshared::Sleeper s = sleeper(l);
    const bool taken = P::write_or_wait(b, records(), me, s);
    finish(s);
    return taken;
  }
  static bool enter_shared_again(PgLwlock& l) {
    percid_shared::Block b;
    if (!block_of(l, b)) return Plain::enter_shared_again(l);
    P::read_again(b, reader_key());
    return true;
  }
  // The variable protocol is the inner rwsem's: the exclusive holder holds
  // it for writing for as long as it holds the lock.
  static bool wait_for_var(PgLwlock& l, uint64_t* var, uint64_t old, uint64_t* newval) {
    percid_shared::Block b;
    if (!block_of(l, b)) return Plain::wait_for_var(l, var, old, newval);
    return Plain::wait_for_var_on(b.control->sem, l, var, old, newval);
  }
  static void update_var(PgLwlock& l, uint64_t* var, uint64_t v) {
    percid_shared::Block b;
    if (!block_of(l, b)) return Plain::update_var(l, var, v);
    P::Sem::update_var(b.control->sem, records(), var, v);
  }
  static void set_var(PgLwlock& l, uint64_t* var, uint64_t v) {
    percid_shared::Block b;
    if (!block_of(l, b)) return Plain::set_var(l, var, v);
    P::Sem::set_var(b.control->sem, var, v);
  }
  // The shared release calls nothing but the drainer's wake-up, its last
  // act. A lock this process holds through its block is live (its word
  // said so when it was taken, and only a re-creation of shared memory,
  // which ends every holder, resets it): no look at the word here.
  __attribute__((always_inline)) static void release(PgLwlock& l, Mode m) {
    uintptr_t index;
    if (!candidate(l, index)) return Plain::release(l, m);
    if (__builtin_expect(m != pglw::kShared, 0)) return write_unlock(l);
    std::byte* const block = g_percid.base + index * g_percid.block_bytes;
    P::read_unlock_slot(g_percid.block(static_cast<uint32_t>(index)), *reinterpret_cast<percid::ReaderSlot*>(block + g_last_slot));
  }

 private:
  // Whether the lock may be the array's, and its slot number if so. The
  // offset rotated right by 7 (kPaddedSize = 2^7) is the slot number of a
  // lock on the 128-byte grid and, off the grid, has its low bits on top:
  // far past any bound, so one comparison tests both. Before CreateLWLocks
  // (MainLWLockArray null) the offset is the lock's address, also far past.
  __attribute__((always_inline)) static bool candidate(const PgLwlock& l, uintptr_t& index) {
    static_assert(kPaddedSize == 1u << 7);
    index = std::rotr(reinterpret_cast<uintptr_t>(&l) - reinterpret_cast<uintptr_t>(*g_array_ref), 7);
    return index < g_main_array_locks;
  }
  // The lock's block, reset first if this incarnation of the lock has not
  // used it yet (header comment). False: not a main-array lock.
  __attribute__((always_inline)) static bool block_of(PgLwlock& l, percid_shared::Block& b) {
    uintptr_t index;
    if (!candidate(l, index)) return false;
    if (__builtin_expect(l.state.load(arch::mo_lock) != kLive, 0) && !set_up(l, index)) return false;
    b = g_percid.block(static_cast<uint32_t>(index));
    return true;
  }
  // A candidate's first use in this incarnation: the array's length, if
  // this process has not read it (then the lock may turn out to be past
  // the array: false, nothing claimed); then the block claimed and reset.
  // A word that reads kLive was claimed by some process that knew the
  // length (kLive is no rwsem count: bit 30 is set).
  __attribute__((noinline)) static bool set_up(PgLwlock& l, uintptr_t index) {
    if (!g_main_array_known) {
      const uint32_t locks = main_array_locks(*g_array_ref);
      g_main_array_locks = locks < PercidArea::kBlocks ? locks : PercidArea::kBlocks;
      g_main_array_known = true;
      if (index >= g_main_array_locks) return false;
    }
    side_area_ready();
    uint32_t v = kFreeState;
    if (l.state.compare_exchange_strong(v, kSettingUp, arch::mo_dekker)) {
      g_percid.block(static_cast<uint32_t>(index)).reset();
      l.state.store(kLive, arch::mo_unlock);
      return true;
    }
    while (l.state.load(arch::mo_lock) != kLive) sched_yield();  // another process resets it
    return true;
  }
  // The slot a reader counts itself in (header comment). A release may use
  // any slot (only the sum means anything): it uses the process's last
  // reader key, so it costs no second look at the id.
  __attribute__((always_inline)) static uint32_t reader_key() {
    void* proc = *g_host.my_proc;
    if (__builtin_expect(proc != g_keyed_proc, 0)) rekey(proc);
    if (__builtin_expect(g_key_fixed, 1)) return g_last_key;
    uint32_t k = cid::current();
    if (cid::mode() != CidMode::global) k += g_proc_key;
    g_last_key = k;
    g_last_slot = g_percid.slot_offset(k);
    return k;
  }
  // The process number, read once per PGPROC (a backend keeps its PGPROC
  // for life; the postmaster has none: 0), and with it the whole key where
  // the id cannot move.
  __attribute__((noinline)) static void rekey(void* proc) {
    int32_t procno = 0;
    if (proc != nullptr) memcpy(&procno, static_cast<char*>(proc) + g_host.pgprocno_offset, sizeof procno);
    g_proc_key = static_cast<uint32_t>(procno);
    g_keyed_proc = proc;
    const CidMode m = cid::mode();
    g_key_fixed = m == CidMode::thread || m == CidMode::rseq;
    if (g_key_fixed) {
      g_last_key = cid::current() + g_proc_key;
      g_last_slot = g_percid.slot_offset(g_last_key);
    }
  }
  // Out of line, and given the lock rather than its block: a block whose
  // address escapes would live on the readers' stack frame too.
  __attribute__((noinline)) static bool try_rare(PgLwlock& l, Mode m) {
    percid_shared::Block b;
    if (!block_of(l, b)) return Plain::try_acquire(l, m);  // past the array after all (set_up)
    if (m == pglw::kExclusive) return P::write_try(b, records(), owner_proc());
    return P::read_try(b, reader_key());
  }
  // A reader that met PENDING on the hot path: out again (read_try's back-out).
  __attribute__((noinline)) static bool read_backed_out(PgLwlock& l) {
    percid_shared::Block b;
    block_of(l, b);
    P::read_unlock(b, g_last_key);
    return false;
  }
  __attribute__((noinline)) static void write_unlock(PgLwlock& l) {
    percid_shared::Block b;
    block_of(l, b);
    P::write_unlock(b, records());
  }
};

}  // namespace lockswap::lwlock
