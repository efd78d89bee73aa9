// preload/pthread/mutex.cpp — pthread_mutex_* for every variant: glibc's kind
// semantics around the adapter's lock word (preload/pthread/families.h), and the
// native pthread_cond_* that goes with every native mutex. The default-kind,
// uncontended path is a short leaf; kinds, timeouts and errors live in
// noinline functions.
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include <atomic>

#include "core/cancel.h"
#include "core/cond.h"
#include "core/thread_registry.h"
#include "core/wait_ctx.h"
#include "preload/abi.h"
#include "preload/pthread/entry.h"
#include "preload/pthread/families.h"
#include "preload/ops.h"
#include "preload/real.h"
#include "preload/pthread/adapters.h"
#include "preload/config/select.h"
#include "preload/stats/stats.h"
#include "preload/stats/waits.h"

namespace lockswap {
namespace {

using abi::MutexObject;

// A native variant met an object glibc must own (robust, PI, PP, pshared):
// replay the call on glibc's implementation.
__attribute__((noinline)) int delegate_mutex(pthread_mutex_t* m, Call c) {
  lockevent_inc(LockEvent::delegated_to_glibc);
  const auto& g = real::glibc();
  switch (c.op) {
    case Call::block: return g.pthread_mutex_lock(m);
    case Call::trylock: return g.pthread_mutex_trylock(m);
    case Call::timed: return g.pthread_mutex_timedlock(m, c.abs);
    default: return g.pthread_mutex_clocklock(m, c.clock, c.abs);
  }
}

// A timed acquisition whose quiet attempt failed: glibc validates the
// timeout only now, when it would have to wait.
template <class V>
__attribute__((noinline)) int mutex_wait_timed(MutexObject& o, Call c, bool adaptive) {
  if (!valid_nsec(c.abs)) return EINVAL;
  return V::lock(o, c.ctx(WaitFamily::mutex), adaptive);
}

// One acquisition of the lock word. A blocking call goes straight to the
// variant (whose own fast path comes first); try is the variant's trylock;
// a timed call makes one quiet attempt before validating and waiting.
template <class V>
LOCKSWAP_INLINE int mutex_take(MutexObject& o, Call c, bool adaptive) {
  if (c.op == Call::block) return V::lock(o, WaitCtx::blocking(WaitFamily::mutex), adaptive);
  if (c.op == Call::trylock) return V::trylock(o) ? 0 : EBUSY;
  if (V::try_fast(o)) return 0;
  return mutex_wait_timed<V>(o, c, adaptive);
}

template <class V>
__attribute__((noinline)) int mutex_acquire_kinded(pthread_mutex_t* m, int kind, Call c) {
  MutexObject& o = abi::obj(m);
  if (kind == abi::kKindDestroyed) return EINVAL;
  if (abi::glibc_owned(kind)) return delegate_mutex(m, c);
  int type = kind & ~abi::kKindElisionBits;
  if (type < 0 || type > abi::kKindTypeMask) return EINVAL;
  if (type == abi::kKindNormal || type == abi::kKindAdaptive) return mutex_take<V>(o, c, type == abi::kKindAdaptive);
  int32_t self = current_tid();
  if (o.owner_tid.load(std::memory_order_relaxed) == self) {
    if (type == abi::kKindErrorcheck) return c.op == Call::trylock ? EBUSY : EDEADLK;
    if (o.recursion + 1 == 0) return EAGAIN;  // recursion counter would wrap
    ++o.recursion;
    return 0;
  }
  if (int rc = mutex_take<V>(o, c, false)) return rc;
  o.owner_tid.store(self, std::memory_order_relaxed);
  o.recursion = 1;
  return 0;
}

// kTagged: the instantiation LOCKSWAP_SELECT's mixed entries reach, for
// objects carrying a selection tag in __kind (abi.h), which it strips first.
template <class V, bool kTagged = false>
LOCKSWAP_INLINE int mutex_kind(const MutexObject& o) {
  int kind = o.kind.load(std::memory_order_relaxed);
  if constexpr (kTagged) kind = abi::without_tag(kind);
  return kind;
}

template <class V, bool kTagged = false>
LOCKSWAP_INLINE int mutex_acquire(pthread_mutex_t* m, Call c) {
  MutexObject& o = abi::obj(m);
  int kind = mutex_kind<V, kTagged>(o);
  if (LOCKSWAP_LIKELY(kind == abi::kKindNormal)) return mutex_take<V>(o, c, false);
  return mutex_acquire_kinded<V>(m, kind, c);
}

// glibc counts a mutex's users (__nusers: +1 per lock, -1 per unlock, checked
// by destroy) and its unlock of the kinds without an owner check releases
// whatever is there. So an unlock of an unlocked normal or adaptive mutex
// returns 0 and leaves the count one short for good: destroy says EBUSY until
// the mutex is initialised again. The other kinds never get there (EPERM).
// Those kinds leave `recursion` unused, so it keeps that shortfall (as a count
// of stray unlocks), at the offset where glibc keeps __nusers.
__attribute__((noinline)) void note_stray_unlock(MutexObject& o) { ++o.recursion; }

// Releases the lock word of an owner-less kind.
template <class V>
LOCKSWAP_INLINE void release_word(MutexObject& o) {
  if (!V::unlock(o)) note_stray_unlock(o);
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
    V::unlock(o);
    return 0;
  }
  release_word<V>(o);
  return 0;
}

template <class V, bool kTagged = false>
LOCKSWAP_INLINE int mutex_release(pthread_mutex_t* m) {
  MutexObject& o = abi::obj(m);
  int kind = mutex_kind<V, kTagged>(o);
  if (LOCKSWAP_LIKELY(kind == abi::kKindNormal)) {
    release_word<V>(o);
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
  // Locked, or (normal and adaptive kinds) the user count glibc would keep is
  // off by the stray unlocks (note_stray_unlock): EBUSY, as glibc says.
  if (V::is_locked(o) || o.recursion != 0) return EBUSY;
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

// ------------------------------------------------------- native entry points
// Same signatures as glibc's functions; one instantiation per variant.

// A blocking acquisition by a caller with asynchronous cancellation runs
// deferred; only its futex sleeps are asynchronous cancellation points, and a
// cancellation pending when it ends gives the lock back and acts
// (core/cancel.h). Objects glibc owns get glibc's call at the caller's type.
template <class V, bool kTagged>
__attribute__((noinline)) int mutex_acquire_async_caller(pthread_mutex_t* m, Call c) {
  if (abi::glibc_owned(abi::obj(m).kind.load(std::memory_order_relaxed))) return delegate_mutex(m, c);
  return cancel::run_deferred([&] { return mutex_acquire<V, kTagged>(m, c); },
                              [&] { mutex_release<V, kTagged>(m); });
}

template <class V, bool kTagged>
LOCKSWAP_INLINE int mutex_acquire_blocking(pthread_mutex_t* m, Call c) {
  if (cancel::async_caller()) return mutex_acquire_async_caller<V, kTagged>(m, c);
  return mutex_acquire<V, kTagged>(m, c);
}

template <class V, bool kTagged = false>
struct NativeMutex {
  static int lock(pthread_mutex_t* m) { return mutex_acquire_blocking<V, kTagged>(m, {Call::block, 0, nullptr}); }
  static int trylock(pthread_mutex_t* m) { return mutex_acquire<V, kTagged>(m, {Call::trylock, 0, nullptr}); }
  static int timedlock(pthread_mutex_t* m, const timespec* abs) {
    return mutex_acquire_blocking<V, kTagged>(m, {Call::timed, CLOCK_REALTIME, abs});
  }
  static int clocklock(pthread_mutex_t* m, clockid_t clock, const timespec* abs) {
    if (!supported_clock(clock)) return EINVAL;  // glibc checks the clock first
    return mutex_acquire_blocking<V, kTagged>(m, {Call::clocked, clock, abs});
  }
  static int unlock(pthread_mutex_t* m) { return mutex_release<V, kTagged>(m); }
  static int destroy(pthread_mutex_t* m) { return mutex_destroy<V>(m); }
};

int native_mutex_consistent(pthread_mutex_t* m) {
  if (!(abi::obj(m).kind.load(std::memory_order_relaxed) & abi::kKindRobust)) return EINVAL;
  return real::glibc().pthread_mutex_consistent(m);
}

void time_glibc_cond_waits(OpsTable& t);

void install_glibc_mutex_and_cond(OpsTable& t, const OpsTable& g) {
  auto copy = [&]<auto Slot>() { t.*Slot = g.*Slot; };
  for_each_function<ApiFamily::mutex, true>(copy);
  for_each_function<ApiFamily::cond, true>(copy);
  time_glibc_cond_waits(t);
}

template <class V, bool kTagged = false>
void install_mutex_and_cond(OpsTable& t) {
  if constexpr (V::forwards_to_glibc) {
    install_glibc_mutex_and_cond(t, real::glibc());
  } else {
    using M = NativeMutex<V, kTagged>;
    t.pthread_mutex_init = mutex_init_native;
    t.pthread_mutex_destroy = M::destroy;
    t.pthread_mutex_lock = M::lock;
    t.pthread_mutex_trylock = M::trylock;
    t.pthread_mutex_timedlock = M::timedlock;
    t.pthread_mutex_clocklock = M::clocklock;
    t.pthread_mutex_unlock = M::unlock;
    t.pthread_mutex_consistent = native_mutex_consistent;
    install_native_cond(t);
  }
}

}  // namespace

void install_mutex_family(OpsTable& t, MutexVariant v, bool tagged) {
  switch (v) {
#define X(id, name, type, desc)                                                        \
  case MutexVariant::id:                                                               \
    tagged ? install_mutex_and_cond<type, true>(t) : install_mutex_and_cond<type>(t); \
    break;
    LOCKSWAP_MUTEX_VARIANTS(X)
#undef X
    default:
      break;
  }
}

// ------------------------------------------------------------------- cond
// In this file because it goes with the mutex: glibc's condvar reaches into
// glibc's mutex layout, so the native one serves every native mutex.

namespace {

Cond& cond_obj(pthread_cond_t* c) { return *reinterpret_cast<Cond*>(c); }
static_assert(sizeof(Cond) <= sizeof(pthread_cond_t));

// The mutex is released and re-taken through the table, so every kind and
// delegated object behaves as with a direct call.
int cond_wait_native(pthread_cond_t* c, pthread_mutex_t* m, const WaitCtx& ctx) {
  return with_deferred_cancellation([&] {
    return cond_obj(c).wait<CancellableSleeper<PlainSleeper>>([m] { return g_ops.pthread_mutex_unlock(m); },
                                                              [m] { return g_ops.pthread_mutex_lock(m); }, ctx);
  });
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

// Native condvar entry points (used with every native mutex variant; the
// condvar is glibc's exactly when the mutex variant is, because glibc's
// condvar reaches into glibc's mutex layout).
struct NativeCond {
  static int init(pthread_cond_t* c, const pthread_condattr_t* attr) { return cond_init_native(c, attr); }
  static int destroy(pthread_cond_t* c) {
    cond_obj(c).destroy();
    return 0;
  }
  static int signal(pthread_cond_t* c) {
    cond_obj(c).signal();
    return 0;
  }
  static int broadcast(pthread_cond_t* c) {
    cond_obj(c).broadcast();
    return 0;
  }
  static int wait(pthread_cond_t* c, pthread_mutex_t* m) { return cond_wait_native(c, m, WaitCtx::blocking(WaitFamily::cond)); }
  static int timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abs) {
    if (!valid_nsec(abs)) return EINVAL;
    return cond_wait_native(c, m, WaitCtx::until(cond_obj(c).clock(), abs, WaitFamily::cond));
  }
  static int clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs) {
    if (!supported_clock(clock) || !valid_nsec(abs)) return EINVAL;
    return cond_wait_native(c, m, WaitCtx::until(clock, abs, WaitFamily::cond));
  }
};

}  // namespace

// ------------------------------------------------- timed condition waits
// With statistics on (LOCKSWAP_STATS counts or profile), every condition
// wait is recorded in the wait table (preload/stats/waits.h, kind `cond`) at the
// program's call site, under every variant, glibc's included: the time a
// thread waited for an event rather than for a lock. The wrappers replace
// the wait slots of the table only then; with statistics off the slots are
// the variant's own, as before.

namespace {

// The program's caller. The export tail-jumps here, so our return address is
// normally that caller. From inside liblockswap it is not: cnd_wait and
// cnd_timedwait call pthread_cond_* themselves (they leave their caller in
// t_c11_caller), and the profiler's wrapper calls this one (it left its
// caller in select::t_site_hint).
__attribute__((always_inline)) inline uintptr_t cond_site(void* ra, void* cfa) {
  uintptr_t ip = select::caller_ip(ra, cfa);
  if (!waits::in_own_text(ip)) return ip;
  if (waits::t_c11_caller != 0) return waits::t_c11_caller;
  if (select::t_site_hint != 0) return select::t_site_hint;
  return ip;
}
#define LOCKSWAP_COND_SITE() cond_site(__builtin_return_address(0), __builtin_dwarf_cfa())

template <class Inner>
struct TimedCond {
  static int wait(pthread_cond_t* c, pthread_mutex_t* m) {
    return waits::timed_cond_wait("pthread_cond_wait", LOCKSWAP_COND_SITE(),
                                  [&] { return Inner::wait(c, m); });
  }
  static int timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abs) {
    return waits::timed_cond_wait("pthread_cond_timedwait", LOCKSWAP_COND_SITE(),
                                  [&] { return Inner::timedwait(c, m, abs); });
  }
  static int clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs) {
    return waits::timed_cond_wait("pthread_cond_clockwait", LOCKSWAP_COND_SITE(),
                                  [&] { return Inner::clockwait(c, m, clock, abs); });
  }
};

