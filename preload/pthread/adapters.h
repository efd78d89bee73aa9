// preload/pthread/adapters.h — every adapter of the pthread and semaphore
// families, for the files that run them (the entry points, the dispatch
// table, fork): the types the lists of preload/config/registry.h name.
#pragma once
#include "preload/config/registry.h"
#include "preload/pthread/variants/futex.h"
#include "preload/pthread/variants/glibc.h"
#include "preload/pthread/variants/lockref.h"
#include "preload/pthread/variants/percid.h"
#include "preload/pthread/variants/rwsem.h"

namespace lockswap {

// After fork(), in the child: every pthread adapter's hook
// (adapter_after_fork_in_child, preload/config/registry.h).
inline void variants_after_fork_in_child() {
#define X(id, name, type, desc) adapter_after_fork_in_child<type>();
  LOCKSWAP_MUTEX_VARIANTS(X)
  LOCKSWAP_RWLOCK_VARIANTS(X)
  LOCKSWAP_SEM_VARIANTS(X)
#undef X
}

}  // namespace lockswap
