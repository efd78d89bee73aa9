// preload/dispatch.cpp — the one path from a pthread / C11 call to a variant.
//
// Every exported function does three things, in this order:
//   1. pick the variant chosen at start-up (a switch generated from
//      registry.h; the `glibc` variant forwards the untouched call);
//   2. reproduce glibc's argument checks and kind semantics (recursive,
//      errorcheck, adaptive, destroyed objects, EDEADLK, EINVAL timing), and
//      delegate objects glibc must own (robust, PI, PP, process-shared);
//   3. call the variant's lock word operations with a WaitCtx.
// The common case (default kind, no contention) stays inline and short; kinds
// and argument errors live in noinline functions.
#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <threads.h>

#include <atomic>

#include "core/cond.h"
#include "core/thread_registry.h"
#include "core/wait_ctx.h"
#include "preload/abi.h"
#include "preload/config.h"
#include "preload/real.h"
#include "preload/registry.h"

#define LOCKSWAP_EXPORT extern "C" __attribute__((visibility("default")))
#define LOCKSWAP_LIKELY(x) __builtin_expect(!!(x), 1)
#define LOCKSWAP_INLINE __attribute__((always_inline)) inline

namespace lockswap {
namespace {

using abi::MutexObject;
using abi::RwlockObject;

// ---------------------------------------------------------------- timeouts

bool valid_nsec(const timespec* t) { return t->tv_nsec >= 0 && t->tv_nsec < 1'000'000'000; }
bool supported_clock(clockid_t c) { return c == CLOCK_REALTIME || c == CLOCK_MONOTONIC; }

// How a mutex acquisition was asked for; also what a delegation replays.
struct MutexCall {
  enum Op : uint8_t { lock, trylock, timedlock, clocklock } op;
  clockid_t clock;
  const timespec* abs;
  WaitCtx ctx() const {
    switch (op) {
      case trylock: return WaitCtx::try_once();
      case lock: return WaitCtx::blocking();
      default: return WaitCtx::until(clock, abs);
    }
  }
};

// ------------------------------------------------------------------ mutex

// The `glibc` variant: the call, untouched (and uncounted: it is the control).
int forward_mutex(pthread_mutex_t* m, const MutexCall& c) {
  const auto& g = real::glibc();
  switch (c.op) {
    case MutexCall::lock: return g.pthread_mutex_lock(m);
    case MutexCall::trylock: return g.pthread_mutex_trylock(m);
    case MutexCall::timedlock: return g.pthread_mutex_timedlock(m, c.abs);
    default: return g.pthread_mutex_clocklock(m, c.clock, c.abs);
  }
}

// A native variant met an object glibc must own (robust, PI, PP, pshared).
__attribute__((noinline)) int delegate_mutex(pthread_mutex_t* m, const MutexCall& c) {
  lockevent_inc(LockEvent::delegated_to_glibc);
  return forward_mutex(m, c);
}

// The part of an acquisition that may block: glibc validates the timeout only
// here, after the uncontended attempt failed.
template <class V>
int mutex_wait(MutexObject& o, const MutexCall& c, bool adaptive) {
  if (c.op == MutexCall::trylock) return EBUSY;
  if (c.abs != nullptr && !valid_nsec(c.abs)) return EINVAL;
  return V::lock(o, c.ctx(), adaptive);
}

template <class V>
__attribute__((noinline)) int mutex_acquire_kinded(pthread_mutex_t* m, int kind, const MutexCall& c) {
  MutexObject& o = abi::obj(m);
  if (kind == abi::kKindDestroyed) return EINVAL;
  if (abi::glibc_owned(kind)) return delegate_mutex(m, c);
  int type = kind & ~abi::kKindElisionBits;
  if (type < 0 || type > abi::kKindTypeMask) return EINVAL;
  if (type == abi::kKindNormal || type == abi::kKindAdaptive) {
    if (V::trylock(o)) return 0;
    return mutex_wait<V>(o, c, type == abi::kKindAdaptive);
  }
  int32_t self = current_tid();
  if (o.owner_tid.load(std::memory_order_relaxed) == self) {
    if (type == abi::kKindErrorcheck) return c.op == MutexCall::trylock ? EBUSY : EDEADLK;
    if (o.recursion + 1 == 0) return EAGAIN;  // recursion counter would wrap
    ++o.recursion;
    return 0;
  }
  if (!V::trylock(o)) {
    if (int rc = mutex_wait<V>(o, c, false)) return rc;
  }
  o.owner_tid.store(self, std::memory_order_relaxed);
  o.recursion = 1;
  return 0;
}

template <class V>
LOCKSWAP_INLINE int mutex_acquire(pthread_mutex_t* m, const MutexCall& c) {
  MutexObject& o = abi::obj(m);
  int kind = o.kind.load(std::memory_order_relaxed);
  if (LOCKSWAP_LIKELY(kind == abi::kKindNormal)) {
    if (LOCKSWAP_LIKELY(V::trylock(o))) return 0;
    return mutex_wait<V>(o, c, false);
  }
  return mutex_acquire_kinded<V>(m, kind, c);
}

template <class V>
__attribute__((noinline)) int mutex_release_kinded(pthread_mutex_t* m, int kind) {
  MutexObject& o = abi::obj(m);
  if (kind == abi::kKindDestroyed) return EINVAL;
  if (abi::glibc_owned(kind)) return real::glibc().pthread_mutex_unlock(m);
  int type = kind & ~abi::kKindElisionBits;
  if (type < 0 || type > abi::kKindTypeMask) return EINVAL;
  if (type == abi::kKindRecursive || type == abi::kKindErrorcheck) {
    if (o.owner_tid.load(std::memory_order_relaxed) != current_tid()) return EPERM;
    if (--o.recursion != 0) return 0;
    o.owner_tid.store(0, std::memory_order_relaxed);
  }
  V::unlock(o);
  return 0;
}

template <class V>
LOCKSWAP_INLINE int mutex_release(pthread_mutex_t* m) {
  MutexObject& o = abi::obj(m);
  int kind = o.kind.load(std::memory_order_relaxed);
  if (LOCKSWAP_LIKELY(kind == abi::kKindNormal)) {
    V::unlock(o);
    return 0;
  }
  return mutex_release_kinded<V>(m, kind);
}

template <class V>
int mutex_destroy(pthread_mutex_t* m) {
  MutexObject& o = abi::obj(m);
  int kind = o.kind.load(std::memory_order_relaxed);
  if (kind == abi::kKindDestroyed) return 0;
  if (abi::glibc_owned(kind)) return real::glibc().pthread_mutex_destroy(m);
  if (V::is_locked(o)) return EBUSY;
  o.kind.store(abi::kKindDestroyed, std::memory_order_relaxed);
  return 0;
}

// Kinds come from glibc's attribute object; only objects glibc must own are
// initialised by glibc (so their layout is glibc's).
int mutex_init_native(pthread_mutex_t* m, const pthread_mutexattr_t* attr) {
  int type = PTHREAD_MUTEX_DEFAULT, robust = PTHREAD_MUTEX_STALLED, protocol = PTHREAD_PRIO_NONE,
      pshared = PTHREAD_PROCESS_PRIVATE;
  if (attr != nullptr) {
    pthread_mutexattr_gettype(attr, &type);
    pthread_mutexattr_getrobust(attr, &robust);
    pthread_mutexattr_getprotocol(attr, &protocol);
    pthread_mutexattr_getpshared(attr, &pshared);
  }
  if (robust != PTHREAD_MUTEX_STALLED || protocol != PTHREAD_PRIO_NONE || pshared != PTHREAD_PROCESS_PRIVATE)
    return real::glibc().pthread_mutex_init(m, attr);
  memset(static_cast<void*>(m), 0, sizeof *m);
  abi::obj(m).kind.store(type & abi::kKindTypeMask, std::memory_order_relaxed);
  return 0;
}

// ------------------------------------------------------------ variant switch
// Generated from registry.h: one case per variant, each calling the lambda
// with the variant's adapter type.

template <class F>
LOCKSWAP_INLINE int with_mutex_variant(F&& f) {
  switch (mutex_variant()) {
#define X(id, name, type, desc) \
  case MutexVariant::id:        \
    return f.template operator()<type>();
    LOCKSWAP_MUTEX_VARIANTS(X)
#undef X
    default:
      __builtin_unreachable();
  }
}

template <class F>
LOCKSWAP_INLINE int with_rwlock_variant(F&& f) {
  switch (rwlock_variant()) {
#define X(id, name, type, desc) \
  case RwlockVariant::id:       \
    return f.template operator()<type>();
    LOCKSWAP_RWLOCK_VARIANTS(X)
#undef X
    default:
      __builtin_unreachable();
  }
}

LOCKSWAP_INLINE int mutex_acquire_any(pthread_mutex_t* m, const MutexCall& c) {
  return with_mutex_variant([&]<class V>() __attribute__((always_inline)) {
    if constexpr (V::forwards_to_glibc) return forward_mutex(m, c);
    else return mutex_acquire<V>(m, c);
  });
}

LOCKSWAP_INLINE int mutex_release_any(pthread_mutex_t* m) {
  return with_mutex_variant([&]<class V>() __attribute__((always_inline)) {
    if constexpr (V::forwards_to_glibc) return real::glibc().pthread_mutex_unlock(m);
    else return mutex_release<V>(m);
  });
}

// ----------------------------------------------------------------- rwlock

struct RwCall {
  enum Op : uint8_t { block, trylock, timed, clocked } op;
  clockid_t clock;
  const timespec* abs;
  WaitCtx ctx() const {
    switch (op) {
      case trylock: return WaitCtx::try_once();
      case block: return WaitCtx::blocking();
      default: return WaitCtx::until(clock, abs);
    }
  }
};

int forward_rdlock(pthread_rwlock_t* l, const RwCall& c) {
  const auto& g = real::glibc();
  switch (c.op) {
    case RwCall::block: return g.pthread_rwlock_rdlock(l);
    case RwCall::trylock: return g.pthread_rwlock_tryrdlock(l);
    case RwCall::timed: return g.pthread_rwlock_timedrdlock(l, c.abs);
    default: return g.pthread_rwlock_clockrdlock(l, c.clock, c.abs);
  }
}

int forward_wrlock(pthread_rwlock_t* l, const RwCall& c) {
  const auto& g = real::glibc();
  switch (c.op) {
    case RwCall::block: return g.pthread_rwlock_wrlock(l);
    case RwCall::trylock: return g.pthread_rwlock_trywrlock(l);
    case RwCall::timed: return g.pthread_rwlock_timedwrlock(l, c.abs);
    default: return g.pthread_rwlock_clockwrlock(l, c.clock, c.abs);
  }
}

__attribute__((noinline)) int delegate_rdlock(pthread_rwlock_t* l, const RwCall& c) {
  lockevent_inc(LockEvent::delegated_to_glibc);
  return forward_rdlock(l, c);
}

__attribute__((noinline)) int delegate_wrlock(pthread_rwlock_t* l, const RwCall& c) {
  lockevent_inc(LockEvent::delegated_to_glibc);
  return forward_wrlock(l, c);
}

// glibc checks clock and tv_nsec before anything else, then EDEADLK.
LOCKSWAP_INLINE int rw_precheck(const RwlockObject& o, const RwCall& c) {
  if (c.abs != nullptr && (!supported_clock(c.clock) || !valid_nsec(c.abs))) return EINVAL;
  if (o.writer_tid.load(std::memory_order_relaxed) == current_tid()) return EDEADLK;
  return 0;
}

template <class V>
LOCKSWAP_INLINE int rw_rdlock(pthread_rwlock_t* l, const RwCall& c) {
  RwlockObject& o = abi::obj(l);
  if (abi::glibc_owned(o)) return delegate_rdlock(l, c);
  if (int rc = rw_precheck(o, c)) return rc;
  bool writer_preferring = o.flags.load(std::memory_order_relaxed) == abi::kRwPreferWriterNonrecursive;
  if constexpr (V::needs_read_hold_tracking) {
    int rc = V::rdlock(o, c.ctx(), writer_preferring, t_local.read_held != 0);
    if (rc == 0) ++t_local.read_held;
    return rc;
  } else {
    return V::rdlock(o, c.ctx(), writer_preferring, false);
  }
}

template <class V>
LOCKSWAP_INLINE int rw_wrlock(pthread_rwlock_t* l, const RwCall& c) {
  RwlockObject& o = abi::obj(l);
  if (abi::glibc_owned(o)) return delegate_wrlock(l, c);
  if (int rc = rw_precheck(o, c)) return rc;
  int rc = V::wrlock(o, c.ctx());
  if (rc == 0) o.writer_tid.store(current_tid(), std::memory_order_relaxed);
  return rc;
}

template <class V>
LOCKSWAP_INLINE int rw_unlock(pthread_rwlock_t* l) {
  RwlockObject& o = abi::obj(l);
  if (abi::glibc_owned(o)) return real::glibc().pthread_rwlock_unlock(l);
  // Like glibc: we are the writer iff the recorded writer is us.
  if (o.writer_tid.load(std::memory_order_relaxed) == current_tid()) {
    o.writer_tid.store(0, std::memory_order_relaxed);
    V::unlock(o, true);
    return 0;
  }
  V::unlock(o, false);
  if constexpr (V::needs_read_hold_tracking) {
    if (t_local.read_held != 0) --t_local.read_held;
  }
  return 0;
}

LOCKSWAP_INLINE int rwlock_rdlock_any(pthread_rwlock_t* l, const RwCall& c) {
  return with_rwlock_variant([&]<class V>() __attribute__((always_inline)) {
    if constexpr (V::forwards_to_glibc) return forward_rdlock(l, c);
    else return rw_rdlock<V>(l, c);
  });
}

LOCKSWAP_INLINE int rwlock_wrlock_any(pthread_rwlock_t* l, const RwCall& c) {
  return with_rwlock_variant([&]<class V>() __attribute__((always_inline)) {
    if constexpr (V::forwards_to_glibc) return forward_wrlock(l, c);
    else return rw_wrlock<V>(l, c);
  });
}

// ------------------------------------------------------------------- cond

// The condvar follows the mutex: glibc's condvar reaches into glibc's mutex
// layout, so it is glibc's exactly when the mutex variant is.
bool cond_is_glibc() { return mutex_variant() == MutexVariant::glibc; }

Cond& cond_obj(pthread_cond_t* c) { return *reinterpret_cast<Cond*>(c); }
static_assert(sizeof(Cond) <= sizeof(pthread_cond_t));

// The futex sleep inside a condition wait is the cancellation point. Async
// cancellation is enabled only around the system call, inside a function that
// has no cleanups of its own: a cancellation unwinds straight out of it into
// Cond::wait's guard, which re-takes the mutex before the caller's handlers.
struct CancellableSleeper {
  __attribute__((noinline)) static int sleep(const std::atomic<uint32_t>* word, uint32_t expected,
                                             const WaitCtx& ctx, bool shared) {
    int old_type;
    pthread_setcanceltype(PTHREAD_CANCEL_ASYNCHRONOUS, &old_type);
    int rc = ctx.sleep(word, expected, shared);
    pthread_setcanceltype(old_type, &old_type);
    return rc;
  }
};

int cond_wait_native(pthread_cond_t* c, pthread_mutex_t* m, const WaitCtx& ctx) {
  return cond_obj(c).wait<CancellableSleeper>([m] { return mutex_release_any(m); },
                                              [m] { return mutex_acquire_any(m, {MutexCall::lock, 0, nullptr}); },
                                              ctx);
}

int cond_init_native(pthread_cond_t* c, const pthread_condattr_t* attr) {
  clockid_t clock = CLOCK_REALTIME;
  int pshared = PTHREAD_PROCESS_PRIVATE;
  if (attr != nullptr) {
    pthread_condattr_getclock(attr, &clock);
    pthread_condattr_getpshared(attr, &pshared);
  }
  memset(static_cast<void*>(c), 0, sizeof *c);
  cond_obj(c).init(clock == CLOCK_MONOTONIC, pshared != PTHREAD_PROCESS_PRIVATE);
  return 0;
}

// ---------------------------------------------------------------- C11 glue

int thrd_result(int err) {
  switch (err) {
    case 0: return thrd_success;
    case EBUSY: return thrd_busy;
    case ETIMEDOUT: return thrd_timedout;
    case ENOMEM: return thrd_nomem;
    default: return thrd_error;
  }
}

}  // namespace
}  // namespace lockswap

using namespace lockswap;

// =================================================================== exports

LOCKSWAP_EXPORT int pthread_mutex_init(pthread_mutex_t* m, const pthread_mutexattr_t* attr) noexcept {
  return with_mutex_variant([&]<class V>() __attribute__((always_inline)) {
    if constexpr (V::forwards_to_glibc) return real::glibc().pthread_mutex_init(m, attr);
    else return mutex_init_native(m, attr);
  });
}

LOCKSWAP_EXPORT int pthread_mutex_destroy(pthread_mutex_t* m) noexcept {
  return with_mutex_variant([&]<class V>() __attribute__((always_inline)) {
    if constexpr (V::forwards_to_glibc) return real::glibc().pthread_mutex_destroy(m);
    else return mutex_destroy<V>(m);
  });
}

LOCKSWAP_EXPORT int pthread_mutex_lock(pthread_mutex_t* m) noexcept {
  return mutex_acquire_any(m, {MutexCall::lock, 0, nullptr});
}

LOCKSWAP_EXPORT int pthread_mutex_trylock(pthread_mutex_t* m) noexcept {
  return mutex_acquire_any(m, {MutexCall::trylock, 0, nullptr});
}

LOCKSWAP_EXPORT int pthread_mutex_timedlock(pthread_mutex_t* m, const timespec* abs) noexcept {
  return mutex_acquire_any(m, {MutexCall::timedlock, CLOCK_REALTIME, abs});
}

LOCKSWAP_EXPORT int pthread_mutex_clocklock(pthread_mutex_t* m, clockid_t clock, const timespec* abs) noexcept {
  if (mutex_variant() != MutexVariant::glibc && !supported_clock(clock)) return EINVAL;
  return mutex_acquire_any(m, {MutexCall::clocklock, clock, abs});
}

LOCKSWAP_EXPORT int pthread_mutex_unlock(pthread_mutex_t* m) noexcept { return mutex_release_any(m); }

LOCKSWAP_EXPORT int pthread_mutex_consistent(pthread_mutex_t* m) noexcept {
  if (mutex_variant() != MutexVariant::glibc && !(abi::obj(m).kind.load(std::memory_order_relaxed) & abi::kKindRobust))
    return EINVAL;
  return real::glibc().pthread_mutex_consistent(m);
}

LOCKSWAP_EXPORT int pthread_rwlock_init(pthread_rwlock_t* l, const pthread_rwlockattr_t* attr) noexcept {
  return with_rwlock_variant([&]<class V>() __attribute__((always_inline)) {
    int kind = PTHREAD_RWLOCK_DEFAULT_NP, pshared = PTHREAD_PROCESS_PRIVATE;
    if (attr != nullptr) {
      pthread_rwlockattr_getkind_np(attr, &kind);
      pthread_rwlockattr_getpshared(attr, &pshared);
    }
    if (V::forwards_to_glibc || pshared != PTHREAD_PROCESS_PRIVATE) return real::glibc().pthread_rwlock_init(l, attr);
    memset(static_cast<void*>(l), 0, sizeof *l);
    abi::obj(l).flags.store(static_cast<uint32_t>(kind), std::memory_order_relaxed);
    return 0;
  });
}

LOCKSWAP_EXPORT int pthread_rwlock_destroy(pthread_rwlock_t* l) noexcept {
  return with_rwlock_variant([&]<class V>() __attribute__((always_inline)) {
    if (V::forwards_to_glibc || abi::glibc_owned(abi::obj(l))) return real::glibc().pthread_rwlock_destroy(l);
    return 0;  // glibc's destroy of a private rwlock checks nothing either
  });
}

LOCKSWAP_EXPORT int pthread_rwlock_rdlock(pthread_rwlock_t* l) noexcept {
  return rwlock_rdlock_any(l, {RwCall::block, 0, nullptr});
}
LOCKSWAP_EXPORT int pthread_rwlock_tryrdlock(pthread_rwlock_t* l) noexcept {
  return rwlock_rdlock_any(l, {RwCall::trylock, 0, nullptr});
}
LOCKSWAP_EXPORT int pthread_rwlock_timedrdlock(pthread_rwlock_t* l, const timespec* abs) noexcept {
  return rwlock_rdlock_any(l, {RwCall::timed, CLOCK_REALTIME, abs});
}
LOCKSWAP_EXPORT int pthread_rwlock_clockrdlock(pthread_rwlock_t* l, clockid_t clock, const timespec* abs) noexcept {
  return rwlock_rdlock_any(l, {RwCall::clocked, clock, abs});
}
LOCKSWAP_EXPORT int pthread_rwlock_wrlock(pthread_rwlock_t* l) noexcept {
  return rwlock_wrlock_any(l, {RwCall::block, 0, nullptr});
}
LOCKSWAP_EXPORT int pthread_rwlock_trywrlock(pthread_rwlock_t* l) noexcept {
  return rwlock_wrlock_any(l, {RwCall::trylock, 0, nullptr});
}
LOCKSWAP_EXPORT int pthread_rwlock_timedwrlock(pthread_rwlock_t* l, const timespec* abs) noexcept {
  return rwlock_wrlock_any(l, {RwCall::timed, CLOCK_REALTIME, abs});
}
LOCKSWAP_EXPORT int pthread_rwlock_clockwrlock(pthread_rwlock_t* l, clockid_t clock, const timespec* abs) noexcept {
  return rwlock_wrlock_any(l, {RwCall::clocked, clock, abs});
}
LOCKSWAP_EXPORT int pthread_rwlock_unlock(pthread_rwlock_t* l) noexcept {
  return with_rwlock_variant([&]<class V>() __attribute__((always_inline)) {
    if constexpr (V::forwards_to_glibc) return real::glibc().pthread_rwlock_unlock(l);
    else return rw_unlock<V>(l);
  });
}

LOCKSWAP_EXPORT int pthread_cond_init(pthread_cond_t* c, const pthread_condattr_t* attr) noexcept {
  if (cond_is_glibc()) return real::glibc().pthread_cond_init(c, attr);
  return cond_init_native(c, attr);
}

LOCKSWAP_EXPORT int pthread_cond_destroy(pthread_cond_t* c) noexcept {
  if (cond_is_glibc()) return real::glibc().pthread_cond_destroy(c);
  cond_obj(c).destroy();
  return 0;
}

LOCKSWAP_EXPORT int pthread_cond_signal(pthread_cond_t* c) noexcept {
  if (cond_is_glibc()) return real::glibc().pthread_cond_signal(c);
  cond_obj(c).signal();
  return 0;
}

LOCKSWAP_EXPORT int pthread_cond_broadcast(pthread_cond_t* c) noexcept {
  if (cond_is_glibc()) return real::glibc().pthread_cond_broadcast(c);
  cond_obj(c).broadcast();
  return 0;
}

// Cancellation points: no noexcept (a cancellation unwinds through them).
LOCKSWAP_EXPORT int pthread_cond_wait(pthread_cond_t* c, pthread_mutex_t* m) {
  if (cond_is_glibc()) return real::glibc().pthread_cond_wait(c, m);
  return cond_wait_native(c, m, WaitCtx::blocking());
}

LOCKSWAP_EXPORT int pthread_cond_timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abs) {
  if (cond_is_glibc()) return real::glibc().pthread_cond_timedwait(c, m, abs);
  if (!valid_nsec(abs)) return EINVAL;
  return cond_wait_native(c, m, WaitCtx::until(cond_obj(c).clock(), abs));
}

