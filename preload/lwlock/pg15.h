// preload/lwlock/pg15.h — what lockswap relies on in PostgreSQL 15's LWLock
// API (src/include/storage/lwlock.h, lwlock.c; docs/lwlock.md).
//
// These are facts of PostgreSQL's ABI, the same in every 15.x build; what
// moves between builds (function addresses, the PGPROC layout) is checked
// per build against preload/lwlock/allowlist.h.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "core/pg_lwlock.h"

namespace lockswap::lwlock {

// struct LWLock without LOCK_DEBUG: 16 bytes, 4-byte aligned (buffer
// content locks sit at 4 mod 8), so only the 4-byte words at +4, +8 and +12
// are atomic everywhere. PostgreSQL initialises them to
// {RELEASE_OK, INVALID_PGPROCNO, INVALID_PGPROCNO}; no code outside lwlock.c
// reads them.
struct PgLwlock {
  uint16_t tranche;
  uint16_t padding;
  std::atomic<uint32_t> state;   // +4
  std::atomic<int32_t> word8;    // +8  (waiters.head)
  std::atomic<int32_t> word12;   // +12 (waiters.tail)
};
static_assert(sizeof(PgLwlock) == 16 && alignof(PgLwlock) == 4);
static_assert(offsetof(PgLwlock, state) == 4 && offsetof(PgLwlock, word8) == 8 && offsetof(PgLwlock, word12) == 12);

// MainLWLockArray (lwlock.c's CreateLWLocks, InitializeLWLocks): one
// ShmemAlloc holds the padded locks (LWLockPadded, LWLOCK_PADDED_SIZE = 128
// bytes each): NUM_FIXED_LWLOCKS = NUM_INDIVIDUAL_LWLOCKS (48: ShmemIndexLock
// .. NotifyQueueTailLock, lwlocknames.txt) + NUM_BUFFER_PARTITIONS (128) +
// NUM_LOCK_PARTITIONS (16) + NUM_PREDICATELOCK_PARTITIONS (16) = 208 (the
// 0xd0 that LWLockShmemSize and CreateLWLocks of the 15.18 amd64 build
// load), then the locks of the tranches extensions requested
// (RequestNamedLWLockTranche, NamedLWLockTrancheRequests of them); right
// after the last of those, NamedLWLockTrancheArray =
// &MainLWLockArray[NUM_FIXED_LWLOCKS + named locks] (then the tranche
// names), set only when NamedLWLockTrancheRequests > 0, NULL otherwise.
// Both are exported (nm -D); they are read once, after CreateLWLocks, to
// bound the array (preload/lwlock/variants_percid.h).
inline constexpr uint32_t kPaddedSize = 128;
inline constexpr uint32_t kFixedLwlocks = 48 + 128 + 16 + 16;
inline constexpr const char* kNamedTrancheArraySymbol = "NamedLWLockTrancheArray";
inline constexpr const char* kNamedTrancheRequestsSymbol = "NamedLWLockTrancheRequests";

// The `pg` port's three words are the lock's own.
inline pglw::Words& pg_words(PgLwlock& l) { return *reinterpret_cast<pglw::Words*>(&l.state); }
static_assert(sizeof(pglw::Words) == 12);

inline constexpr uint32_t kWaitLwlock = 0x01000000u;  // PG_WAIT_LWLOCK, the wait-event class
inline constexpr unsigned kMaxHeld = 200;             // MAX_SIMUL_LWLOCKS
inline constexpr uint32_t kFreeState = pglw::kFreeState;
inline constexpr int32_t kFreeWord = pglw::kNoProc;   // +8 and +12 of a free lock

// elog levels (utils/elog.h).
inline constexpr int kError = 21;
inline constexpr int kFatal = 22;
inline constexpr int kPanic = 23;

// PGPROCs beyond MaxBackends and max_prepared_xacts (storage/proc.h,
// NUM_AUXILIARY_PROCS; InitProcGlobal's TotalProcs).
inline constexpr int64_t kAuxiliaryProcs = 5;

// The redirected functions: X(name, replacement, arguments). Every function
// of the API that touches the lock words or the list of held locks
// (lwlock.c's static held_lwlocks), so no original instruction but the
// first runs again (entry_patch.h). The arguments, in lwlock.h's order, tell
// entry_patch.h which registers carry one: 'p' a pointer or 64-bit value,
// 'i' an int or enum.
// LWLockInitialize and CreateLWLocks are not redirected: every variant takes
// the state they write as free.
#define LOCKSWAP_LWLOCK_FUNCTIONS(X)                          \
  X(LWLockAcquire, lw_acquire, "pi")                          \
  X(LWLockConditionalAcquire, lw_conditional_acquire, "pi")   \
  X(LWLockAcquireOrWait, lw_acquire_or_wait, "pi")            \
  X(LWLockWaitForVar, lw_wait_for_var, "pppp")                \
  X(LWLockUpdateVar, lw_update_var, "ppp")                    \
  X(LWLockRelease, lw_release, "p")                           \
  X(LWLockReleaseClearVar, lw_release_clear_var, "ppp")       \
  X(LWLockReleaseAll, lw_release_all, "")                     \
  X(LWLockHeldByMe, lw_held_by_me, "p")                       \
  X(LWLockHeldByMeInMode, lw_held_by_me_in_mode, "pi")        \
  X(LWLockAnyHeldByMe, lw_any_held_by_me, "pip")              \
  X(ForEachLWLockHeldByMe, lw_for_each_held_by_me, "pp")

#define LOCKSWAP_COUNT_FN(name, fn, args) +1
inline constexpr unsigned kRedirected = 0 LOCKSWAP_LWLOCK_FUNCTIONS(LOCKSWAP_COUNT_FN);
#undef LOCKSWAP_COUNT_FN

inline constexpr const char* kArgKinds[kRedirected] = {
#define LOCKSWAP_ARGS_FN(name, fn, args) args,
    LOCKSWAP_LWLOCK_FUNCTIONS(LOCKSWAP_ARGS_FN)
#undef LOCKSWAP_ARGS_FN
};

}  // namespace lockswap::lwlock
