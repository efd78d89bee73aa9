// preload/pthread/variants/futex.h — the reference variant: core/futex_mutex.h and
// core/futex_rwlock.h laid over the pthread objects (word A, offset 0), and
// core/sem.h's FutexSem over sem_t (preload/pthread/variants/sem.h).
#pragma once
#include "core/futex_mutex.h"
#include "core/futex_rwlock.h"
#include "preload/abi.h"
#include "preload/pthread/variants/sem.h"

namespace lockswap {

struct FutexMutexVariant {
  static constexpr bool forwards_to_glibc = false;
  static FutexMutex& at(abi::MutexObject& o) { return *reinterpret_cast<FutexMutex*>(&o); }
  static bool try_fast(abi::MutexObject& o) { return at(o).try_lock(); }
  static bool trylock(abi::MutexObject& o) { return at(o).try_lock(); }
  static int lock(abi::MutexObject& o, const WaitCtx& ctx, bool adaptive) { return at(o).lock(ctx, adaptive); }
  // False: the mutex was not locked (dispatch keeps glibc's account of that).
  static bool unlock(abi::MutexObject& o) { return at(o).unlock(); }
  static bool is_locked(abi::MutexObject& o) { return at(o).is_locked(); }
};

struct FutexRwlockVariant {
  static constexpr bool forwards_to_glibc = false;
  // Reader-preferring on the default kinds: a recursive read can never wait
  // behind a writer, so no per-thread bookkeeping is needed.
  static FutexRwlock& at(abi::RwlockObject& o) { return *reinterpret_cast<FutexRwlock*>(&o); }
  static int rdlock(abi::RwlockObject& o, const WaitCtx& ctx, bool writer_preferring) {
    return at(o).read_lock(ctx, writer_preferring);
  }
  static int wrlock(abi::RwlockObject& o, const WaitCtx& ctx) { return at(o).write_lock(ctx); }
  static bool write_held(abi::RwlockObject& o) { return at(o).write_locked(); }
  static void read_unlock(abi::RwlockObject& o) { at(o).unlock(); }
  static void write_unlock(abi::RwlockObject& o) { at(o).unlock(); }
};

using FutexSemVariant = SemVariantOf<FutexSem>;

}  // namespace lockswap
