// preload/pthread/families.h — each API family's entry points, installed into an
// ops table for one variant (the family entry files: preload/pthread/mutex.cpp
// with the condition variable, rwlock.cpp, sem.cpp).
//
// Variant `glibc` installs glibc's own functions, so the control costs one
// extra jump and nothing else. A native variant installs the family's
// templates instantiated for its adapter: they reproduce glibc's argument
// checks and kind semantics (recursive, errorcheck, adaptive, destroyed
// objects, EDEADLK, EINVAL timing), delegate objects glibc must own (robust,
// PI, PP, process-shared), and call the adapter's lock word operations with
// a WaitCtx. Each family's fast paths are compiled in its entry file, next
// to nothing else.
#pragma once
#include "preload/real.h"
#include "preload/pthread/adapters.h"

namespace lockswap {

// The mutex slots and the condvar slots: the condvar is glibc's exactly when
// the mutex variant is, because glibc's condvar reaches into glibc's mutex
// layout. `tagged`: the instantiation LOCKSWAP_SELECT's mixed entries reach,
// for objects carrying a selection tag in __kind (abi.h), which it strips.
void install_mutex_family(OpsTable& t, MutexVariant v, bool tagged = false);
// The native condvar alone (serves every native mutex, and mixed mutexes).
void install_native_cond(OpsTable& t);
void install_rwlock_family(OpsTable& t, RwlockVariant v);
void install_sem_family(OpsTable& t, SemVariant v);

}  // namespace lockswap