LOCKSWAP_EXPORT int pthread_cond_clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock,
                                           const timespec* abs) {
  if (cond_is_glibc()) return real::glibc().pthread_cond_clockwait(c, m, clock, abs);
  if (!supported_clock(clock) || !valid_nsec(abs)) return EINVAL;
  return cond_wait_native(c, m, WaitCtx::until(clock, abs));
}

// glibc's C11 functions call internal aliases that bypass the symbols above,
// so they are interposed too, with glibc's mapping of error codes.
LOCKSWAP_EXPORT int mtx_init(mtx_t* mtx, int type) {
  pthread_mutexattr_t attr;
  pthread_mutexattr_init(&attr);
  switch (type) {
    case mtx_plain:
    case mtx_timed:
      break;
    case mtx_plain | mtx_recursive:
    case mtx_timed | mtx_recursive:
      pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_RECURSIVE);
      break;
    default:
      return thrd_error;
  }
  return thrd_result(pthread_mutex_init(reinterpret_cast<pthread_mutex_t*>(mtx), &attr));
}
LOCKSWAP_EXPORT int mtx_lock(mtx_t* mtx) { return thrd_result(pthread_mutex_lock(reinterpret_cast<pthread_mutex_t*>(mtx))); }
LOCKSWAP_EXPORT int mtx_trylock(mtx_t* mtx) {
  return thrd_result(pthread_mutex_trylock(reinterpret_cast<pthread_mutex_t*>(mtx)));
}
LOCKSWAP_EXPORT int mtx_timedlock(mtx_t* __restrict mtx, const timespec* __restrict abs) {
  return thrd_result(pthread_mutex_timedlock(reinterpret_cast<pthread_mutex_t*>(mtx), abs));
}
LOCKSWAP_EXPORT int mtx_unlock(mtx_t* mtx) {
  return thrd_result(pthread_mutex_unlock(reinterpret_cast<pthread_mutex_t*>(mtx)));
}
LOCKSWAP_EXPORT void mtx_destroy(mtx_t* mtx) { pthread_mutex_destroy(reinterpret_cast<pthread_mutex_t*>(mtx)); }

