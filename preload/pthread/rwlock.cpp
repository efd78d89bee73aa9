// preload/pthread/rwlock.cpp — pthread_rwlock_* for every variant: glibc's order of
// checks and kinds around the adapter's lock word (preload/pthread/families.h).
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <atomic>

#include "core/cancel.h"
#include "core/thread_registry.h"
#include "core/wait_ctx.h"
#include "preload/abi.h"
#include "preload/pthread/entry.h"
#include "preload/pthread/families.h"
#include "preload/real.h"
#include "preload/pthread/adapters.h"
#include "preload/stats/stats.h"

namespace lockswap {
namespace {

using abi::RwlockObject;

__attribute__((noinline)) int delegate_rdlock(pthread_rwlock_t* l, Call c) {
  lockevent_inc(LockEvent::delegated_to_glibc);
  const auto& g = real::glibc();
  switch (c.op) {
    case Call::block: return g.pthread_rwlock_rdlock(l);
    case Call::trylock: return g.pthread_rwlock_tryrdlock(l);
    case Call::timed: return g.pthread_rwlock_timedrdlock(l, c.abs);
    default: return g.pthread_rwlock_clockrdlock(l, c.clock, c.abs);
  }
}

__attribute__((noinline)) int delegate_wrlock(pthread_rwlock_t* l, Call c) {
  lockevent_inc(LockEvent::delegated_to_glibc);
  const auto& g = real::glibc();
  switch (c.op) {
    case Call::block: return g.pthread_rwlock_wrlock(l);
    case Call::trylock: return g.pthread_rwlock_trywrlock(l);
    case Call::timed: return g.pthread_rwlock_timedwrlock(l, c.abs);
    default: return g.pthread_rwlock_clockwrlock(l, c.clock, c.abs);
  }
}

// glibc's order of checks: clock and tv_nsec first (even when the lock is
// free), then EDEADLK if the caller holds the write lock, then the attempt.
// The plain blocking calls skip the first step at compile time.
template <class V>
LOCKSWAP_INLINE int rw_rdlock_take(RwlockObject& o, Call c) {
  bool writer_preferring = o.flags.load(std::memory_order_relaxed) == abi::kRwPreferWriterNonrecursive;
  return V::rdlock(o, c.ctx(WaitFamily::rwlock), writer_preferring);
}

// A blocking read acquisition of a write-held lock: EDEADLK if the caller is
// that writer. Out of line, so that the fast path makes no call (current_tid()
// may have to ask the kernel) and needs no stack frame.
template <class V>
__attribute__((noinline)) int rw_rdlock_write_held(RwlockObject& o, Call c) {
  if (o.writer_tid.load(std::memory_order_relaxed) == current_tid()) return EDEADLK;
  return rw_rdlock_take<V>(o, c);
}

template <class V>
LOCKSWAP_INLINE int rw_rdlock(pthread_rwlock_t* l, Call c) {
  RwlockObject& o = abi::obj(l);
  if (__builtin_expect(abi::glibc_owned(o), 0)) return delegate_rdlock(l, c);
  if (c.abs != nullptr && (!supported_clock(c.clock) || !valid_nsec(c.abs))) return EINVAL;
  // The try functions report EBUSY instead of EDEADLK, as glibc's do.
  if (c.op != Call::trylock && __builtin_expect(V::write_held(o), 0)) return rw_rdlock_write_held<V>(o, c);
  return rw_rdlock_take<V>(o, c);
}

template <class V>
LOCKSWAP_INLINE int rw_wrlock(pthread_rwlock_t* l, Call c) {
  RwlockObject& o = abi::obj(l);
  if (__builtin_expect(abi::glibc_owned(o), 0)) return delegate_wrlock(l, c);
  if (c.abs != nullptr && (!supported_clock(c.clock) || !valid_nsec(c.abs))) return EINVAL;
  int32_t self = current_tid();
  if (c.op != Call::trylock && __builtin_expect(V::write_held(o), 0) &&
      o.writer_tid.load(std::memory_order_relaxed) == self)
    return EDEADLK;
  int rc = V::wrlock(o, c.ctx(WaitFamily::rwlock));
  if (rc == 0) o.writer_tid.store(self, std::memory_order_relaxed);
  return rc;
}

// Out of line: resolving glibc's table may be a call, which would cost the
// unlock fast path a stack frame.
__attribute__((noinline)) int delegate_rwlock_unlock(pthread_rwlock_t* l) {
  return real::glibc().pthread_rwlock_unlock(l);
}

// The write release, out of line: the read and the write release each may
// call their slow path, and with both inline the unlock needs a stack frame
// on every path (the frame goes where the two calls meet); apart, each slow
// call gets one of its own and the read release none.
template <class V>
__attribute__((noinline)) int rw_write_unlock(RwlockObject& o) {
  o.writer_tid.store(0, std::memory_order_relaxed);
  V::write_unlock(o);
  return 0;
}

template <class V>
LOCKSWAP_INLINE int rw_unlock(pthread_rwlock_t* l) {
  RwlockObject& o = abi::obj(l);
  if (__builtin_expect(abi::glibc_owned(o), 0)) return delegate_rwlock_unlock(l);
  // Only the writer can release a write-held lock (anything else is
  // undefined), so the lock word says which release this is.
  if (V::write_held(o)) return rw_write_unlock<V>(o);
  V::read_unlock(o);
  return 0;
}

// Timed, clock and try acquisitions share one out-of-line body per variant.
// Blocking rwlock acquisitions of a caller with asynchronous cancellation
// (see mutex_acquire_async_caller in preload/pthread/mutex.cpp).
template <class V>
__attribute__((noinline)) int rw_rdlock_async_caller(pthread_rwlock_t* l, Call c) {
  if (abi::glibc_owned(abi::obj(l))) return delegate_rdlock(l, c);
  return cancel::run_deferred([&] { return rw_rdlock<V>(l, c); }, [&] { rw_unlock<V>(l); });
}
template <class V>
__attribute__((noinline)) int rw_wrlock_async_caller(pthread_rwlock_t* l, Call c) {
  if (abi::glibc_owned(abi::obj(l))) return delegate_wrlock(l, c);
  return cancel::run_deferred([&] { return rw_wrlock<V>(l, c); }, [&] { rw_unlock<V>(l); });
}

template <class V>
struct NativeRwlock {
  static int rdlock(pthread_rwlock_t* l) { return rdlock_cancel_safe(l, {Call::block, 0, nullptr}); }
  static int tryrdlock(pthread_rwlock_t* l) { return rdlock_cancel_safe(l, {Call::trylock, 0, nullptr}); }
  static int timedrdlock(pthread_rwlock_t* l, const timespec* abs) {
    return rdlock_cancel_safe(l, {Call::timed, CLOCK_REALTIME, abs});
  }
  static int clockrdlock(pthread_rwlock_t* l, clockid_t clock, const timespec* abs) {
    return rdlock_cancel_safe(l, {Call::clocked, clock, abs});
  }
  static int wrlock(pthread_rwlock_t* l) { return wrlock_cancel_safe(l, {Call::block, 0, nullptr}); }
  static int trywrlock(pthread_rwlock_t* l) { return wrlock_cancel_safe(l, {Call::trylock, 0, nullptr}); }
  static int timedwrlock(pthread_rwlock_t* l, const timespec* abs) {
    return wrlock_cancel_safe(l, {Call::timed, CLOCK_REALTIME, abs});
  }
  static int clockwrlock(pthread_rwlock_t* l, clockid_t clock, const timespec* abs) {
    return wrlock_cancel_safe(l, {Call::clocked, clock, abs});
  }
  // The try calls come here too: a percid writer's drain (which a try
  // acquisition runs as well) keeps a guard, and an asynchronous cancellation
  // landing in a frame with cleanups, off a call, terminates the process
  // where glibc's lock would just be left as it was.
  LOCKSWAP_INLINE static int rdlock_cancel_safe(pthread_rwlock_t* l, Call c) {
    if (cancel::async_caller()) return rw_rdlock_async_caller<V>(l, c);
    return rw_rdlock<V>(l, c);
  }
  LOCKSWAP_INLINE static int wrlock_cancel_safe(pthread_rwlock_t* l, Call c) {
    if (cancel::async_caller()) return rw_wrlock_async_caller<V>(l, c);
    return rw_wrlock<V>(l, c);
  }
  static int unlock(pthread_rwlock_t* l) { return rw_unlock<V>(l); }
};

int native_rwlock_init(pthread_rwlock_t* l, const pthread_rwlockattr_t* attr) {
  int kind = PTHREAD_RWLOCK_DEFAULT_NP, pshared = PTHREAD_PROCESS_PRIVATE;
  if (attr != nullptr) {
    pthread_rwlockattr_getkind_np(attr, &kind);
    pthread_rwlockattr_getpshared(attr, &pshared);
  }
  if (pshared != PTHREAD_PROCESS_PRIVATE) return real::glibc().pthread_rwlock_init(l, attr);
  memset(static_cast<void*>(l), 0, sizeof *l);
  abi::obj(l).flags.store(static_cast<uint32_t>(kind), std::memory_order_relaxed);
  return 0;
}

// glibc's destroy of a private rwlock checks nothing; a variant that keeps
// state outside the object (percid's reader slots) gets to release it.
template <class V>
int native_rwlock_destroy(pthread_rwlock_t* l) {
  if (abi::glibc_owned(abi::obj(l))) return real::glibc().pthread_rwlock_destroy(l);
  if constexpr (requires(RwlockObject& o) { V::destroy(o); }) V::destroy(abi::obj(l));
  return 0;
}

void install_glibc_rwlock(OpsTable& t, const OpsTable& g) {
  for_each_function<ApiFamily::rwlock, true>([&]<auto Slot>() { t.*Slot = g.*Slot; });
}

template <class V>
void install_rwlock(OpsTable& t) {
  if constexpr (V::forwards_to_glibc) {
    install_glibc_rwlock(t, real::glibc());
  } else {
    using R = NativeRwlock<V>;
    t.pthread_rwlock_init = native_rwlock_init;
    t.pthread_rwlock_destroy = native_rwlock_destroy<V>;
    t.pthread_rwlock_rdlock = R::rdlock;
    t.pthread_rwlock_tryrdlock = R::tryrdlock;
    t.pthread_rwlock_timedrdlock = R::timedrdlock;
    t.pthread_rwlock_clockrdlock = R::clockrdlock;
    t.pthread_rwlock_wrlock = R::wrlock;
    t.pthread_rwlock_trywrlock = R::trywrlock;
    t.pthread_rwlock_timedwrlock = R::timedwrlock;
    t.pthread_rwlock_clockwrlock = R::clockwrlock;
    t.pthread_rwlock_unlock = R::unlock;
  }
}

}  // namespace

void install_rwlock_family(OpsTable& t, RwlockVariant v) {
  switch (v) {
#define X(id, name, type, desc) \
  case RwlockVariant::id:       \
    install_rwlock<type>(t);    \
    break;
    LOCKSWAP_RWLOCK_VARIANTS(X)
#undef X
    default:
      break;
  }
}

}  // namespace lockswap
