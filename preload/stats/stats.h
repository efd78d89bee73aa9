// preload/stats/stats.h — per-lock and per-call-site statistics
// (LOCKSWAP_STATS=profile) and the machine records of every dump.
//
// Off by default, and then free: nothing on any lock path knows about this
// file; LOCKSWAP_STATS=counts leaves it off as well (its dump holds the lock
// event counters only). With profile, install_ops() (preload/ops.cpp) hands
// its finished table to install(): the variant's functions move to an inner
// table and `g_ops` points at profiling wrappers (preload/stats/stats.cpp) that
// call them. The output — human lines plus the machine records, one file:
// preload/stats/dump.cpp — is written at exit and on LOCKSWAP_STATS_SIGNAL,
// when preload/lifecycle.cpp calls write_dump().
#pragma once
#include <cstddef>
#include <cstdint>

#include "preload/real.h"

namespace lockswap::stats {

// With LOCKSWAP_STATS=profile: wrap every slot of `ops` (idempotent; racing
// installers converge), mapping the tables on first use. Otherwise nothing.
void install(OpsTable& ops);

// A text buffer filled without allocation (the dump may run in a signal
// handler); writes past `cap` are cut off and flagged.
struct Out {
  char* text;
  size_t cap;
  size_t len = 0;
  bool truncated = false;
  void put(const char* s);
  void put(const char* s, size_t n);
  void dec(uint64_t v);
  void dec_right(uint64_t v, unsigned width);  // right-aligned in `width` columns
  void put_left(const char* s, unsigned width);  // left-aligned, padded to `width`
  void hex(uint64_t v);  // 0x...
  void key_dec(const char* key, uint64_t v);  // " key=v"
  void key_hex(const char* key, uint64_t v);  // " key=0x..."
  // Every byte <= 0x20, '%' and >= 0x7f as %XX: a path (an executable's name,
  // a mapping) stays one field of one line whatever it holds.
  void key_path(const char* key, const char* path, size_t n);
  void escaped(const char* s, size_t n);
};

// The families that count without the profiler (PostgreSQL's LWLocks,
// WiredTiger's rwlocks) time the hold of one acquisition in this many: two
// clock reads on a path that must stay near its uncounted cost.
inline constexpr unsigned kHoldSample = 64;

// Room the dump functions borrow instead of their stack (the dump may run
// in a signal handler, perhaps on a small alternate stack).
inline constexpr size_t kScratchBytes = 4096;

// Locks outside the ops table (WiredTiger's rwlocks, preload/wtlock/), profiled
// like the rwlock wrappers: `try_fn(arg)` is the variant's try function (0 or
// `busy`), `wait_fn(arg)` its blocking one. Only after outside_ready().
using OutsideCall = int (*)(void* arg);
struct OutsideAttempt {
  const void* lock;
  uint8_t kind, op;  // Kind, Op (preload/stats/table.h)
  uintptr_t ip;      // the caller
  bool read, is_try;
  int busy;
};
bool outside_ready();  // LOCKSWAP_STATS=profile and the tables are mapped
int outside_acquire(const OutsideAttempt& a, OutsideCall try_fn, OutsideCall wait_fn, void* arg);
void outside_release(const void* lock, uint8_t kind);  // closes a write hold
void outside_init(const void* lock, uint8_t kind, uintptr_t ip);

// Writes one dump (the human lines, then the machine records) to
// LOCKSWAP_STATS_FILE or lockswap's stderr, with one write(2) from a buffer
// mapped for it: at exit and in the LOCKSWAP_STATS_SIGNAL handler
// (preload/lifecycle.cpp decides when), so async-signal-safe in practice.
// `signals_dropped`: statistics signals that came too soon after a dump.
void write_dump(uint64_t signals_dropped);

// ---------------------------------------------------------------- sections
// A family outside the ops table (preload/lwlock/, preload/wtlock/) adds its
// own records to every dump through a section it registers when it starts,
// so the statistics know no family. The hooks run where the dump runs.
struct Tally {
  uint64_t written = 0, unwritten = 0;  // records appended; records left out for want of room
};
struct Section {
  void (*heading)(Out& o);            // " key=value" for the human line and the begin record (may be null)
  size_t (*bound)();                  // bytes its records may take now
  void (*records)(Out& o, Tally& t);  // appends its records
  bool names_code;                    // its records hold code addresses: map records follow any written
};
inline constexpr unsigned kMaxSections = 4;
// `s` must outlive the process (a static); before main, from one thread.
void add_section(const Section& s);
// For a section's records: the start of a record line ("lockswap-v1 TYPE"),
// and whether one more record (kRecordBound) fits besides the dump's tail.
void record_start(Out& o, const char* type);
bool room(const Out& o);
inline constexpr size_t kRecordBound = 4096;  // one record, worst case

// The dump's start_ns: now, unless already set (the profiler's first use).
void mark_start();

// Fork child: the statistics are per process (tables zeroed).
void after_fork_in_child();

}  // namespace lockswap::stats