LOCKSWAP_EXPORT int cnd_init(cnd_t* c) { return thrd_result(pthread_cond_init(reinterpret_cast<pthread_cond_t*>(c), nullptr)); }
LOCKSWAP_EXPORT int cnd_signal(cnd_t* c) { return thrd_result(pthread_cond_signal(reinterpret_cast<pthread_cond_t*>(c))); }
LOCKSWAP_EXPORT int cnd_broadcast(cnd_t* c) {
  return thrd_result(pthread_cond_broadcast(reinterpret_cast<pthread_cond_t*>(c)));
}
LOCKSWAP_EXPORT int cnd_wait(cnd_t* c, mtx_t* mtx) {
  return thrd_result(pthread_cond_wait(reinterpret_cast<pthread_cond_t*>(c), reinterpret_cast<pthread_mutex_t*>(mtx)));
}
LOCKSWAP_EXPORT int cnd_timedwait(cnd_t* __restrict c, mtx_t* __restrict mtx, const timespec* __restrict abs) {
  return thrd_result(pthread_cond_timedwait(reinterpret_cast<pthread_cond_t*>(c),
                                            reinterpret_cast<pthread_mutex_t*>(mtx), abs));
}
LOCKSWAP_EXPORT void cnd_destroy(cnd_t* c) { pthread_cond_destroy(reinterpret_cast<pthread_cond_t*>(c)); }

