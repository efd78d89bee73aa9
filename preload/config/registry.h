// preload/config/registry.h — the variant registry: one line per variant.
//
// Adding a variant = one adapter file in preload/pthread/variants/ plus one line in a
// list below. Everything else (the LOCKSWAP_MUTEX / LOCKSWAP_RWLOCK /
// LOCKSWAP_SEM parsers, the error message listing valid names, the dispatch
// switch, `lockswap --list`) is generated from these lists.
//
// The columns of the test and benchmark matrix (a name for a set of choices,
// e.g. rwsem-rspin = LOCKSWAP_MUTEX=rwsem,LOCKSWAP_RWLOCK=rwsem-rspin) are
// one list beside this one, preload/config/variant_columns.def, read by the library,
// CMake and the tools alike.
//
// There is no LOCKSWAP_MUTEX=lockref: a mutex cut from the lockref word is its
// lock half alone (the count has nothing to count when there is one owner),
// which is the futex variant's mutex again.
//
// X(identifier, "name users type", AdapterType, "one-line description")
// (for LOCKSWAP_CID the third field is the core allocator, a CidMode).
// This header names the adapter types without declaring them: what only
// parses or names a choice (config/, stats/) compiles no algorithm. The
// files that run the adapters include their family's adapter list
// (preload/pthread/adapters.h, preload/lwlock/variants.h,
// preload/wtlock/variants.h).
#pragma once
#include <cstdint>

#include "core/cid.h"

#define LOCKSWAP_MUTEX_VARIANTS(X)                                                              \
  X(glibc, "glibc", GlibcVariant, "glibc's own pthread_mutex (the control of every experiment)") \
  X(futex, "futex", FutexMutexVariant, "reference three-state futex mutex")                      \
  X(rwsem, "rwsem", RwsemMutexVariant, "Linux v5.11+ rw_semaphore write side: spinning + handoff")

#define LOCKSWAP_RWLOCK_VARIANTS(X)                                                               \
  X(glibc, "glibc", GlibcVariant, "glibc's own pthread_rwlock (the control of every experiment)") \
  X(futex, "futex", FutexRwlockVariant, "reference reader-preferring futex rwlock")               \
  X(rwsem, "rwsem", RwsemStealRwlockVariant, "Linux v5.11+ rw_semaphore: reader lock stealing")          \
  X(rwsem_rspin, "rwsem-rspin", RwsemRspinRwlockVariant, "Linux v5.10 rw_semaphore: reader optimistic spinning") \
  X(lockref, "lockref", LockrefRwlockVariant, "lockref word: bounded lock-free reader count, writer takes the lock half") \
  X(percid, "percid", PercidRwlockVariant, "readers counted per concurrency id (LOCKSWAP_CID), writers drain them")

// POSIX semaphores (sem_*). Process-shared ones keep glibc's word under every
// variant (core/sem.h), so processes sharing them may run different variants.
#define LOCKSWAP_SEM_VARIANTS(X)                                                                 \
  X(glibc, "glibc", GlibcVariant, "glibc's own sem_* (the control of every experiment)")          \
  X(futex, "futex", FutexSemVariant, "reference value+waiters word, unbounded compare-and-swap")  \
  X(lockref, "lockref", LockrefSemVariant, "lockref word: bounded compare-and-swap, then the lock half")

// PostgreSQL's LWLocks (preload/lwlock/): off unless asked. Their entry
// points are redirected only in a verified postgres build (docs/lwlock.md);
// the adapters are in preload/lwlock/variants.h.
#define LOCKSWAP_LWLOCK_VARIANTS(X)                                                                       \
  X(off, "off", LwlockOff, "PostgreSQL's own LWLocks, nothing redirected (default)")                      \
  X(pg, "pg", LwlockPg, "a port of PostgreSQL 15's own LWLock (the control beside the unpreloaded server)") \
  X(futex, "futex", LwlockFutex, "reference reader-preferring futex rwlock in the LWLock's state word")       \
  X(rwsem, "rwsem", LwlockRwsemSteal, "Linux v5.11+ rw_semaphore, process-shared: reader lock stealing")  \
  X(rwsem_rspin, "rwsem-rspin", LwlockRwsemRspin, "Linux v5.10 rw_semaphore, process-shared: reader optimistic spinning") \
  X(percid, "percid", LwlockPercid, "readers counted per concurrency id (LOCKSWAP_CID) on the main array's locks, the rwsem elsewhere")

// WiredTiger's rwlocks (__wt_readlock & co., preload/wtlock/): off unless
// asked; the adapters are in preload/wtlock/variants.h (percid's, whose words
// live in a side record, in variants_percid.h).
#define LOCKSWAP_WTLOCK_VARIANTS(X)                                                                   \
  X(off, "off", WtlockOff, "WiredTiger's own rwlock, untouched (default)")                            \
  X(wt, "wt", WtlockWt, "WiredTiger's own rwlock through lockswap's dispatch (the control)")          \
  X(rwsem, "rwsem", WtlockRwsemSteal, "Linux v5.11+ rw_semaphore: reader lock stealing")              \
  X(rwsem_rspin, "rwsem-rspin", WtlockRwsemRspin, "Linux v5.10 rw_semaphore: reader optimistic spinning") \
  X(percid, "percid", WtlockPercid, "readers counted per concurrency id (LOCKSWAP_CID), writers drain them")

