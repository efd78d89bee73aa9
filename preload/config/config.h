// preload/config/config.h — what the user chose, read once from the environment.
#pragma once
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "preload/config/registry.h"

namespace lockswap {

// LOCKSWAP_STATS: what a statistics dump holds and what it costs.
//   counts   the lock event counters (core/lock_events_list.h), which are
//            counted on slow paths whether or not anyone asks: nothing is
//            added to any lock path.
//   profile  counts plus the per-lock, per-call-site profiler
//            (preload/stats/stats.cpp), which wraps every lock call.
enum class StatsMode : uint8_t { off, counts, profile };

struct Config {
  MutexVariant mutex = MutexVariant::unset;
  RwlockVariant rwlock = RwlockVariant::unset;
  SemVariant sem = SemVariant::unset;
  LwlockVariant lwlock = LwlockVariant::unset;  // LOCKSWAP_LWLOCK (preload/lwlock/)
  WtlockVariant wtlock = WtlockVariant::unset;  // LOCKSWAP_WTLOCK (preload/wtlock/)
  CidMode cid = CidMode::rseq;   // LOCKSWAP_CID: concurrency-id allocator (percid rwlock)
  OncpuMode oncpu = OncpuMode::automatic;  // LOCKSWAP_ONCPU: what it asked for (core/oncpu.h: what it got)
  StatsMode stats_mode = StatsMode::off;  // LOCKSWAP_STATS=0|1|counts|profile
  bool stats = false;                // a dump at exit (counts or profile)
  bool profile = false;              // the per-lock, per-site profiler is installed
  const char* stats_file = nullptr;  // LOCKSWAP_STATS_FILE=path: the dump goes there, not to stderr
  uint32_t stats_backtrace = 64;     // LOCKSWAP_STATS_BACKTRACE=N: 1 in N contended acquisitions (0: none)
  int stats_signal = 0;              // LOCKSWAP_STATS_SIGNAL=USR2: also dump on this signal (0: none)
  uint32_t stats_lock_slots = 0;     // LOCKSWAP_STATS_LOCK_SLOTS: profiler's lock table size (0: full)
  bool oncpu_strict = true;          // LOCKSWAP_ONCPU_STRICT=0: bpf without its map degrades to rseq
  bool cid_switch = false;           // LOCKSWAP_CID_SWITCH=1: the concurrency-id switch model (core/cid.h)
};

extern Config g_config;

// Parsing, the list of valid choices and the names in statistics are
// generated from these.
// X(Enum, field, "ENV_NAME", VARIANT_LIST, default, "what a choice names")
#define LOCKSWAP_FAMILIES(X)                                                                \
  X(MutexVariant, mutex, "LOCKSWAP_MUTEX", LOCKSWAP_MUTEX_VARIANTS, glibc, "mutex variant")     \
  X(RwlockVariant, rwlock, "LOCKSWAP_RWLOCK", LOCKSWAP_RWLOCK_VARIANTS, glibc, "rwlock variant") \
  X(SemVariant, sem, "LOCKSWAP_SEM", LOCKSWAP_SEM_VARIANTS, glibc, "sem variant")               \
  X(LwlockVariant, lwlock, "LOCKSWAP_LWLOCK", LOCKSWAP_LWLOCK_VARIANTS, off, "PostgreSQL LWLock variant") \
  X(WtlockVariant, wtlock, "LOCKSWAP_WTLOCK", LOCKSWAP_WTLOCK_VARIANTS, off, "WiredTiger rwlock variant") \
  X(CidMode, cid, "LOCKSWAP_CID", LOCKSWAP_CID_VARIANTS, rseq, "concurrency-id allocator") \
  X(OncpuMode, oncpu, "LOCKSWAP_ONCPU", LOCKSWAP_ONCPU_VARIANTS, automatic, "owner-on-CPU source for spinners")


// The families' choices, parsed and not yet published.
struct Choices {
#define FAMILY(Enum, field, env, LIST, dflt, what) Enum field;
  LOCKSWAP_FAMILIES(FAMILY)
#undef FAMILY
  int oncpu_fd;  // LOCKSWAP_ONCPU_FD, -1 when unset
};

// Reads every LOCKSWAP_* setting (config.cpp): tunables and the statistics
// settings take effect at once (no lock path reads them before the families
// are published), the families' choices are returned. An invalid setting
// prints the valid choices on stderr and exits with 2. Starts nothing.
Choices parse_settings();

// Publishes the families' choices (release): from here on lock paths use them.
void publish(const Choices& c);

// Parses the environment and starts what it chose, once, on first use (from
// whichever call comes first: a lock taken in another library's constructor,
// or our own constructor): preload/boot.cpp.
void load_config();

// A family's choice: parsed on first use, then one acquire load.
template <class Enum>
inline Enum chosen(Enum& field) {
  Enum v = std::atomic_ref<Enum>(field).load(std::memory_order_acquire);
  if (__builtin_expect(v != Enum::unset, 1)) return v;
  load_config();
  return field;
}

inline MutexVariant mutex_variant() { return chosen(g_config.mutex); }
inline RwlockVariant rwlock_variant() { return chosen(g_config.rwlock); }
inline SemVariant sem_variant() { return chosen(g_config.sem); }
inline WtlockVariant wtlock_variant() { return chosen(g_config.wtlock); }
// LOCKSWAP_LWLOCK has no accessor: load_config hands the choice to
// lwlock::start, before main, and nothing reads it later on a lock path.

// variant_name(): preload/config/registry.h.

}  // namespace lockswap