// glibc's old public aliases (GLIBC_2.2.5 compatibility symbols). A binary
// that calls them must reach lockswap too, or two implementations would share
// one lock word.
#define LOCKSWAP_ALIAS(old_name, target) \
  LOCKSWAP_EXPORT __typeof__(target) old_name __attribute__((alias(#target)));
LOCKSWAP_ALIAS(__pthread_mutex_init, pthread_mutex_init)
LOCKSWAP_ALIAS(__pthread_mutex_destroy, pthread_mutex_destroy)
LOCKSWAP_ALIAS(__pthread_mutex_lock, pthread_mutex_lock)
LOCKSWAP_ALIAS(__pthread_mutex_trylock, pthread_mutex_trylock)
LOCKSWAP_ALIAS(__pthread_mutex_unlock, pthread_mutex_unlock)
LOCKSWAP_ALIAS(__pthread_rwlock_init, pthread_rwlock_init)
LOCKSWAP_ALIAS(__pthread_rwlock_destroy, pthread_rwlock_destroy)
LOCKSWAP_ALIAS(__pthread_rwlock_rdlock, pthread_rwlock_rdlock)
LOCKSWAP_ALIAS(__pthread_rwlock_tryrdlock, pthread_rwlock_tryrdlock)
LOCKSWAP_ALIAS(__pthread_rwlock_wrlock, pthread_rwlock_wrlock)
LOCKSWAP_ALIAS(__pthread_rwlock_trywrlock, pthread_rwlock_trywrlock)
LOCKSWAP_ALIAS(__pthread_rwlock_unlock, pthread_rwlock_unlock)
