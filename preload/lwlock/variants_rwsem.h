// preload/lwlock/variants_rwsem.h — LOCKSWAP_LWLOCK=rwsem|rwsem-rspin: the
// Linux rw_semaphore, process-shared (core/rwsem/shared.h), on the LWLock's
// three words (+4 count, +8 owner, +12 wait list), its waiter records in
// the side table g_host.rwsem_records (one per process number).
#pragma once
#include "core/rwsem/shared.h"
#include "preload/lwlock/host.h"
#include "preload/lwlock/pg15.h"

namespace lockswap::lwlock {

static_assert(rwshared::kFreeCount == kFreeState, "PostgreSQL's initial state is the free count");
static_assert(static_cast<uint32_t>(kFreeWord) == rwshared::kStoredXor, "its +8 and +12 decode to no owner, no waiter");

// What every variant on core/rwsem/shared.h needs of the host: the waiter
// records, the owner hint, a sleeper that publishes the wait event.
struct SharedWaits {
  static const rwshared::Records& records() { return g_host.rwsem_records; }
  // The owner hint of a fast path: the postmaster (no PGPROC) takes locks
  // too, as no one.
  static int32_t owner_proc() { return *g_host.my_proc == nullptr ? rwshared::kNoProc : my_procno(); }
  static void started_waiting(void* l) { wait_start(*static_cast<const PgLwlock*>(l)); }
  static rwshared::Sleeper sleeper(PgLwlock& l) {
    return {WaitCtx::blocking(kLwlockWaits), &started_waiting, &l};
  }
  static bool finish(const rwshared::Sleeper& s) {
    if (s.slept) wait_end();
    return s.slept;
  }
};

template <class Policy>
struct LwlockRwsem : SharedWaits {
  using S = rwshared::SharedRwsem<Policy>;
  static rwshared::Words& at(PgLwlock& l) { return *reinterpret_cast<rwshared::Words*>(&l.state); }

  static bool try_acquire(PgLwlock& l, Mode m) {
    const int32_t me = owner_proc();
    return m == pglw::kExclusive ? S::write_trylock(at(l), me) : S::read_trylock(at(l), me);
  }
  static bool acquire_slow(PgLwlock& l, Mode m) {
    const int32_t me = my_procno();  // check_may_wait() included: the slow path may sleep
    rwshared::Sleeper s = sleeper(l);
    if (m == pglw::kExclusive)
      S::write_lock(at(l), records(), me, s);
    else
      S::read_lock(at(l), records(), me, s);
    return finish(s);
  }
  static bool acquire_or_wait_slow(PgLwlock& l, Mode m) {
    const int32_t me = my_procno();
    rwshared::Sleeper s = sleeper(l);
    const bool taken = S::acquire_or_wait(at(l), records(), me, m == pglw::kExclusive, s);
    finish(s);
    return taken;
  }
  static bool wait_for_var(PgLwlock& l, uint64_t* var, uint64_t old, uint64_t* newval) {
    return wait_for_var_on(at(l), l, var, old, newval);
  }
  // The variable protocol on rwsem words `w` that stand for `l` (the lock's
  // own, or percid's inner rwsem: variants_percid.h).
  static bool wait_for_var_on(rwshared::Words& w, PgLwlock& l, uint64_t* var, uint64_t old, uint64_t* newval) {
    if (!S::write_locked(w)) return true;
    const int32_t me = my_procno();
    rwshared::Sleeper s = sleeper(l);
    const bool free = S::wait_for_var(w, records(), me, var, old, newval, s);
    finish(s);
    return free;
  }
  // A shared holder asking again (lwlock.cpp checks the held list): the
  // kernel's fairness would queue it behind a writer that waits for it.
  static bool enter_shared_again(PgLwlock& l) {
    S::read_again(at(l));
    return true;
  }
  static void update_var(PgLwlock& l, uint64_t* var, uint64_t v) { S::update_var(at(l), records(), var, v); }
  static void set_var(PgLwlock& l, uint64_t* var, uint64_t v) { S::set_var(at(l), var, v); }
  static void release(PgLwlock& l, Mode m) {
    if (m == pglw::kExclusive)
      S::write_unlock(at(l), records());
    else
      S::read_unlock(at(l), records());
  }

};

using LwlockRwsemSteal = LwlockRwsem<RwsemSteal>;
using LwlockRwsemRspin = LwlockRwsem<RwsemRspin>;

}  // namespace lockswap::lwlock