// Concurrency-id allocators (core/cid.h), used by LOCKSWAP_RWLOCK=percid. The
// "type" field is the core allocator; the identifier is CidMode's.
#define LOCKSWAP_CID_VARIANTS(X)                                                                               \
  X(rseq, "rseq", CidMode::rseq, "the kernel's mm_cid from rseq; percpu where unavailable (default)")       \
  X(percpu, "percpu", CidMode::percpu, "v6.4: per-CPU id cache, lock-free fast path, lazy reclaim")           \
  X(global, "global", CidMode::global, "v6.3: one lock + bitmap shared with forked children, id put at sleep") \
  X(thread, "thread", CidMode::thread, "v6.19 per-task: the thread's registry id, kept for its life")

// Owner-on-CPU knowledge for spinners (core/oncpu.h), LOCKSWAP_ONCPU.
#define LOCKSWAP_ONCPU_VARIANTS(X)                                                                          \
  X(automatic, "auto", OncpuMode::automatic, "bpf when lockswap-oncpu handed over its map, else rseq (default)") \
  X(bpf, "bpf", OncpuMode::bpf, "exact, from the sched_switch eBPF map (lockswap-oncpu exec); error if unavailable") \
  X(rseq, "rseq", OncpuMode::rseq, "no privilege: owner asleep in lockswap or on our CPU, spinner preemption seen") \
  X(off, "off", OncpuMode::off, "owner asleep in lockswap or last seen on our CPU (before LOCKSWAP_ONCPU)")

namespace lockswap {

enum class OncpuMode : uint8_t { automatic, bpf, rseq, off };

enum class MutexVariant : uint8_t {
  unset,
#define X(id, name, type, desc) id,
  LOCKSWAP_MUTEX_VARIANTS(X)
#undef X
};

enum class RwlockVariant : uint8_t {
  unset,
#define X(id, name, type, desc) id,
  LOCKSWAP_RWLOCK_VARIANTS(X)
#undef X
};

enum class SemVariant : uint8_t {
  unset,
#define X(id, name, type, desc) id,
  LOCKSWAP_SEM_VARIANTS(X)
#undef X
};

enum class LwlockVariant : uint8_t {
  unset,
#define X(id, name, type, desc) id,
  LOCKSWAP_LWLOCK_VARIANTS(X)
#undef X
};

enum class WtlockVariant : uint8_t {
  unset,
#define X(id, name, type, desc) id,
  LOCKSWAP_WTLOCK_VARIANTS(X)
#undef X
};

// How many variants each family has: the highest value of its enum (unset is
// 0, the variants follow in list order).
#define LOCKSWAP_COUNT_ONE(id, name, type, desc) +1
inline constexpr unsigned kMutexVariantCount = 0 LOCKSWAP_MUTEX_VARIANTS(LOCKSWAP_COUNT_ONE);
inline constexpr unsigned kRwlockVariantCount = 0 LOCKSWAP_RWLOCK_VARIANTS(LOCKSWAP_COUNT_ONE);
inline constexpr unsigned kSemVariantCount = 0 LOCKSWAP_SEM_VARIANTS(LOCKSWAP_COUNT_ONE);
inline constexpr unsigned kLwlockVariantCount = 0 LOCKSWAP_LWLOCK_VARIANTS(LOCKSWAP_COUNT_ONE);
inline constexpr unsigned kWtlockVariantCount = 0 LOCKSWAP_WTLOCK_VARIANTS(LOCKSWAP_COUNT_ONE);
#undef LOCKSWAP_COUNT_ONE

// After fork(), in the child: every adapter that declares
// `static void after_fork_in_child()` gets it called, whether or not this
// process selected it (a lock word of any variant may have been copied
// mid-operation). The hooks reset process-wide state that a thread which did
// not survive the fork may have held; they must be idempotent, since
// variants sharing state (the rwsem family) each call theirs, and
// independent of one another, since the order is list order.
template <class Adapter>
void adapter_after_fork_in_child() {
  if constexpr (requires { Adapter::after_fork_in_child(); }) Adapter::after_fork_in_child();
}

// The name users type, for statistics and error messages (generated in
// preload/config/config.cpp from the lists above).
const char* variant_name(MutexVariant v);
const char* variant_name(RwlockVariant v);
const char* variant_name(SemVariant v);
const char* variant_name(LwlockVariant v);
const char* variant_name(WtlockVariant v);
const char* variant_name(CidMode m);
const char* variant_name(OncpuMode m);

struct VariantColumn {
  const char* name;
  const char* settings;  // SETTING=value,SETTING=value
  const char* description;
  const char* tags;  // tag,tag ("" for none)
};

inline constexpr VariantColumn kVariantColumns[] = {
#define LOCKSWAP_COLUMN(name, settings, description, tags) {name, settings, description, tags},
#include "preload/config/variant_columns.def"
#undef LOCKSWAP_COLUMN
};

}  // namespace lockswap
