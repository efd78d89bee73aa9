// preload/ops.cpp — the dispatch table (preload/ops.h) and its first-call
// install from the configuration.
#include "preload/ops.h"

#include <atomic>

#include "preload/config/config.h"
#include "preload/pthread/families.h"
#include "preload/pthread/mixed.h"
#include "preload/pthread/adapters.h"
#include "preload/config/select.h"
#include "preload/stats/stats.h"

namespace lockswap {
namespace {

std::atomic<bool> g_ops_installed{false};

// Fill the table from the configuration (idempotent; racing first calls all
// write the same pointers, each pointer-sized store being atomic on every
// supported ISA). The table is completed in `t` and then published slot by
// slot, so a racing installer never exposes an intermediate pointer (with
// statistics on: a variant's function where the wrapper belongs).
__attribute__((noinline)) void install_ops() {
  if (g_ops_installed.load(std::memory_order_acquire)) return;
  OpsTable t = {};
  install_mutex_family(t, mutex_variant());
  install_rwlock_family(t, rwlock_variant());
  install_sem_family(t, sem_variant());
  using select::Family;
  if (select::active(Family::mutex) || select::active(Family::rwlock) || select::active(Family::sem))
    install_mixed(t);
  // LOCKSWAP_STATS=profile: the variant's table moves inside the profiling
  // wrappers (preload/stats/stats.cpp). Off or counts, nothing here or on any lock
  // path changes.
  if (g_config.profile) stats::install(t);
#define X(name, ret, params, args, sleeps, family) __atomic_store_n(&g_ops.name, t.name, __ATOMIC_RELEASE);
  LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
  g_ops_installed.store(true, std::memory_order_release);
}

// First-call stubs: read the configuration, fill the table, call through it.
template <auto Slot>
struct FirstCall;
template <class R, class... A, R (*OpsTable::*Slot)(A...)>
struct FirstCall<Slot> {
  static R call(A... args) {
    install_ops();
    return (g_ops.*Slot)(args...);
  }
};

}  // namespace

OpsTable g_ops = {
#define X(name, ret, params, args, sleeps, family) &FirstCall<&OpsTable::name>::call,
    LOCKSWAP_REAL_FUNCTIONS(X)
#undef X
};

}  // namespace lockswap
