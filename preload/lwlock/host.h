// preload/lwlock/host.h — what the LWLock variants use of the PostgreSQL
// they run in: its globals and its error path, resolved once by name
// (the server exports them for extensions), before main.
#pragma once
#include <cstdint>

#include "core/pg_lwlock.h"
#include "core/rwsem/shared.h"
#include "preload/lwlock/pg15.h"

namespace lockswap::lwlock {

struct Host {
  void** my_proc;                    // PGPROC *MyProc (null in the postmaster)
  volatile uint32_t* holdoff;        // InterruptHoldoffCount
  uint32_t** wait_event_info;        // uint32 *my_wait_event_info
  bool (*errstart)(int, const char*);
  int (*errmsg_internal)(const char*, ...);
  void (*errfinish)(const char*, int, const char*);
  const char* (*lwlock_identifier)(uint32_t, uint16_t);  // GetLWLockIdentifier
  uint32_t pgprocno_offset;
  pglw::Waiters waiters;             // the side area: one record per process number
  rwshared::Records rwsem_records;   // the same for the rwsem variants (core/rwsem/shared.h)
  bool waited;                       // set by wait_start: the call in progress waited (statistics)
};

extern Host g_host;

// HOLD_INTERRUPTS / RESUME_INTERRUPTS.
inline void hold_interrupts() { *g_host.holdoff = *g_host.holdoff + 1; }
inline void resume_interrupts() { *g_host.holdoff = *g_host.holdoff - 1; }

// pgstat_report_wait_start(PG_WAIT_LWLOCK | tranche) / _end().
// Every variant calls these around its waiting, and only there.
inline void wait_start(const PgLwlock& l) {
  **g_host.wait_event_info = kWaitLwlock | l.tranche;
  g_host.waited = true;
}
inline void wait_end() { **g_host.wait_event_info = 0; }

// The tranche's name, as pg_stat_activity shows it.
inline const char* tranche_name(uint16_t tranche) { return g_host.lwlock_identifier(kWaitLwlock, tranche); }

// elog(level, fmt, arg) through PostgreSQL's own error path: ERROR jumps
// to the caller's error handler, PANIC aborts. Never returns.
[[noreturn]] void pg_error(int level, const char* fmt, const char* arg = nullptr);

// This process's waiter record; elog(PANIC) if it has no PGPROC (the
// postmaster never waits) or its number lies outside the side area.
int32_t my_procno();
// The same check where a variant is about to wait without a record.
void check_may_wait();

// The lock's variant at work, for the statistics.
inline constexpr WaitFamily kLwlockWaits = WaitFamily::rwlock;

}  // namespace lockswap::lwlock