struct GlibcCond {
  static int wait(pthread_cond_t* c, pthread_mutex_t* m) { return real::glibc().pthread_cond_wait(c, m); }
  static int timedwait(pthread_cond_t* c, pthread_mutex_t* m, const timespec* abs) {
    return real::glibc().pthread_cond_timedwait(c, m, abs);
  }
  static int clockwait(pthread_cond_t* c, pthread_mutex_t* m, clockid_t clock, const timespec* abs) {
    return real::glibc().pthread_cond_clockwait(c, m, clock, abs);
  }
};

template <class Inner>
void time_cond_waits(OpsTable& t) {
  waits::init();  // the first lock call may come before the constructor
  if (!waits::on()) return;
  t.pthread_cond_wait = TimedCond<Inner>::wait;
  t.pthread_cond_timedwait = TimedCond<Inner>::timedwait;
  t.pthread_cond_clockwait = TimedCond<Inner>::clockwait;
}

void time_glibc_cond_waits(OpsTable& t) { time_cond_waits<GlibcCond>(t); }

}  // namespace

// The native condvar serves every native mutex variant.
void install_native_cond(OpsTable& t) {
  t.pthread_cond_init = NativeCond::init;
  t.pthread_cond_destroy = NativeCond::destroy;
  t.pthread_cond_wait = NativeCond::wait;
  t.pthread_cond_timedwait = NativeCond::timedwait;
  t.pthread_cond_clockwait = NativeCond::clockwait;
  t.pthread_cond_signal = NativeCond::signal;
  t.pthread_cond_broadcast = NativeCond::broadcast;
  time_cond_waits<NativeCond>(t);
}

}  // namespace lockswap
